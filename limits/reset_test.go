package limits

import (
	"context"
	"errors"
	"testing"
	"time"

	"trendgate/internal/clock"
	"trendgate/internal/testing/redistest"
)

// TestResetQuota: a reset clears one account's counter of one window and
// reports what it held; the account's quota is whole again, while the
// other window, another account and the keys' buckets are untouched. On
// each limiter: local, Redis, Redis Cluster.
func TestResetQuota(t *testing.T) {
	for name, newLimiter := range accountLimiters(t) {
		t.Run(name, func(t *testing.T) {
			lim := newLimiter(t)
			rs := lim.(QuotaResetter)
			ctx := context.Background()
			// 0.001/s: no token comes back while the test runs.
			p := Policy{PerSecond: 0.001, Burst: 8, Daily: 5, Monthly: 100}
			web := Subject{Key: "web", Account: "acme"}
			batch := Subject{Key: "batch", Account: "acme"}
			solo := Subject{Key: "solo"}
			admit := func(s Subject, n int) (allowed int) {
				t.Helper()
				for range n {
					d, err := lim.Admit(ctx, s, p, 1)
					if err != nil {
						t.Fatal(err)
					}
					if d.Allowed {
						allowed++
					}
				}
				return allowed
			}
			usage := func() []Usage {
				t.Helper()
				u, err := lim.(UsageReader).Usage(ctx, []KeyPolicy{
					{Key: "web", Account: "acme", Policy: p}, {Key: "solo", Policy: p},
				})
				if err != nil {
					t.Fatal(err)
				}
				return u
			}

			if got := admit(web, 3) + admit(batch, 3) + admit(solo, 2); got != 7 {
				t.Fatalf("before the reset: %d admitted; want 7 (acme's daily 5, solo's 2)", got)
			}
			cleared, err := rs.ResetQuota(ctx, "acme", QuotaDay)
			if err != nil || cleared != 5 {
				t.Fatalf("ResetQuota(acme, day) = %d, %v; want 5, nil", cleared, err)
			}
			u := usage()
			if u[0].DayUsed != 0 || u[0].MonthUsed != 5 {
				t.Errorf("acme after the day's reset: %d/%d used; want 0/5 (the month untouched)", u[0].DayUsed, u[0].MonthUsed)
			}
			if u[1].DayUsed != 2 || u[1].MonthUsed != 2 {
				t.Errorf("solo after acme's reset: %d/%d used; want 2/2", u[1].DayUsed, u[1].MonthUsed)
			}
			if u[0].BurstTokens != 5 {
				t.Errorf("web's bucket after the reset: %d tokens; want 5 (8 less the 3 taken; a reset does not refill)", u[0].BurstTokens)
			}
			if got := admit(batch, 6); got != 5 {
				t.Errorf("after the reset: %d of 6 admitted; want 5 (a whole daily quota)", got)
			}

			cleared, err = rs.ResetQuota(ctx, "acme", QuotaMonth)
			if err != nil || cleared != 10 {
				t.Fatalf("ResetQuota(acme, month) = %d, %v; want 10, nil", cleared, err)
			}
			if u := usage(); u[0].DayUsed != 5 || u[0].MonthUsed != 0 || u[1].MonthUsed != 2 {
				t.Errorf("after the month's reset: acme %d/%d, solo month %d; want 5/0, 2", u[0].DayUsed, u[0].MonthUsed, u[1].MonthUsed)
			}
			if cleared, err := rs.ResetQuota(ctx, "acme", QuotaMonth); err != nil || cleared != 0 {
				t.Errorf("resetting again: %d, %v; want 0, nil", cleared, err)
			}
			if cleared, err := rs.ResetQuota(ctx, "nobody", QuotaDay); err != nil || cleared != 0 {
				t.Errorf("an account with no counter: %d, %v; want 0, nil", cleared, err)
			}
			if _, err := rs.ResetQuota(ctx, "acme", "week"); !errors.Is(err, ErrInvalidWindow) {
				t.Errorf("window week: %v; want ErrInvalidWindow", err)
			}
			if _, err := rs.ResetQuota(ctx, "", QuotaDay); !errors.Is(err, ErrNoSubject) {
				t.Errorf("no account: %v; want ErrNoSubject", err)
			}
		})
	}
}

// TestRedisResetSeenByEveryInstance: two instances share the counters; a
// reset through one clears what both admitted, the other sees it at once,
// and the next admissions count from zero in the same Redis keys.
func TestRedisResetSeenByEveryInstance(t *testing.T) {
	for _, be := range backends() {
		t.Run(be.name, func(t *testing.T) {
			c, prefix := be.client(t)
			opts := RedisOptions{Prefix: prefix, Timeout: 10 * time.Second}
			a, _ := newLimiterOn(t, c, opts, clock.Real{})
			b, _ := newLimiterOn(t, c, opts, clock.Real{})
			ctx := context.Background()
			p := Policy{Daily: 4, Monthly: 50}
			var last Decision
			for i, lim := range []*Redis{a, b, a, b} {
				d, err := lim.Admit(ctx, Subject{Key: "web", Account: "acme"}, p, 1)
				if err != nil || !d.Allowed {
					t.Fatalf("admission %d: %+v, %v; want allowed", i, d, err)
				}
				last = d
			}
			if d, _ := a.Admit(ctx, Subject{Key: "web", Account: "acme"}, p, 1); d.Allowed {
				t.Fatal("a fifth admission passed a daily quota of 4")
			}
			dayKey, monthKey := a.dayKey("acme", last.Day), a.monthKey("acme", last.Month)

			cleared, err := b.ResetQuota(ctx, "acme", QuotaDay)
			if err != nil || cleared != 4 {
				t.Fatalf("ResetQuota through b = %d, %v; want 4, nil", cleared, err)
			}
			if got := readCounter(t, c, dayKey); got != 0 {
				t.Errorf("%s after the reset: %d; want 0", dayKey, got)
			}
			if got := readCounter(t, c, monthKey); got != 4 {
				t.Errorf("%s after the day's reset: %d; want 4 (untouched)", monthKey, got)
			}
			u, err := a.Usage(ctx, []KeyPolicy{{Key: "other-key", Account: "acme", Policy: p}})
			if err != nil || u[0].DayUsed != 0 || u[0].MonthUsed != 4 || u[0].Source != SourceRedis {
				t.Errorf("usage on a: %+v, %v; want 0/4 from redis", u, err)
			}
			for i := range 4 {
				if d, err := a.Admit(ctx, Subject{Key: "web", Account: "acme"}, p, 1); err != nil || !d.Allowed {
					t.Fatalf("after the reset, admission %d on a: %+v, %v; want allowed", i, d, err)
				}
			}
			if got := readCounter(t, c, dayKey); got != 4 {
				t.Errorf("%s after 4 more: %d; want 4 (counted again from zero)", dayKey, got)
			}
		})
	}
}

// TestRedisResetReplaysJournalFirst: units the fallback admitted during an
// outage are cleared by a reset made once Redis is back, not added back
// by the journal's later replay; during the outage the reset fails with
// ErrUnavailable and changes nothing. The fallback's counter is cleared
// with Redis's.
func TestRedisResetReplaysJournalFirst(t *testing.T) {
	srv := redistest.StartServer(t, true) // keeps what it answered across the restart
	c := redisOrSkip(t, srv.Addr())
	clk := clock.NewFake(time.Now()) // drives only the breaker here
	opts := RedisOptions{
		Prefix: "tg:test:reset:", Timeout: 3 * time.Second, LocalShare: 1.0 / 3,
		FailureThreshold: 2, Backoff: time.Second, ReconcileEvery: time.Hour,
	}
	r, _ := newLimiterOn(t, c, opts, clk)
	ctx := context.Background()
	p := Policy{Daily: 90, Monthly: 900}
	s := Subject{Key: "k"}
	var d Decision
	for range 4 {
		var err error
		if d, err = r.Admit(ctx, s, p, 1); err != nil || !d.Allowed || d.fallback {
			t.Fatalf("with Redis up: %+v, %v; want allowed by Redis", d, err)
		}
	}
	dayKey := r.dayKey("k", d.Day)

	srv.Stop()
	for range 5 {
		if d, err := r.Admit(ctx, s, p, 1); err != nil || !d.Allowed || !d.fallback {
			t.Fatalf("during the outage: %+v, %v; want allowed by the fallback", d, err)
		}
	}
	if _, err := r.ResetQuota(ctx, "k", QuotaDay); !errors.Is(err, ErrUnavailable) {
		t.Errorf("reset during the outage: %v; want ErrUnavailable", err)
	}
	if day, _ := r.fallback.usage("k", clk.Now()); day != 5 {
		t.Errorf("fallback after a failed reset: %d used; want 5 (unchanged)", day)
	}
	if r.JournalLen() == 0 {
		t.Fatal("journal empty after fallback admissions")
	}

	srv.Start()
	clk.Advance(opts.Backoff) // the breaker lets a probe through
	cleared, err := r.ResetQuota(ctx, "k", QuotaDay)
	if err != nil || cleared != 9 {
		t.Fatalf("reset once Redis is back = %d, %v; want 9 (4 in Redis, 5 journaled), nil", cleared, err)
	}
	if n := r.JournalLen(); n != 0 {
		t.Errorf("journal after the reset: %d entries; want 0 (replayed first)", n)
	}
	if err := r.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if got := readCounter(t, c, dayKey); got != 0 {
		t.Errorf("%s after the reset and a replay: %d; want 0", dayKey, got)
	}
	if day, month := r.fallback.usage("k", clk.Now()); day != 0 || month != 5 {
		t.Errorf("fallback after the reset: %d/%d used; want 0/5 (its day cleared too)", day, month)
	}
}

// TestRedisResetUnreachable: with Redis unreachable and the breaker still
// closed, the reset tries, fails and says so.
func TestRedisResetUnreachable(t *testing.T) {
	r, _ := newRedisLimiter(t, "127.0.0.1:1", RedisOptions{Timeout: 200 * time.Millisecond, FailureThreshold: 5}, clock.NewFake(t0))
	if _, err := r.ResetQuota(context.Background(), "acme", QuotaMonth); !errors.Is(err, ErrUnavailable) {
		t.Errorf("reset on an unreachable Redis: %v; want ErrUnavailable", err)
	}
}

// inflightKeeper is a keeper with a checkpoint in flight: one taken
// before the reset, whose store completes (Commit) inside the reset's
// Sync, before the checkpoint that Sync asks for.
type inflightKeeper struct {
	*memKeeper
	stale []Counter
}

func (k *inflightKeeper) Sync(ctx context.Context) error {
	if k.stale != nil {
		k.l.Commit(k.stale)
		k.stale = nil
	}
	return k.memKeeper.Sync(ctx)
}

// TestLocalResetIsStored: with a keeper, the reset is stored before
// ResetQuota returns, so a crash right after it does not bring the count
// back. What the keeper held was reserved ahead of the count, and later
// checkpoints never store below a committed ceiling: before the reset
// dropped its ceiling, the old count stayed stored all day (and came back
// at a crash); a checkpoint taken before the reset and committed after it
// must not restore it either.
func TestLocalResetIsStored(t *testing.T) {
	for _, inflight := range []bool{false, true} {
		name := "after a committed checkpoint"
		if inflight {
			name = "with a checkpoint in flight"
		}
		t.Run(name, func(t *testing.T) {
			clk := clock.NewFake(t0)
			l := newLocal(t, clk, nil)
			mk := &memKeeper{l: l, clk: clk}
			k := &inflightKeeper{memKeeper: mk}
			l.SetKeeper(k)
			ctx := context.Background()
			p := Policy{Daily: 20000, Monthly: 400000}
			for range 300 {
				if d, err := l.Admit(ctx, Subject{Key: "acme-web", Account: "acme"}, p, 1); err != nil || !d.Allowed {
					t.Fatalf("Admit: %+v, %v", d, err)
				}
			}
			if err := mk.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			if day, _ := mk.storedFor("acme"); day < 300 {
				t.Fatalf("stored before the reset: %d; want at least 300", day)
			}
			if inflight {
				k.stale = l.Checkpoint(clk.Now(), true)
			}
			cleared, err := l.ResetQuota(ctx, "acme", QuotaDay)
			if err != nil || cleared != 300 {
				t.Fatalf("ResetQuota = %d, %v; want 300, nil", cleared, err)
			}
			if day, month := mk.storedFor("acme"); day != 0 || month < 300 {
				t.Errorf("stored after the reset: %d/%d; want 0 and at least 300 (the month untouched)", day, month)
			}
			// Reserving again still keeps what is stored at least what is used.
			for range 10 {
				if d, err := l.Admit(ctx, Subject{Key: "acme-web", Account: "acme"}, p, 1); err != nil || !d.Allowed {
					t.Fatalf("Admit after the reset: %+v, %v", d, err)
				}
			}
			if day, _ := mk.storedFor("acme"); day < 10 || day > 10+200 {
				t.Errorf("stored after 10 more: %d; want 10 plus a reservation of at most 200 (1%% of 20000)", day)
			}
			// A restart from what is stored (a crash) keeps the reset.
			again := newLocal(t, clk, nil)
			again.Restore(mk.stored, clk.Now())
			if d, err := again.Admit(ctx, Subject{Key: "acme-web", Account: "acme"}, Policy{Daily: 220, Monthly: 400000}, 1); err != nil || !d.Allowed {
				t.Errorf("after a crash and restart: %+v, %v; want admitted under a daily 220", d, err)
			}
		})
	}
}

// TestLocalResetNotStored: when the keeper fails, the reset holds in
// memory and the error says it is not stored.
func TestLocalResetNotStored(t *testing.T) {
	clk := clock.NewFake(t0)
	l, k := newKeptLocal(t, clk)
	ctx := context.Background()
	p := Policy{Daily: 100, Monthly: 1000}
	admitN(t, l, "solo", p, 1, 3)
	k.fail = true
	cleared, err := l.ResetQuota(ctx, "solo", QuotaMonth)
	if err == nil || cleared != 3 {
		t.Errorf("ResetQuota with a failing keeper = %d, %v; want 3 and an error", cleared, err)
	}
	if day, month := l.usage("solo", clk.Now()); day != 3 || month != 0 {
		t.Errorf("after the reset: %d/%d used; want 3/0", day, month)
	}
}

// TestLocalResetPresumedSpent: a window presumed spent (damaged state
// file, on_damage: spent) is cleared by a reset too, and stays cleared
// through a sweep; the other window stays presumed spent.
func TestLocalResetPresumedSpent(t *testing.T) {
	clk := clock.NewFake(t0)
	l := newLocal(t, clk, nil)
	l.PresumeSpent(t0)
	p := Policy{Daily: 30, Monthly: 1000}
	if cleared, err := l.ResetQuota(context.Background(), "acme", QuotaMonth); err != nil || cleared != 0 {
		t.Fatalf("ResetQuota = %d, %v; want 0 (presumed, not counted), nil", cleared, err)
	}
	l.Sweep(clk.Now())
	u, _ := l.Usage(context.Background(), []KeyPolicy{{Key: "web", Account: "acme", Policy: p}})
	if u[0].DayUsed != 30 || u[0].MonthUsed != 0 {
		t.Errorf("after resetting the month and a sweep: %d/%d used; want 30/0 (the day still presumed spent)", u[0].DayUsed, u[0].MonthUsed)
	}
	if cleared, err := l.ResetQuota(context.Background(), "acme", QuotaDay); err != nil || cleared != 0 {
		t.Fatalf("ResetQuota(day) = %d, %v; want 0, nil", cleared, err)
	}
	l.Sweep(clk.Now())
	if d, err := l.Admit(context.Background(), Subject{Key: "web", Account: "acme"}, p, 1); err != nil || !d.Allowed {
		t.Errorf("after both resets: %+v, %v; want admitted", d, err)
	}
}
