package keystore

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"trendgate/api"
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
	// Taken: a key, in force or revoked from the file, or an account,
	// already has the id.
	Taken
	// Tombstoned: a key revoked within the retention had the id, and the
	// request did not name the account the new key joins.
	Tombstoned
	// NotActive: a rotation of a key that is disabled, expired or not
	// valid yet.
	NotActive
	// InUse: an account that keys still name, or one of the configuration
	// file, cannot be deleted.
	InUse
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

// edit is one change to a Doc, made against the configuration file base
// at now: it returns the records the change writes (d is not modified),
// or an *Error. The Store runs an edit again on a newer Doc when another
// edit won the race, so an edit depends only on its inputs.
type edit func(d *Doc, base *config.Config, now time.Time) (*Patch, error)

// rules are the settings an edit is checked with.
type rules struct {
	// retention is how long the id of a revoked key stays taken.
	retention time.Duration
}

// create adds the key nk with digest sha.
func (r rules) create(nk NewKey, sha string) edit {
	return func(d *Doc, base *config.Config, now time.Time) (*Patch, error) {
		if err := config.CheckName(nk.ID); err != nil {
			return nil, refuse(Invalid, "id: %q is not a valid key id: use 1 to 64 letters, digits, '_', '.' or '-', other than \".\" and \"..\"", nk.ID)
		}
		if d.taken(base, nk.ID) {
			return nil, refuse(Taken, "key id %q is taken: choose another (ids of revoked keys in the configuration file stay taken until the file drops them)", nk.ID)
		}
		if t := d.tombstone(base, nk.ID, now, r.retention); t != nil && nk.Account == "" {
			return nil, refuse(Tombstoned, "key id %q was revoked at %s%s and is not given out again until %s: choose another id, "+
				"or name the account the new key joins (account)", nk.ID, t.at.UTC().Format(time.RFC3339), t.byText(), t.at.Add(r.retention).UTC().Format(time.RFC3339))
		}
		switch {
		case nk.Expires != nil && !nk.Expires.After(now):
			return nil, refuse(Invalid, "expires: %s is not in the future", nk.Expires.UTC().Format(time.RFC3339))
		case nk.NotBefore != nil && nk.Expires != nil && !nk.NotBefore.Before(*nk.Expires):
			return nil, refuse(Invalid, "not_before must be before expires")
		}
		p := &Patch{}
		k := Key{ID: nk.ID, SHA256: sha, Created: now.UTC().Truncate(time.Second), NotBefore: utc(nk.NotBefore), Expires: utc(nk.Expires)}
		switch {
		case nk.Account == "" && nk.Plan == "":
			return nil, refuse(Invalid, "give the key an account (account) or the plan of an account of its own (plan)")
		case nk.Account == "":
			if _, ok := base.Plans[nk.Plan]; !ok {
				return nil, refuse(Invalid, "plan: unknown plan %q", nk.Plan)
			}
			if _, ok := d.Account(base, nk.ID); ok {
				return nil, refuse(Taken, "key id %q is the id of an account: a key of an account of its own needs an id no account has; "+
					"to add a key to that account, name it (account) and choose another id", nk.ID)
			}
			k.Plan = nk.Plan
		default:
			plan, made, err := d.join(base, nk.Account)
			if err != nil {
				return nil, err
			}
			if nk.Plan != "" && nk.Plan != plan {
				return nil, refuse(Invalid, "plan: %q differs from the plan of account %q (%q); a key takes its account's plan, so leave plan out", nk.Plan, nk.Account, plan)
			}
			if made != nil {
				p.Accounts = append(p.Accounts, *made)
			}
			k.Account = nk.Account
		}
		p.Keys = append(p.Keys, k)
		return p, nil
	}
}

// revoke takes the key id out of force; by is the admin token's id.
func (r rules) revoke(id, by string) edit {
	return func(d *Doc, base *config.Config, now time.Time) (*Patch, error) {
		at := now.UTC().Truncate(time.Second)
		if i := slices.IndexFunc(base.Keys, func(k config.Key) bool { return k.ID == id }); i >= 0 {
			k := base.Keys[i]
			ch := KeyChange{ID: k.ID, SHA256: k.SHA256}
			if old := d.configKey(k.ID, k.SHA256); old != nil {
				ch = *old
			}
			if ch.Revoked == nil {
				ch.Revoked, ch.RevokedBy = &at, by
				return &Patch{ConfigKeys: []KeyChange{ch}}, nil
			}
		}
		ak := d.apiKey(id)
		if ak != nil && ak.Revoked == nil {
			k := *ak
			k.Revoked, k.RevokedBy = &at, by
			return &Patch{Keys: []Key{k}}, nil
		}
		if t := d.tombstone(base, id, now, 0); t != nil {
			return nil, refuse(UnknownKey, "key %q was revoked at %s", id, t.at.UTC().Format(time.RFC3339))
		}
		return nil, refuse(UnknownKey, "no key has id %q", id)
	}
}

// Rotation is a rotation's outcome: the new key, and when the old one ends.
type Rotation struct {
	New    Key
	OldEnd time.Time
}

// rotate makes a key with digest sha in the account of key id, named
// newID (or the next free "<id>-r<n>" when empty), and ends key id after
// overlap (or at its own expiry, if that comes first). Only a key in
// force can be rotated: a disabled, expired or not yet valid one cannot
// hand its account to a new key. A key configured without an account
// has its account written out (see Apply), so both keys draw on one quota.
func (r rules) rotate(id, newID string, overlap time.Duration, sha string, out *Rotation) edit {
	return func(d *Doc, base *config.Config, now time.Time) (*Patch, error) {
		if overlap < 0 {
			return nil, refuse(Invalid, "overlap: must not be negative")
		}
		old, ok := d.Key(base, id)
		switch {
		case !ok:
			return nil, refuse(UnknownKey, "no key in force has id %q", id)
		case old.Disabled:
			return nil, refuse(NotActive, "key %q is disabled: only an active key can be rotated; enable it in the configuration file first, or create a new key", id)
		case old.Expires != nil && !old.Expires.After(now):
			return nil, refuse(NotActive, "key %q expired at %s: only an active key can be rotated; create a new key instead", id, old.Expires.UTC().Format(time.RFC3339))
		case old.NotBefore != nil && old.NotBefore.After(now):
			return nil, refuse(NotActive, "key %q is not valid before %s: only an active key can be rotated", id, old.NotBefore.UTC().Format(time.RFC3339))
		}
		if newID == "" {
			newID = d.nextID(base, id, now, r.retention)
		}
		end := now.Add(overlap).UTC().Truncate(time.Second)
		if old.Expires != nil && old.Expires.Before(end) {
			end = old.Expires.UTC()
		}
		account := api.AccountOf(old.ID, old.Account)
		p, err := r.create(NewKey{ID: newID, Account: account}, sha)(d, base, now)
		if err != nil {
			return nil, err
		}
		nk := p.Keys[0]
		if ak := d.apiKey(id); ak != nil && ak.Revoked == nil && !slices.ContainsFunc(base.Keys, func(k config.Key) bool { return k.ID == id && d.live(k) }) {
			k := *ak
			k.Expires = &end
			p.Keys = append(p.Keys, k)
		} else {
			ch := KeyChange{ID: old.ID, SHA256: old.SHA256}
			if c := d.configKey(old.ID, old.SHA256); c != nil {
				ch = *c
			}
			ch.Expires = &end
			p.ConfigKeys = append(p.ConfigKeys, ch)
		}
		*out = Rotation{New: nk, OldEnd: end}
		return p, nil
	}
}

// patchAccount applies ap to account id.
func (r rules) patchAccount(id string, ap AccountPatch) edit {
	return func(d *Doc, base *config.Config, now time.Time) (*Patch, error) {
		_, made, err := d.join(base, id)
		if err != nil {
			return nil, err
		}
		ch := AccountChange{ID: id}
		switch old := d.account(id); {
		case made != nil:
			ch = *made
		case old != nil:
			ch = *old
		}
		ap.PerSecond.apply(&ch.PerSecond)
		ap.Burst.apply(&ch.Burst)
		ap.Daily.apply(&ch.Daily)
		ap.Monthly.apply(&ch.Monthly)
		return &Patch{Accounts: []AccountChange{ch}}, nil
	}
}

// NewAccount is an account to create: an id, a plan, and optionally the
// plan's numbers overridden.
type NewAccount struct {
	ID        string   `json:"id"`
	Plan      string   `json:"plan"`
	PerSecond *float64 `json:"per_second,omitempty"`
	Burst     *int     `json:"burst,omitempty"`
	Daily     *int64   `json:"daily,omitempty"`
	Monthly   *int64   `json:"monthly,omitempty"`
}

// createAccount makes the account na.
func (r rules) createAccount(na NewAccount) edit {
	return func(d *Doc, base *config.Config, now time.Time) (*Patch, error) {
		if err := config.CheckName(na.ID); err != nil {
			return nil, refuse(Invalid, "id: %q is not a valid account id: use 1 to 64 letters, digits, '_', '.' or '-', other than \".\" and \"..\"", na.ID)
		}
		if _, ok := d.Account(base, na.ID); ok {
			return nil, refuse(Taken, "account %q exists: change it with PATCH /accounts/%s", na.ID, na.ID)
		}
		if _, ok := d.Key(base, na.ID); ok || d.taken(base, na.ID) {
			return nil, refuse(Taken, "%q is the id of a key, which is an account of its own: choose another id", na.ID)
		}
		if _, ok := base.Plans[na.Plan]; !ok {
			return nil, refuse(Invalid, "plan: unknown plan %q", na.Plan)
		}
		ch := AccountChange{ID: na.ID, Plan: na.Plan, PerSecond: na.PerSecond, Burst: na.Burst, Daily: na.Daily, Monthly: na.Monthly}
		return &Patch{Accounts: []AccountChange{ch}}, nil
	}
}

// deleteAccount takes away account id, made through the API, once no key
// in force names it.
func (r rules) deleteAccount(id string) edit {
	return func(d *Doc, base *config.Config, now time.Time) (*Patch, error) {
		if slices.ContainsFunc(base.Accounts, func(a config.Account) bool { return a.ID == id }) {
			return nil, refuse(InUse, "account %q is in the configuration file: remove it there (and reload)", id)
		}
		a, ok := d.Account(base, id)
		if !ok {
			return nil, refuse(UnknownAccount, "no account made through the key API has id %q", id)
		}
		var keys []string
		for _, k := range d.Apply(base).Keys {
			if api.AccountOf(k.ID, k.Account) == id {
				keys = append(keys, k.ID)
			}
		}
		if len(keys) > 0 {
			return nil, refuse(InUse, "account %q still has %d key(s) in force (%s): revoke them first", id, len(keys), strings.Join(keys[:min(len(keys), 5)], ", "))
		}
		at := now.UTC().Truncate(time.Second)
		ch := *d.account(id)
		ch.Plan, ch.Deleted = a.Plan, &at
		return &Patch{Accounts: []AccountChange{ch}}, nil
	}
}

// join finds account id for a key to join or an override: its plan, and
// the account written out when it is a key's own (see Apply), which the
// edit must store.
func (d *Doc) join(base *config.Config, id string) (plan string, made *AccountChange, err error) {
	if a, ok := d.Account(base, id); ok {
		return a.Plan, nil, nil
	}
	k, ok := d.Key(base, id)
	if !ok || k.Account != "" {
		return "", nil, refuse(UnknownAccount, "no account has id %q", id)
	}
	return k.Plan, &AccountChange{ID: id, Plan: k.Plan, Daily: k.Daily, Monthly: k.Monthly}, nil
}

// live reports whether the file's key k is not revoked by d.
func (d *Doc) live(k config.Key) bool {
	ch := d.configKey(k.ID, k.SHA256)
	return ch == nil || ch.Revoked == nil
}

// taken reports whether a key of the file (revoked or not) or a key of d
// in force has id.
func (d *Doc) taken(base *config.Config, id string) bool {
	if slices.ContainsFunc(base.Keys, func(k config.Key) bool { return k.ID == id }) {
		return true
	}
	k := d.apiKey(id)
	return k != nil && k.Revoked == nil
}

// grave is a tombstone: when a key of some id was revoked, and by whom.
type grave struct {
	at time.Time
	by string
}

func (g *grave) byText() string {
	if g.by == "" {
		return ""
	}
	return " by admin " + strconv.Quote(g.by)
}

// tombstone is the latest revocation of a key of id that d keeps, when
// it is younger than retention (0: any age), or nil.
func (d *Doc) tombstone(base *config.Config, id string, now time.Time, retention time.Duration) *grave {
	var g *grave
	note := func(at *time.Time, by string) {
		if at != nil && (retention <= 0 || now.Sub(*at) < retention) && (g == nil || at.After(g.at)) {
			g = &grave{at: *at, by: by}
		}
	}
	if k := d.apiKey(id); k != nil {
		note(k.Revoked, k.RevokedBy)
	}
	for i := range d.ConfigKeys {
		if ch := &d.ConfigKeys[i]; ch.ID == id {
			note(ch.Revoked, ch.RevokedBy)
		}
	}
	return g
}

var rotated = regexp.MustCompile(`-r[0-9]+$`)

// nextID is the first "<id>-r<n>" (n from 1, id without such a suffix of
// its own) that no key has, nor had within the retention.
func (d *Doc) nextID(base *config.Config, id string, now time.Time, retention time.Duration) string {
	stem := rotated.ReplaceAllString(id, "")
	for n := 1; ; n++ {
		cand := stem + "-r" + strconv.Itoa(n)
		if len(cand) > 64 {
			return cand // refused by create, with the reason
		}
		if !d.taken(base, cand) && d.tombstone(base, cand, now, retention) == nil {
			return cand
		}
	}
}

// prune returns d without the tombstones older than retention (the keys
// it revoked, and the changes of file keys the file no longer has that
// only revoked them); d itself when it has none.
func (d *Doc) prune(base *config.Config, now time.Time, retention time.Duration) *Doc {
	old := func(at *time.Time) bool { return at != nil && retention > 0 && now.Sub(*at) >= retention }
	gone := func(ch KeyChange) bool {
		return old(ch.Revoked) && !slices.ContainsFunc(base.Keys, func(k config.Key) bool { return k.ID == ch.ID && k.SHA256 == ch.SHA256 })
	}
	if !slices.ContainsFunc(d.Keys, func(k Key) bool { return old(k.Revoked) }) && !slices.ContainsFunc(d.ConfigKeys, gone) {
		return d
	}
	out := d.clone()
	out.Keys = slices.DeleteFunc(out.Keys, func(k Key) bool { return old(k.Revoked) })
	out.ConfigKeys = slices.DeleteFunc(out.ConfigKeys, gone)
	return out
}

func utc(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}
