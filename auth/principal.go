package auth

// Principal is the authenticated identity of a request: the configured key
// ID (safe to log; never the key itself), the account the key belongs to,
// and the name of the account's plan. A key configured without an account
// is an account of its own, so Account is never empty for an authenticated
// Principal (it equals KeyID then). The zero value means no key has been
// authenticated.
type Principal struct {
	KeyID   string
	Account string
	Plan    string
}

// AccountOf returns the account a key draws on: account when the key
// names one, otherwise the key itself, named by its keyID ("a key without
// an account is its own account"). Every package that needs the rule
// calls this function.
func AccountOf(keyID, account string) string {
	if account == "" {
		return keyID
	}
	return account
}
