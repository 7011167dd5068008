package api

// AccountOf returns the account a key draws on, as the usage API reports
// it: account when the key names one, otherwise the key itself, named by
// its keyID ("a key without an account is its own account"). Every
// package that needs the rule calls this function.
func AccountOf(keyID, account string) string {
	if account == "" {
		return keyID
	}
	return account
}
