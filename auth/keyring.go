package auth

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"trendgate/api"
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
// reload builds a new Keyring and swaps it in, and a key changed through
// the key API makes one out of the old with With. The zero value, and a
// nil *Keyring, hold no keys and refuse every token.
//
// A keyring is a large table built at once (NewKeyring) and a small layer
// of the changes With made since: the keys added or replaced (over), and
// the table's keys taken out (gone). With copies only the layer, so one
// change costs the same with 100 keys as with 100,000; once the layer
// has grown to compactAt changes, With builds a whole table again.
type Keyring struct {
	base *table
	over *table         // keys With added or replaced; nil: none
	gone map[int32]bool // indexes of base's keys With took out or replaced
}

// table is a set of keys with their indexes.
type table struct {
	entries []entry
	// byPrefix maps the first 8 bytes of a digest to the indexes of the
	// entries whose digest starts with them. Timing of the map lookup can
	// reveal at most whether the presented token's own digest shares 64
	// bits with a stored one, which an attacker cannot steer; the full
	// digests are then compared in constant time.
	byPrefix map[uint64][]int32
	byID     map[string]int32 // index of each entry by id
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
	t, err := newTable(specs, "key")
	if err != nil {
		return nil, err
	}
	return &Keyring{base: t}, nil
}

// newTable is NewKeyring's table; what names a spec in errors ("key").
func newTable(specs []KeySpec, what string) (*table, error) {
	var errs []error
	t := &table{
		entries:  make([]entry, 0, len(specs)),
		byPrefix: make(map[uint64][]int32, len(specs)),
		byID:     make(map[string]int32, len(specs)),
	}
	digests := make(map[[sha256.Size]byte]int, len(specs))
	for i, s := range specs {
		bad := func(format string, args ...any) {
			errs = append(errs, fmt.Errorf("auth: %s %d (id %q): "+format, append([]any{what, i, s.ID}, args...)...))
		}
		e, ok := s.entry(bad)
		if s.ID != "" {
			if j, dup := t.byID[s.ID]; dup {
				bad("duplicate id (also %s %d)", what, j)
			} else {
				t.byID[s.ID] = int32(i)
			}
		}
		if !ok {
			continue
		}
		if j, dup := digests[e.digest]; dup {
			bad("duplicate digest (also %s %d)", what, j)
			continue
		}
		digests[e.digest] = i
		t.entries = append(t.entries, e)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	for i := range t.entries {
		p := prefixOf(&t.entries[i].digest)
		t.byPrefix[p] = append(t.byPrefix[p], int32(i))
	}
	return t, nil
}

// entry checks s on its own and decodes it, reporting each problem to bad;
// ok is false when the entry cannot be used.
func (s KeySpec) entry(bad func(format string, args ...any)) (e entry, ok bool) {
	ok = true
	if s.ID == "" {
		bad("empty id")
		ok = false
	}
	if s.Plan == "" {
		bad("empty plan")
		ok = false
	}
	d, dok := parseDigest(s.Digest)
	if !dok {
		bad("digest must be 64 lower-case hex characters (the sha256 of the key)")
		return entry{}, false
	}
	return entry{
		digest:    d,
		id:        s.ID,
		account:   api.AccountOf(s.ID, s.Account),
		plan:      s.Plan,
		expires:   s.Expires,
		notBefore: s.NotBefore,
		disabled:  s.Disabled,
	}, ok
}

// spec is e as the KeySpec it was built from.
func (e *entry) spec() KeySpec {
	s := KeySpec{ID: e.id, Digest: hex.EncodeToString(e.digest[:]), Plan: e.plan,
		Expires: e.expires, NotBefore: e.notBefore, Disabled: e.disabled}
	if e.account != e.id {
		s.Account = e.account
	}
	return s
}

// compactAt is how many changes the layer of a Keyring holds before With
// builds a whole table again: small enough that the layer's copy stays
// cheap, large enough that the rebuild's cost, spread over the changes,
// is small.
const compactAt = 1024

// With returns a Keyring with the keys of put added, or in place of the
// keys of their ids, and the keys of the ids in drop taken out (an id it
// does not hold is ignored). k is not modified. It refuses, with every
// problem joined, what NewKeyring refuses: a put spec that is not valid,
// two put specs of one id, and a digest another key keeps.
func (k *Keyring) With(put []KeySpec, drop []string) (*Keyring, error) {
	if k == nil {
		k = &Keyring{}
	}
	out := &Keyring{base: k.base, gone: make(map[int32]bool, len(k.gone)+len(put)+len(drop))}
	for i := range k.gone {
		out.gone[i] = true
	}
	// The layer is rebuilt from its kept entries and put: it is small.
	leaving := make(map[string]bool, len(put)+len(drop))
	for _, id := range drop {
		leaving[id] = true
	}
	for _, s := range put {
		leaving[s.ID] = true
	}
	var specs []KeySpec
	if k.over != nil {
		for i := range k.over.entries {
			if e := &k.over.entries[i]; !leaving[e.id] {
				specs = append(specs, e.spec())
			}
		}
	}
	specs = append(specs, put...)
	if k.base != nil {
		for id := range leaving {
			if i, ok := k.base.byID[id]; ok {
				out.gone[i] = true
			}
		}
	}
	over, err := newTable(specs, "changed key")
	if err != nil {
		return nil, err
	}
	// A digest of the layer must be no key's of the table it stays in.
	var errs []error
	for i := range over.entries {
		e := &over.entries[i]
		if j := out.base.find(&e.digest, out.gone); j >= 0 {
			errs = append(errs, fmt.Errorf("auth: key %q: duplicate digest (also key %q)", e.id, out.base.entries[j].id))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	out.over = over
	if len(over.entries)+len(out.gone) < compactAt {
		return out, nil
	}
	return NewKeyring(out.Specs())
}

// Specs returns the keys of k, the table's in order and then the layer's.
func (k *Keyring) Specs() []KeySpec {
	if k == nil {
		return nil
	}
	out := make([]KeySpec, 0, k.Len())
	for _, t := range []*table{k.base, k.over} {
		if t == nil {
			continue
		}
		for i := range t.entries {
			if t == k.base && k.gone[int32(i)] {
				continue
			}
			out = append(out, t.entries[i].spec())
		}
	}
	return out
}

// find returns the index of t's entry with digest d, skipping those in
// gone, or -1. Every candidate is compared, in constant time.
func (t *table) find(d *[sha256.Size]byte, gone map[int32]bool) int {
	if t == nil {
		return -1
	}
	found := -1
	for _, i := range t.byPrefix[prefixOf(d)] {
		// No early exit: every candidate is compared.
		if subtle.ConstantTimeCompare(t.entries[i].digest[:], d[:]) == 1 && !gone[i] {
			found = int(i)
		}
	}
	return found
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
	n := 0
	if k.base != nil {
		n = len(k.base.entries) - len(k.gone)
	}
	if k.over != nil {
		n += len(k.over.entries)
	}
	return n
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
	p, _, err := k.AuthenticateSpan(token, now)
	return p, err
}

// Span is the time in which the keyring accepts a key: from NotBefore
// (zero: from the start) until Expires (zero: for ever).
type Span struct {
	NotBefore, Expires time.Time
}

// Contains reports whether the key is accepted at t.
func (s Span) Contains(t time.Time) bool {
	return (s.Expires.IsZero() || t.Before(s.Expires)) && !t.Before(s.NotBefore)
}

// AuthenticateSpan is Authenticate, and for an accepted key also the span
// in which this keyring goes on accepting it: a caller that kept the
// Principal may use it again for the same token at any time the span
// contains, without hashing the token again, as long as the keyring is
// the same.
func (k *Keyring) AuthenticateSpan(token string, now time.Time) (Principal, Span, error) {
	if err := CheckFormat(token); err != nil {
		return Principal{}, Span{}, err
	}
	if k == nil {
		return Principal{}, Span{}, errUnknown
	}
	// CheckFormat guarantees len(token) == tokenLen, so the copy is whole;
	// hashing a stack array keeps the lookup free of allocations.
	var buf [tokenLen]byte
	copy(buf[:], token)
	sum := sha256.Sum256(buf[:])
	var e *entry
	if i := k.over.find(&sum, nil); i >= 0 {
		e = &k.over.entries[i]
	} else if i := k.base.find(&sum, k.gone); i >= 0 {
		e = &k.base.entries[i]
	} else {
		return Principal{}, Span{}, errUnknown
	}
	p := Principal{KeyID: e.id, Account: e.account, Plan: e.plan}
	if e.disabled {
		return p, Span{}, errDisabled
	}
	if !e.expires.IsZero() && !now.Before(e.expires) {
		return p, Span{}, errExpired
	}
	if now.Before(e.notBefore) {
		return p, Span{}, errNotYet
	}
	return p, Span{NotBefore: e.notBefore, Expires: e.expires}, nil
}
