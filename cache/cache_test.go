package cache

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"trendgate/api"
	"trendgate/internal/clock"
)

const key = "v2|series|bitcoin|hour|1w||"

// counting returns a Fetcher that counts calls and answers an entry fresh
// for ttl from clk's now, or err when err is set.
func counting(h *harness, ttl time.Duration, err error) (Fetcher, *atomic.Int32) {
	var n atomic.Int32
	return func(ctx context.Context, background bool) (*Entry, error) {
		i := n.Add(1)
		if err != nil {
			return nil, err
		}
		return entry(key, "bitcoin", h.clk.Now(), ttl, fmt.Sprintf(`{"fetch":%d}`, i)), nil
	}, &n
}

func TestGetFreshnessTransitions(t *testing.T) {
	const ttl = 10 * time.Minute
	cfg := DefaultConfig() // SWR 1h, MaxStale 24h
	tests := []struct {
		name        string
		advance     time.Duration // after the entry is stored
		fetchErr    error
		wantOutcome Outcome
		wantErr     bool
		wantFetches int32 // synchronous fetches only (background ones are checked separately)
		wantBody    string
	}{
		{"fresh is a hit", ttl - time.Nanosecond, nil, Hit, false, 0, `{"seed":1}`},
		{"at FreshUntil it is stale", ttl, nil, Stale, false, 0, `{"seed":1}`},
		{"end of swr window is still stale", ttl + cfg.StaleWhileRevalidate - time.Nanosecond, nil, Stale, false, 0, `{"seed":1}`},
		{"past swr fetches synchronously", ttl + cfg.StaleWhileRevalidate, nil, Miss, false, 1, `{"fetch":1}`},
		{"past swr with failing fetch serves stale", ttl + cfg.StaleWhileRevalidate, errUpstream, StaleIfError, false, 1, `{"seed":1}`},
		{"just inside max stale with failing fetch", ttl + cfg.MaxStale - time.Nanosecond, errUpstream, StaleIfError, false, 1, `{"seed":1}`},
		{"beyond max stale is a plain miss", ttl + cfg.MaxStale, nil, Miss, false, 1, `{"fetch":1}`},
		{"beyond max stale with failing fetch is an error", ttl + cfg.MaxStale, errUpstream, Miss, true, 1, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.store.Set(context.Background(), entry(key, "bitcoin", t0, ttl, `{"seed":1}`))
			h.clk.Advance(tc.advance)
			block := make(chan struct{}) // background refreshes stay parked until cleanup
			defer close(block)
			fetch, n := counting(h, ttl, tc.fetchErr)
			var bg atomic.Int32
			wrapped := func(ctx context.Context, background bool) (*Entry, error) {
				if background {
					bg.Add(1)
					<-block
					return nil, errUpstream
				}
				return fetch(ctx, background)
			}
			res, err := h.c.Get(context.Background(), key, wrapped)
			if (err != nil) != tc.wantErr {
				t.Fatalf("Get error = %v; want error %v", err, tc.wantErr)
			}
			if tc.wantErr {
				if !errors.Is(err, errUpstream) {
					t.Errorf("Get error = %v; want %v", err, errUpstream)
				}
				if _, ok := h.store.Get(context.Background(), key); ok && h.store.setCount() != 1 {
					t.Errorf("failed fetch was cached")
				}
				return
			}
			if res.Outcome != tc.wantOutcome {
				t.Errorf("Outcome = %s; want %s", res.Outcome, tc.wantOutcome)
			}
			if got := string(res.Entry.Body); got != tc.wantBody {
				t.Errorf("Body = %s; want %s", got, tc.wantBody)
			}
			if got := n.Load(); got != tc.wantFetches {
				t.Errorf("synchronous fetches = %d; want %d", got, tc.wantFetches)
			}
			if tc.wantOutcome == StaleIfError && !errors.Is(res.Err, errUpstream) {
				t.Errorf("Result.Err = %v; want %v", res.Err, errUpstream)
			}
			if tc.fetchErr != nil && h.store.setCount() != 1 {
				t.Errorf("store sets = %d; want 1 (the failed fetch must not be cached)", h.store.setCount())
			}
			if got, want := metric(t, h.reg, "trendgate_cache_requests_total", "outcome", tc.wantOutcome.String()), 1.0; got != want {
				t.Errorf("requests_total{outcome=%s} = %v; want %v", tc.wantOutcome, got, want)
			}
		})
	}
}

func TestStaleWhileRevalidateRefreshesOnce(t *testing.T) {
	h := newHarness(t)
	h.store.Set(context.Background(), entry(key, "bitcoin", t0, time.Minute, `{"old":true}`))
	h.clk.Advance(2 * time.Minute) // inside the SWR window

	release := make(chan struct{})
	started := make(chan struct{}, 10)
	var fetches atomic.Int32
	var sawBackground atomic.Bool
	fetch := func(ctx context.Context, background bool) (*Entry, error) {
		fetches.Add(1)
		sawBackground.Store(background)
		started <- struct{}{}
		<-release
		return entry(key, "bitcoin", h.clk.Now(), time.Minute, `{"new":true}`), nil
	}
	for i := range 20 {
		res, err := h.c.Get(context.Background(), key, fetch)
		if err != nil || res.Outcome != Stale || string(res.Entry.Body) != `{"old":true}` {
			t.Fatalf("Get %d = %s %q, %v; want stale old body", i, res.Outcome, res.Entry.Body, err)
		}
	}
	watchdog(t, started, "the background refresh")
	close(release)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := h.c.Close(ctx); err != nil { // waits for the refresh
		t.Fatalf("Close: %v", err)
	}
	if got := fetches.Load(); got != 1 {
		t.Errorf("fetches = %d; want exactly 1 background refresh", got)
	}
	if !sawBackground.Load() {
		t.Errorf("refresh fetch had background=false; want true")
	}
	res, err := h.c.Get(context.Background(), key, fetch)
	if err != nil || res.Outcome != Hit || string(res.Entry.Body) != `{"new":true}` {
		t.Errorf("Get after refresh = %s %q, %v; want hit with new body", res.Outcome, res.Entry.Body, err)
	}
	if got := metric(t, h.reg, "trendgate_cache_background_refreshes_total", "", ""); got != 1 {
		t.Errorf("background_refreshes_total = %v; want 1", got)
	}
}

func TestFailedBackgroundRefreshKeepsEntry(t *testing.T) {
	h := newHarness(t)
	old := entry(key, "bitcoin", t0, time.Minute, `{"old":true}`)
	h.store.Set(context.Background(), old)
	h.clk.Advance(2 * time.Minute)
	done := make(chan struct{})
	fetch := func(ctx context.Context, background bool) (*Entry, error) {
		defer close(done)
		return nil, errUpstream
	}
	if res, err := h.c.Get(context.Background(), key, fetch); err != nil || res.Outcome != Stale {
		t.Fatalf("Get = %s, %v; want stale", res.Outcome, err)
	}
	watchdog(t, done, "the refresh")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := h.c.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if e, ok := h.store.Get(context.Background(), key); !ok || e != old {
		t.Errorf("after a failed refresh the store holds %v, %v; want the old entry", e, ok)
	}
	if got := metric(t, h.reg, "trendgate_cache_fetch_errors_total", "", ""); got != 1 {
		t.Errorf("fetch_errors_total = %v; want 1", got)
	}
}

func TestNegativeEntryExpiresAfterNegativeTTL(t *testing.T) {
	h := newHarness(t)
	cfg := DefaultConfig()
	var n atomic.Int32
	fetch := func(ctx context.Context, background bool) (*Entry, error) {
		n.Add(1)
		now := h.clk.Now()
		return &Entry{Key: key, Topic: "bitcoin", Status: 404, Body: []byte(`{"error":"not found"}`),
			Fetched: now, FreshUntil: cfg.FreshUntil(Class{Endpoint: api.EndpointSeries, Bucket: "hour", Negative: true}, now)}, nil
	}
	steps := []struct {
		advance time.Duration
		want    Outcome
		fetches int32
	}{
		{0, Miss, 1},
		{cfg.TTL.Negative - time.Second, Hit, 1},
		{time.Second, Stale, 1}, // now == FreshUntil: stale, refreshed in the background
	}
	for i, s := range steps {
		h.clk.Advance(s.advance)
		res, err := h.c.Get(context.Background(), key, fetch)
		if err != nil || res.Outcome != s.want || res.Entry.Status != 404 {
			t.Fatalf("step %d: Get = %s status %d, %v; want %s 404", i, res.Outcome, res.Entry.Status, err, s.want)
		}
		if s.want != Stale && n.Load() != s.fetches {
			t.Fatalf("step %d: fetches = %d; want %d", i, n.Load(), s.fetches)
		}
	}
}

func TestFailingFetchIsNeverCached(t *testing.T) {
	h := newHarness(t)
	fetch, n := counting(h, time.Minute, errUpstream)
	for i := range 3 {
		if _, err := h.c.Get(context.Background(), key, fetch); !errors.Is(err, errUpstream) {
			t.Fatalf("Get %d error = %v; want %v", i, err, errUpstream)
		}
	}
	if got := n.Load(); got != 3 {
		t.Errorf("fetches = %d; want 3 (each failure retried, none cached)", got)
	}
	if _, ok := h.c.Peek(context.Background(), key); ok {
		t.Errorf("Peek found an entry after failed fetches")
	}
}

func TestFetcherContractViolations(t *testing.T) {
	tests := []struct {
		name  string
		fetch Fetcher
		want  error
	}{
		{"nil entry", func(context.Context, bool) (*Entry, error) { return nil, nil }, ErrNoEntry},
		{"other key", func(context.Context, bool) (*Entry, error) {
			return entry("v2|list||||", "", t0, time.Minute, "{}"), nil
		}, ErrKeyMismatch},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			if _, err := h.c.Get(context.Background(), key, tc.fetch); !errors.Is(err, tc.want) {
				t.Errorf("Get error = %v; want %v", err, tc.want)
			}
			if h.store.setCount() != 0 {
				t.Errorf("store sets = %d; want 0", h.store.setCount())
			}
		})
	}
}

func TestHerdCoalescesToOneFetch(t *testing.T) {
	h := newHarness(t)
	const callers = 500
	release := make(chan struct{})
	var fetches atomic.Int32
	fetch := func(ctx context.Context, background bool) (*Entry, error) {
		fetches.Add(1)
		<-release
		return entry(key, "bitcoin", h.clk.Now(), time.Minute, `{"ok":1}`), nil
	}
	var wg sync.WaitGroup
	entries := make([]*Entry, callers)
	errs := make([]error, callers)
	var ready sync.WaitGroup
	ready.Add(callers)
	for i := range callers {
		wg.Go(func() {
			ready.Done()
			res, err := h.c.Get(context.Background(), key, fetch)
			entries[i], errs[i] = res.Entry, err
		})
	}
	ready.Wait()
	close(release)
	wg.Wait()
	if got := fetches.Load(); got != 1 {
		t.Fatalf("fetches = %d; want 1", got)
	}
	for i := range callers {
		if errs[i] != nil || entries[i] == nil || entries[i] != entries[0] {
			t.Fatalf("caller %d got %p, %v; want the shared entry %p", i, entries[i], errs[i], entries[0])
		}
	}
	coalesced := metric(t, h.reg, "trendgate_cache_coalesced_waiters_total", "", "")
	hits := metric(t, h.reg, "trendgate_cache_requests_total", "outcome", "hit")
	misses := metric(t, h.reg, "trendgate_cache_requests_total", "outcome", "miss")
	if hits+misses != callers || misses < 1 {
		t.Errorf("hits+misses = %v+%v; want %d with at least one miss", hits, misses, callers)
	}
	// Every miss but the fetching fill's leader waited on that fill. A
	// caller that looked just as the fill ended may start a second fill,
	// which finds the stored entry: it and its waiters count as hits, its
	// waiters as coalesced too. The leaders never count as coalesced.
	if coalesced < misses-1 || coalesced > callers-1 {
		t.Errorf("coalesced waiters = %v; want from misses-1 = %v to callers-1 = %d", coalesced, misses-1, callers-1)
	}
}

func TestFirstCallerLeavingDoesNotCancelFetch(t *testing.T) {
	h := newHarness(t)
	started := make(chan struct{})
	release := make(chan struct{})
	fetchCtxErr := make(chan error, 1)
	var fetches atomic.Int32
	fetch := func(ctx context.Context, background bool) (*Entry, error) {
		fetches.Add(1)
		close(started)
		<-release
		fetchCtxErr <- ctx.Err()
		return entry(key, "bitcoin", h.clk.Now(), time.Minute, `{"ok":1}`), nil
	}
	firstCtx, cancelFirst := context.WithCancel(context.Background())
	firstErr := make(chan error, 1)
	go func() {
		_, err := h.c.Get(firstCtx, key, fetch)
		firstErr <- err
	}()
	watchdog(t, started, "the first fetch")
	cancelFirst()
	if err := watchdog(t, firstErr, "the first caller"); !errors.Is(err, context.Canceled) {
		t.Fatalf("first caller error = %v; want context.Canceled", err)
	}

	const others = 20
	results := make(chan Result, others)
	for range others {
		go func() {
			res, err := h.c.Get(context.Background(), key, fetch)
			if err != nil {
				t.Errorf("Get: %v", err)
			}
			results <- res
		}()
	}
	close(release)
	if err := watchdog(t, fetchCtxErr, "the fetch"); err != nil {
		t.Errorf("fetch context error = %v; want nil (not cancelled by the first caller)", err)
	}
	for range others {
		if res := watchdog(t, results, "a waiter"); res.Entry == nil || string(res.Entry.Body) != `{"ok":1}` {
			t.Errorf("waiter got %+v; want the fetched entry", res)
		}
	}
	if got := fetches.Load(); got != 1 {
		t.Errorf("fetches = %d; want 1", got)
	}
}

func TestWaiterCancellingReturnsPromptly(t *testing.T) {
	h := newHarness(t)
	started := make(chan struct{})
	release := make(chan struct{})
	defer close(release)
	fetch := func(ctx context.Context, background bool) (*Entry, error) {
		close(started)
		<-release
		return entry(key, "bitcoin", h.clk.Now(), time.Minute, `{}`), nil
	}
	go func() { _, _ = h.c.Get(context.Background(), key, fetch) }()
	watchdog(t, started, "the leader's fetch")

	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan error, 1)
	go func() {
		_, err := h.c.Get(ctx, key, fetch)
		got <- err
	}()
	cancel()
	// The fetch is still blocked on release, so returning at all proves the
	// waiter did not wait for it.
	if err := watchdog(t, got, "the cancelled waiter"); !errors.Is(err, context.Canceled) {
		t.Errorf("waiter error = %v; want context.Canceled", err)
	}
}

func TestCloseStopsBackgroundRefresh(t *testing.T) {
	h := newHarness(t)
	h.store.Set(context.Background(), entry(key, "bitcoin", t0, time.Minute, `{}`))
	h.clk.Advance(2 * time.Minute)
	started := make(chan struct{})
	stopped := make(chan error, 1)
	var fetches atomic.Int32
	fetch := func(ctx context.Context, background bool) (*Entry, error) {
		fetches.Add(1)
		close(started)
		<-ctx.Done() // an upstream that never answers
		stopped <- ctx.Err()
		return nil, ctx.Err()
	}
	if res, err := h.c.Get(context.Background(), key, fetch); err != nil || res.Outcome != Stale {
		t.Fatalf("Get = %s, %v; want stale", res.Outcome, err)
	}
	watchdog(t, started, "the background refresh")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := h.c.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := watchdog(t, stopped, "the refresh to stop"); !errors.Is(err, context.Canceled) {
		t.Errorf("refresh context error = %v; want context.Canceled", err)
	}
	// After Close, stale entries are still served but no refresh starts.
	if res, err := h.c.Get(context.Background(), key, fetch); err != nil || res.Outcome != Stale {
		t.Errorf("Get after Close = %s, %v; want stale", res.Outcome, err)
	}
	if got := fetches.Load(); got != 1 {
		t.Errorf("fetches = %d; want 1 (none after Close)", got)
	}
	h.clk.Advance(48 * time.Hour)
	if _, err := h.c.Get(context.Background(), key, fetch); !errors.Is(err, ErrClosed) {
		t.Errorf("miss after Close error = %v; want ErrClosed", err)
	}
}

func TestPeek(t *testing.T) {
	h := newHarness(t)
	if _, ok := h.c.Peek(context.Background(), key); ok {
		t.Fatalf("Peek on empty cache found an entry")
	}
	e := entry(key, "bitcoin", t0, time.Minute, `{}`)
	h.store.Set(context.Background(), e)
	h.clk.Advance(time.Hour) // stale but servable
	if got, ok := h.c.Peek(context.Background(), key); !ok || got != e {
		t.Errorf("Peek on stale entry = %v, %v; want it", got, ok)
	}
	h.clk.Advance(DefaultConfig().MaxStale)
	if _, ok := h.c.Peek(context.Background(), key); ok {
		t.Errorf("Peek beyond MaxStale found an entry")
	}
	if got := metric(t, h.reg, "trendgate_cache_requests_total", "outcome", "hit"); got != 0 {
		t.Errorf("Peek counted %v hits; want 0", got)
	}
}

func TestNewRejectsBadInput(t *testing.T) {
	bad := DefaultConfig()
	bad.TTL.List = 0
	if _, err := New(bad, newMapStore(), nil, nil, nil); err == nil {
		t.Errorf("New with invalid config succeeded")
	}
	if _, err := New(DefaultConfig(), nil, nil, nil, nil); err == nil {
		t.Errorf("New with nil store succeeded")
	}
}

func TestReconfigureSwapsStaleWindows(t *testing.T) {
	h := newHarness(t)
	h.store.Set(context.Background(), entry(key, "bitcoin", t0, time.Minute, `{"old":true}`))
	h.clk.Advance(2 * time.Minute) // stale; inside the default 1h SWR window
	cfg := DefaultConfig()
	cfg.StaleWhileRevalidate = 0
	if err := h.c.Reconfigure(cfg); err != nil {
		t.Fatalf("Reconfigure: %v", err)
	}
	fetch, n := counting(h, time.Minute, nil)
	res, err := h.c.Get(context.Background(), key, fetch)
	if err != nil || res.Outcome != Miss || n.Load() != 1 {
		t.Errorf("Get without SWR = %s, %v after %d fetches; want a synchronous miss", res.Outcome, err, n.Load())
	}
	cfg.MaxBytes = 0
	if err := h.c.Reconfigure(cfg); err == nil {
		t.Errorf("Reconfigure with invalid config succeeded")
	}
}

// hookStore runs hook once, inside the first Get, before answering it from
// what the store held when that Get began.
type hookStore struct {
	*mapStore
	fired atomic.Bool
	hook  func()
}

func (s *hookStore) Get(ctx context.Context, key string) (*Entry, bool) {
	e, ok := s.mapStore.Get(ctx, key)
	if s.fired.CompareAndSwap(false, true) {
		s.hook()
	}
	return e, ok
}

// Regression: singleflight only merges overlapping calls; a caller that
// looked just before another fill stored its entry must not fetch again.
func TestFillRechecksStoreBeforeFetching(t *testing.T) {
	clk := clock.NewFake(t0)
	s := &hookStore{mapStore: newMapStore()}
	c, err := New(DefaultConfig(), s, clk, nil, nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	var n atomic.Int32
	fetch := func(context.Context, bool) (*Entry, error) {
		n.Add(1)
		return entry(key, "bitcoin", clk.Now(), time.Minute, `{}`), nil
	}
	s.hook = func() { // another caller's whole fill completes in between
		if _, err := c.Get(context.Background(), key, fetch); err != nil {
			t.Errorf("inner Get: %v", err)
		}
	}
	res, err := c.Get(context.Background(), key, fetch)
	if err != nil || res.Outcome != Hit {
		t.Errorf("Get = %s, %v; want hit from the fill's re-check", res.Outcome, err)
	}
	if got := n.Load(); got != 1 {
		t.Errorf("fetches = %d; want 1", got)
	}
}

// storingLease simulates another instance that stored the entry and released
// its lease between our look and our Acquire.
type storingLease struct {
	shared Store
	e      *Entry
}

func (l storingLease) Acquire(ctx context.Context, _ string, _ time.Duration) (func(), bool, error) {
	l.shared.Set(ctx, l.e)
	return func() {}, true, nil
}

func TestLeaseHolderRechecksShared(t *testing.T) {
	clk := clock.NewFake(t0)
	local, shared := newMapStore(), newMapStore()
	theirs := entry(key, "bitcoin", t0, time.Minute, `{"theirs":1}`)
	c, err := New(DefaultConfig(), Tiered(local, shared), clk, nil, nil,
		WithLease(storingLease{shared: shared, e: theirs}, shared, time.Second))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	var n atomic.Int32
	res, err := c.Get(context.Background(), key, func(context.Context, bool) (*Entry, error) {
		n.Add(1)
		return entry(key, "bitcoin", clk.Now(), time.Minute, `{"ours":1}`), nil
	})
	if err != nil || res.Entry != theirs || n.Load() != 0 {
		t.Errorf("Get = %q, %v after %d fetches; want the other instance's entry and no fetch", res.Entry.Body, err, n.Load())
	}
	if e, ok := local.Get(context.Background(), key); !ok || e != theirs {
		t.Errorf("local tier holds %v, %v; want the shared entry copied in", e, ok)
	}
}

func TestEntryWithAnotherKeyIsAMiss(t *testing.T) {
	h := newHarness(t)
	// A store that does not check keys hands back another request's entry.
	h.store.m[key] = entry("v2|list||||", "", t0, time.Hour, `{"list":1}`)
	fetch, n := counting(h, time.Minute, nil)
	res, err := h.c.Get(context.Background(), key, fetch)
	if err != nil || res.Outcome != Miss || res.Entry.Key != key || n.Load() != 1 {
		t.Errorf("Get = %s %q, %v after %d fetches; want a miss fetching %q", res.Outcome, res.Entry.Key, err, n.Load(), key)
	}
}

// Regression: an entry past stale-while-revalidate used to wait for a
// hanging upstream until its fetch timed out. It is now served stale after
// StaleIfErrorWait, while the fetch goes on and refreshes the entry.
func TestStaleIfErrorDoesNotWaitForSlowFetch(t *testing.T) {
	h := newHarness(t)
	cfg := DefaultConfig()
	cfg.StaleIfErrorWait = 20 * time.Millisecond // the upstream below never answers in time
	if err := h.c.Reconfigure(cfg); err != nil {
		t.Fatal(err)
	}
	const ttl = 10 * time.Minute
	h.store.Set(context.Background(), entry(key, "bitcoin", h.clk.Now(), ttl, `{"old":1}`))
	h.clk.Advance(ttl + cfg.StaleWhileRevalidate + time.Minute) // past SWR, within MaxStale

	release := make(chan struct{})
	fetched := make(chan struct{})
	slow := func(ctx context.Context, background bool) (*Entry, error) {
		defer close(fetched)
		select {
		case <-release: // the upstream finally answers
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return entry(key, "bitcoin", h.clk.Now(), ttl, `{"new":1}`), nil
	}
	res, err := h.c.Get(context.Background(), key, slow)
	if err != nil || res.Outcome != StaleIfError || string(res.Entry.Body) != `{"old":1}` {
		t.Fatalf("Get = %s %q, %v; want the stale entry served as stale-if-error", res.Outcome, res.Entry.Body, err)
	}
	if !errors.Is(res.Err, context.DeadlineExceeded) {
		t.Errorf("Result.Err = %v; want the wait's deadline", res.Err)
	}
	close(release) // the detached fetch completes and stores its entry
	<-fetched
	waitFor(t, func() bool {
		e, ok := h.store.Get(context.Background(), key)
		return ok && string(e.Body) == `{"new":1}`
	})
	res, err = h.c.Get(context.Background(), key, slow)
	if err != nil || res.Outcome != Hit || string(res.Entry.Body) != `{"new":1}` {
		t.Errorf("after the fetch: Get = %s %q, %v; want a hit on the refreshed entry", res.Outcome, res.Entry.Body, err)
	}
}

// waitFor polls cond until it holds, failing after a generous bound. It
// waits for another goroutine's event, not for time to pass.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(time.Millisecond)
	}
}
