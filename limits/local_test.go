package limits

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"trendgate/api"
	"trendgate/internal/clock"
)

// t0 is a Wednesday afternoon, far from any window boundary.
var t0 = time.Date(2026, 11, 18, 15, 0, 0, 0, time.UTC)

func newLocal(t testing.TB, clk clock.Clock, mutate func(*Config)) *Local {
	t.Helper()
	cfg := DefaultConfig()
	if mutate != nil {
		mutate(&cfg)
	}
	l, err := NewLocal(cfg, clk, nil)
	if err != nil {
		t.Fatalf("NewLocal: %v", err)
	}
	return l
}

// admitN admits n requests and returns how many were refused, by reason.
func admitN(t *testing.T, lim Limiter, key string, p Policy, cost, n int) map[Reason]int {
	t.Helper()
	got := map[Reason]int{}
	for range n {
		d, err := lim.Admit(context.Background(), Subject{Key: key}, p, cost)
		if err != nil {
			t.Fatalf("Admit: %v", err)
		}
		got[d.Reason]++
		if d.Allowed != (d.Reason == "") {
			t.Fatalf("Allowed=%v with Reason=%q", d.Allowed, d.Reason)
		}
		if !d.Allowed && d.RetryAfter <= 0 {
			t.Fatalf("refused with RetryAfter %v; want > 0", d.RetryAfter)
		}
	}
	return got
}

func TestLocalBurst(t *testing.T) {
	costs := DefaultConfig().Costs
	tests := []struct {
		name     string
		p        Policy
		endpoint api.Endpoint
		requests int
		want429  int
	}{
		{"burst 10, 13 requests", Policy{PerSecond: 1, Burst: 10}, api.EndpointList, 13, 3},
		{"burst 10, exactly 10", Policy{PerSecond: 1, Burst: 10}, api.EndpointSeries, 10, 0},
		{"whatsup costs 5: 2 of 5 pass", Policy{PerSecond: 1, Burst: 10}, api.EndpointWhatsup, 5, 3},
		{"burst 0 means ceil(per_second)", Policy{PerSecond: 2.5}, api.EndpointList, 5, 2},
		{"no rate limit", Policy{}, api.EndpointWhatsup, 50, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := newLocal(t, clock.NewFake(t0), nil)
			got := admitN(t, l, "k1", tc.p, costs.For(tc.endpoint), tc.requests)
			if got[ReasonRate] != tc.want429 || got[""] != tc.requests-tc.want429 {
				t.Errorf("got %d rate_limited, %d allowed; want %d, %d", got[ReasonRate], got[""], tc.want429, tc.requests-tc.want429)
			}
		})
	}
}

func TestLocalRefill(t *testing.T) {
	clk := clock.NewFake(t0)
	l := newLocal(t, clk, nil)
	p := Policy{PerSecond: 2, Burst: 4}
	if got := admitN(t, l, "k", p, 1, 4); got[""] != 4 {
		t.Fatalf("got %d allowed from a full bucket; want 4", got[""])
	}
	d, _ := l.Admit(context.Background(), Subject{Key: "k"}, p, 1)
	if d.Allowed || d.Reason != ReasonRate {
		t.Fatalf("got %+v from an empty bucket; want rate_limited", d)
	}
	if d.RetryAfter != 500*time.Millisecond {
		t.Errorf("got RetryAfter %v; want 500ms (one token at 2/s)", d.RetryAfter)
	}
	clk.Advance(499 * time.Millisecond)
	if d, _ := l.Admit(context.Background(), Subject{Key: "k"}, p, 1); d.Allowed {
		t.Errorf("got allowed 499ms later; want refused")
	}
	clk.Advance(time.Millisecond)
	if d, _ := l.Admit(context.Background(), Subject{Key: "k"}, p, 1); !d.Allowed {
		t.Errorf("got %+v 500ms later; want allowed", d)
	}
	clk.Advance(time.Hour) // refills to the burst, not beyond
	if got := admitN(t, l, "k", p, 1, 6); got[""] != 4 {
		t.Errorf("got %d allowed after an hour; want 4 (the burst)", got[""])
	}
}

func TestLocalCostOverBurstNeverPasses(t *testing.T) {
	clk := clock.NewFake(t0)
	l := newLocal(t, clk, nil)
	p := Policy{PerSecond: 1, Burst: 3, Daily: 100}
	for range 3 {
		d, err := l.Admit(context.Background(), Subject{Key: "k"}, p, 5)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed || d.Reason != ReasonRate || d.RetryAfter != 3*time.Second {
			t.Errorf("got %v %q %v; want refused rate_limited after 3s", d.Allowed, d.Reason, d.RetryAfter)
		}
		clk.Advance(time.Hour)
	}
	if day, _ := l.usage("k", clk.Now()); day != 0 {
		t.Errorf("got %d daily units used by refused requests; want 0", day)
	}
}

func TestLocalKeysDoNotShareBuckets(t *testing.T) {
	l := newLocal(t, clock.NewFake(t0), nil)
	p := Policy{PerSecond: 1, Burst: 2, Daily: 2}
	for _, key := range []string{"a", "b", "c"} {
		got := admitN(t, l, key, p, 1, 3)
		if got[""] != 2 {
			t.Errorf("key %s: got %d allowed; want 2 (own bucket and quota)", key, got[""])
		}
	}
}

func TestLocalQuotaWindows(t *testing.T) {
	tests := []struct {
		name      string
		start     time.Time
		p         Policy
		reason    Reason
		retry     time.Duration
		advance   time.Duration // to just before the boundary, then across it
		stillOver bool
	}{
		{
			name: "daily rolls over at UTC midnight", start: time.Date(2026, 11, 18, 23, 59, 50, 0, time.UTC),
			p: Policy{Daily: 3}, reason: ReasonDaily, retry: 10 * time.Second, advance: 10 * time.Second,
		},
		{
			name: "monthly rolls over at month start", start: time.Date(2026, 2, 28, 23, 0, 0, 0, time.UTC),
			p: Policy{Monthly: 3}, reason: ReasonMonthly, retry: time.Hour, advance: time.Hour,
		},
		{
			name:  "monthly wins over daily and keeps refusing after midnight",
			start: time.Date(2026, 11, 18, 23, 0, 0, 0, time.UTC),
			p:     Policy{Daily: 3, Monthly: 3}, reason: ReasonMonthly, retry: 12*24*time.Hour + time.Hour,
			advance: time.Hour, stillOver: true,
		},
		{
			name: "non-UTC clock still uses UTC windows", start: time.Date(2026, 11, 18, 23, 59, 0, 0, time.UTC).In(time.FixedZone("X", 5*3600)),
			p: Policy{Daily: 3}, reason: ReasonDaily, retry: time.Minute, advance: time.Minute,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk := clock.NewFake(tc.start)
			l := newLocal(t, clk, nil)
			if got := admitN(t, l, "k", tc.p, 1, 3); got[""] != 3 {
				t.Fatalf("got %d allowed; want 3", got[""])
			}
			d, _ := l.Admit(context.Background(), Subject{Key: "k"}, tc.p, 1)
			if d.Allowed || d.Reason != tc.reason || d.RetryAfter != tc.retry {
				t.Fatalf("got %v %q %v; want refused %q after %v", d.Allowed, d.Reason, d.RetryAfter, tc.reason, tc.retry)
			}
			clk.Advance(tc.advance - time.Nanosecond)
			if d, _ := l.Admit(context.Background(), Subject{Key: "k"}, tc.p, 1); d.Allowed {
				t.Errorf("got allowed 1ns before the window ends; want refused")
			}
			clk.Advance(time.Nanosecond)
			d, _ = l.Admit(context.Background(), Subject{Key: "k"}, tc.p, 1)
			if d.Allowed == tc.stillOver {
				t.Errorf("got Allowed=%v after the boundary; want %v", d.Allowed, !tc.stillOver)
			}
		})
	}
}

func TestLocalRefund(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(t0)
	l := newLocal(t, clk, nil)
	p := Policy{PerSecond: 100, Daily: 10, Monthly: 12}

	d1, _ := l.Admit(ctx, Subject{Key: "k"}, p, 5)
	d2, _ := l.Admit(ctx, Subject{Key: "k"}, p, 5)
	refused, _ := l.Admit(ctx, Subject{Key: "k"}, p, 5)
	if !d1.Allowed || !d2.Allowed || refused.Allowed {
		t.Fatalf("got %v %v %v; want allowed, allowed, refused", d1.Allowed, d2.Allowed, refused.Allowed)
	}
	if err := l.Refund(ctx, Subject{Key: "k"}, refused); err != nil {
		t.Fatal(err)
	}
	if day, month := l.usage("k", clk.Now()); day != 10 || month != 10 {
		t.Fatalf("after refunding a 429: got day %d month %d; want 10 10 (a 429 was never charged)", day, month)
	}
	if err := l.Refund(ctx, Subject{Key: "k"}, d2); err != nil {
		t.Fatal(err)
	}
	if day, month := l.usage("k", clk.Now()); day != 5 || month != 5 {
		t.Fatalf("after refund: got day %d month %d; want 5 5", day, month)
	}
	if d, _ := l.Admit(ctx, Subject{Key: "k"}, p, 5); !d.Allowed {
		t.Errorf("got %q after refund; want allowed", d.Reason)
	}

	// A refund that arrives after its day ended does not touch the new day,
	// but still returns the units to the (unchanged) month.
	clk.Set(time.Date(2026, 11, 19, 0, 0, 1, 0, time.UTC))
	d3, _ := l.Admit(ctx, Subject{Key: "k"}, p, 2)
	if !d3.Allowed {
		t.Fatalf("got %q on a new day; want allowed (month 10+2 <= 12)", d3.Reason)
	}
	if err := l.Refund(ctx, Subject{Key: "k"}, d1); err != nil {
		t.Fatal(err)
	}
	if day, month := l.usage("k", clk.Now()); day != 2 || month != 7 {
		t.Errorf("got day %d month %d; want 2 7", day, month)
	}
}

func TestLocalMaxKeysAndSweepKeepQuotas(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(t0)
	l := newLocal(t, clk, func(c *Config) { c.MaxKeys = 2; c.IdleAfter = time.Minute })
	p := Policy{PerSecond: 1, Burst: 5, Daily: 3}
	for _, k := range []string{"a", "b", "c", "d"} {
		if got := admitN(t, l, k, p, 1, 4); got[ReasonDaily] != 1 {
			t.Fatalf("key %s: got %v; want exactly one daily refusal", k, got)
		}
	}
	accounts, buckets := l.counts()
	if accounts != 4 || buckets != 2 {
		t.Fatalf("got %d accounts, %d buckets; want 4 accounts (quotas kept), 2 buckets (MaxKeys)", accounts, buckets)
	}
	// "a" lost its bucket to LRU eviction; its quota must still be spent.
	if d, _ := l.Admit(ctx, Subject{Key: "a"}, p, 1); d.Reason != ReasonDaily {
		t.Errorf("evicted key a: got %q; want daily_quota_exceeded (quota must survive eviction)", d.Reason)
	}

	clk.Advance(2 * time.Minute)
	if n := l.Sweep(clk.Now()); n != 2 {
		t.Errorf("Sweep: got %d evicted; want 2 (the two remaining buckets)", n)
	}
	if keys, buckets := l.counts(); keys != 4 || buckets != 0 {
		t.Errorf("after Sweep: got %d keys, %d buckets; want 4, 0", keys, buckets)
	}
	if d, _ := l.Admit(ctx, Subject{Key: "c"}, p, 1); d.Reason != ReasonDaily {
		t.Errorf("swept key c: got %q; want daily_quota_exceeded", d.Reason)
	}

	clk.Set(time.Date(2026, 11, 19, 0, 5, 0, 0, time.UTC)) // next day, everyone idle
	if n := l.Sweep(clk.Now()); n != 5 {
		t.Errorf("Sweep on the next day: got %d; want 5 (c's new bucket and four accounts' counters)", n)
	}
	if keys, buckets := l.counts(); keys != 0 || buckets != 0 {
		t.Errorf("after the window ended: got %d keys, %d buckets; want 0, 0", keys, buckets)
	}
}

func TestLocalOpportunisticSweep(t *testing.T) {
	clk := clock.NewFake(t0)
	l := newLocal(t, clk, func(c *Config) { c.IdleAfter = time.Minute })
	for i := range 50 {
		admitN(t, l, "k"+strconv.Itoa(i), Policy{PerSecond: 1}, 1, 1)
	}
	clk.Advance(time.Minute)
	admitN(t, l, "other", Policy{PerSecond: 1}, 1, 1)
	if _, buckets := l.counts(); buckets != 1 {
		t.Errorf("got %d buckets; want 1 (idle ones swept by Admit)", buckets)
	}
}

func TestLocalPolicyChangeApplies(t *testing.T) {
	l := newLocal(t, clock.NewFake(t0), nil)
	admitN(t, l, "k", Policy{PerSecond: 1, Burst: 2}, 1, 2)
	if got := admitN(t, l, "k", Policy{PerSecond: 1, Burst: 5}, 1, 5); got[""] != 0 {
		t.Errorf("got %d allowed right after raising the burst; want 0 (tokens are not created by a config change)", got[""])
	}
}

func TestLocalArgs(t *testing.T) {
	l := newLocal(t, clock.NewFake(t0), nil)
	tests := []struct {
		name string
		key  string
		p    Policy
		cost int
	}{
		{"empty key", "", Policy{}, 1},
		{"zero cost", "k", Policy{}, 0},
		{"negative per_second", "k", Policy{PerSecond: -1}, 1},
		{"negative daily", "k", Policy{Daily: -1}, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := l.Admit(context.Background(), Subject{Key: tc.key}, tc.p, tc.cost); err == nil {
				t.Errorf("got nil error; want one")
			}
		})
	}
	if accounts, buckets := l.counts(); accounts != 0 || buckets != 0 {
		t.Errorf("got %d accounts, %d buckets with state after invalid calls; want 0, 0", accounts, buckets)
	}
}

func TestLocalMetrics(t *testing.T) {
	m := NewMetrics(nil)
	l, err := NewLocal(DefaultConfig(), clock.NewFake(t0), m)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	p := Policy{PerSecond: 1, Burst: 2, Daily: 100}
	d, _ := l.Admit(ctx, Subject{Key: "k"}, p, 1)
	l.Admit(ctx, Subject{Key: "k"}, p, 1)
	l.Admit(ctx, Subject{Key: "k"}, p, 1)
	l.Refund(ctx, Subject{Key: "k"}, d)
	for _, c := range []struct {
		name string
		got  float64
		want float64
	}{
		{"allowed", testutil.ToFloat64(m.Decisions.WithLabelValues(resultAllowed)), 2},
		{"rate_limited", testutil.ToFloat64(m.Decisions.WithLabelValues(resultRate)), 1},
		{"reserved", testutil.ToFloat64(m.QuotaReserved.WithLabelValues("k", "")), 2},
		{"refunded", testutil.ToFloat64(m.QuotaRefunded.WithLabelValues("k", "")), 1},
	} {
		if c.got != c.want {
			t.Errorf("%s: got %v; want %v", c.name, c.got, c.want)
		}
	}
}

func TestCostsFor(t *testing.T) {
	c := Costs{List: 2, Series: 3, Whatsup: 5, TSV: 7}
	for _, tc := range []struct {
		endpoint api.Endpoint
		want     int
	}{{api.EndpointList, 2}, {api.EndpointSeries, 3}, {api.EndpointWhatsup, 5}, {api.EndpointTSV, 7}, {0, 1}, {api.Endpoint(99), 1}} {
		if got := c.For(tc.endpoint); got != tc.want {
			t.Errorf("For(%v): got %d; want %d", tc.endpoint, got, tc.want)
		}
	}
	if got := (Costs{}).For(api.EndpointWhatsup); got != 1 {
		t.Errorf("zero Costs: got %d; want 1", got)
	}
}

func BenchmarkLocalAdmit(b *testing.B) {
	l := newLocal(b, clock.Real{}, nil)
	p := Policy{PerSecond: 1e9, Burst: 1 << 30, Daily: 1 << 60, Monthly: 1 << 60}
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = "key" + strconv.Itoa(i)
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := l.Admit(ctx, Subject{Key: keys[i&1023]}, p, 1); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkLocalAdmitParallel(b *testing.B) {
	l := newLocal(b, clock.Real{}, nil)
	p := Policy{PerSecond: 1e9, Burst: 1 << 30, Daily: 1 << 60, Monthly: 1 << 60}
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = "key" + strconv.Itoa(i)
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			if _, err := l.Admit(ctx, Subject{Key: keys[i&1023]}, p, 1); err != nil {
				b.Error(err)
				return
			}
			i++
		}
	})
}

// TestSweepBesideAdmissions: sweeps judging the keys a part at a time
// while other keys are admitted (go test -race) drop the idle buckets and
// the counters of ended windows, and keep the keys admitted meanwhile.
func TestSweepBesideAdmissions(t *testing.T) {
	clk := clock.NewFake(t0)
	l := newLocal(t, clk, func(c *Config) { c.IdleAfter = time.Minute })
	idle := 2*lockPart + 5
	for i := range idle {
		admitN(t, l, "idle-"+strconv.Itoa(i), Policy{PerSecond: 1, Daily: 10}, 1, 1)
	}
	clk.Advance(24 * time.Hour) // the idle ones' day has ended too
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 500 {
			admitN(t, l, "busy-"+strconv.Itoa(i), Policy{PerSecond: 1, Daily: 10}, 1, 1)
		}
	}()
	l.Sweep(clk.Now()) // the first busy admission may run one too: either drops the idle
	<-done
	quotas, buckets := l.counts()
	if buckets != 500 || quotas != 500 {
		t.Errorf("%d buckets and %d counter sets left; want the 500 busy keys'", buckets, quotas)
	}
}

// BenchmarkAdmitDuringSweep is admissions of one key made back to back
// while Sweep judges 100,000 keys and accounts, none idle (it looks at
// each and drops none): admit-max-ms is the longest an admission waited.
func BenchmarkAdmitDuringSweep(b *testing.B) {
	clk := clock.NewFake(t0)
	l := newLocal(b, clk, nil)
	ctx := context.Background()
	p := Policy{PerSecond: 10, Daily: 1000}
	for i := range 100_000 {
		if _, err := l.Admit(ctx, Subject{Key: "key-" + strconv.Itoa(i)}, p, 1); err != nil {
			b.Fatal(err)
		}
	}
	admitDuring(b, l, func() {
		if n := l.Sweep(clk.Now()); n != 0 {
			b.Fatalf("Sweep dropped %d; want 0", n)
		}
	})
}

// admitDuring runs walk once per b.Loop iteration while another goroutine
// admits one key with a rate limit back to back (the lock and nothing
// else), and reports the longest of those admissions as admit-max-ms.
func admitDuring(b *testing.B, l *Local, walk func()) {
	b.Helper()
	p := Policy{PerSecond: 1e9, Burst: 1 << 30}
	var longest time.Duration
	for b.Loop() {
		stop, probed := make(chan struct{}), make(chan time.Duration)
		go func() {
			var most time.Duration
			for {
				select {
				case <-stop:
					probed <- most
					return
				default:
				}
				start := time.Now()
				if _, err := l.Admit(context.Background(), Subject{Key: "probe"}, p, 1); err != nil {
					b.Error(err)
				}
				most = max(most, time.Since(start))
			}
		}()
		walk()
		close(stop)
		longest = max(longest, <-probed)
	}
	b.ReportMetric(float64(longest.Microseconds())/1000, "admit-max-ms")
}
