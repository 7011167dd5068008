package keystore

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"time"

	"trendgate/config"
)

// Kind says what kind of input an edit refused; the admin API answers
// each with its own status and code.
type Kind int

const (
	// Invalid input: a bad id, an expiry in the past, a plan that differs
	// from the account's, numbers the configuration would refuse.
	Invalid Kind = iota + 1
	// UnknownKey: no key in force has the id.
	UnknownKey
	// UnknownAccount: no account has the id.
	UnknownAccount
	// Taken: a key, in force or revoked from the file, already has the id.
	Taken
)

// Error is an edit refused for its input. Its message is for the operator
// and never holds a secret.
type Error struct {
	Kind Kind
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

func refuse(kind Kind, format string, args ...any) *Error {
	return &Error{Kind: kind, Msg: fmt.Sprintf(format, args...)}
}

// NewKey is a key to create: an id, and either the account it joins or
// the plan of an account of its own.
type NewKey struct {
	ID        string     `json:"id"`
	Account   string     `json:"account,omitempty"`
	Plan      string     `json:"plan,omitempty"`
	NotBefore *time.Time `json:"not_before,omitempty"`
	Expires   *time.Time `json:"expires,omitempty"`
}

// AccountPatch changes an account's overrides: for each number, Set says
// whether the patch names it, and a nil value with Set returns it to the
// configured value (the plan's for an account the API made).
type AccountPatch struct {
	PerSecond Field[float64]
	Burst     Field[int]
	Daily     Field[int64]
	Monthly   Field[int64]
}

// Field is one number of an AccountPatch.
type Field[T any] struct {
	Set   bool
	Value *T
}

func (f Field[T]) apply(to **T) {
	if f.Set {
		*to = f.Value
	}
}

// edit is one change to a Doc, made against the configuration file base at
// now. It returns the new Doc (d is not modified) and what the change
// reports back, or an *Error. The Store runs an edit again on a newer Doc
// when another edit won the race, so an edit depends only on its inputs.
type edit func(d *Doc, base *config.Config, now time.Time) (*Doc, error)

// create adds the key nk with digest sha.
func create(nk NewKey, sha string) edit {
	return func(d *Doc, base *config.Config, now time.Time) (*Doc, error) {
		if err := config.CheckName(nk.ID); err != nil {
			return nil, refuse(Invalid, "id: %q is not a valid key id: use 1 to 64 letters, digits, '_', '.' or '-'", nk.ID)
		}
		if d.taken(base, nk.ID) {
			return nil, refuse(Taken, "key id %q is taken: choose another (ids of revoked keys in the configuration file stay taken until the file drops them)", nk.ID)
		}
		switch {
		case nk.Expires != nil && !nk.Expires.After(now):
			return nil, refuse(Invalid, "expires: %s is not in the future", nk.Expires.UTC().Format(time.RFC3339))
		case nk.NotBefore != nil && nk.Expires != nil && !nk.NotBefore.Before(*nk.Expires):
			return nil, refuse(Invalid, "not_before must be before expires")
		}
		out := d.clone()
		k := Key{ID: nk.ID, SHA256: sha, Created: now.UTC().Truncate(time.Second), NotBefore: utc(nk.NotBefore), Expires: utc(nk.Expires)}
		switch {
		case nk.Account == "" && nk.Plan == "":
			return nil, refuse(Invalid, "give the key an account (account) or the plan of an account of its own (plan)")
		case nk.Account == "":
			if _, ok := base.Plans[nk.Plan]; !ok {
				return nil, refuse(Invalid, "plan: unknown plan %q", nk.Plan)
			}
			k.Plan = nk.Plan
		default:
			plan, err := out.join(base, nk.Account)
			if err != nil {
				return nil, err
			}
			if nk.Plan != "" && nk.Plan != plan {
				return nil, refuse(Invalid, "plan: %q differs from the plan of account %q (%q); a key takes its account's plan, so leave plan out", nk.Plan, nk.Account, plan)
			}
			k.Account = nk.Account
		}
		out.Keys = append(out.Keys, k)
		return out, nil
	}
}

// revoke takes the key id out of force.
func revoke(id string) edit {
	return func(d *Doc, base *config.Config, now time.Time) (*Doc, error) {
		out := d.clone()
		if i := slices.IndexFunc(out.Keys, func(k Key) bool { return k.ID == id }); i >= 0 {
			out.Keys = slices.Delete(out.Keys, i, i+1)
			return out, nil
		}
		k, ok := fileKey(base, id)
		if !ok {
			return nil, refuse(UnknownKey, "no key has id %q", id)
		}
		ch := out.changeOf(k)
		if ch.Revoked != nil {
			return nil, refuse(UnknownKey, "key %q was revoked at %s", id, ch.Revoked.Format(time.RFC3339))
		}
		at := now.UTC().Truncate(time.Second)
		ch.Revoked = &at
		return out, nil
	}
}

// Rotation is a rotation's outcome: the new key, and when the old one ends.
type Rotation struct {
	New    Key
	OldEnd time.Time
}

// rotate makes a key with digest sha in the account of key id, named
// newID (or the next free "<id>-r<n>" when empty), and ends key id after
// overlap (or at its own expiry, if that comes first). A key configured
// without an account has its account written out (see Apply), so both
// keys draw on one quota.
func rotate(id, newID string, overlap time.Duration, sha string, out *Rotation) edit {
	return func(d *Doc, base *config.Config, now time.Time) (*Doc, error) {
		if overlap < 0 {
			return nil, refuse(Invalid, "overlap: must not be negative")
		}
		eff := d.Apply(base)
		i := slices.IndexFunc(eff.Keys, func(k config.Key) bool { return k.ID == id })
		if i < 0 {
			return nil, refuse(UnknownKey, "no key in force has id %q", id)
		}
		old := eff.Keys[i]
		if old.Expires != nil && !old.Expires.After(now) {
			return nil, refuse(Invalid, "key %q expired at %s: create a new key instead", id, old.Expires.UTC().Format(time.RFC3339))
		}
		if newID == "" {
			newID = d.nextID(base, id)
		}
		end := now.Add(overlap).UTC().Truncate(time.Second)
		if old.Expires != nil && old.Expires.Before(end) {
			end = old.Expires.UTC()
		}
		account := old.Account
		if account == "" {
			account = old.ID
		}
		res, err := create(NewKey{ID: newID, Account: account}, sha)(d, base, now)
		if err != nil {
			return nil, err
		}
		if j := slices.IndexFunc(res.Keys, func(k Key) bool { return k.ID == id }); j >= 0 {
			res.Keys[j].Expires = &end
		} else {
			k, _ := fileKey(base, id)
			res.changeOf(k).Expires = &end
		}
		*out = Rotation{New: res.Keys[len(res.Keys)-1], OldEnd: end}
		return res, nil
	}
}

// patchAccount applies p to account id.
func patchAccount(id string, p AccountPatch) edit {
	return func(d *Doc, base *config.Config, now time.Time) (*Doc, error) {
		out := d.clone()
		if _, err := out.join(base, id); err != nil {
			return nil, err
		}
		i := slices.IndexFunc(out.Accounts, func(a AccountChange) bool { return a.ID == id })
		if i < 0 {
			out.Accounts = append(out.Accounts, AccountChange{ID: id})
			i = len(out.Accounts) - 1
		}
		ch := &out.Accounts[i]
		p.PerSecond.apply(&ch.PerSecond)
		p.Burst.apply(&ch.Burst)
		p.Daily.apply(&ch.Daily)
		p.Monthly.apply(&ch.Monthly)
		return out, nil
	}
}

// join makes sure d can put a key in, or override, account id, writing
// the account out when it is a key's own (see Apply), and returns the
// account's plan.
func (d *Doc) join(base *config.Config, id string) (plan string, err error) {
	i := slices.IndexFunc(d.Accounts, func(a AccountChange) bool { return a.ID == id })
	if i >= 0 && d.Accounts[i].Plan != "" {
		return d.Accounts[i].Plan, nil
	}
	if j := slices.IndexFunc(base.Accounts, func(a config.Account) bool { return a.ID == id }); j >= 0 {
		return base.Accounts[j].Plan, nil
	}
	eff := d.Apply(base)
	j := slices.IndexFunc(eff.Keys, func(k config.Key) bool { return k.ID == id && k.Account == "" })
	if j < 0 {
		return "", refuse(UnknownAccount, "no account has id %q", id)
	}
	k := eff.Keys[j]
	ch := AccountChange{ID: id, Plan: k.Plan, Daily: k.Daily, Monthly: k.Monthly}
	if i >= 0 {
		d.Accounts[i] = ch
	} else {
		d.Accounts = append(d.Accounts, ch)
	}
	return k.Plan, nil
}

// taken reports whether a key of the file or of d has id.
func (d *Doc) taken(base *config.Config, id string) bool {
	_, inFile := fileKey(base, id)
	return inFile || slices.ContainsFunc(d.Keys, func(k Key) bool { return k.ID == id })
}

var rotated = regexp.MustCompile(`-r[0-9]+$`)

// nextID is the first "<id>-r<n>" (n from 1, id without such a suffix of
// its own) that no key has.
func (d *Doc) nextID(base *config.Config, id string) string {
	stem := rotated.ReplaceAllString(id, "")
	for n := 1; ; n++ {
		cand := stem + "-r" + strconv.Itoa(n)
		if len(cand) > 64 {
			return cand // refused by create, with the reason
		}
		if !d.taken(base, cand) {
			return cand
		}
	}
}

// changeOf returns d's change of the file's key k, adding one.
func (d *Doc) changeOf(k config.Key) *KeyChange {
	if ch := d.configKey(k.ID, k.SHA256); ch != nil {
		return ch
	}
	d.ConfigKeys = append(d.ConfigKeys, KeyChange{ID: k.ID, SHA256: k.SHA256})
	return &d.ConfigKeys[len(d.ConfigKeys)-1]
}

// fileKey is the file's key id.
func fileKey(base *config.Config, id string) (config.Key, bool) {
	i := slices.IndexFunc(base.Keys, func(k config.Key) bool { return k.ID == id })
	if i < 0 {
		return config.Key{}, false
	}
	return base.Keys[i], true
}

func utc(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}
