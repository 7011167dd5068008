package auth

import "errors"

// ErrMissingKey means the request carried no credentials at all: no
// Authorization header, or one whose value is empty or only spaces and
// tabs. The gateway answers 401 missing_api_key.
var ErrMissingKey = errors.New("auth: missing api key")

// ErrInvalidKey means the request presented credentials that are not a valid
// key: a malformed Authorization header, a malformed key, a bad checksum, or
// a key that is unknown, expired or disabled. Errors returned by this package
// wrap it (test with errors.Is) and carry a Reason. The gateway answers every
// one of them with the same 401 invalid_api_key.
var ErrInvalidKey = errors.New("auth: invalid api key")

// ErrDuplicateHeader means the request had more than one Authorization header
// line. It is a malformed request rather than a bad key; the gateway
// answers 400.
var ErrDuplicateHeader = errors.New("auth: more than one authorization header")

// Reason says why a key was refused. It is for logs and metrics labels only
// and must never change what a client sees. The zero value means no reason
// is known (the error was not a refusal of a presented key).
type Reason string

// The reasons a presented key is refused.
const (
	// ReasonMalformed: the header or the key does not have the required form.
	ReasonMalformed Reason = "malformed"
	// ReasonChecksum: the key has the right form but its checksum is wrong.
	ReasonChecksum Reason = "checksum"
	// ReasonUnknown: the key is well formed but not in the keyring.
	ReasonUnknown Reason = "unknown"
	// ReasonExpired: the key is known but its expiry has passed.
	ReasonExpired Reason = "expired"
	// ReasonDisabled: the key is known but disabled by configuration.
	ReasonDisabled Reason = "disabled"
	// ReasonNotYetValid: the key is known but its not_before is still ahead.
	ReasonNotYetValid Reason = "not_yet_valid"
)

// ReasonOf returns the Reason carried by err, or "" if err is nil or is not
// a refusal from this package (ErrMissingKey and ErrDuplicateHeader have no
// Reason).
func ReasonOf(err error) Reason {
	var r *refusal
	if errors.As(err, &r) {
		return r.reason
	}
	return ""
}

// refusal is an ErrInvalidKey with its reason and a short detail. All
// refusals are allocated once, below, so refusing a key costs nothing.
type refusal struct {
	reason Reason
	detail string // never contains the key
}

func (e *refusal) Error() string {
	return ErrInvalidKey.Error() + ": " + string(e.reason) + ": " + e.detail
}

func (e *refusal) Unwrap() error { return ErrInvalidKey }

// ErrNotBearer is the error of ParseAuthorization for a header whose value
// does not start with the Bearer scheme (the key alone, "Token ...",
// "Basic ..."). It wraps ErrInvalidKey with ReasonMalformed like the other
// header errors; the gateway tells such clients, with a fixed hint, to
// send the Bearer scheme.
var ErrNotBearer error = errScheme

var (
	// Key format (CheckFormat).
	errLength   = &refusal{ReasonMalformed, "wrong length"}
	errPrefix   = &refusal{ReasonMalformed, "wrong prefix"}
	errAlphabet = &refusal{ReasonMalformed, "character outside base62"}
	errRange    = &refusal{ReasonMalformed, "payload out of range"}
	errChecksum = &refusal{ReasonChecksum, "checksum mismatch"}

	// Authorization header (ParseAuthorization).
	errNoCredentials = &refusal{ReasonMalformed, "authorization header has no credentials"}
	errScheme        = &refusal{ReasonMalformed, "authorization scheme is not bearer"}
	errToken68       = &refusal{ReasonMalformed, "bearer credentials are not a single token68"}

	// Keyring (Authenticate).
	errUnknown  = &refusal{ReasonUnknown, "key not found"}
	errExpired  = &refusal{ReasonExpired, "key expired"}
	errDisabled = &refusal{ReasonDisabled, "key disabled"}
	errNotYet   = &refusal{ReasonNotYetValid, "key not valid yet"}
)
