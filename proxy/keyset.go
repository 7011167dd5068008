package proxy

import (
	"maps"
	"reflect"

	"trendgate/auth"
	"trendgate/config"
	"trendgate/limits"
)

// policyMap is the resolved rate and quotas of each key: a large map
// Compile fills and a small layer of the keys WithKeys compiled since,
// which it copies alone. A key in the layer shadows the map's.
type policyMap struct {
	base map[string]limits.Policy
	over map[string]limits.Policy // nil: none
}

// get is key id's policy; the zero Policy for a key it does not have.
func (m policyMap) get(id string) limits.Policy {
	if p, ok := m.over[id]; ok {
		return p
	}
	return m.base[id]
}

// compactPolicies is how many keys the layer of a policyMap holds before
// WithKeys folds it into a new map (see auth.Keyring.With).
const compactPolicies = 1024

// WithKeys returns set compiled again for cfg, which differs from set's
// configuration only in the keys of ids (added, changed, or gone) and in
// the accounts of those keys; every other part of set is shared. This is
// what a change made through the key API costs: the keys it touches, not
// the keys beside them. cfg must pass config.Validate, as for Compile; a
// change the keyring refuses (a digest another key keeps) is an error and
// set is left as it was.
//
// A change of an account's numbers touches the policy of each of its
// keys: ids must name them all.
func (set *Settings) WithKeys(cfg *config.Config, ids []string) (*Settings, error) {
	want := make(map[string]bool, len(ids))
	for _, id := range ids {
		want[id] = true
	}
	var put []auth.KeySpec
	over := make(map[string]limits.Policy, len(set.policies.over)+len(ids))
	maps.Copy(over, set.policies.over)
	found := make(map[string]bool, len(ids))
	for _, rk := range cfg.ResolvedKeysOf(want) {
		found[rk.Key.ID] = true
		put = append(put, specOf(rk))
		over[rk.Key.ID] = rk.Policy
	}
	var drop []string
	for _, id := range ids {
		if !found[id] {
			drop = append(drop, id)
			delete(over, id)
		}
	}
	kr, err := set.keyring.With(put, drop)
	if err != nil {
		return nil, err
	}
	out := *set
	out.cfg, out.keyring = cfg, kr
	out.policies = policyMap{base: set.policies.base, over: over}
	if len(over) >= compactPolicies {
		base := maps.Clone(set.policies.base)
		maps.Copy(base, over)
		for _, id := range drop {
			delete(base, id)
		}
		out.policies = policyMap{base: base}
	}
	return &out, nil
}

// specOf is rk as the keyring needs it.
func specOf(rk config.ResolvedKey) auth.KeySpec {
	spec := auth.KeySpec{ID: rk.Key.ID, Digest: rk.Key.SHA256, Account: rk.Account, Plan: rk.Plan, Disabled: rk.Key.Disabled}
	if rk.Key.Expires != nil {
		spec.Expires = *rk.Key.Expires
	}
	if rk.Key.NotBefore != nil {
		spec.NotBefore = *rk.Key.NotBefore
	}
	return spec
}

// Recompile is Compile(cfg) for a reload from prev's configuration: when
// the plans and accounts are the same and only some keys differ, the
// keys that did not change keep their compiled entries (prev's keyring
// and policies, changed through WithKeys) and only those that changed are
// compiled, so a reload that touches one key of 100,000 costs about what
// it costs with 100. Otherwise it is Compile.
func Recompile(prev *Settings, cfg *config.Config) (*Settings, error) {
	if prev == nil || !sameKeyContext(prev.cfg, cfg) {
		return Compile(cfg)
	}
	ids, ok := changedKeys(prev.cfg.Keys, cfg.Keys)
	if !ok {
		return Compile(cfg)
	}
	shell := *cfg
	shell.Keys = nil
	set, err := Compile(&shell)
	if err != nil {
		return nil, err
	}
	keys, err := prev.WithKeys(cfg, ids)
	if err != nil {
		return nil, err
	}
	set.cfg, set.keyring, set.policies = cfg, keys.keyring, keys.policies
	return set, nil
}

// sameKeyContext reports whether the keys of a and b resolve against the
// same plans and accounts.
func sameKeyContext(a, b *config.Config) bool {
	if len(a.Accounts) != len(b.Accounts) || len(a.Plans) != len(b.Plans) {
		return false
	}
	for i := range a.Accounts {
		if !a.Accounts[i].Equal(b.Accounts[i]) {
			return false
		}
	}
	for name, p := range a.Plans {
		q, ok := b.Plans[name]
		if !ok || !reflect.DeepEqual(p, q) {
			return false
		}
	}
	return true
}

// changedKeys returns the ids of the keys added, removed or changed
// between old and cur; ok is false when cur names a key twice (Compile
// reports it) or when so many changed that compiling them all is as cheap.
func changedKeys(old, cur []config.Key) (ids []string, ok bool) {
	// The common reload keeps the keys in their order: compare in step
	// while the ids match, and index only what is left.
	n := 0
	for ; n < len(old) && n < len(cur) && old[n].ID == cur[n].ID; n++ {
		if !old[n].Equal(cur[n]) {
			ids = append(ids, cur[n].ID)
		}
	}
	total := len(cur)
	old, cur = old[n:], cur[n:]
	before := make(map[string]int, len(old))
	for i := range old {
		before[old[i].ID] = i
	}
	seen := make(map[string]bool, len(cur))
	for i := range cur {
		k := &cur[i]
		if seen[k.ID] {
			return nil, false
		}
		seen[k.ID] = true
		if j, had := before[k.ID]; !had || !old[j].Equal(*k) {
			ids = append(ids, k.ID)
		}
	}
	for i := range old {
		if !seen[old[i].ID] {
			ids = append(ids, old[i].ID)
		}
	}
	return ids, len(ids) < total/2+compactPolicies
}
