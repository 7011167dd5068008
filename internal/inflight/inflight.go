// Package inflight bounds the bytes that work in flight keeps alive outside
// the cache's own bound: upstream bodies being read and checked, and the
// projected and compressed variants a response builds. A request takes its
// bytes before it allocates them and gives them back when it is done, so
// concurrent cold requests queue briefly instead of all holding their
// buffers at once.
package inflight

import (
	"context"
	"sync/atomic"

	"golang.org/x/sync/semaphore"
)

// Bound is a byte-weighted semaphore with a gauge of the bytes held. A nil
// *Bound bounds nothing: Acquire grants at once and Held is 0. Build it
// with New; it is safe for concurrent use.
type Bound struct {
	sem      *semaphore.Weighted
	capacity int64
	held     atomic.Int64 // bytes granted and not yet released
	waits    atomic.Int64 // acquisitions that had to wait
}

// New returns a Bound of capacity bytes (at least 1).
func New(capacity int64) *Bound {
	capacity = max(capacity, 1)
	return &Bound{sem: semaphore.NewWeighted(capacity), capacity: capacity}
}

// Grant is bytes taken from a Bound; Release gives them back. The zero
// Grant holds nothing and its Release does nothing.
type Grant struct {
	b *Bound
	n int64
}

// Acquire takes n bytes, waiting until they are free or ctx ends (then it
// returns ctx's error and holds nothing). n is clamped to the capacity, so
// a request larger than the whole bound waits until it is alone and then
// runs; n <= 0 takes nothing. A caller must not hold a Grant of the same
// Bound while it waits for another: take everything a step needs at once.
func (b *Bound) Acquire(ctx context.Context, n int64) (Grant, error) {
	if b == nil || n <= 0 {
		return Grant{}, nil
	}
	n = min(n, b.capacity)
	if !b.sem.TryAcquire(n) {
		b.waits.Add(1)
		if err := b.sem.Acquire(ctx, n); err != nil {
			return Grant{}, err
		}
	}
	b.held.Add(n)
	return Grant{b: b, n: n}, nil
}

// Release gives the grant's bytes back. Call it once.
func (g Grant) Release() {
	if g.b == nil {
		return
	}
	g.b.held.Add(-g.n)
	g.b.sem.Release(g.n)
}

// Bytes returns how many bytes g holds.
func (g Grant) Bytes() int64 { return g.n }

// Held returns the bytes granted and not yet released.
func (b *Bound) Held() int64 {
	if b == nil {
		return 0
	}
	return b.held.Load()
}

// Capacity returns the bound in bytes; 0 for a nil Bound.
func (b *Bound) Capacity() int64 {
	if b == nil {
		return 0
	}
	return b.capacity
}

// Waits returns how many acquisitions had to wait for bytes.
func (b *Bound) Waits() int64 {
	if b == nil {
		return 0
	}
	return b.waits.Load()
}
