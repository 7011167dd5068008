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
	Version int64 `yaml:"version"`
	// Keys are the keys created through the API.
	Keys []Key `yaml:"keys,omitempty"`
	// ConfigKeys are changes to keys of the configuration file: revoked,
	// or given an end by a rotation.
	ConfigKeys []KeyChange `yaml:"config_keys,omitempty"`
	// Accounts are quota and rate overrides set through the API.
	Accounts []AccountChange `yaml:"accounts,omitempty"`
}

// Key is a key created through the API: its digest, never its secret.
// Exactly one of Account and Plan is set.
type Key struct {
	ID        string     `yaml:"id"`
	SHA256    string     `yaml:"sha256"`
	Account   string     `yaml:"account,omitempty"`
	Plan      string     `yaml:"plan,omitempty"`
	Created   time.Time  `yaml:"created"`
	NotBefore *time.Time `yaml:"not_before,omitempty"`
	Expires   *time.Time `yaml:"expires,omitempty"`
}

// KeyChange changes one key of the configuration file, named by its id and
// digest together: a key given a new digest in the file under the same id
// is a new key, which the change does not touch.
type KeyChange struct {
	ID     string `yaml:"id"`
	SHA256 string `yaml:"sha256"`
	// Revoked, when set, removes the key from the keys in force.
	Revoked *time.Time `yaml:"revoked,omitempty"`
	// Expires, when set, ends the key then, or at its configured expiry
	// if that comes first.
	Expires *time.Time `yaml:"expires,omitempty"`
}

// AccountChange overrides an account's numbers; nil keeps the configured
// value (the account's own, else its plan's). With Plan set it also makes
// the account when the file has none of that id: the API writes out so
// the account of a key configured without one (see Apply), copying the
// key's plan and quotas, once another key joins it or it is given
// overrides.
type AccountChange struct {
	ID        string   `yaml:"id"`
	Plan      string   `yaml:"plan,omitempty"`
	PerSecond *float64 `yaml:"per_second,omitempty"`
	Burst     *int     `yaml:"burst,omitempty"`
	Daily     *int64   `yaml:"daily,omitempty"`
	Monthly   *int64   `yaml:"monthly,omitempty"`
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
// revokes, with the ends rotations gave them, then the keys d created;
// each account with d's overrides, and the accounts d made.
// base is not modified; an empty d gives base itself.
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
	c := *base
	c.Keys = make([]config.Key, 0, len(base.Keys)+len(d.Keys))
	c.Accounts = slices.Clone(base.Accounts)
	for _, k := range base.Keys {
		ch := d.configKey(k.ID, k.SHA256)
		if ch != nil && ch.Revoked != nil {
			continue
		}
		if ch != nil && ch.Expires != nil && (k.Expires == nil || ch.Expires.Before(*k.Expires)) {
			k.Expires = ch.Expires
		}
		c.Keys = append(c.Keys, k)
	}
	for _, k := range d.Keys {
		c.Keys = append(c.Keys, k.config())
	}
	for _, ch := range d.Accounts {
		i := slices.IndexFunc(c.Accounts, func(a config.Account) bool { return a.ID == ch.ID })
		if i < 0 {
			if ch.Plan == "" {
				continue // the account is gone from the file
			}
			c.Accounts = append(c.Accounts, config.Account{ID: ch.ID, Plan: ch.Plan})
			i = len(c.Accounts) - 1
			if j := slices.IndexFunc(c.Keys, func(k config.Key) bool { return k.ID == ch.ID && k.Account == "" }); j >= 0 {
				k := &c.Keys[j]
				k.Account, k.Plan, k.Daily, k.Monthly = ch.ID, "", nil, nil
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
