package proxy

import (
	"maps"

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
