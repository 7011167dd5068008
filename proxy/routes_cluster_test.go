package proxy_test

import (
	"testing"
	"time"

	"trendgate/config"
	"trendgate/limits"
)

// TestClusterRoute: a configured route is coalesced across instances and
// shared through the Redis cache tier like a built-in endpoint (one
// upstream call for a herd on three instances, hits everywhere after), and
// its cost is charged to the quota shared in Redis.
func TestClusterRoute(t *testing.T) {
	c := newCluster(t, clusterOptions{
		instances: 3,
		mutate: func(cfg *config.Config) {
			withRoutes(cfg)
			setFullPolicy(limits.Policy{PerSecond: 100_000, Burst: 100_000, Daily: 1000})(cfg)
		},
	})
	const target = "/api4/public/topic/%23ai/posts/v1" // topic_posts: cost 2
	rs := c.burst(30, target, c.full)
	if got := tally(rs); got["200"] != len(rs) {
		t.Fatalf("statuses: %v; want all %d 200", got, len(rs))
	}
	if got := c.up.Count(); got != 1 {
		t.Errorf("upstream calls: %d; want 1 for the herd on %d instances", got, len(c.nodes))
	}
	c.clk.Advance(time.Second)
	for i := range c.nodes {
		if r := c.send(i, target, c.full); r.status != 200 || r.cache != "trendgate; hit" {
			t.Errorf("node %d after the herd: %d %q; want a hit", i, r.status, r.cache)
		}
	}
	if got := c.quotaCounter("d", "team-full"); got != 2*int64(len(rs)+len(c.nodes)) {
		t.Errorf("daily quota used: %d; want %d (cost 2 per request)", got, 2*(len(rs)+len(c.nodes)))
	}
}
