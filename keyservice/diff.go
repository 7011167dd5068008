package keyservice

import "trendgate/config"

// KeyChanges lists key ids by what a change of the key list (a reload,
// another instance's key changes) did to them.
type KeyChanges struct {
	Added, Removed, Disabled, Enabled, Changed []string
}

// DiffKeys compares two key lists by id. A key whose only change is being
// disabled or enabled is listed there, not under changed.
func DiffKeys(old, cur []config.Key) KeyChanges {
	var c KeyChanges
	// The common reload keeps the keys in their order: compare in step
	// while the ids match, and index only what is left.
	n := 0
	for ; n < len(old) && n < len(cur) && old[n].ID == cur[n].ID; n++ {
		c.compare(old[n], cur[n])
	}
	old, cur = old[n:], cur[n:]
	before := make(map[string]int, len(old))
	for i := range old {
		before[old[i].ID] = i
	}
	seen := make(map[string]bool, len(cur))
	for _, k := range cur {
		seen[k.ID] = true
		i, ok := before[k.ID]
		if !ok {
			c.Added = append(c.Added, k.ID)
			continue
		}
		c.compare(old[i], k)
	}
	for _, k := range old {
		if !seen[k.ID] {
			c.Removed = append(c.Removed, k.ID)
		}
	}
	return c
}

// compare notes how key k, o before, changed.
func (c *KeyChanges) compare(o, k config.Key) {
	switch {
	case k.Disabled && !o.Disabled:
		c.Disabled = append(c.Disabled, k.ID)
	case !k.Disabled && o.Disabled:
		c.Enabled = append(c.Enabled, k.ID)
	}
	o.Disabled = k.Disabled
	if !o.Equal(k) {
		c.Changed = append(c.Changed, k.ID)
	}
}
