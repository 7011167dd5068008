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
