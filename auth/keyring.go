package auth

import (
	"cmp"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// KeySpec is one configured key as the keyring needs it. ID names the key in
// logs and metrics; Digest is Digest(key) (64 lower-case hex characters);
// Plan names the key's plan; Account names the key's account ("" means the
// key is an account of its own, named by its ID). A zero Expires means the key never expires;
// otherwise the key is refused from that instant on. A zero NotBefore means
// the key is valid from the start; otherwise it is refused before then. Disabled refuses the key
// without removing it. The zero value is not a valid spec (NewKeyring
// rejects it).
type KeySpec struct {
	ID        string
	Digest    string
	Account   string
	Plan      string
	Expires   time.Time
	NotBefore time.Time
	Disabled  bool
}

// Keyring answers which configured key, if any, a presented token is. It is
// immutable after NewKeyring and safe for concurrent use; a configuration
// reload builds a new Keyring and swaps it in. The zero value, and a nil
// *Keyring, hold no keys and refuse every token.
type Keyring struct {
	entries []entry
	// byPrefix maps the first 8 bytes of a digest to the indexes of the
	// entries whose digest starts with them. Timing of the map lookup can
	// reveal at most whether the presented token's own digest shares 64
	// bits with a stored one, which an attacker cannot steer; the full
	// digests are then compared in constant time.
	byPrefix map[uint64][]int
}

// entry is a KeySpec with its digest decoded.
type entry struct {
	digest    [sha256.Size]byte
	id        string
	account   string
	plan      string
	expires   time.Time
	notBefore time.Time
	disabled  bool
}

// NewKeyring validates specs and builds a Keyring from them. It reports
// every problem at once (joined): an empty or duplicate ID, an empty Plan,
// a Digest that is not 64 lower-case hex characters, and a Digest used by
// two keys. An empty or nil specs gives an empty Keyring.
func NewKeyring(specs []KeySpec) (*Keyring, error) {
	var errs []error
	k := &Keyring{
		entries:  make([]entry, 0, len(specs)),
		byPrefix: make(map[uint64][]int, len(specs)),
	}
	ids := make(map[string]int, len(specs))
	digests := make(map[[sha256.Size]byte]int, len(specs))
	for i, s := range specs {
		bad := func(format string, args ...any) {
			errs = append(errs, fmt.Errorf("auth: key %d (id %q): "+format, append([]any{i, s.ID}, args...)...))
		}
		if s.ID == "" {
			bad("empty id")
		} else if j, dup := ids[s.ID]; dup {
			bad("duplicate id (also key %d)", j)
		} else {
			ids[s.ID] = i
		}
		if s.Plan == "" {
			bad("empty plan")
		}
		d, ok := parseDigest(s.Digest)
		if !ok {
			bad("digest must be 64 lower-case hex characters (the sha256 of the key)")
		} else if j, dup := digests[d]; dup {
			bad("duplicate digest (also key %d)", j)
		} else {
			digests[d] = i
		}
		if !ok {
			continue
		}
		k.entries = append(k.entries, entry{
			digest:    d,
			id:        s.ID,
			account:   cmp.Or(s.Account, s.ID),
			plan:      s.Plan,
			expires:   s.Expires,
			notBefore: s.NotBefore,
			disabled:  s.Disabled,
		})
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	for i := range k.entries {
		p := prefixOf(&k.entries[i].digest)
		k.byPrefix[p] = append(k.byPrefix[p], i)
	}
	return k, nil
}

// parseDigest decodes a 64-character lower-case hex digest.
func parseDigest(s string) (d [sha256.Size]byte, ok bool) {
	if len(s) != 2*sha256.Size {
		return d, false
	}
	for i := range d {
		hi, ok1 := hexValue(s[2*i])
		lo, ok2 := hexValue(s[2*i+1])
		if !ok1 || !ok2 {
			return d, false
		}
		d[i] = hi<<4 | lo
	}
	return d, true
}

// hexValue decodes one lower-case hex digit.
func hexValue(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

func prefixOf(d *[sha256.Size]byte) uint64 { return binary.BigEndian.Uint64(d[:8]) }

// Len returns the number of keys in the keyring (0 for nil or the zero
// value), disabled and expired ones included.
func (k *Keyring) Len() int {
	if k == nil {
		return 0
	}
	return len(k.entries)
}

// Authenticate returns the Principal of token at time now. A token that
// fails CheckFormat is refused without any lookup. A well-formed token is
// hashed and looked up by digest, comparing digests in constant time. A
// token not in the keyring is refused with ReasonUnknown; a known key that is
// disabled with ReasonDisabled (checked first), one whose Expires is set
// and not after now with ReasonExpired, and one whose NotBefore is after now
// with ReasonNotYetValid. Every refusal wraps ErrInvalidKey.
// A refused known key (disabled, expired) still comes with its Principal,
// for the operator's log; it must never be treated as authenticated.
func (k *Keyring) Authenticate(token string, now time.Time) (Principal, error) {
	if err := CheckFormat(token); err != nil {
		return Principal{}, err
	}
	if k == nil {
		return Principal{}, errUnknown
	}
	// CheckFormat guarantees len(token) == tokenLen, so the copy is whole;
	// hashing a stack array keeps the lookup free of allocations.
	var buf [tokenLen]byte
	copy(buf[:], token)
	sum := sha256.Sum256(buf[:])
	found := -1
	for _, i := range k.byPrefix[prefixOf(&sum)] {
		// No early exit: every candidate is compared.
		if subtle.ConstantTimeCompare(k.entries[i].digest[:], sum[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return Principal{}, errUnknown
	}
	e := &k.entries[found]
	p := Principal{KeyID: e.id, Account: e.account, Plan: e.plan}
	if e.disabled {
		return p, errDisabled
	}
	if !e.expires.IsZero() && !now.Before(e.expires) {
		return p, errExpired
	}
	if now.Before(e.notBefore) {
		return p, errNotYet
	}
	return p, nil
}
