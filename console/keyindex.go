package console

import (
	"cmp"
	"slices"
	"sort"
	"sync"
	"sync/atomic"

	"trendgate/config"
	"trendgate/limits"
	"trendgate/proxy"
)

// keyIndex is what the admin views look keys and accounts up in: one
// settings snapshot's keys and accounts sorted by id, with maps from id to
// place. It is built once per snapshot (on the first admin read after a
// reload), so a page, a lookup or the summary costs what it returns, not
// what is configured. Read only once built.
type keyIndex struct {
	set *proxy.Settings // the snapshot the index was built from

	keys   []config.ResolvedKey // sorted by key id
	keyPos map[string]int       // key id → place in keys

	accounts   []indexedAccount // sorted by account id
	accountPos map[string]int   // account id → place in accounts

	// quotaKeys and freeKeys are the places in keys of the keys whose
	// account has a quota (daily or monthly) and of those whose account
	// has none, in id order; quotaAccounts and freeAccounts the same for
	// the accounts with keys. The summary's top lists and the quota
	// gauges draw their quiet entries (nothing used) from their heads.
	quotaKeys, freeKeys         []int
	quotaAccounts, freeAccounts []int
}

// indexedAccount is one account: its settings and the places of its keys
// in keyIndex.keys, in key id order.
type indexedAccount struct {
	config.ResolvedAccount
	keys []int
}

// hasQuota reports whether p limits a day or a month.
func hasQuota(p limits.Policy) bool { return p.Daily > 0 || p.Monthly > 0 }

// newKeyIndex indexes set's keys and accounts.
func newKeyIndex(set *proxy.Settings) *keyIndex {
	cfg := set.Config()
	resolved := cfg.ResolvedKeys()
	// Sort small (id, place) pairs rather than the large ResolvedKeys.
	type ref struct {
		id    string
		place int
	}
	refs := make([]ref, len(resolved))
	for i := range resolved {
		refs[i] = ref{resolved[i].Key.ID, i}
	}
	slices.SortFunc(refs, func(a, b ref) int { return cmp.Compare(a.id, b.id) })
	idx := &keyIndex{set: set, keys: make([]config.ResolvedKey, len(resolved))}
	for i, r := range refs {
		idx.keys[i] = resolved[r.place]
	}
	idx.keyPos = make(map[string]int, len(idx.keys))
	for i, rk := range idx.keys {
		idx.keyPos[rk.Key.ID] = i
		if hasQuota(rk.Policy) {
			idx.quotaKeys = append(idx.quotaKeys, i)
		} else {
			idx.freeKeys = append(idx.freeKeys, i)
		}
	}
	for _, ra := range cfg.ResolvedAccounts() {
		idx.accounts = append(idx.accounts, indexedAccount{ResolvedAccount: ra})
	}
	slices.SortFunc(idx.accounts, func(a, b indexedAccount) int { return cmp.Compare(a.ID, b.ID) })
	idx.accountPos = make(map[string]int, len(idx.accounts))
	for i := range idx.accounts {
		idx.accountPos[idx.accounts[i].ID] = i
	}
	for i, rk := range idx.keys { // in id order, so each account's keys are too
		if j, ok := idx.accountPos[rk.Account]; ok {
			idx.accounts[j].keys = append(idx.accounts[j].keys, i)
		}
	}
	for i := range idx.accounts {
		switch a := &idx.accounts[i]; {
		case len(a.keys) == 0:
		case hasQuota(a.Policy):
			idx.quotaAccounts = append(idx.quotaAccounts, i)
		default:
			idx.freeAccounts = append(idx.freeAccounts, i)
		}
	}
	return idx
}

// key returns the key with id.
func (idx *keyIndex) key(id string) (config.ResolvedKey, bool) {
	i, ok := idx.keyPos[id]
	if !ok {
		return config.ResolvedKey{}, false
	}
	return idx.keys[i], true
}

// account returns the account with id.
// has reports whether a key of that id is in force in the snapshot.
func (idx *keyIndex) has(id string) bool {
	_, ok := idx.key(id)
	return ok
}

func (idx *keyIndex) account(id string) (*indexedAccount, bool) {
	i, ok := idx.accountPos[id]
	if !ok {
		return nil, false
	}
	return &idx.accounts[i], true
}

// firstKey returns the id of a's first key, or a's own id when it has none
// (the limiter reads an account's quotas through any of its keys).
func (idx *keyIndex) firstKey(a *indexedAccount) string {
	if len(a.keys) == 0 {
		return a.ID
	}
	return idx.keys[a.keys[0]].Key.ID
}

// accountPicks gathers accounts of an index (places in its accounts), each
// once and only those with keys: the accounts whose quotas are read.
type accountPicks struct {
	idx    *keyIndex
	seen   map[int]bool
	places []int
}

func newAccountPicks(idx *keyIndex) *accountPicks {
	return &accountPicks{idx: idx, seen: make(map[int]bool)}
}

func (p *accountPicks) add(i int) {
	if !p.seen[i] && len(p.idx.accounts[i].keys) > 0 {
		p.seen[i] = true
		p.places = append(p.places, i)
	}
}

// addID adds the account id when it is in force.
func (p *accountPicks) addID(id string) {
	if i, ok := p.idx.accountPos[id]; ok {
		p.add(i)
	}
}

// addQuiet adds the first n accounts by id with a quota and the first n
// without one: those ranked first among the accounts that used nothing.
func (p *accountPicks) addQuiet(n int) {
	for _, list := range [][]int{p.idx.quotaAccounts, p.idx.freeAccounts} {
		for _, i := range list[:min(n, len(list))] {
			p.add(i)
		}
	}
}

// quotaPolicies returns what the limiter reads each account's quotas
// with, in the order the accounts were added: one of its keys stands for
// it, with the account's quotas and no rate (only the quotas are read).
func (p *accountPicks) quotaPolicies() []limits.KeyPolicy {
	kps := make([]limits.KeyPolicy, len(p.places))
	for j, i := range p.places {
		a := &p.idx.accounts[i]
		pol := a.Policy
		pol.PerSecond, pol.Burst = 0, 0
		kps[j] = limits.KeyPolicy{Key: p.idx.firstKey(a), Account: a.ID, Policy: pol}
	}
	return kps
}

// keysAfter returns the place of the first key whose id sorts after after
// ("" for the first key).
func (idx *keyIndex) keysAfter(after string) int {
	return sort.Search(len(idx.keys), func(i int) bool { return idx.keys[i].Key.ID > after })
}

// accountsAfter is keysAfter for accounts.
func (idx *keyIndex) accountsAfter(after string) int {
	return sort.Search(len(idx.accounts), func(i int) bool { return idx.accounts[i].ID > after })
}

// keyIndexCache holds the index of the latest snapshot read.
type keyIndexCache struct {
	cur atomic.Pointer[keyIndex]
	mu  sync.Mutex // serializes builds, so a reload is indexed once
}

// of returns set's index, building it if the cached one is another
// snapshot's.
func (c *keyIndexCache) of(set *proxy.Settings) *keyIndex {
	if idx := c.cur.Load(); idx != nil && idx.set == set {
		return idx
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if idx := c.cur.Load(); idx != nil && idx.set == set {
		return idx
	}
	idx := newKeyIndex(set)
	c.cur.Store(idx)
	return idx
}
