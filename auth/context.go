package auth

import "context"

// Principal is the authenticated identity of a request: the configured key
// ID (safe to log; never the key itself) and the name of its plan. The zero
// value means no key has been authenticated.
type Principal struct {
	KeyID string
	Plan  string
}

// principalKey is the context key under which WithPrincipal stores a
// Principal. Its type is unexported so no other package can collide with it.
type principalKey struct{}

// WithPrincipal returns a copy of ctx carrying p, for the stages after auth.
func WithPrincipal(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// PrincipalFrom returns the Principal stored by WithPrincipal and true, or
// the zero Principal and false if ctx carries none.
func PrincipalFrom(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(Principal)
	return p, ok
}
