package gateway_test

import (
	"testing"
	"time"

	"trendgate/config"
	"trendgate/gateway/gatewaytest"
	"trendgate/limits"
)

// TestClusterRoute: a configured route is coalesced across instances and
// shared through the Redis cache tier like a built-in endpoint (one
// upstream call for a herd on three instances, hits everywhere after), and
// its cost is charged to the quota shared in Redis.
func TestClusterRoute(t *testing.T) {
	c := gatewaytest.NewCluster(t, gatewaytest.ClusterOptions{
		Instances: 3,
		Mutate: func(cfg *config.Config) {
			gatewaytest.WithRoutes(cfg)
			setFullPolicy(limits.Policy{PerSecond: 100_000, Burst: 100_000, Daily: 1000})(cfg)
		},
	})
	const target = "/api4/public/topic/%23ai/posts/v1" // topic_posts: cost 2
	rs := c.Burst(30, target, c.Full)
	if got := gatewaytest.Tally(rs); got["200"] != len(rs) {
		t.Fatalf("statuses: %v; want all %d 200", got, len(rs))
	}
	if got := c.Up.Count(); got != 1 {
		t.Errorf("upstream calls: %d; want 1 for the herd on %d instances", got, len(c.Nodes))
	}
	c.Clock.Advance(time.Second)
	for i := range c.Nodes {
		if r := c.Send(i, target, c.Full); r.Status != 200 || r.Cache != "trendgate; hit" {
			t.Errorf("node %d after the herd: %d %q; want a hit", i, r.Status, r.Cache)
		}
	}
	if got := c.QuotaCounter("d", "team-full"); got != 2*int64(len(rs)+len(c.Nodes)) {
		t.Errorf("daily quota used: %d; want %d (cost 2 per request)", got, 2*(len(rs)+len(c.Nodes)))
	}
}
