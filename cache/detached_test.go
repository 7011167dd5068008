package cache

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// heldFetches is a Fetcher factory whose fetches wait until released or
// cancelled, recording which were cancelled.
type heldFetches struct {
	h       *harness
	release chan struct{}

	mu        sync.Mutex // guards started, cancelled and abandoned
	started   map[string]int
	cancelled map[string]bool
	abandoned map[string]bool // Abandoned(ctx) when the fetch was released
}

func newHeldFetches(h *harness) *heldFetches {
	return &heldFetches{h: h, release: make(chan struct{}), started: map[string]int{}, cancelled: map[string]bool{}, abandoned: map[string]bool{}}
}

func (f *heldFetches) fetch(key string) Fetcher {
	return func(ctx context.Context, _ bool) (*Entry, error) {
		f.mu.Lock()
		f.started[key]++
		f.mu.Unlock()
		select {
		case <-f.release:
			f.mu.Lock()
			f.abandoned[key] = Abandoned(ctx)
			f.mu.Unlock()
			return entry(key, "bitcoin", f.h.clk.Now(), time.Hour, `{"k":"`+key+`"}`), nil
		case <-ctx.Done():
			f.mu.Lock()
			f.cancelled[key] = true
			f.mu.Unlock()
			return nil, ctx.Err()
		}
	}
}

func (f *heldFetches) count(key string) (started int, cancelled bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.started[key], f.cancelled[key]
}

func (f *heldFetches) wasAbandoned(key string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.abandoned[key]
}

// abandon starts a Get of key whose caller leaves once its fetch has
// started (as a client that goes away does), and waits for it to return.
func abandon(t *testing.T, h *harness, key string, fetch Fetcher) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := h.c.Get(ctx, key, fetch)
		errc <- err
	}()
	synctest.Wait() // the fill has started and its fetch waits
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("abandoned Get(%s): %v; want context.Canceled", key, err)
	}
	synctest.Wait() // the fill is detached, or dropped and its fetch ended
}

// Regression (issue 31): a fill whose callers had all left ran on until
// fetch_timeout, and nothing bounded how many did: a connection that
// opened and abandoned 20,000 requests for distinct keys left 15,610
// fills waiting for an upstream connection. Now at most
// max_detached_fills of them run on, and they still store their answers;
// past that bound an abandoned fill is cancelled, and the key is fetched
// afresh when asked again.
func TestAbandonedFillsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const limit, abandoned = 2, 5
		h := newHarness(t, WithDetachedFills(limit))
		f := newHeldFetches(h)
		for i := range abandoned {
			key := fmt.Sprintf("k%d", i)
			abandon(t, h, key, f.fetch(key))
		}
		if got := h.c.DetachedFills(); got != limit {
			t.Errorf("detached fills after %d abandoned: got %d; want %d", abandoned, got, limit)
		}
		if got := h.c.Fills(); got != limit {
			t.Errorf("fills running: got %d; want %d", got, limit)
		}
		for i := range abandoned {
			key := fmt.Sprintf("k%d", i)
			_, cancelled := f.count(key)
			if want := i >= limit; cancelled != want {
				t.Errorf("fetch of %s cancelled: %v; want %v (the first %d keep a slot)", key, cancelled, want, limit)
			}
		}
		if got := metric(t, h.reg, "trendgate_cache_fills_dropped_total", "reason", "abandoned"); got != abandoned-limit {
			t.Errorf("fills_dropped_total{abandoned} = %v; want %d", got, abandoned-limit)
		}
		if got := metric(t, h.reg, "trendgate_cache_detached_fills", "", ""); got != limit {
			t.Errorf("trendgate_cache_detached_fills = %v; want %d", got, limit)
		}
		if got := metric(t, h.reg, "trendgate_cache_fetch_errors_total", "", ""); got != 0 {
			t.Errorf("fetch_errors_total = %v; want 0 (a dropped fill did not fail)", got)
		}

		close(f.release)
		synctest.Wait()
		if got := h.c.DetachedFills(); got != 0 {
			t.Errorf("detached fills once the upstream answered: got %d; want 0", got)
		}
		for i := range limit {
			if key := fmt.Sprintf("k%d", i); !f.wasAbandoned(key) {
				t.Errorf("Abandoned(ctx) in the detached fill of %s: false; want true (nobody waits for its answer)", key)
			}
		}
		for i := range abandoned {
			key := fmt.Sprintf("k%d", i)
			res, err := h.c.Get(context.Background(), key, f.fetch(key))
			if err != nil {
				t.Fatalf("Get(%s) after: %v", key, err)
			}
			started, _ := f.count(key)
			if kept := i < limit; kept {
				if res.Outcome != Hit || started != 1 {
					t.Errorf("Get(%s) after its detached fill: %v with %d fetches; want a hit on the stored answer, 1 fetch", key, res.Outcome, started)
				}
			} else if res.Outcome != Miss || started != 2 {
				t.Errorf("Get(%s) after its fill was dropped: %v with %d fetches; want a miss that fetches again (2)", key, res.Outcome, started)
			}
		}
	})
}

// A caller that joins a detached fill waits on it again: the fill gives
// its slot back, so another abandoned fill may take it, and the caller
// gets the answer without another fetch.
func TestJoiningADetachedFillFreesItsSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, WithDetachedFills(1))
		f := newHeldFetches(h)
		abandon(t, h, "a", f.fetch("a"))
		if got := h.c.DetachedFills(); got != 1 {
			t.Fatalf("detached fills: got %d; want 1", got)
		}
		res := make(chan Result, 1)
		go func() {
			r, err := h.c.Get(context.Background(), "a", f.fetch("a"))
			if err != nil {
				t.Errorf("joining Get: %v", err)
			}
			res <- r
		}()
		synctest.Wait()
		if got := h.c.DetachedFills(); got != 0 {
			t.Errorf("detached fills once a caller joined: got %d; want 0", got)
		}
		abandon(t, h, "b", f.fetch("b"))
		if _, cancelled := f.count("b"); cancelled {
			t.Errorf("the fill of b was dropped; want it detached in the slot a gave back")
		}
		close(f.release)
		r := <-res
		if f.wasAbandoned("a") {
			t.Errorf("Abandoned(ctx) in the fill a caller joined: true; want false")
		}
		if started, _ := f.count("a"); r.Outcome != Miss || !r.Coalesced || started != 1 {
			t.Errorf("joining caller: %v coalesced %v, %d fetches of a; want a coalesced miss, 1 fetch", r.Outcome, r.Coalesced, started)
		}
	})
}

// A background refresh nobody waits for takes a detached slot too: with
// every slot taken by abandoned fills it is not started, the stale entry
// is served all the same, and a later stale hit starts it once a slot is
// free.
func TestRefreshNeedsADetachedSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, WithDetachedFills(1))
		f := newHeldFetches(h)
		h.store.Set(context.Background(), entry("s", "bitcoin", h.clk.Now(), time.Minute, `{"old":1}`))
		h.clk.Advance(2 * time.Minute) // stale, within stale_while_revalidate
		abandon(t, h, "a", f.fetch("a"))

		res, err := h.c.Get(context.Background(), "s", f.fetch("s"))
		if err != nil || res.Outcome != Stale {
			t.Fatalf("Get(s): %v, %v; want the stale entry", res.Outcome, err)
		}
		synctest.Wait()
		if started, _ := f.count("s"); started != 0 {
			t.Errorf("refreshes of s started with no slot free: %d; want 0", started)
		}
		if got := metric(t, h.reg, "trendgate_cache_fills_dropped_total", "reason", "refresh"); got != 1 {
			t.Errorf("fills_dropped_total{refresh} = %v; want 1", got)
		}

		close(f.release)
		synctest.Wait() // a's fill is done: its slot is free
		if res, _ := h.c.Get(context.Background(), "s", f.fetch("s")); res.Outcome != Stale {
			t.Fatalf("Get(s) again: %v; want stale", res.Outcome)
		}
		synctest.Wait()
		if started, _ := f.count("s"); started != 1 {
			t.Errorf("refreshes of s once a slot was free: %d; want 1", started)
		}
		if res, _ := h.c.Get(context.Background(), "s", f.fetch("s")); res.Outcome != Hit {
			t.Errorf("Get(s) after the refresh: %v; want a hit", res.Outcome)
		}
	})
}
