package gateway_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"trendgate/admin"
	"trendgate/gateway/gatewaytest"
)

// In cluster mode every instance adds what it served to the same Redis
// hashes: the history read through any instance equals the shared quota
// counters, each request counted once.
func TestUsageHistoryCluster(t *testing.T) {
	c := gatewaytest.NewCluster(t, gatewaytest.ClusterOptions{Instances: 2})
	paths := []string{"/api4/public/topics/list/v1", "/api4/public/topic/bitcoin/whatsup/v1", "/api4/public/topic/solana/whatsup/v1"}
	for i := range 6 {
		if r := c.Send(i%2, paths[i%len(paths)], c.Full); r.Status != http.StatusOK {
			t.Fatalf("request %d: %d", i, r.Status)
		}
	}
	for _, n := range c.Nodes {
		if err := n.Gateway.History().Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	day := c.RedisNow().Format(time.DateOnly)
	want := c.QuotaCounter("d", "team-full")
	if want == 0 {
		t.Fatal("nothing charged")
	}
	for i, n := range c.Nodes {
		resp, body := n.AdminDo(http.MethodGet, "/keys/team-full/usage?from="+day+"&to="+day, "")
		var h admin.UsageHistory
		if err := json.Unmarshal(body, &h); resp.StatusCode != 200 || err != nil || len(h.Series) != 1 {
			t.Fatalf("node %d: %d %s", i, resp.StatusCode, body)
		}
		if got := h.Series[0].Total; got.Units != want || got.Requests != 6 {
			t.Errorf("node %d: %d units in %d requests, want %d (the shared daily counter) in 6", i, got.Units, got.Requests, want)
		}
	}
}
