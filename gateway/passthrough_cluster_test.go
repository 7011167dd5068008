package gateway_test

import (
	"testing"

	"trendgate/config"
	"trendgate/gateway/gatewaytest"
	"trendgate/internal/testing/redistest"
)

// TestClusterPassThroughRoute: in cluster mode a route with cache: false
// sends every call upstream from whichever instance takes it: two calls on
// two instances make two upstream requests, both answered, neither a hit,
// both charged to the shared daily counter, and no entry is written to
// the Redis cache tier (issue 41: such a route was cached).
func TestClusterPassThroughRoute(t *testing.T) {
	onEachRedis(t, func(t *testing.T, rc *redistest.Cluster) {
		c := gatewaytest.NewCluster(t, gatewaytest.ClusterOptions{Redis: rc, Instances: 2, Mutate: func(cfg *config.Config) {
			gatewaytest.WithRoutes(cfg)
			no := false
			for i := range cfg.Routes {
				if cfg.Routes[i].Name == "creators_list" {
					cfg.Routes[i].Cache, cfg.Routes[i].Fresh, cfg.Routes[i].Stale = &no, 0, 0
				}
			}
			p := cfg.Plans[config.PlanFull]
			p.Daily = 100
			cfg.Plans[config.PlanFull] = p
		}})
		const path = "/api4/public/creators/list/v1"
		for i := range c.Nodes {
			r := c.Send(i, path, c.Full)
			if r.Err != nil || r.Status != 200 {
				t.Fatalf("node %d: status %d, %v; want 200", i, r.Status, r.Err)
			}
			if r.Cache != "trendgate; fwd=bypass" {
				t.Errorf("node %d: Cache-Status %q; want trendgate; fwd=bypass", i, r.Cache)
			}
		}
		if got := c.Up.Count(); got != 2 {
			t.Errorf("upstream calls: got %d; want 2", got)
		}
		if n := c.QuotaCounter("d", "team-full"); n != 2 {
			t.Errorf("redis daily counter: got %d; want 2 (one unit a call)", n)
		}
		if kc := c.CheckTTLs(false); kc.Cache != 0 {
			t.Errorf("keys in the Redis cache tier: %d; want none", kc.Cache)
		}
	})
}
