package limits

import (
	"container/list"
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"trendgate/internal/clock"
)

// Local is the in-memory Limiter of one instance. One mutex guards two
// maps: key id to token bucket, and account id to quota counters; the
// critical section is two map lookups, a bucket update and two counter
// updates, so contention stays short.
//
// Memory: a key's token bucket is evicted when idle for IdleAfter (an idle
// bucket would be full again, so nothing is lost) and, when more than
// MaxKeys buckets exist, the least recently used bucket is evicted first.
// Quota counters are never evicted before their window ends, because that
// would reset the account's quota; they are a few words per account, and
// only authenticated keys ever get state, so they are bounded by the
// configured accounts. An active key whose bucket is evicted because of MaxKeys starts again
// with a full bucket, so MaxKeys should exceed the number of keys active
// within IdleAfter. Sweeping walks both maps, holding the mutex for a part
// of them at a time (once per IdleAfter from Admit, or when Sweep is
// called). Use NewLocal; the zero
// value is not usable.
type Local struct {
	cfg Config
	clk clock.Clock
	m   *Metrics

	mu        sync.Mutex              // guards keys, quotas, lru, lastSweep, win, resets and changed
	keys      map[string]*keyState    // key id -> token bucket
	quotas    map[string]*quotaCounts // account id -> quota counters
	lru       *list.List              // of *keyState holding a bucket; front = most recently used
	lastSweep time.Time
	sweepDue  atomic.Bool // a sweep is due: the next Admit runs it
	win       window      // the windows of the latest Admit, recomputed when the day changes

	// keeper makes quota counters durable (see SetKeeper); nil keeps them
	// in memory only. Set before the first Admit, then only read.
	keeper Keeper
	// spentDay and spentMonth are the windows (YYYYMMDD, YYYYMM) in which a
	// subject with no counters is presumed to have spent its quota (see
	// PresumeSpent); 0 for none. Guarded by mu.
	spentDay, spentMonth int
	// resets holds, with a keeper, the accounts' windows reset since the
	// latest Checkpoint was taken (see Commit and ResetQuota).
	resets map[string]resetMark
	// changed holds, with a keeper, the accounts whose counters changed
	// since the latest Checkpoint (see durable.go): a checkpoint stores
	// only those.
	changed map[string]*quotaCounts
}

// keyState is one key's token bucket. Guarded by Local.mu.
type keyState struct {
	key string

	bucket   *rate.Limiter // nil when the key has no bucket (evicted or no rate limit)
	limit    float64       // the bucket's configured rate and burst, to spot policy changes
	burst    int
	elem     *list.Element // in Local.lru while bucket != nil
	lastUsed time.Time
}

// quotaCounts is one account's quota counters. Guarded by Local.mu.
type quotaCounts struct {
	day, month         int   // window ids the counters belong to
	dayUsed, monthUsed int64 // quota units reserved in those windows

	// With a Keeper (see durable.go): dayCeil and monthCeil are the units
	// the keeper has stored for these windows, which reservations may not
	// pass; need is the largest cost a request waits to reserve; recent the
	// units reserved since the latest checkpoint; daily and monthly the
	// quotas of the latest policy, which no ceiling passes.
	dayCeil, monthCeil int64
	need, recent       int64
	daily, monthly     int64
	changed            bool // in Local.changed
}

// usedIn returns the units q holds in the windows w (0 for a window q
// has not entered yet).
func (q *quotaCounts) usedIn(w window) int64 {
	var n int64
	if q.day == w.day {
		n += q.dayUsed
	}
	if q.month == w.month {
		n += q.monthUsed
	}
	return n
}

// NewLocal returns an in-memory limiter. cfg must be valid; a nil clk is
// clock.Real{}; a nil m gets an unregistered Metrics.
func NewLocal(cfg Config, clk clock.Clock, m *Metrics) (*Local, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("limits: invalid config: %w", err)
	}
	if clk == nil {
		clk = clock.Real{}
	}
	return &Local{
		cfg:       cfg,
		clk:       clk,
		m:         m.orNew(),
		keys:      make(map[string]*keyState),
		quotas:    make(map[string]*quotaCounts),
		resets:    make(map[string]resetMark),
		changed:   make(map[string]*quotaCounts),
		lru:       list.New(),
		lastSweep: clk.Now(),
	}, nil
}

// Admit implements Limiter. The quota check comes first (monthly, then
// daily, on s's account), then the rate (s's key); only when all pass are
// tokens taken and quota reserved. A cost larger than the burst is refused
// as rate_limited with a Retry-After of one full refill, since it can
// never pass.
func (l *Local) Admit(ctx context.Context, s Subject, p Policy, cost int) (Decision, error) {
	if err := checkArgs(s, cost); err != nil {
		return Decision{}, err
	}
	if err := p.Validate(); err != nil {
		return Decision{}, fmt.Errorf("limits: invalid policy: %w", err)
	}
	d, err := l.admitKept(ctx, s, p, cost)
	if l.sweepDue.Load() && l.sweepDue.CompareAndSwap(true, false) {
		l.Sweep(l.clk.Now()) // after the decision, and without holding others up
	}
	if err != nil {
		return Decision{}, err
	}
	l.m.decision(d)
	if d.Allowed {
		l.m.reserved(s, d)
	}
	return d, nil
}

// admit decides one request at now. With a keeper and !force, a request
// that passes every limit but would reserve past its account's stored
// ceiling reserves nothing and reports short: the caller waits for the
// keeper to store a higher one and asks again.
func (l *Local) admit(s Subject, p Policy, cost int, now time.Time, force bool) (d Decision, short bool) {
	if p.PerSecond > 0 {
		p.Burst = effectiveBurst(p)
	}
	d = Decision{Policy: p}
	if p.PerSecond == 0 && p.Daily == 0 && p.Monthly == 0 {
		d.Allowed = true // nothing to enforce: create no state
		d.fillQuota(p, windowAt(now), now, 0, 0)
		return d, false
	}

	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.windowLocked(now)
	l.maybeSweepLocked(now)

	var none quotaCounts // the counters of a policy without quotas: always 0
	q := &none
	account := s.account()
	if p.Daily > 0 || p.Monthly > 0 {
		q = l.quotasLocked(account)
		l.enterWindowsLocked(account, q, w, p)
	}

	// Rate: look, do not take yet.
	var st *keyState
	var tokens float64
	if p.PerSecond > 0 {
		st = l.keys[s.Key]
		if st == nil {
			st = &keyState{key: s.Key}
			l.keys[s.Key] = st
		}
		st.lastUsed = now
		tokens = l.bucketLocked(st, p, now).TokensAt(now)
	}

	reason, retry := quotaCheck(p, w, now, q.dayUsed, q.monthUsed, cost)
	if reason == "" && p.PerSecond > 0 {
		switch {
		case cost > p.Burst:
			reason, retry = ReasonRate, neverFits(p)
		case tokens < float64(cost):
			reason, retry = ReasonRate, durationForTokens(float64(cost)-tokens, p.PerSecond)
		}
	}

	if reason == "" && l.keeper != nil && !force && q.pastCeiling(p, cost) {
		q.need = max(q.need, int64(cost))
		l.changedLocked(account, q)
		return d, true
	}
	if reason == "" {
		d.Allowed = true
		q.recent += int64(cost)
		if q != &none {
			l.changedLocked(account, q)
		}
		if p.PerSecond > 0 {
			st.bucket.AllowN(now, cost) // cannot fail: checked above under l.mu
			tokens -= float64(cost)
		}
		if p.Daily > 0 {
			q.dayUsed += int64(cost)
			d.DayReserved = int64(cost)
		}
		if p.Monthly > 0 {
			q.monthUsed += int64(cost)
			d.MonthReserved = int64(cost)
		}
	} else {
		d.Reason, d.RetryAfter = reason, retry
	}
	if p.PerSecond > 0 {
		d.BurstRemaining = max(int(math.Floor(tokens)), 0)
		d.BurstReset = durationForTokens(float64(p.Burst)-tokens, p.PerSecond)
	}
	d.fillQuota(p, w, now, q.dayUsed, q.monthUsed)
	return d, false
}

// quotasLocked returns account's counters, creating them. l.mu must be
// held.
func (l *Local) quotasLocked(account string) *quotaCounts {
	q := l.quotas[account]
	if q == nil {
		q = &quotaCounts{}
		l.quotas[account] = q
	}
	return q
}

// windowLocked returns the windows containing now, computing them only when
// now leaves the cached day. l.mu must be held.
func (l *Local) windowLocked(now time.Time) window {
	if now.Before(l.win.dayStart) || !now.Before(l.win.dayEnd) {
		l.win = windowAt(now)
	}
	return l.win
}

// bucketLocked returns st's bucket for p, creating it (and evicting the least
// recently used buckets beyond MaxKeys) or adjusting it to a changed policy.
// l.mu must be held.
func (l *Local) bucketLocked(st *keyState, p Policy, now time.Time) *rate.Limiter {
	if st.bucket == nil {
		st.bucket = rate.NewLimiter(rate.Limit(p.PerSecond), p.Burst)
		st.limit, st.burst = p.PerSecond, p.Burst
		st.elem = l.lru.PushFront(st)
		for l.lru.Len() > l.cfg.MaxKeys {
			l.dropBucketLocked(l.lru.Back().Value.(*keyState))
		}
		return st.bucket
	}
	l.lru.MoveToFront(st.elem)
	if st.limit != p.PerSecond {
		st.bucket.SetLimitAt(now, rate.Limit(p.PerSecond))
		st.limit = p.PerSecond
	}
	if st.burst != p.Burst {
		st.bucket.SetBurstAt(now, p.Burst)
		st.burst = p.Burst
	}
	return st.bucket
}

// dropBucketLocked evicts st's bucket, keeping its quota counters.
// l.mu must be held.
func (l *Local) dropBucketLocked(st *keyState) {
	l.lru.Remove(st.elem)
	st.elem, st.bucket = nil, nil
	l.m.BucketsEvicted.Inc()
}

// Refund implements Limiter: it gives back the quota units d reserved on
// s's account, if their windows are still current. It never takes a
// counter below zero.
func (l *Local) Refund(ctx context.Context, s Subject, d Decision) error {
	if s.Key == "" {
		return ErrNoSubject
	}
	if !d.Allowed || (d.DayReserved == 0 && d.MonthReserved == 0) {
		return nil
	}
	l.mu.Lock()
	if q := l.quotas[s.account()]; q != nil {
		if d.DayReserved > 0 && q.day == d.Day {
			q.dayUsed = max(q.dayUsed-d.DayReserved, 0)
		}
		if d.MonthReserved > 0 && q.month == d.Month {
			q.monthUsed = max(q.monthUsed-d.MonthReserved, 0)
		}
	}
	l.mu.Unlock()
	l.m.refunded(s, d)
	return nil
}

// Sweep evicts the buckets of keys idle for IdleAfter and the counters of
// accounts whose quota windows have ended, and returns the number of
// buckets and counter sets dropped. Admit also sweeps on its own once per
// IdleAfter, after its decision.
//
// It holds the lock for a list of the keys and accounts, then for
// lockPart of them at a time (inParts), so that admissions wait for a part, not
// for all of them (about 20 ms at 100,000 keys and accounts under one
// hold; BenchmarkAdmitDuringSweep).
// What changed meanwhile is judged as it is then: a key or account
// replaced is left alone, one used since is not idle, and one that entered
// a window after now's keeps it.
func (l *Local) Sweep(now time.Time) int {
	type keyEntry struct {
		key string
		st  *keyState
	}
	w := windowAt(now)
	l.mu.Lock()
	l.lastSweep = now
	keys := make([]keyEntry, 0, len(l.keys))
	for k, st := range l.keys {
		keys = append(keys, keyEntry{k, st})
	}
	quotas := l.accountsLocked()
	l.mu.Unlock()

	n := 0
	l.inParts(len(keys), func(i int) {
		e := keys[i]
		st := e.st
		if l.keys[e.key] != st {
			return
		}
		if st.bucket != nil && now.Sub(st.lastUsed) >= l.cfg.IdleAfter {
			l.dropBucketLocked(st)
			n++
		}
		if st.bucket == nil { // idle, or evicted for MaxKeys earlier
			delete(l.keys, e.key)
		}
	})
	l.inParts(len(quotas), func(i int) {
		e := quotas[i]
		q := e.q
		if l.quotas[e.account] != q || q.day > w.day || q.month > w.month {
			return
		}
		// Windows ended, or nothing reserved in them. A counter at zero in
		// a window presumed spent (a reset one) stays: without it the
		// window would be presumed spent again.
		kept := (q.day == w.day && w.day == l.spentDay) || (q.month == w.month && w.month == l.spentMonth)
		if q.usedIn(w) == 0 && !kept {
			delete(l.quotas, e.account)
			delete(l.changed, e.account)
			n++
		}
	})
	return n
}

// accountQuotas is one account's quota counters, as a walk in parts
// lists them.
type accountQuotas struct {
	account string
	q       *quotaCounts
}

// accountsLocked lists every account's quota counters, for a walk over
// them in parts (inParts). l.mu must be held.
func (l *Local) accountsLocked() []accountQuotas {
	all := make([]accountQuotas, 0, len(l.quotas))
	for account, q := range l.quotas {
		all = append(all, accountQuotas{account, q})
	}
	return all
}

// lockPart is how many keys or accounts a walk over all of them (Sweep,
// PeekAll) handles under one hold of the lock.
const lockPart = 2048

// inParts calls fn for 0 <= i < n, holding l.mu for lockPart calls at a
// time, so that admissions wait for a part of a walk, not all of it.
func (l *Local) inParts(n int, fn func(i int)) {
	for lo := 0; lo < n; lo += lockPart {
		l.mu.Lock()
		for i := lo; i < min(lo+lockPart, n); i++ {
			fn(i)
		}
		l.mu.Unlock()
	}
}

// maybeSweepLocked marks a sweep due once IdleAfter has passed since the
// last: Admit runs it after its decision. l.mu must be held.
func (l *Local) maybeSweepLocked(now time.Time) {
	if now.Sub(l.lastSweep) >= l.cfg.IdleAfter {
		l.lastSweep = now
		l.sweepDue.Store(true)
	}
}
