package cache

import (
	"context"
	"time"
)

// tiered reads the local tier first and the shared one second.
type tiered struct {
	local, shared Store
}

var (
	_ Store      = (*tiered)(nil)
	_ TopicIndex = (*tiered)(nil)
	_ Retainer   = (*tiered)(nil)
	_ Admitter   = (*tiered)(nil)
)

// Tiered combines a local and a shared tier: Get reads local first, then
// shared (copying a shared hit into local); Set, Delete and Clear go to both.
// It implements TopicIndex and Retainer by forwarding to the tiers that do.
// Both tiers must be non-nil.
func Tiered(local, shared Store) Store { return &tiered{local: local, shared: shared} }

// Get reads local, then shared.
func (t *tiered) Get(ctx context.Context, key string) (*Entry, bool) {
	if e, ok := t.local.Get(ctx, key); ok {
		return e, true
	}
	mark := t.removals()
	e, ok := t.shared.Get(ctx, key)
	if ok {
		t.keep(ctx, e, mark)
	}
	return e, ok
}

// remover is a local tier that counts its removals (Local).
type remover interface{ Removals() uint64 }

// removals returns the local tier's removal count, or 0 if it keeps none.
func (t *tiered) removals() uint64 {
	if r, ok := t.local.(remover); ok {
		return r.Removals()
	}
	return 0
}

// keep copies e, read from the shared tier after the local tier's removal
// count was mark, into the local tier. When anything was removed from the
// local tier since mark, the copy is taken out again: a purge whose
// message was applied between the shared read (which may predate the
// purge's own delete in Redis) and this Set must not be undone by it. The
// cost is a local miss after an unrelated purge, now and then.
func (t *tiered) keep(ctx context.Context, e *Entry, mark uint64) {
	t.local.Set(ctx, e)
	if t.removals() != mark {
		t.local.Delete(ctx, e.Key)
	}
}

// Set writes both tiers.
func (t *tiered) Set(ctx context.Context, e *Entry) {
	t.local.Set(ctx, e)
	t.shared.Set(ctx, e)
}

// Delete removes key from both tiers.
func (t *tiered) Delete(ctx context.Context, key string) {
	t.local.Delete(ctx, key)
	t.shared.Delete(ctx, key)
}

// Clear empties both tiers.
func (t *tiered) Clear(ctx context.Context) {
	t.local.Clear(ctx)
	t.shared.Clear(ctx)
}

// TopicKeys returns the union of both tiers' keys for topic.
func (t *tiered) TopicKeys(ctx context.Context, topic string) []string {
	seen := make(map[string]struct{})
	var keys []string
	for _, s := range []Store{t.local, t.shared} {
		ti, ok := s.(TopicIndex)
		if !ok {
			continue
		}
		for _, k := range ti.TopicKeys(ctx, topic) {
			if _, dup := seen[k]; !dup {
				seen[k] = struct{}{}
				keys = append(keys, k)
			}
		}
	}
	return keys
}

// SetRetention forwards to both tiers.
func (t *tiered) SetRetention(maxStale time.Duration) {
	for _, s := range []Store{t.local, t.shared} {
		if r, ok := s.(Retainer); ok {
			r.SetRetention(maxStale)
		}
	}
}

// Admits reports whether the local tier would store e (the shared tier
// bounds entries by the upstream's body limit, which every entry meets).
func (t *tiered) Admits(e *Entry) bool {
	if a, ok := t.local.(Admitter); ok {
		return a.Admits(e)
	}
	return true
}

// Len returns the local tier's entry count, if it keeps one.
func (t *tiered) Len() int {
	if l, ok := t.local.(interface{ Len() int }); ok {
		return l.Len()
	}
	return 0
}
