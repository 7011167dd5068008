package cache

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"trendgate/internal/clock"
)

// Sentinel errors callers may branch on.
var (
	// ErrClosed is returned for fetches requested after Close.
	ErrClosed = errors.New("cache: closed")
	// ErrNoEntry is returned when a Fetcher returns neither an entry nor an
	// error.
	ErrNoEntry = errors.New("cache: fetcher returned no entry")
	// ErrKeyMismatch is returned when a Fetcher returns an entry for another
	// key; it is not cached.
	ErrKeyMismatch = errors.New("cache: fetched entry has another key")
)

// Fetcher fetches the upstream answer for one key. background is true for a
// stale-while-revalidate refresh nobody waits on. A non-nil error means
// "do not cache"; the entry's FreshUntil must be set by the fetcher.
type Fetcher func(ctx context.Context, background bool) (*Entry, error)

// Reason says why the cache asks a Fetcher for an entry; the fetcher reads
// it from its context with ReasonFrom (for example to label upstream calls).
type Reason uint8

// The reasons of a fetch.
const (
	// ReasonMiss: a client asked for a key the cache does not hold (or
	// holds past max_stale).
	ReasonMiss Reason = iota
	// ReasonRefresh: the entry is stale; a background refresh, or a client
	// waiting for fresh data with the stale entry in hand.
	ReasonRefresh
	// ReasonLeaseTimeout: another instance held the key's lease and did not
	// store an answer in time, so this one fetches too.
	ReasonLeaseTimeout
)

// String returns the reason's label: "miss", "refresh" or "lease_timeout".
func (r Reason) String() string {
	switch r {
	case ReasonRefresh:
		return "refresh"
	case ReasonLeaseTimeout:
		return "lease_timeout"
	}
	return "miss"
}

type reasonKey struct{}

// ReasonFrom returns the reason of the fetch ctx belongs to; ReasonMiss
// when ctx carries none.
func ReasonFrom(ctx context.Context) Reason {
	r, _ := ctx.Value(reasonKey{}).(Reason)
	return r
}

func withReason(ctx context.Context, r Reason) context.Context {
	return context.WithValue(ctx, reasonKey{}, r)
}

// Option configures a Cache.
type Option func(*Cache)

// defaultLeaseWait bounds how long a fill waits for another instance's fetch.
const defaultLeaseWait = 5 * time.Second

// leasePoll is how often a fill waiting on another instance's lease looks in
// the shared tier.
const leasePoll = 20 * time.Millisecond

// WithLease turns on cross-instance coalescing: before fetching a missing
// key, a fill acquires l; if another instance holds it, the fill polls
// shared (every ~20ms, for at most wait, default 5s when wait <= 0) for the
// entry that instance is fetching, and fetches itself if none appears. Lease
// errors just fetch. A nil l or shared leaves the option off.
func WithLease(l Lease, shared Store, wait time.Duration) Option {
	return func(c *Cache) {
		if l == nil || shared == nil {
			return
		}
		if wait <= 0 {
			wait = defaultLeaseWait
		}
		c.lease, c.leaseShared, c.leaseWait = l, shared, wait
	}
}

// defaultDetachedFills is the bound on detached fills when neither
// Config.MaxDetachedFills nor WithDetachedFills sets one: four times the
// upstream's default max_conns.
const defaultDetachedFills = 64

// WithDetachedFills sets the bound on detached fills used while
// Config.MaxDetachedFills is 0 (the gateway passes four times
// upstream.max_conns); n <= 0 leaves the default, 64.
func WithDetachedFills(n int) Option {
	return func(c *Cache) {
		if n > 0 {
			c.detachedDefault = n
		}
	}
}

// Cache answers Gets from a Store with the gateway's freshness rules,
// coalescing concurrent fetches of a key into one, serving stale entries
// while refreshing them, and serving stale on fetch errors. Use New; the zero
// value is not usable. Safe for concurrent use.
type Cache struct {
	cfg   atomic.Pointer[Config] // swapped whole by Reconfigure
	store Store
	clk   clock.Clock
	log   *zap.Logger
	m     *Metrics

	lease       Lease         // nil: no cross-instance coalescing
	leaseShared Store         // where another instance's result appears
	leaseWait   time.Duration // bound on waiting for it

	ctx    context.Context    // cancelled by Close; parent of every fetch's cancellation
	cancel context.CancelFunc // cancels ctx

	detachedDefault int // the bound on detached fills while Config.MaxDetachedFills is 0

	mu       sync.Mutex         // guards closed, flights, detached, the flights' waiter fields and wg.Add
	closed   bool               // no fill starts once set
	flights  map[string]*flight // the fill running for each key
	detached int                // flights holding a detached slot (see flight.detached)
	wg       sync.WaitGroup     // fills in flight
}

// flight is one coalesced fill of a key: every caller that asks for the
// key while it runs waits on it instead of fetching. singleflight did this
// before; the cache keeps its own so that it knows who still waits.
//
// Abandoned fills have a ceiling. The fill runs on a context detached from
// its callers, so when every caller has left (a client gone: 499; a stale
// entry served after stale_if_error_wait) it could run on until
// fetch_timeout, waiting for an upstream connection, and a client that
// opens and abandons requests for distinct keys would make the process
// hold one fill per request. So a fill nobody waits for any more keeps
// running only while it holds one of the process's detached slots
// (Config.MaxDetachedFills): it still stores its answer, which the next
// request for the key would otherwise pay the upstream for again (a client
// whose timeout is shorter than the upstream's answer would never get
// one). With every slot taken it is cancelled (dropped). A background
// refresh, which nobody waits for from the start, takes a slot too, and is
// not started without one; the next stale hit asks again. A caller that
// joins a detached fill gives its slot back.
type flight struct {
	done   chan struct{}      // closed once val and err are set
	val    filled             // the result; read after done
	err    error              // the error; read after done
	cancel context.CancelFunc // cancels the fill (a drop)

	waiters  atomic.Int32 // callers waiting on done; changed with Cache.mu held, read by Abandoned without
	detached bool         // holds a detached slot; guarded by Cache.mu
	over     bool         // finished or dropped: no one joins or leaves any more; guarded by Cache.mu
}

// New returns a Cache over store. cfg must be valid; a nil clk is the real
// clock, a nil log discards, a nil m is an unregistered Metrics. If store is
// a Retainer it is told cfg.MaxStale.
func New(cfg Config, store Store, clk clock.Clock, log *zap.Logger, m *Metrics, opts ...Option) (*Cache, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("cache: config: %w", err)
	}
	if store == nil {
		return nil, errors.New("cache: nil store")
	}
	if clk == nil {
		clk = clock.Real{}
	}
	if log == nil {
		log = zap.NewNop()
	}
	if r, ok := store.(Retainer); ok {
		r.SetRetention(cfg.MaxStale)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Cache{
		store:           store,
		clk:             clk,
		log:             log.Named("cache"),
		m:               orNew(m),
		ctx:             ctx,
		cancel:          cancel,
		flights:         make(map[string]*flight),
		detachedDefault: defaultDetachedFills,
	}
	c.cfg.Store(&cfg)
	for _, o := range opts {
		o(c)
	}
	c.m.cache.Store(c)
	return c, nil
}

// Reconfigure swaps in cfg (on reload) after validating it; entries and
// fetches in flight are kept. MaxBytes is not applied here: the local tier's
// bound is fixed when it is built.
func (c *Cache) Reconfigure(cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("cache: config: %w", err)
	}
	if r, ok := c.store.(Retainer); ok {
		r.SetRetention(cfg.MaxStale)
	}
	c.cfg.Store(&cfg)
	return nil
}

// Get returns the entry for key: fresh → Hit; within StaleWhileRevalidate
// after FreshUntil → Stale at once, with one background refresh; within
// MaxStale → a coalesced fetch, serving the stale entry (StaleIfError) if it
// fails; otherwise (or absent) a coalesced fetch whose error is returned. A
// caller whose ctx ends while waiting gets ctx.Err(); the fetch goes on for
// the others.
func (c *Cache) Get(ctx context.Context, key string, fetch Fetcher) (Result, error) {
	cfg := c.cfg.Load()
	return c.get(ctx, key, fetch, cfg, cfg.StaleWhileRevalidate, cfg.MaxStale)
}

// GetWithin is Get for an answer that may be served stale for at most
// stale after FreshUntil (a configured route's own stale lifetime):
// StaleWhileRevalidate and MaxStale are each capped at stale, so with
// stale 0 an entry past FreshUntil is never served.
func (c *Cache) GetWithin(ctx context.Context, key string, stale time.Duration, fetch Fetcher) (Result, error) {
	cfg := c.cfg.Load()
	return c.get(ctx, key, fetch, cfg, min(cfg.StaleWhileRevalidate, stale), min(cfg.MaxStale, stale))
}

func (c *Cache) get(ctx context.Context, key string, fetch Fetcher, cfg *Config, swr, maxStale time.Duration) (Result, error) {
	now := c.clk.Now()
	e, ok := c.store.Get(ctx, key)
	if ok && e.Key != key {
		ok = false // a store that does not check keys must not serve another's entry
	}
	if ok {
		switch {
		case now.Before(e.FreshUntil):
			c.m.hits.Inc()
			return Result{Entry: e, Outcome: Hit}, nil
		case now.Before(e.FreshUntil.Add(swr)):
			c.m.stale.Inc()
			c.refresh(ctx, key, fetch)
			return Result{Entry: e, Outcome: Stale}, nil
		case !now.Before(e.FreshUntil.Add(maxStale)):
			ok = false // too old to serve even on error: a plain miss
		}
	}
	fillCtx := ctx
	if ok {
		// A stale entry can answer: wait for the upstream only so long.
		// The fill runs detached, so it goes on and stores its result.
		var cancel context.CancelFunc
		fillCtx, cancel = context.WithTimeout(withReason(ctx, ReasonRefresh), cfg.StaleIfErrorWait)
		defer cancel()
	}
	got, coalesced, err := c.fill(fillCtx, key, fetch)
	if err != nil {
		if ok && ctx.Err() == nil {
			c.m.staleIfError.Inc()
			return Result{Entry: e, Outcome: StaleIfError, Coalesced: coalesced, Err: err}, nil
		}
		return Result{Coalesced: coalesced}, err
	}
	if got.fetched {
		c.m.misses.Inc()
		return Result{Entry: got.e, Outcome: Miss, Coalesced: coalesced, TooLarge: got.tooLarge}, nil
	}
	c.m.hits.Inc() // another fill stored it between our look and the fill's
	return Result{Entry: got.e, Outcome: Hit, Coalesced: coalesced}, nil
}

// Put stores e, an answer the caller fetched for e.Key itself (a wider
// window fetched to answer a narrower request), as a fill would store it.
// Like any Set it may be dropped.
func (c *Cache) Put(ctx context.Context, e *Entry) error {
	if e == nil || e.Key == "" {
		return ErrNoEntry
	}
	if err := c.check(e, e.Key); err != nil {
		return err
	}
	c.store.Set(ctx, e)
	return nil
}

// Peek returns the stored entry for key, fresh or stale but not beyond
// MaxStale, without fetching or counting.
func (c *Cache) Peek(ctx context.Context, key string) (*Entry, bool) {
	e, ok := c.store.Get(ctx, key)
	if !ok || e.Key != key || !c.clk.Now().Before(e.FreshUntil.Add(c.cfg.Load().MaxStale)) {
		return nil, false
	}
	return e, true
}

// Purge removes what sel selects and returns how many entries were removed
// (best effort: a topic's count may include keys already gone). Purging by
// topic needs a store implementing TopicIndex.
func (c *Cache) Purge(ctx context.Context, sel Selector) int {
	return purgeStore(ctx, c.store, sel)
}

// Close cancels every fetch in flight, stops background refreshes and waits
// for them, bounded by ctx. Gets after Close still serve stored entries but
// fetches fail with ErrClosed.
func (c *Cache) Close(ctx context.Context) error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.cancel()
	done := make(chan struct{})
	go func() { // ends when the cancelled fills return
		c.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("cache: close: %w", ctx.Err())
	}
}

// refresh starts one background refresh of key unless a fill of key is
// running (it will store the entry). The refresh holds a detached slot;
// with none free it is not started (the next stale hit asks again).
func (c *Cache) refresh(ctx context.Context, key string, fetch Fetcher) {
	c.mu.Lock()
	if _, running := c.flights[key]; running || c.closed {
		c.mu.Unlock()
		return
	}
	if c.detached >= c.detachedLimit() {
		c.mu.Unlock()
		c.m.droppedRefresh.Inc()
		return
	}
	f := c.startLocked(withReason(ctx, ReasonRefresh), key, fetch, true)
	f.detached = true
	c.detached++
	c.mu.Unlock()
	c.m.refreshes.Inc()
}

// detachedLimit is the bound on detached fills in force. Call with mu held
// or not: it reads the config only.
func (c *Cache) detachedLimit() int {
	if n := c.cfg.Load().MaxDetachedFills; n > 0 {
		return n
	}
	return c.detachedDefault
}

// DetachedFills returns how many fills run with no caller waiting on them
// (abandoned by their callers, or background refreshes).
func (c *Cache) DetachedFills() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.detached
}

// Fills returns how many fills are running and joinable (a dropped fill
// still unwinding is not counted).
func (c *Cache) Fills() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.flights)
}

// filled is what one fill hands to every waiter: ristretto may drop the Set,
// so waiters never read it back from the store.
type filled struct {
	e        *Entry
	fetched  bool // false: found in the store by the fill's re-check
	tooLarge bool // fetched, but the store refuses entries that large
}

// fill runs (or joins) the coalesced fill of key and waits for it or ctx.
// A caller that leaves before the fill is done may leave it detached or
// dropped (see flight).
func (c *Cache) fill(ctx context.Context, key string, fetch Fetcher) (filled, bool, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return filled{}, false, ErrClosed
	}
	f, leader := c.flights[key], false
	if f == nil {
		f, leader = c.startLocked(ctx, key, fetch, false), true // counts this caller
	} else {
		if f.detached {
			f.detached = false // waited on again
			c.detached--
		}
		f.waiters.Add(1)
	}
	c.mu.Unlock()
	select {
	case <-f.done:
		if !leader {
			c.m.coalesced.Inc()
		}
		if f.err != nil {
			return filled{}, !leader, f.err
		}
		return f.val, !leader, nil
	case <-ctx.Done():
		c.leave(key, f)
		return filled{}, false, ctx.Err()
	}
}

// leave ends one caller's wait on f. The last caller to leave a fill still
// running detaches it, holding a slot, or drops it when no slot is free.
func (c *Cache) leave(key string, f *flight) {
	c.mu.Lock()
	if f.over {
		c.mu.Unlock()
		return
	}
	if f.waiters.Add(-1) > 0 {
		c.mu.Unlock()
		return
	}
	if c.detached < c.detachedLimit() {
		f.detached = true
		c.detached++
		c.mu.Unlock()
		return
	}
	f.over = true
	if c.flights[key] == f {
		delete(c.flights, key) // the next caller starts afresh
	}
	c.mu.Unlock()
	f.cancel()
	c.m.droppedAbandoned.Inc()
}

type flightKey struct{}

// Abandoned reports whether the fill ctx belongs to has no caller waiting
// on it any more (every one left: a client gone, a stale entry served
// after StaleIfErrorWait), so that a Fetcher can tell, when its fetch
// returns, that nobody is waiting for the answer it paid for. A background
// refresh is waited on by nobody from the start. False for a ctx of no
// fill.
func Abandoned(ctx context.Context) bool {
	f, ok := ctx.Value(flightKey{}).(*flight)
	return ok && f.waiters.Load() == 0
}

// startLocked starts the fill of key on a context detached from ctx (its
// values kept) and registers it, with its caller as its one waiter unless
// background; the caller holds mu and has checked closed.
func (c *Cache) startLocked(ctx context.Context, key string, fetch Fetcher, background bool) *flight {
	f := &flight{done: make(chan struct{})}
	if !background {
		// The caller waits from the start: counted before the fill runs,
		// so that Abandoned never sees a fill whose caller is still there
		// as abandoned.
		f.waiters.Store(1)
	}
	fctx, cancel := context.WithCancel(context.WithValue(context.WithoutCancel(ctx), flightKey{}, f))
	f.cancel = cancel
	c.flights[key] = f
	c.wg.Add(1)
	go func() { // owned by c: ends with the fill, which Close and a drop cancel
		defer c.wg.Done()
		val, err := c.doFill(fctx, key, fetch, background)
		cancel()
		if err != nil && background {
			if ce := c.log.Check(zap.DebugLevel, "background refresh failed"); ce != nil {
				ce.Write(zap.String("key", key), zap.Error(err))
			}
		}
		f.val, f.err = val, err
		c.mu.Lock()
		if !f.over {
			f.over = true
			if c.flights[key] == f {
				delete(c.flights, key)
			}
		}
		if f.detached {
			f.detached = false
			c.detached--
		}
		c.mu.Unlock()
		close(f.done)
	}()
	return f
}

// doFill is the body of one coalesced fill. It runs on a context detached
// from the caller (cancelled when the fill is dropped), with FetchTimeout,
// cancelled by Close.
func (c *Cache) doFill(parent context.Context, key string, fetch Fetcher, background bool) (filled, error) {
	ctx, cancel := context.WithTimeout(parent, c.cfg.Load().FetchTimeout)
	defer cancel()
	stop := context.AfterFunc(c.ctx, cancel)
	defer stop()

	// singleflight only merges calls that overlap: a caller that looked just
	// before the previous fill stored its entry starts a new fill, so look
	// again before paying for a fetch.
	if e, ok := c.freshIn(ctx, c.store, key); ok {
		return filled{e: e}, nil
	}
	if c.lease != nil {
		release, e, ok, timedOut := c.awaitLease(ctx, key)
		if ok {
			return filled{e: e, fetched: true}, nil
		}
		if release != nil {
			defer release()
		}
		if timedOut {
			ctx = withReason(ctx, ReasonLeaseTimeout)
		}
	}
	e, err := fetch(ctx, background)
	if err == nil {
		err = c.check(e, key)
	}
	if err != nil {
		if parent.Err() == nil { // a dropped fill did not fail
			c.m.fetchErrors.Inc()
		}
		return filled{}, err
	}
	if a, ok := c.store.(Admitter); ok && !a.Admits(e) {
		return filled{e: e, fetched: true, tooLarge: true}, nil
	}
	c.store.Set(context.WithoutCancel(ctx), e)
	return filled{e: e, fetched: true}, nil
}

// check validates a fetched entry before it is cached.
func (c *Cache) check(e *Entry, key string) error {
	switch {
	case e == nil:
		return ErrNoEntry
	case e.Key == "":
		e.Key = key // not shared with anyone yet
	case e.Key != key:
		return fmt.Errorf("%w: got %q, want %q", ErrKeyMismatch, e.Key, key)
	}
	if e.Fetched.IsZero() {
		e.Fetched = c.clk.Now()
	}
	return nil
}

// freshIn returns key's entry from s if it is fresh now.
func (c *Cache) freshIn(ctx context.Context, s Store, key string) (*Entry, bool) {
	e, ok := s.Get(ctx, key)
	if !ok || e.Key != key || !c.clk.Now().Before(e.FreshUntil) {
		return nil, false
	}
	return e, true
}

// awaitLease acquires key's lease for this fill. When another instance holds
// it, it polls the shared tier for that instance's result and returns it
// (ok); otherwise it returns the release func to call after fetching (nil
// when the lease could not be taken or failed: fetch anyway; timedOut when
// another instance held it and stored nothing in time).
func (c *Cache) awaitLease(ctx context.Context, key string) (release func(), e *Entry, ok, timedOut bool) {
	mark := c.localRemovals()
	release, acquired, err := c.lease.Acquire(ctx, key, c.cfg.Load().FetchTimeout)
	if err != nil {
		if ce := c.log.Check(zap.DebugLevel, "cache lease failed; fetching"); ce != nil {
			ce.Write(zap.String("key", key), zap.Error(err))
		}
		return nil, nil, false, false
	}
	if acquired {
		// The previous holder may have stored and released between our
		// look and our Acquire.
		if e, ok := c.freshIn(ctx, c.leaseShared, key); ok {
			release()
			c.keepLocal(ctx, e, mark)
			return nil, e, true, false
		}
		return release, nil, false, false
	}
	wait, cancel := context.WithTimeout(ctx, c.leaseWait)
	defer cancel()
	t := time.NewTicker(leasePoll)
	defer t.Stop()
	for {
		select {
		case <-wait.Done():
			c.m.leaseTimeout.Inc()
			return nil, nil, false, true
		case <-t.C:
			if e, ok := c.freshIn(ctx, c.leaseShared, key); ok {
				c.m.leaseShared.Inc()
				c.keepLocal(ctx, e, mark)
				return nil, e, true, false
			}
		}
	}
}

// localRemovals is the local tier's removal count when the store is
// Tiered (see tiered.keep), else 0.
func (c *Cache) localRemovals() uint64 {
	if t, ok := c.store.(*tiered); ok {
		return t.removals()
	}
	return 0
}

// keepLocal stores an entry read from the shared tier in the local one
// (without writing it back to the shared tier when the store is Tiered),
// unless a purge ran since the local tier's removal count was mark.
func (c *Cache) keepLocal(ctx context.Context, e *Entry, mark uint64) {
	if t, ok := c.store.(*tiered); ok {
		t.keep(ctx, e, mark)
		return
	}
	if c.store != c.leaseShared {
		c.store.Set(ctx, e)
	}
}
