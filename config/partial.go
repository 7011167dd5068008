package config

import (
	"fmt"
	"strconv"
	"strings"
)

// ValidateChanged reports what Validate would report about the keys whose
// ids are in keys and the accounts whose ids are in accounts (a key or an
// account no longer in c is not a problem), in a configuration whose
// other keys and accounts passed Validate as they are. It is what a key
// API change is checked with: one pass over the keys and accounts, with
// the checks Validate makes, so an account or key written by the API is
// held to the rules of a configured one. Problems name a key or an
// account by its id (`key "acme-ci".plan: ...`), not by a position in
// the file.
func (c *Config) ValidateChanged(keys, accounts []string) error {
	kset := newNameSet(keys)
	aset := newNameSet(accounts)
	sub := &Config{Plans: c.Plans, Limits: c.Limits, Routes: c.Routes}
	var p problems
	ids := map[string]int{}        // the changed keys' ids, counted in c
	digests := map[string]string{} // the changed keys' digests → id
	need := map[string]bool{}      // accounts the changed keys name
	for _, k := range c.Keys {
		if !kset.has(k.ID) {
			continue
		}
		ids[k.ID]++
		if ids[k.ID] > 1 {
			p.add(fmt.Sprintf("key %q.id", k.ID), "is used by another key")
			continue
		}
		sub.Keys = append(sub.Keys, k)
		digests[k.SHA256] = k.ID
		if k.Account != "" {
			need[k.Account] = true
		}
	}
	seen := map[string]bool{}
	for _, a := range c.Accounts {
		switch {
		case aset.has(a.ID) && seen[a.ID]:
			p.add(fmt.Sprintf("account %q.id", a.ID), "is used by another account")
		case aset.has(a.ID) || need[a.ID]:
			sub.Accounts = append(sub.Accounts, a)
		}
		seen[a.ID] = true
		// A changed key outside this account may not take its id.
		if n := ids[a.ID]; n > 0 && !aset.has(a.ID) {
			for _, k := range sub.Keys {
				if k.ID == a.ID && k.Account != a.ID {
					p.add(fmt.Sprintf("key %q.id", k.ID), "is the id of an account; a key outside that account "+
						"is an account of its own and needs an id no account has")
				}
			}
		}
	}
	var shas []string
	for sha := range digests {
		shas = append(shas, sha)
	}
	dset := newNameSet(shas)
	for _, k := range c.Keys {
		if kset.has(k.ID) {
			continue
		}
		if dset.has(k.SHA256) {
			p.add(fmt.Sprintf("key %q.sha256", digests[k.SHA256]), "same digest as key %q", k.ID)
		}
		// A changed account may not take the id of a key outside it.
		if aset.has(k.ID) && k.Account != k.ID {
			p.add(fmt.Sprintf("account %q.id", k.ID), "is the id of a key outside the account; "+
				"that key is an account of its own and needs an id no account has")
		}
	}
	var own problems
	sub.validateAccounts(&own)
	sub.validateKeys(&own)
	for _, prob := range own {
		p = append(p, sub.named(prob))
	}
	if len(p) > 0 {
		return &Error{Problems: p}
	}
	return nil
}

// nameSet is a set of strings asked about once per key of a large file:
// a few members are compared in turn, which costs less than hashing each
// name asked about; more go in a map.
type nameSet struct {
	few  []string
	many map[string]bool
}

func newNameSet(names []string) nameSet {
	if len(names) <= 8 {
		return nameSet{few: names}
	}
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return nameSet{many: m}
}

func (s nameSet) has(name string) bool {
	if s.many != nil {
		return s.many[name]
	}
	for _, n := range s.few {
		if n == name {
			return true
		}
	}
	return false
}

// named replaces the position that starts prob (keys[3], accounts[0])
// with the id of what is at that position.
func (c *Config) named(prob string) string {
	for _, s := range []struct {
		prefix string
		id     func(int) string
		n      int
	}{
		{"keys[", func(i int) string { return fmt.Sprintf("key %q", c.Keys[i].ID) }, len(c.Keys)},
		{"accounts[", func(i int) string { return fmt.Sprintf("account %q", c.Accounts[i].ID) }, len(c.Accounts)},
	} {
		rest, ok := strings.CutPrefix(prob, s.prefix)
		if !ok {
			continue
		}
		num, tail, ok := strings.Cut(rest, "]")
		i, err := strconv.Atoi(num)
		if !ok || err != nil || i < 0 || i >= s.n {
			continue
		}
		return s.id(i) + tail
	}
	return prob
}
