package gateway_test

import (
	"context"
	"testing"

	"trendgate/gateway/gatewaytest"
	"trendgate/limits"
)

// TestResetQuotaReachesTheLimiter: Gateway.ResetQuota clears the counter
// of the limiter that serves requests: this instance's, or in cluster mode
// the shared one, which another instance then reports at zero.
func TestResetQuotaReachesTheLimiter(t *testing.T) {
	const series = "/api4/public/topic/bitcoin/time-series/v1" // 1 unit each
	ctx := context.Background()
	t.Run("single", func(t *testing.T) {
		h := gatewaytest.New(t, nil)
		for range 3 {
			if resp, body := h.Get(series, h.Full); resp.StatusCode != 200 {
				t.Fatalf("series: %d %s", resp.StatusCode, body)
			}
		}
		if cleared, err := h.Gateway.ResetQuota(ctx, "team-full", limits.QuotaDay); err != nil || cleared != 3 {
			t.Fatalf("ResetQuota = %d, %v; want 3, nil", cleared, err)
		}
		if _, ku, body := h.KeyUsage("team-full"); ku.Daily.Used != 0 || ku.Monthly.Used != 3 {
			t.Errorf("after the reset: daily %d, monthly %d used; want 0, 3 (%s)", ku.Daily.Used, ku.Monthly.Used, body)
		}
	})
	t.Run("cluster", func(t *testing.T) {
		c := gatewaytest.NewCluster(t, gatewaytest.ClusterOptions{Instances: 2})
		for i := range 3 {
			if r := c.Send(i%2, series, c.Full); r.Err != nil || r.Status != 200 {
				t.Fatalf("series on node %d: %d %v", r.Node, r.Status, r.Err)
			}
		}
		if cleared, err := c.Nodes[1].Gateway.ResetQuota(ctx, "team-full", limits.QuotaDay); err != nil || cleared != 3 {
			t.Fatalf("ResetQuota on node 1 = %d, %v; want 3, nil", cleared, err)
		}
		if n := c.QuotaCounter("d", "team-full"); n != 0 {
			t.Errorf("shared daily counter after the reset: %d; want 0", n)
		}
		_, ku, body := c.Nodes[0].KeyUsage("team-full")
		if ku.Daily.Used != 0 || ku.Monthly.Used != 3 || ku.Source != limits.SourceRedis {
			t.Errorf("node 0 after the reset: daily %d, monthly %d used from %q; want 0, 3 from redis (%s)", ku.Daily.Used, ku.Monthly.Used, ku.Source, body)
		}
	})
}
