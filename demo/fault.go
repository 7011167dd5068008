package demo

import (
	"errors"
	"fmt"
	"strings"
)

// Fault is a failure mode the demo upstream can be switched into to test
// how the gateway copes. The zero value, FaultNone, answers normally.
type Fault int

// The fault modes. Each applies to API routes only, after authentication
// and before the account rate limit (a faulty answer uses no quota).
const (
	// FaultNone answers normally.
	FaultNone Fault = iota
	// FaultServerError answers 500 {"error":"Internal server error"}.
	FaultServerError
	// FaultRateLimit answers 429 "Rate limit exceeded (minute)" with the
	// minute remaining at 0 and the reset at the next minute boundary.
	FaultRateLimit
	// FaultGarbage answers 200 with bytes that are not JSON.
	FaultGarbage
	// FaultWrongShape answers 200 with valid JSON of the wrong shape.
	FaultWrongShape
	// FaultOversize answers 200 with a JSON-looking body larger than 9 MiB.
	FaultOversize
	// FaultHang never answers until the request context is done or the
	// server is closed (then 503).
	FaultHang
	// FaultFlap answers 500 to every other request, starting with the
	// first one after SetFault, and normally to the others.
	FaultFlap
	// FaultReset closes the connection without any response.
	FaultReset
)

// ErrUnknownFault is returned by ParseFault for a name it does not know.
var ErrUnknownFault = errors.New("demo: unknown fault")

var faultNames = [...]string{
	FaultNone:        "none",
	FaultServerError: "server-error",
	FaultRateLimit:   "rate-limit",
	FaultGarbage:     "garbage",
	FaultWrongShape:  "wrong-shape",
	FaultOversize:    "oversize",
	FaultHang:        "hang",
	FaultFlap:        "flap",
	FaultReset:       "reset",
}

// String returns the fault's name as ParseFault accepts it.
func (f Fault) String() string {
	if f >= 0 && int(f) < len(faultNames) {
		return faultNames[f]
	}
	return fmt.Sprintf("fault(%d)", int(f))
}

// ParseFault returns the fault named s: none, server-error, rate-limit,
// garbage, wrong-shape, oversize, hang, flap or reset. Any other string
// returns an error wrapping ErrUnknownFault that lists the known names.
func ParseFault(s string) (Fault, error) {
	for f, name := range faultNames {
		if s == name {
			return Fault(f), nil
		}
	}
	return FaultNone, fmt.Errorf("%w %q (known: %s)", ErrUnknownFault, s, strings.Join(FaultNames(), ", "))
}

// FaultNames returns the name of every fault, as ParseFault accepts them,
// in the order of the constants.
func FaultNames() []string {
	return append([]string(nil), faultNames[:]...)
}
