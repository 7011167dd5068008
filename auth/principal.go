package auth

// Principal is the authenticated identity of a request: the configured key
// ID (safe to log; never the key itself) and the name of its plan. The zero
// value means no key has been authenticated.
type Principal struct {
	KeyID string
	Plan  string
}
