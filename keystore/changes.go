package keystore

import (
	"cmp"
	"slices"
	"time"

	"trendgate/config"
)

// Doc is every change made through the key API, at one version.
type Doc struct {
	// Version counts the edits; 0 is the empty Doc no edit has touched.
	Version int64 `yaml:"version" json:"version"`
	// Keys are the keys created through the API, revoked ones included
	// (tombstones, kept for the retention; see Options.Retention).
	Keys []Key `yaml:"keys,omitempty" json:"keys,omitempty"`
	// ConfigKeys are changes to keys of the configuration file: revoked,
	// or given an end by a rotation.
	ConfigKeys []KeyChange `yaml:"config_keys,omitempty" json:"config_keys,omitempty"`
	// Accounts are quota and rate overrides set through the API.
	Accounts []AccountChange `yaml:"accounts,omitempty" json:"accounts,omitempty"`
}

// Key is a key created through the API: its digest, never its secret.
// Exactly one of Account and Plan is set. A revoked key stays, as a
// tombstone that keeps its id from being taken again.
type Key struct {
	ID        string     `yaml:"id" json:"id"`
	SHA256    string     `yaml:"sha256" json:"sha256"`
	Account   string     `yaml:"account,omitempty" json:"account,omitempty"`
	Plan      string     `yaml:"plan,omitempty" json:"plan,omitempty"`
	Created   time.Time  `yaml:"created" json:"created"`
	NotBefore *time.Time `yaml:"not_before,omitempty" json:"not_before,omitempty"`
	Expires   *time.Time `yaml:"expires,omitempty" json:"expires,omitempty"`
	// Revoked, when set, takes the key out of force; RevokedBy is the id
	// of the admin token that did.
	Revoked   *time.Time `yaml:"revoked,omitempty" json:"revoked,omitempty"`
	RevokedBy string     `yaml:"revoked_by,omitempty" json:"revoked_by,omitempty"`
}

// KeyChange changes one key of the configuration file, named by its id and
// digest together: a key given a new digest in the file under the same id
// is a new key, which the change does not touch.
type KeyChange struct {
	ID     string `yaml:"id" json:"id"`
	SHA256 string `yaml:"sha256" json:"sha256"`
	// Revoked, when set, removes the key from the keys in force; RevokedBy
	// is the id of the admin token that did.
	Revoked   *time.Time `yaml:"revoked,omitempty" json:"revoked,omitempty"`
	RevokedBy string     `yaml:"revoked_by,omitempty" json:"revoked_by,omitempty"`
	// Expires, when set, ends the key then, or at its configured expiry
	// if that comes first.
	Expires *time.Time `yaml:"expires,omitempty" json:"expires,omitempty"`
}

// AccountChange overrides an account's numbers; nil keeps the configured
// value (the account's own, else its plan's). With Plan set it also makes
// the account when the file has none of that id: the API writes out so
// the account of a key configured without one (see Apply), copying the
// key's plan and quotas, once another key joins it or it is given
// overrides.
type AccountChange struct {
	ID        string   `yaml:"id" json:"id"`
	Plan      string   `yaml:"plan,omitempty" json:"plan,omitempty"`
	PerSecond *float64 `yaml:"per_second,omitempty" json:"per_second,omitempty"`
	Burst     *int     `yaml:"burst,omitempty" json:"burst,omitempty"`
	Daily     *int64   `yaml:"daily,omitempty" json:"daily,omitempty"`
	Monthly   *int64   `yaml:"monthly,omitempty" json:"monthly,omitempty"`
	// Deleted, when set, takes away the account the API made (DELETE
	// /accounts/{id}); its id may be given to a new account.
	Deleted *time.Time `yaml:"deleted,omitempty" json:"deleted,omitempty"`
}

// Patch is one edit: the records it adds to a Doc or puts in place of
// those of the same id (a KeyChange: the same id and digest). It is what
// the keys file appends and what Redis stores per edit, so an edit costs
// the records it touches, not the Doc.
type Patch struct {
	// Version is the Doc's version once the patch is applied: one more
	// than the version it was made against.
	Version    int64           `json:"version"`
	Keys       []Key           `json:"keys,omitempty"`
	ConfigKeys []KeyChange     `json:"config_keys,omitempty"`
	Accounts   []AccountChange `json:"accounts,omitempty"`
}

// Touched names what p changes in the keys and accounts in force (see
// Apply): the ids of the keys it creates, revokes or changes, with the
// key an account written out was made from, and the ids of its accounts.
func (p *Patch) Touched() (keys, accounts []string) {
	for _, k := range p.Keys {
		keys = append(keys, k.ID)
	}
	for _, ch := range p.ConfigKeys {
		keys = append(keys, ch.ID)
	}
	for _, ch := range p.Accounts {
		accounts = append(accounts, ch.ID)
		if ch.Plan != "" {
			keys = append(keys, ch.ID)
		}
	}
	return keys, accounts
}

// with returns d with p's records in place, at p's version; d is not
// modified.
func (d *Doc) with(p *Patch) *Doc {
	out := d.clone()
	out.Version = p.Version
	for _, k := range p.Keys {
		if i := slices.IndexFunc(out.Keys, func(o Key) bool { return o.ID == k.ID }); i >= 0 {
			out.Keys[i] = k
		} else {
			out.Keys = append(out.Keys, k)
		}
	}
	for _, ch := range p.ConfigKeys {
		if i := slices.IndexFunc(out.ConfigKeys, func(o KeyChange) bool { return o.ID == ch.ID && o.SHA256 == ch.SHA256 }); i >= 0 {
			out.ConfigKeys[i] = ch
		} else {
			out.ConfigKeys = append(out.ConfigKeys, ch)
		}
	}
	for _, ch := range p.Accounts {
		if i := slices.IndexFunc(out.Accounts, func(o AccountChange) bool { return o.ID == ch.ID }); i >= 0 {
			out.Accounts[i] = ch
		} else {
			out.Accounts = append(out.Accounts, ch)
		}
	}
	return out
}

// empty reports whether d changes nothing.
func (d *Doc) empty() bool {
	return len(d.Keys) == 0 && len(d.ConfigKeys) == 0 && len(d.Accounts) == 0
}

// clone returns a copy of d that shares no slice with it (the pointers in
// its elements are never written through, only replaced).
func (d *Doc) clone() *Doc {
	return &Doc{
		Version:    d.Version,
		Keys:       slices.Clone(d.Keys),
		ConfigKeys: slices.Clone(d.ConfigKeys),
		Accounts:   slices.Clone(d.Accounts),
	}
}

// Apply returns base with d laid over it: the file's keys less those d
// revokes, with the ends rotations gave them, then the keys d created and
// did not revoke; each account with d's overrides, and the accounts d
// made. base is not modified; an empty d gives base itself. It costs one
// pass over the keys and accounts.
//
// A key configured without an account is an account of its own, named by
// the key's id. An account d makes out of such a key (AccountChange.Plan)
// takes the key in: the key's quotas are the account's now, and the
// counters, kept by account id, stay the same.
//
// Changes that name what the file no longer has (a key removed, or given
// a new digest; an account gone and not made by d) are left out. The
// result still has to pass config.Validate: a Doc made for one file may
// not fit another.
func (d *Doc) Apply(base *config.Config) *config.Config {
	if d == nil || d.empty() {
		return base
	}
	changes := make(map[[2]string]*KeyChange, len(d.ConfigKeys))
	for i := range d.ConfigKeys {
		ch := &d.ConfigKeys[i]
		changes[[2]string{ch.ID, ch.SHA256}] = ch
	}
	c := *base
	c.Keys = make([]config.Key, 0, len(base.Keys)+len(d.Keys))
	c.Accounts = slices.Clone(base.Accounts)
	for _, k := range base.Keys {
		ch := changes[[2]string{k.ID, k.SHA256}]
		if ch != nil && ch.Revoked != nil {
			continue
		}
		if ch != nil && ch.Expires != nil && (k.Expires == nil || ch.Expires.Before(*k.Expires)) {
			k.Expires = ch.Expires
		}
		c.Keys = append(c.Keys, k)
	}
	for _, k := range d.Keys {
		if k.Revoked == nil {
			c.Keys = append(c.Keys, k.config())
		}
	}
	accounts := make(map[string]int, len(c.Accounts))
	for i, a := range c.Accounts {
		if _, dup := accounts[a.ID]; !dup {
			accounts[a.ID] = i
		}
	}
	var own map[string]int // keys without an account, by id; built once needed
	for _, ch := range d.Accounts {
		i, ok := accounts[ch.ID]
		if ch.Deleted != nil && !ok {
			continue // made by the API, and deleted
		}
		if !ok {
			if ch.Plan == "" {
				continue // the account is gone from the file
			}
			c.Accounts = append(c.Accounts, config.Account{ID: ch.ID, Plan: ch.Plan})
			i = len(c.Accounts) - 1
			accounts[ch.ID] = i
			if own == nil {
				own = make(map[string]int)
				for j := len(c.Keys) - 1; j >= 0; j-- {
					if c.Keys[j].Account == "" {
						own[c.Keys[j].ID] = j // the first of an id wins, as in a search
					}
				}
			}
			if j, ok := own[ch.ID]; ok {
				writeOut(&c.Keys[j])
				delete(own, ch.ID)
			}
		}
		a := &c.Accounts[i]
		a.PerSecond = cmp.Or(ch.PerSecond, a.PerSecond)
		a.Burst = cmp.Or(ch.Burst, a.Burst)
		a.Daily = cmp.Or(ch.Daily, a.Daily)
		a.Monthly = cmp.Or(ch.Monthly, a.Monthly)
	}
	return &c
}

// writeOut puts k, a key configured without an account, into the account
// of its id that the API wrote out of it.
func writeOut(k *config.Key) {
	k.Account, k.Plan, k.Daily, k.Monthly = k.ID, "", nil, nil
}

// Key is key id as Apply(base) has it, found without building the whole:
// what the key API reads and what an edit's patch is checked against.
func (d *Doc) Key(base *config.Config, id string) (config.Key, bool) {
	k, ok := config.Key{}, false
	if i := slices.IndexFunc(base.Keys, func(k config.Key) bool { return k.ID == id }); i >= 0 {
		k = base.Keys[i]
		ch := d.configKey(k.ID, k.SHA256)
		switch {
		case ch == nil:
			ok = true
		case ch.Revoked == nil:
			ok = true
			if ch.Expires != nil && (k.Expires == nil || ch.Expires.Before(*k.Expires)) {
				k.Expires = ch.Expires
			}
		}
	}
	if !ok {
		ak := d.apiKey(id)
		if ak == nil || ak.Revoked != nil {
			return config.Key{}, false
		}
		k = ak.config()
	}
	if k.Account == "" && !slices.ContainsFunc(base.Accounts, func(a config.Account) bool { return a.ID == id }) {
		if ch := d.account(id); ch != nil && ch.Plan != "" && ch.Deleted == nil {
			writeOut(&k)
		}
	}
	return k, true
}

// Account is account id as Apply(base) has it (an account configured or
// made by d, not the implicit account of a key), found without building
// the whole.
func (d *Doc) Account(base *config.Config, id string) (config.Account, bool) {
	ch := d.account(id)
	var a config.Account
	if i := slices.IndexFunc(base.Accounts, func(a config.Account) bool { return a.ID == id }); i >= 0 {
		a = base.Accounts[i]
	} else if ch != nil && ch.Plan != "" && ch.Deleted == nil {
		a = config.Account{ID: id, Plan: ch.Plan}
	} else {
		return config.Account{}, false
	}
	if ch != nil {
		a.PerSecond = cmp.Or(ch.PerSecond, a.PerSecond)
		a.Burst = cmp.Or(ch.Burst, a.Burst)
		a.Daily = cmp.Or(ch.Daily, a.Daily)
		a.Monthly = cmp.Or(ch.Monthly, a.Monthly)
	}
	return a, true
}

// config is k as a configured key.
func (k Key) config() config.Key {
	created := k.Created
	return config.Key{
		ID: k.ID, SHA256: k.SHA256, Account: k.Account, Plan: k.Plan,
		Created: &created, NotBefore: k.NotBefore, Expires: k.Expires,
	}
}

// configKey is d's change of the file's key id with digest sha, or nil.
func (d *Doc) configKey(id, sha string) *KeyChange {
	for i := range d.ConfigKeys {
		if ch := &d.ConfigKeys[i]; ch.ID == id && ch.SHA256 == sha {
			return ch
		}
	}
	return nil
}

// apiKey is d's key id, revoked or not, or nil.
func (d *Doc) apiKey(id string) *Key {
	if i := slices.IndexFunc(d.Keys, func(k Key) bool { return k.ID == id }); i >= 0 {
		return &d.Keys[i]
	}
	return nil
}

// account is d's change of account id, or nil.
func (d *Doc) account(id string) *AccountChange {
	if i := slices.IndexFunc(d.Accounts, func(a AccountChange) bool { return a.ID == id }); i >= 0 {
		return &d.Accounts[i]
	}
	return nil
}
