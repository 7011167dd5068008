package auth

import (
	"net/http"
	"strings"
)

// ParseAuthorization extracts the bearer token from the request headers.
//
// The rules are strict, so that one presented key has exactly one spelling:
//
//   - No Authorization header, or a single one whose value is empty or only
//     spaces and tabs: ErrMissingKey.
//   - More than one Authorization header line (whatever they hold):
//     ErrDuplicateHeader.
//   - Otherwise the value must be the scheme "Bearer" (ASCII letters compared
//     case-insensitively), exactly one space (0x20), then the credentials,
//     which must be a non-empty token68 (RFC 9110 section 11.2: letters,
//     digits, "-._~+/", optionally followed by "=" padding) and run to the
//     end of the value. RFC 9110 allows 1*SP after the scheme; we accept only
//     one, and no tabs. Anything else (another scheme, a bare token, "Bearer"
//     alone, leading, extra or trailing spaces, commas, parameters, non-ASCII
//     or control bytes) returns an error wrapping ErrInvalidKey with
//     ReasonMalformed.
//
// The returned token is a substring of the header value, never trimmed or
// case-folded; it has not been checked against the key format (Authenticate
// does that). Go's HTTP server already strips leading and trailing spaces and
// tabs from header values it reads off the wire, so the trailing-space rule
// matters only for headers built in code. Errors never contain the token.
func ParseAuthorization(h http.Header) (string, error) {
	values := h["Authorization"]
	switch {
	case len(values) == 0:
		return "", ErrMissingKey
	case len(values) > 1:
		return "", ErrDuplicateHeader
	}
	v := values[0]
	if strings.Trim(v, " \t") == "" {
		return "", ErrMissingKey
	}
	scheme, token, found := strings.Cut(v, " ")
	if !isBearer(scheme) {
		return "", errScheme
	}
	if !found {
		return "", errNoCredentials
	}
	if !isToken68(token) {
		return "", errToken68
	}
	return token, nil
}

// CutBearer returns the credentials of an Authorization value of the form
// "<scheme> <credentials>" whose scheme is "Bearer" in any mix of ASCII
// case (RFC 9110 section 11.1: the scheme is case-insensitive), and whether
// v had that form. The credentials are returned untrimmed and unchecked;
// the admin listener uses it for its token, which need not be a token68.
func CutBearer(v string) (credentials string, ok bool) {
	scheme, credentials, found := strings.Cut(v, " ")
	if !found || !isBearer(scheme) {
		return "", false
	}
	return credentials, true
}

// isBearer reports whether s is "bearer" in any mix of ASCII case. It
// deliberately does not use Unicode case folding.
func isBearer(s string) bool {
	const want = "bearer"
	if len(s) != len(want) {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != want[i] {
			return false
		}
	}
	return true
}

// isToken68 reports whether s matches RFC 9110's
// token68 = 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"=".
func isToken68(s string) bool {
	end := len(s)
	for end > 0 && s[end-1] == '=' {
		end--
	}
	if end == 0 {
		return false
	}
	for i := 0; i < end; i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '-', c == '.', c == '_', c == '~', c == '+', c == '/':
		default:
			return false
		}
	}
	return true
}
