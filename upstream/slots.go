package upstream

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"
)

// slots shares the MaxConns concurrent upstream requests among accounts the
// way the budget shares its calls: no account can hold them all while
// another waits, and none is left idle while someone asks.
//
// The rule. A part R of the N slots (SlotReserve×N, rounded up, below N)
// is kept for accounts that hold no slot: an account that holds one may take
// another only while more than R stay free, so an account arriving while
// another fills the upstream with slow requests finds a slot at once. The
// rest, N-R, is what one account alone may hold. When a slot frees, it goes
// to the waiting account that holds the fewest slots for its weight
// (held/weight; the earliest waiter among equals), so under contention each
// account converges on its weighted share of N-R and none holds more than
// that while another under it waits. A request whose callers have all
// left (its fill is abandoned) is dropped from the queue instead of taking
// a slot, and waiting is bounded by SlotWait: then ErrBusy, which says
// nothing about the upstream's health.
//
// Background refreshes and calls that name no account share the account "".
//
// The zero value is not usable; build it with newSlots.
type slots struct {
	size    int
	reserve int // slots only an account holding none may take

	// after starts the bound on one wait; time.NewTimer's channel unless a
	// test replaces it.
	after func(time.Duration) (<-chan time.Time, func() bool)

	mu    sync.Mutex     // guards free, held and queue
	free  int            // slots not held
	held  map[string]int // slots held per account; no zero entries
	queue []*slotWaiter  // waiting requests, oldest first
}

// slotWaiter is one request waiting for a slot.
type slotWaiter struct {
	account   string
	weight    float64
	abandoned func() bool   // nil: never
	ready     chan struct{} // closed once granted or dropped
	granted   bool          // set before ready is closed; guarded by slots.mu
}

// errAbandoned is why a waiter whose callers all left got no slot. It is
// an ErrBusy: a client that joins the fill just as it gives up is told to
// retry, as if the slots had stayed busy.
var errAbandoned = fmt.Errorf("%w: abandoned while waiting", ErrBusy)

// newSlots returns slots of size n keeping reserve (0 to below 1) of them
// for accounts that hold none.
func newSlots(n int, reserve float64) *slots {
	r := 0
	if n > 1 && reserve > 0 {
		r = min(int(math.Ceil(reserve*float64(n)-1e-9)), n-1)
	}
	return &slots{
		size:    n,
		reserve: r,
		free:    n,
		held:    make(map[string]int),
		after: func(d time.Duration) (<-chan time.Time, func() bool) {
			t := time.NewTimer(d)
			return t.C, t.Stop
		},
	}
}

// acquire takes a slot for account (weight <= 0 counts as 1), waiting at
// most wait (0: not at all beyond a free slot) or until ctx ends. It
// returns the function that gives the slot back, which must be called
// exactly once; or ErrBusy when the wait ran out, errAbandoned when
// abandoned reported true while it waited, or ctx's error. abandoned may
// be nil.
func (s *slots) acquire(ctx context.Context, account string, weight float64, wait time.Duration, abandoned func() bool) (func(), error) {
	if weight <= 0 || math.IsInf(weight, 0) || math.IsNaN(weight) {
		weight = 1
	}
	w := &slotWaiter{account: account, weight: weight, abandoned: abandoned, ready: make(chan struct{})}
	s.mu.Lock()
	s.queue = append(s.queue, w)
	s.dispatchLocked()
	if w.granted {
		s.mu.Unlock()
		return s.releaser(account), nil
	}
	s.mu.Unlock()

	var timeout <-chan time.Time
	if wait > 0 {
		c, stop := s.after(wait)
		defer stop()
		timeout = c
	} else {
		c := make(chan time.Time, 1)
		c <- time.Time{}
		timeout = c
	}
	var err error
	select {
	case <-w.ready:
	case <-timeout:
		err = ErrBusy
	case <-ctx.Done():
		err = ctx.Err()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if w.granted {
		return s.releaser(account), nil // granted as the wait ended: keep it
	}
	select {
	case <-w.ready: // dropped as abandoned
		return nil, errAbandoned
	default:
	}
	s.removeLocked(w)
	return nil, err
}

// releaser returns the function that gives account's slot back once.
func (s *slots) releaser(account string) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.free++
			if s.held[account]--; s.held[account] <= 0 {
				delete(s.held, account)
			}
			s.dispatchLocked()
		})
	}
}

// removeLocked takes w out of the queue.
func (s *slots) removeLocked(w *slotWaiter) {
	for i, q := range s.queue {
		if q == w {
			s.queue = append(s.queue[:i], s.queue[i+1:]...)
			return
		}
	}
}

// dispatchLocked hands free slots to waiters by the rule (see slots) and
// drops the abandoned ones. Call with mu held.
func (s *slots) dispatchLocked() {
	// Abandoned waiters leave first: they must not hold anyone's turn.
	kept := s.queue[:0]
	for _, w := range s.queue {
		if w.abandoned != nil && w.abandoned() {
			close(w.ready)
			continue
		}
		kept = append(kept, w)
	}
	clear(s.queue[len(kept):])
	s.queue = kept
	for s.free > 0 {
		best := -1
		var bestRatio float64
		for i, w := range s.queue {
			h := s.held[w.account]
			if h > 0 && s.free-1 < s.reserve {
				continue // the last free slots are kept for accounts holding none
			}
			ratio := float64(h) / w.weight
			if best < 0 || ratio < bestRatio {
				best, bestRatio = i, ratio
			}
		}
		if best < 0 {
			return
		}
		w := s.queue[best]
		s.queue = append(s.queue[:best], s.queue[best+1:]...)
		s.free--
		s.held[w.account]++
		w.granted = true
		close(w.ready)
	}
}

// inUse returns the slots held by account and in all, and how many wait.
func (s *slots) inUse(account string) (mine, all, waiting int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held[account], s.size - s.free, len(s.queue)
}
