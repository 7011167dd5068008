package gateway_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"trendgate/config"
	"trendgate/demo"
	"trendgate/gateway/gatewaytest"
	"trendgate/internal/testing/redistest"
	"trendgate/limits"
)

// onEachRedis runs f on the shared single Redis (rc nil) and on a private
// three-primary Redis Cluster started for the test.
func onEachRedis(t *testing.T, f func(t *testing.T, rc *redistest.Cluster)) {
	t.Run("redis", func(t *testing.T) { f(t, nil) })
	t.Run("redis cluster", func(t *testing.T) { f(t, redistest.StartCluster(t)) })
}

// Targets used by the cluster tests.
const (
	listTarget = "/api4/public/topics/list/v1"
	// whatsupOf costs 5 units by default; seriesOf 1.
	whatsupFmt = "/api4/public/topic/%s/whatsup/v1"
	seriesFmt  = "/api4/public/topic/%s/time-series/v1?bucket=day"
)

// plainTopics returns the first n topics that need no escaping in a path.
func plainTopics(all []string, n int) []string {
	var out []string
	for _, t := range all {
		if len(out) < n && strings.Trim(t, "abcdefghijklmnopqrstuvwxyz0123456789") == "" {
			out = append(out, t)
		}
	}
	return out
}

// setFullPolicy replaces the full plan's limits.
func setFullPolicy(p limits.Policy) func(*config.Config) {
	return func(c *config.Config) {
		pl := c.Plans["full"]
		pl.Policy = p
		c.Plans["full"] = pl
	}
}

// TestClusterBurstSharedAcrossInstances: a burst on one key spread
// round-robin over three instances admits exactly the plan's burst, not
// three bursts. The refill rate is 0.01/s, so the only possible slack is
// the tokens Redis TIME refills while the burst runs: floor(elapsed × 0.01
// / cost), which is 0 unless the burst takes longer than 100 s.
func TestClusterBurstSharedAcrossInstances(t *testing.T) {
	onEachRedis(t, func(t *testing.T, rc *redistest.Cluster) {
		const rate, burstSize = 0.01, 10
		tests := []struct {
			name       string
			target     string
			cost       int
			concurrent bool // all at once; otherwise one after another
		}{
			{"list cost 1 concurrent", listTarget, 1, true},
			{"list cost 1 sequential", listTarget, 1, false},
			{"whatsup cost 5 concurrent", fmt.Sprintf(whatsupFmt, "bitcoin"), 5, true},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				c := gatewaytest.NewCluster(t, gatewaytest.ClusterOptions{Redis: rc, Mutate: setFullPolicy(limits.Policy{PerSecond: rate, Burst: burstSize})})
				want := burstSize / tt.cost
				n := 3 * burstSize
				start := time.Now()
				var rs []gatewaytest.Result
				if tt.concurrent {
					rs = c.Burst(n, tt.target, c.Full)
				} else {
					for j := range n {
						rs = append(rs, c.Send(j%3, tt.target, c.Full))
					}
				}
				slack := int(time.Since(start).Seconds() * rate / float64(tt.cost))

				got := gatewaytest.Tally(rs)
				if got["200"] < want || got["200"] > want+slack {
					t.Errorf("admitted: got %d; want %d (slack %d) — tally %v", got["200"], want, slack, got)
				}
				if got["429 rate_limited"] != n-got["200"] {
					t.Errorf("refused with rate_limited: got %d; want %d — tally %v", got["429 rate_limited"], n-got["200"], got)
				}
				for j, r := range rs {
					if r.Status == 429 && r.Retry == "" {
						t.Errorf("request %d (node %d): 429 without Retry-After", j, r.Node)
					}
					// One after another, the first `want` requests (spread over
					// every node) pass and every later one is refused.
					if !tt.concurrent && slack == 0 && (r.Status == 200) != (j < want) {
						t.Errorf("request %d (node %d): got %d %q; want %s", j, r.Node, r.Status, r.Code,
							map[bool]string{true: "200", false: "429 rate_limited"}[j < want])
					}
				}
			})
		}
	})
}

// TestClusterDailyQuotaShared: with daily quota N, the cluster delivers
// exactly N units in total, then every instance answers 429
// daily_quota_exceeded; the Redis counter holds exactly the units charged.
func TestClusterDailyQuotaShared(t *testing.T) {
	onEachRedis(t, func(t *testing.T, rc *redistest.Cluster) {
		tests := []struct {
			name      string
			target    string
			daily     int64
			cost      int
			wantCalls int // delivered 200s
		}{
			{"list cost 1", listTarget, 7, 1, 7},
			{"whatsup cost 5", fmt.Sprintf(whatsupFmt, "ethereum"), 12, 5, 2},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				c := gatewaytest.NewCluster(t, gatewaytest.ClusterOptions{Redis: rc, Mutate: setFullPolicy(limits.Policy{Daily: tt.daily})})
				rs := c.Burst(3*int(tt.daily), tt.target, c.Full)
				got := gatewaytest.Tally(rs)
				if got["200"] != tt.wantCalls {
					t.Errorf("delivered: got %d; want %d — tally %v", got["200"], tt.wantCalls, got)
				}
				if got["429 daily_quota_exceeded"] != len(rs)-tt.wantCalls {
					t.Errorf("daily_quota_exceeded: got %d; want %d — tally %v", got["429 daily_quota_exceeded"], len(rs)-tt.wantCalls, got)
				}
				for i := range c.Nodes {
					if r := c.Send(i, tt.target, c.Full); r.Status != 429 || r.Code != "daily_quota_exceeded" {
						t.Errorf("node %d after the quota: got %d %q; want 429 daily_quota_exceeded", i, r.Status, r.Code)
					}
				}
				wantUnits := int64(tt.wantCalls * tt.cost)
				if n := c.QuotaCounter("d", "team-full"); n != wantUnits {
					t.Errorf("redis daily counter: got %d; want %d", n, wantUnits)
				}
				var charged float64
				for _, h := range c.Nodes {
					charged += gatewaytest.Metric(t, h.Gateway.Registry(), "trendgate_quota_charged_units_total", "account", "team-full")
				}
				if int64(charged) != wantUnits {
					t.Errorf("charged units summed over the instances' metrics: got %v; want %d", charged, wantUnits)
				}
				kc := c.CheckTTLs(true)
				t.Logf("keys with a TTL: %d counters, %d cache", kc.Counters, kc.Cache)
			})
		}
	})
}

// TestClusterColdHerdOneUpstreamCall: 300 concurrent requests for a cold
// key spread over three instances make exactly one upstream call: each
// instance coalesces its own callers, and the Redis lease makes the other
// instances wait for the shared tier instead of fetching. It holds when the
// gateway clock is far from Redis's (the shared entry's PX is computed on
// the gateway clock, like its freshness).
func TestClusterColdHerdOneUpstreamCall(t *testing.T) {
	onEachRedis(t, func(t *testing.T, rc *redistest.Cluster) {
		tests := []struct {
			name  string
			start time.Time
		}{
			{"clock at real time", time.Time{}},
			{"clock days behind redis", gatewaytest.Now},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				c := gatewaytest.NewCluster(t, gatewaytest.ClusterOptions{Redis: rc,
					Mutate: setFullPolicy(limits.Policy{PerSecond: 100_000, Burst: 100_000}),
					Demo:   func(o *demo.Options) { o.Latency = 150 * time.Millisecond },
					Start:  tt.start,
				})
				rs := c.Burst(300, fmt.Sprintf(seriesFmt, "solana"), c.Full)
				if got := gatewaytest.Tally(rs); got["200"] != len(rs) {
					t.Fatalf("statuses: got %v; want all %d 200", got, len(rs))
				}
				if got := c.Up.Count(); got != 1 {
					t.Errorf("upstream calls: got %d; want 1", got)
					for i, h := range c.Nodes {
						t.Logf("node %d: shared errors %v, lease timeouts %v; logs:\n%s", i,
							gatewaytest.Metric(t, h.Gateway.Registry(), "trendgate_cache_shared_reads_total", "result", "error"),
							gatewaytest.Metric(t, h.Gateway.Registry(), "trendgate_cache_lease_waits_total", "result", "timeout"),
							h.Logs.String())
					}
				}
				var leaseShared float64
				for _, h := range c.Nodes {
					leaseShared += gatewaytest.Metric(t, h.Gateway.Registry(), "trendgate_cache_lease_waits_total", "result", "shared")
				}
				t.Logf("fills that waited on another instance's lease and read the shared tier: %v", leaseShared)
				c.CheckTTLs(false)
			})
		}
	})
}

// TestClusterUpstreamBudget: with an account budget of 5 calls a minute,
// cold misses over three instances make at most 5 upstream calls per
// Redis minute window; the rest get 503 upstream_budget_exhausted, and
// stale entries are served (from the shared tier, on other instances)
// instead of calling the upstream again.
func TestClusterUpstreamBudget(t *testing.T) {
	onEachRedis(t, func(t *testing.T, rc *redistest.Cluster) {
		const perMinute = 5
		c := gatewaytest.NewCluster(t, gatewaytest.ClusterOptions{Redis: rc, Mutate: func(cfg *config.Config) {
			setFullPolicy(limits.Policy{PerSecond: 100_000, Burst: 100_000})(cfg)
			cfg.Upstream.Budget.PerMinute = perMinute
			// One key alone: no part of the minute is held back for newcomers
			// (the fair share has its own tests), so the budget itself runs out.
			cfg.Upstream.Budget.NewcomerReserve = 0
		}})
		topics := plainTopics(c.Up.Topics(), 12)

		// Phase 1: 12 cold keys, one at a time, round-robin.
		ok := make(map[string]int) // topic → node that fetched it
		var refused int
		for i, topic := range topics {
			r := c.Send(i%3, fmt.Sprintf(whatsupFmt, topic), c.Full)
			switch {
			case r.Err != nil:
				t.Fatal(r.Err)
			case r.Status == 200:
				ok[topic] = r.Node
			case r.Status == 503 && r.Code == "upstream_budget_exhausted" && r.Retry != "":
				refused++
			default:
				t.Fatalf("%s on node %d: got %d %q (Retry-After %q); want 200 or 503 upstream_budget_exhausted with Retry-After", topic, i%3, r.Status, r.Code, r.Retry)
			}
		}
		calls := c.Up.Count()
		if len(ok) != calls || refused != len(topics)-calls {
			t.Errorf("phase 1: %d delivered, %d refused, %d upstream calls; want delivered = calls and refused = the rest", len(ok), refused, calls)
		}
		if calls < perMinute {
			t.Errorf("phase 1 upstream calls: got %d; want >= %d (the budget was not used up)", calls, perMinute)
		}

		// Phase 2: past freshness and the stale-while-revalidate window but
		// within max_stale, every fetched key is asked on another instance: the
		// refetch finds the budget spent and the stale entry is served.
		cfg := c.Nodes[0].Config.Cache
		c.Clock.Advance(cfg.TTL.Whatsup + cfg.StaleWhileRevalidate + time.Minute)
		var stale int
		for topic, node := range ok {
			r := c.Send((node+1)%3, fmt.Sprintf(whatsupFmt, topic), c.Full)
			if r.Err != nil || r.Status != 200 {
				t.Fatalf("phase 2 %s: got %d %q (%v); want 200", topic, r.Status, r.Code, r.Err)
			}
			if strings.Contains(r.Cache, "stale") {
				stale++
			}
		}
		phase2Calls := c.Up.Count() - calls
		if stale+phase2Calls != len(ok) {
			t.Errorf("phase 2: %d stale, %d refetched; want their sum %d", stale, phase2Calls, len(ok))
		}

		for minute, n := range c.Calls.PerMinute() {
			if n > perMinute {
				t.Errorf("upstream calls in minute %s: got %d; want <= %d", time.Unix(minute*60, 0).UTC().Format(time.TimeOnly), n, perMinute)
			}
		}
		t.Logf("phase 1: %d calls, %d refused; phase 2: %d stale, %d refetched; calls by minute %v",
			calls, refused, stale, phase2Calls, c.Calls.PerMinute())
	})
}

// TestClusterRedisOutage: Redis is killed mid-run and restarted on the
// same port. The gateways keep serving (local cache and upstream, limits
// at their local share, visible in the limiter metrics); after the restart
// the quota journals are replayed exactly once, so the (new, empty)
// Redis's counters equal the units delivered since the kill.
func TestClusterRedisOutage(t *testing.T) {
	// Burst 30 shared; 10 per instance while Redis is down (share 1/3).
	// The refill (0.01/s shared, 0.0033/s per instance) adds no whole token
	// within the test.
	const burstSize, share = 30, 1.0 / 3
	srv := redistest.StartServer(t, false)
	c := gatewaytest.NewCluster(t, gatewaytest.ClusterOptions{Addr: srv.Addr(), Mutate: func(cfg *config.Config) {
		setFullPolicy(limits.Policy{PerSecond: 0.01, Burst: burstSize, Daily: 1000, Monthly: 10_000})(cfg)
		cfg.Redis.LocalShare = share
	}})
	topics := plainTopics(c.Up.Topics(), 5)
	series := func(i int) string { return fmt.Sprintf(seriesFmt, topics[i]) }

	// Phase 1: Redis up. Six requests, two topics, each instance.
	for i := range 6 {
		if r := c.Send(i%3, series(i%2), c.Full); r.Status != 200 {
			t.Fatalf("phase 1 request %d: got %d %q (%v); want 200", i, r.Status, r.Code, r.Err)
		}
	}
	if n := c.QuotaCounter("d", "team-full"); n != 6 {
		t.Fatalf("daily counter before the outage: got %d; want 6", n)
	}
	callsBefore := c.Up.Count()

	// Phase 2: Redis killed. Each instance gets 15 requests over the two
	// cached topics and one new topic per instance.
	srv.Stop()
	var delivered int
	perNode := make([]map[string]int, len(c.Nodes))
	for i := range c.Nodes {
		perNode[i] = map[string]int{}
		for j := range 15 {
			topic := []int{0, 1, 2 + i}[j%3]
			r := c.Send(i, series(topic), c.Full)
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			key := fmt.Sprint(r.Status)
			if r.Code != "" {
				key += " " + r.Code
			}
			perNode[i][key]++
			if r.Status == 200 {
				delivered++
			}
		}
	}
	wantPerNode := int(burstSize * share)
	for i, got := range perNode {
		if got["200"] != wantPerNode || got["429 rate_limited"] != 15-wantPerNode {
			t.Errorf("node %d during the outage: got %v; want %d 200 and %d 429 rate_limited (burst %d × share %.2f)",
				i, got, wantPerNode, 15-wantPerNode, burstSize, share)
		}
		reg := c.Nodes[i].Gateway.Registry()
		if v := gatewaytest.Metric(t, reg, "trendgate_limits_redis_fallbacks_total"); v < 15 {
			t.Errorf("node %d: limits redis fallbacks: got %v; want >= 15", i, v)
		}
		if v := gatewaytest.Metric(t, reg, "trendgate_limits_redis_available"); v != 0 {
			t.Errorf("node %d: limits redis_available: got %v; want 0", i, v)
		}
		// The other Redis users fell back too: the budget to its local
		// share, the shared cache tier to misses (each instance fetched its
		// new topic itself).
		if v := gatewaytest.Metric(t, reg, "trendgate_upstream_budget_fallbacks_total"); v < 1 {
			t.Errorf("node %d: upstream budget fallbacks: got %v; want >= 1", i, v)
		}
		if v := gatewaytest.Metric(t, reg, "trendgate_cache_shared_reads_total", "result", "error"); v < 1 {
			t.Errorf("node %d: shared cache read errors: got %v; want >= 1", i, v)
		}
		// One daily and one monthly entry; the background replay may have
		// sealed them and started new ones (4), never more.
		if v := gatewaytest.Metric(t, reg, "trendgate_limits_journal_entries"); v != 2 && v != 4 {
			t.Errorf("node %d: journal entries: got %v; want 2 or 4", i, v)
		}
	}
	// Each instance fetched its own new topic (its local budget at share)
	// and the topics its local tier did not hold.
	if calls := c.Up.Count() - callsBefore; calls < 3 {
		t.Errorf("upstream calls during the outage: got %d; want >= 3 (one new topic per instance)", calls)
	}

	// Phase 3: restart on the same port (empty: no persistence). Past the
	// limiter's breaker back-off (on the gateway clock) one request per
	// instance probes Redis, which wakes the journal replay.
	srv.Start()
	c.Clock.Advance(6 * time.Second)
	for i := range c.Nodes {
		if r := c.Send(i, series(0), c.Full); r.Status != 200 {
			t.Fatalf("node %d after the restart: got %d %q (%v); want 200", i, r.Status, r.Code, r.Err)
		}
		delivered++
	}
	want := int64(delivered) // units delivered since the kill, cost 1 each
	replayed := gatewaytest.WaitFor(func() bool {
		for _, h := range c.Nodes {
			if gatewaytest.Metric(t, h.Gateway.Registry(), "trendgate_limits_journal_entries") != 0 {
				return false
			}
		}
		return true
	})
	if !replayed {
		t.Fatalf("the quota journals were not replayed within %s", gatewaytest.RedisWait)
	}
	if got := c.QuotaCounter("d", "team-full"); got != want {
		t.Errorf("daily counter after the replay: got %d; want %d (units delivered since the kill)", got, want)
	}
	if got := c.QuotaCounter("m", "team-full"); got != want {
		t.Errorf("monthly counter after the replay: got %d; want %d", got, want)
	}
	for i, h := range c.Nodes {
		if v := gatewaytest.Metric(t, h.Gateway.Registry(), "trendgate_limits_redis_available"); v != 1 {
			t.Errorf("node %d: limits redis_available after the restart: got %v; want 1", i, v)
		}
	}
	// A second reconcile must not double anything: run more traffic and
	// recount.
	for i := range c.Nodes {
		if r := c.Send(i, series(1), c.Full); r.Status != 200 {
			t.Fatalf("node %d: got %d %q; want 200", i, r.Status, r.Code)
		}
	}
	if got := c.QuotaCounter("d", "team-full"); got != want+3 {
		t.Errorf("daily counter after 3 more requests: got %d; want %d", got, want+3)
	}
	c.CheckTTLs(false)
}

// TestClusterSlowRedisChargesOnce: an Admit whose script runs in Redis but
// whose reply arrives after redis.timeout is admitted by the local
// fallback and journaled; the journal settles that same admission (by its
// admission id) at the units delivered, so the daily counter ends at the
// units delivered. It broke before admission ids: the replay charged the
// request a second time (counter 3 for 2 delivered).
func TestClusterSlowRedisChargesOnce(t *testing.T) {
	gatewaytest.RequireRedis(t, gatewaytest.SharedRedis)
	link := gatewaytest.NewSlowLink(t, gatewaytest.SharedRedis, 300*time.Millisecond)
	c := gatewaytest.NewCluster(t, gatewaytest.ClusterOptions{Instances: 1, Addr: link.Addr(), Mutate: func(cfg *config.Config) {
		setFullPolicy(limits.Policy{Daily: 100})(cfg)
		cfg.Redis.Timeout = 100 * time.Millisecond
	}})
	// Warm: the list is cached locally and one unit is charged in Redis.
	if r := c.Send(0, listTarget, c.Full); r.Status != 200 {
		t.Fatalf("warm request: got %d %q (%v); want 200", r.Status, r.Code, r.Err)
	}
	// Slow: the admission script runs in Redis, its reply is late.
	link.Slow.Store(true)
	r := c.Send(0, listTarget, c.Full)
	link.Slow.Store(false)
	if r.Status != 200 {
		t.Fatalf("slow request: got %d %q (%v); want 200", r.Status, r.Code, r.Err)
	}
	reg := c.Nodes[0].Gateway.Registry()
	if v := gatewaytest.Metric(t, reg, "trendgate_limits_redis_fallbacks_total"); v != 1 {
		t.Fatalf("limits fallbacks: got %v; want 1 (the slow admission)", v)
	}
	if !gatewaytest.WaitFor(func() bool { return gatewaytest.Metric(t, reg, "trendgate_limits_journal_entries") == 0 }) {
		t.Fatalf("the quota journal was not replayed within %s", gatewaytest.RedisWait)
	}
	if got := c.QuotaCounter("d", "team-full"); got != 2 {
		t.Errorf("daily counter: got %d; want 2 (units delivered)", got)
	}
}
