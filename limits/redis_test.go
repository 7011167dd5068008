package limits

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"trendgate/internal/clock"
	"trendgate/internal/testing/redistest"
)

const sharedRedis = "127.0.0.1:6379"

// redisOrSkip connects to addr; when it is unreachable the test is skipped,
// or fails when CI=true.
func redisOrSkip(t *testing.T, addr string) *redis.Client {
	t.Helper()
	return redistest.Client(t, addr)
}

// testPrefix returns a unique "tg:test:<random>:" prefix and deletes its keys
// when the test ends (before that, it checks every key carries a TTL).
func testPrefix(t *testing.T, c *redis.Client) string {
	t.Helper()
	return redistest.Prefix(t, c)
}

// checkTTLs fails the test when a key under prefix has no expiry, and
// returns the keys it found.
func checkTTLs(t *testing.T, c *redis.Client, prefix string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var keys []string
	iter := c.Scan(ctx, 0, prefix+"*", 100).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Fatalf("scan: %v", err)
	}
	for _, k := range keys {
		ttl, err := c.PTTL(ctx, k).Result()
		if err != nil {
			t.Fatalf("PTTL %s: %v", k, err)
		}
		// go-redis reports "no expiry" as -1ns and "gone" as -2ns; 0 means
		// under a millisecond left (a bucket about to be full again).
		if ttl == -1 {
			t.Errorf("key %s: got no TTL; want one (no key may live without expiry)", k)
		}
		if !strings.HasPrefix(k, prefix+"rl:") && ttl != -2 && ttl <= time.Second {
			t.Errorf("counter %s: got TTL %v; want > 1s (it lives until its window ends)", k, ttl)
		}
	}
	return keys
}

// newRedisLimiter is one "instance": its own client, fallback and metrics.
func newRedisLimiter(t *testing.T, addr string, opts RedisOptions, clk clock.Clock) (*Redis, *Metrics) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { c.Close() })
	return newLimiterOn(t, c, opts, clk)
}

// newLimiterOn is one "instance" on client c (closed by the caller).
func newLimiterOn(t *testing.T, c redis.UniversalClient, opts RedisOptions, clk clock.Clock) (*Redis, *Metrics) {
	t.Helper()
	m := NewMetrics(nil)
	fb, err := NewLocal(DefaultConfig(), clk, m)
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewRedis(c, opts, fb, clk, nil, m)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r, m
}

func counter(t *testing.T, c *redis.Client, key string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	n, err := c.Get(ctx, key).Int64()
	if errors.Is(err, redis.Nil) {
		return 0
	}
	if err != nil {
		t.Fatalf("GET %s: %v", key, err)
	}
	return n
}

func TestRedisGCRABurstIsExactAcrossInstances(t *testing.T) {
	c := redisOrSkip(t, sharedRedis)
	prefix := testPrefix(t, c)
	opts := RedisOptions{Prefix: prefix, Timeout: 10 * time.Second}
	a, ma := newRedisLimiter(t, sharedRedis, opts, clock.Real{})
	b, mb := newRedisLimiter(t, sharedRedis, opts, clock.Real{})

	tests := []struct {
		name    string
		p       Policy
		cost    int
		perInst int
		want    int
	}{
		// 0.01/s: no token comes back while the test runs.
		{"burst 20, cost 1", Policy{PerSecond: 0.01, Burst: 20}, 1, 30, 20},
		{"burst 20, cost 5", Policy{PerSecond: 0.01, Burst: 20}, 5, 10, 4},
		// 0.5/s: burst ceil(0.5) = 1; the next token needs 2s.
		{"burst defaults to ceil(per_second)", Policy{PerSecond: 0.5}, 1, 20, 1},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			key := "key" + strconv.Itoa(i)
			var mu sync.Mutex
			allowed := 0
			var wg sync.WaitGroup
			for _, lim := range []*Redis{a, b} {
				for range tc.perInst {
					wg.Go(func() {
						d, err := lim.Admit(context.Background(), Subject{Key: key}, tc.p, tc.cost)
						if err != nil {
							t.Error(err)
							return
						}
						if d.Allowed {
							mu.Lock()
							allowed++
							mu.Unlock()
						} else if d.Reason != ReasonRate || d.RetryAfter <= 0 {
							t.Errorf("got %q retry %v; want rate_limited with a positive retry", d.Reason, d.RetryAfter)
						}
					})
				}
			}
			wg.Wait()
			if allowed != tc.want {
				t.Errorf("got %d admitted across two instances; want exactly %d", allowed, tc.want)
			}
		})
	}
	for name, m := range map[string]*Metrics{"a": ma, "b": mb} {
		if got := testutil.ToFloat64(m.RedisFallbacks); got != 0 {
			t.Errorf("instance %s: got %v fallbacks; want 0 (the result must come from Redis)", name, got)
		}
	}
	checkTTLs(t, c, prefix)
}

func TestRedisDecisionFields(t *testing.T) {
	c := redisOrSkip(t, sharedRedis)
	prefix := testPrefix(t, c)
	r, _ := newRedisLimiter(t, sharedRedis, RedisOptions{Prefix: prefix, Timeout: 10 * time.Second}, clock.Real{})
	ctx := context.Background()
	p := Policy{PerSecond: 0.01, Burst: 20, Daily: 100, Monthly: 1000}
	var d Decision
	for range 3 {
		d, _ = r.Admit(ctx, Subject{Key: "k"}, p, 5)
	}
	if !d.Allowed || d.BurstRemaining != 5 || d.DailyRemaining != 85 || d.MonthlyRemaining != 985 {
		t.Errorf("got allowed=%v burst %d daily %d monthly %d; want true 5 85 985",
			d.Allowed, d.BurstRemaining, d.DailyRemaining, d.MonthlyRemaining)
	}
	if d.BurstReset < 1499*time.Second || d.BurstReset > 1500*time.Second {
		t.Errorf("BurstReset: got %v; want about 1500s (15 tokens at 0.01/s)", d.BurstReset)
	}
	if d.DailyReset <= 0 || d.DailyReset > 24*time.Hour {
		t.Errorf("DailyReset: got %v; want within a day", d.DailyReset)
	}

	// A cost above the burst is refused at once with one full refill.
	d, _ = r.Admit(ctx, Subject{Key: "k"}, p, 21)
	if d.Allowed || d.Reason != ReasonRate || d.RetryAfter != 2000*time.Second {
		t.Errorf("cost > burst: got %v %q %v; want refused rate_limited 2000s", d.Allowed, d.Reason, d.RetryAfter)
	}
	checkTTLs(t, c, prefix)
}

func TestRedisQuotaAcrossInstances(t *testing.T) {
	c := redisOrSkip(t, sharedRedis)
	prefix := testPrefix(t, c)
	opts := RedisOptions{Prefix: prefix, Timeout: 10 * time.Second}
	a, _ := newRedisLimiter(t, sharedRedis, opts, clock.Real{})
	b, _ := newRedisLimiter(t, sharedRedis, opts, clock.Real{})
	ctx := context.Background()
	p := Policy{Daily: 7, Monthly: 8}

	var kept []Decision
	refused := 0
	for i := range 10 {
		lim := a
		if i%2 == 1 {
			lim = b
		}
		d, err := lim.Admit(ctx, Subject{Key: "q"}, p, 1)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			kept = append(kept, d)
		} else {
			refused++
			if d.Reason != ReasonDaily {
				t.Errorf("got %q; want daily_quota_exceeded", d.Reason)
			}
		}
	}
	if len(kept) != 7 || refused != 3 {
		t.Fatalf("got %d admitted, %d refused; want 7, 3", len(kept), refused)
	}
	w := windowAt(time.Now())
	dayKey := prefix + "q:d:q:" + strconv.Itoa(w.day)
	monthKey := prefix + "q:m:q:" + strconv.Itoa(w.month)
	if got := counter(t, c, dayKey); got != 7 {
		t.Errorf("%s: got %d; want 7", dayKey, got)
	}
	// Refund on the other instance gives the unit back to both.
	if err := b.Refund(ctx, Subject{Key: "q"}, kept[0]); err != nil {
		t.Fatal(err)
	}
	if got := counter(t, c, dayKey); got != 6 {
		t.Errorf("after refund: got %d; want 6", got)
	}
	if d, _ := a.Admit(ctx, Subject{Key: "q"}, p, 1); !d.Allowed {
		t.Errorf("after refund: got %q; want allowed", d.Reason)
	}
	// Daily is full again (7 - 1 + 1); a refused request charges neither counter.
	if d, _ := b.Admit(ctx, Subject{Key: "q"}, p, 1); d.Reason != ReasonDaily {
		t.Errorf("got %q; want daily_quota_exceeded (daily 7 is full again)", d.Reason)
	}
	if got := counter(t, c, monthKey); got != 7 {
		t.Errorf("%s: got %d; want 7", monthKey, got)
	}
	keys := checkTTLs(t, c, prefix)
	var counters, records int
	for _, k := range keys {
		if strings.HasPrefix(k, prefix+"a:q:") {
			records++
		} else {
			counters++
		}
	}
	if counters != 2 || records != 8 {
		t.Errorf("got keys %v; want the day and month counters (no rate limit set) and 8 admission records (one per admitted request)", keys)
	}
}

// TestRedisUsesRedisTime drives the instance clock to another year: the
// windows (and key names) must still follow Redis TIME.
func TestRedisUsesRedisTime(t *testing.T) {
	c := redisOrSkip(t, sharedRedis)
	prefix := testPrefix(t, c)
	clk := clock.NewFake(time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC))
	r, _ := newRedisLimiter(t, sharedRedis, RedisOptions{Prefix: prefix, Timeout: 10 * time.Second}, clk)
	d, err := r.Admit(context.Background(), Subject{Key: "k"}, Policy{Daily: 5}, 2)
	if err != nil || !d.Allowed {
		t.Fatalf("Admit: %+v %v", d, err)
	}
	redisNow, err := c.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	w := windowAt(redisNow)
	if d.Day != w.day {
		t.Errorf("got window %d; want Redis's %d", d.Day, w.day)
	}
	if got := counter(t, c, prefix+"q:d:k:"+strconv.Itoa(w.day)); got != 2 {
		t.Errorf("counter for Redis's day: got %d; want 2", got)
	}
	checkTTLs(t, c, prefix)
}

func TestRedisFallbackJournalsAndReconcilesExactlyOnce(t *testing.T) {
	srv := redistest.StartServer(t, false)
	addr := srv.Addr()
	c := redisOrSkip(t, addr)
	prefix := "tg:test:fallback:"

	ctx := context.Background()
	clk := clock.NewFake(time.Now()) // drives only the breaker here
	opts := RedisOptions{
		Prefix: prefix, Timeout: 3 * time.Second, LocalShare: 1.0 / 3,
		FailureThreshold: 2, Backoff: time.Second, ReconcileEvery: time.Hour,
	}
	r, m := newRedisLimiter(t, addr, opts, clk)
	p := Policy{PerSecond: 1000, Burst: 1000, Daily: 90, Monthly: 900}

	// 1. Redis up: 10 admitted, one refunded.
	var first []Decision
	for range 10 {
		d, err := r.Admit(ctx, Subject{Key: "k"}, p, 1)
		if err != nil || !d.Allowed || d.fallback {
			t.Fatalf("with Redis up: got %+v %v; want allowed by Redis", d, err)
		}
		first = append(first, d)
	}
	if err := r.Refund(ctx, Subject{Key: "k"}, first[0]); err != nil {
		t.Fatal(err)
	}
	dayKey := prefix + "q:d:k:" + strconv.Itoa(first[0].Day)
	monthKey := prefix + "q:m:k:" + strconv.Itoa(first[0].Month)
	if got := counter(t, c, dayKey); got != 9 {
		t.Fatalf("before the outage: got %d; want 9", got)
	}

	// 2. Redis dies: the fallback decides at a third of the policy (daily 30).
	srv.Stop()
	var during []Decision
	refusedDaily := 0
	for range 40 {
		d, err := r.Admit(ctx, Subject{Key: "k"}, p, 1)
		if err != nil {
			t.Fatalf("during outage: %v", err)
		}
		if !d.fallback {
			t.Fatalf("during outage: got a decision not marked as fallback")
		}
		if d.Policy.Daily != 30 || d.Policy.Burst != 333 {
			t.Errorf("fallback policy: got daily %d burst %d; want 30 333", d.Policy.Daily, d.Policy.Burst)
		}
		if d.Allowed {
			during = append(during, d)
		} else if d.Reason == ReasonDaily {
			refusedDaily++
		}
	}
	if len(during) != 30 || refusedDaily != 10 {
		t.Fatalf("during outage: got %d admitted, %d refused daily; want 30, 10", len(during), refusedDaily)
	}
	// Two of them fail downstream and are refunded; one pre-outage refund too.
	for _, d := range []Decision{during[0], during[1], first[1]} {
		if err := r.Refund(ctx, Subject{Key: "k"}, d); err != nil {
			t.Fatal(err)
		}
	}
	if got := testutil.ToFloat64(m.RedisFallbacks); got != 41 { // 40 admits + 1 Redis refund
		t.Errorf("fallback counter: got %v; want 41", got)
	}
	if got := testutil.ToFloat64(m.RedisAvailable); got != 0 {
		t.Errorf("redis_available: got %v; want 0", got)
	}
	if got := r.JournalLen(); got != 2 {
		t.Errorf("journal: got %d entries; want 2 (day and month of one key)", got)
	}
	if err := r.Reconcile(ctx); err == nil {
		t.Errorf("Reconcile while Redis is down: got nil; want an error")
	}
	if got := r.JournalLen(); got != 2 {
		t.Errorf("journal after a failed replay: got %d; want 2 (kept)", got)
	}

	// 3. Redis comes back empty (no persistence): the journal is replayed
	// once. Net journal: +30 - 2 - 1 = 27 on both counters.
	srv.Start()
	back := false
	for range 5 {
		clk.Advance(opts.Backoff)
		d, err := r.Admit(ctx, Subject{Key: "k"}, p, 1)
		if err != nil {
			t.Fatal(err)
		}
		if !d.fallback {
			back = true
			break
		}
	}
	if !back {
		t.Fatalf("Redis back: no decision came from Redis after 5 probes")
	}
	if err := r.Reconcile(ctx); err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	if err := r.Reconcile(ctx); err != nil { // nothing left: must not replay again
		t.Fatalf("second Reconcile: %v", err)
	}
	for _, k := range []string{dayKey, monthKey} {
		if got := counter(t, c, k); got != 28 { // 27 replayed + 1 admitted by Redis after recovery
			t.Errorf("%s: got %d; want 28", k, got)
		}
	}
	if got := r.JournalLen(); got != 0 {
		t.Errorf("journal after replay: got %d; want 0", got)
	}
	if got := testutil.ToFloat64(m.RedisAvailable); got != 1 {
		t.Errorf("redis_available: got %v; want 1", got)
	}

	// Replaying an entry that was already applied is a no-op (its marker).
	e := &journalEntry{journalKey: journalKey{account: "k", window: first[0].Day}, delta: 5, seq: 1}
	if err := r.replay(ctx, e); err != nil {
		t.Fatal(err)
	}
	if got := counter(t, c, dayKey); got != 28 {
		t.Errorf("replaying sealed entry 1 again: got %d; want 28 (no double replay)", got)
	}
	keys := checkTTLs(t, c, prefix)
	var markers int
	for _, k := range keys {
		if strings.HasPrefix(k, prefix+"j:") {
			markers++
		}
	}
	if markers != 2 {
		t.Errorf("got %d replay markers; want 2", markers)
	}
}

func TestRedisRefundNeverCreatesOrUnderflows(t *testing.T) {
	c := redisOrSkip(t, sharedRedis)
	prefix := testPrefix(t, c)
	r, _ := newRedisLimiter(t, sharedRedis, RedisOptions{Prefix: prefix, Timeout: 10 * time.Second}, clock.Real{})
	ctx := context.Background()
	d, err := r.Admit(ctx, Subject{Key: "k"}, Policy{Daily: 10}, 3)
	if err != nil || !d.Allowed {
		t.Fatalf("Admit: %+v %v", d, err)
	}
	dayKey := prefix + "q:d:k:" + strconv.Itoa(d.Day)
	big := d
	big.DayReserved = 50 // more than was ever charged
	if err := r.Refund(ctx, Subject{Key: "k"}, big); err != nil {
		t.Fatal(err)
	}
	if got := counter(t, c, dayKey); got != 0 {
		t.Errorf("over-refund: got %d; want 0 (never below zero)", got)
	}
	old := d
	old.Day = 20000101 // a window whose counter is long gone
	if err := r.Refund(ctx, Subject{Key: "k"}, old); err != nil {
		t.Fatal(err)
	}
	if n, _ := c.Exists(ctx, prefix+"q:d:k:20000101").Result(); n != 0 {
		t.Errorf("refund to an ended window created its counter")
	}
	checkTTLs(t, c, prefix)
}

func TestScalePolicy(t *testing.T) {
	tests := []struct {
		name  string
		p     Policy
		share float64
		want  Policy
	}{
		{"a third", Policy{PerSecond: 30, Burst: 90, Daily: 900, Monthly: 9000}, 1.0 / 3,
			Policy{PerSecond: 10, Burst: 30, Daily: 300, Monthly: 3000}},
		{"at least 1", Policy{PerSecond: 1, Burst: 1, Daily: 2, Monthly: 2}, 0.1,
			Policy{PerSecond: 0.1, Burst: 1, Daily: 1, Monthly: 1}},
		{"burst 0 scales the defaulted burst", Policy{PerSecond: 10}, 0.5, Policy{PerSecond: 5, Burst: 5}},
		{"off stays off", Policy{}, 0.5, Policy{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := scalePolicy(tc.p, tc.share)
			if got.Burst != tc.want.Burst || got.Daily != tc.want.Daily || got.Monthly != tc.want.Monthly ||
				got.PerSecond < tc.want.PerSecond*0.999 || got.PerSecond > tc.want.PerSecond*1.001 {
				t.Errorf("got %+v; want %+v", got, tc.want)
			}
		})
	}
}

func TestNewRedisValidates(t *testing.T) {
	fb, err := NewLocal(DefaultConfig(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	defer c.Close()
	tests := []struct {
		name   string
		client redis.UniversalClient
		opts   RedisOptions
		fb     *Local
		want   string
	}{
		{"nil client", nil, RedisOptions{}, fb, "nil client"},
		{"nil fallback", c, RedisOptions{}, nil, "nil fallback"},
		{"share above 1", c, RedisOptions{LocalShare: 2}, fb, "local_share"},
		{"negative timeout", c, RedisOptions{Timeout: -1}, fb, "timeout"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := NewRedis(tc.client, tc.opts, tc.fb, nil, nil, nil)
			if err == nil {
				r.Close()
				t.Fatalf("got nil error; want one mentioning %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v; want it to mention %q", err, tc.want)
			}
		})
	}
}
