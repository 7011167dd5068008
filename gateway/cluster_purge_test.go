package gateway_test

import (
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"trendgate/config"
	"trendgate/gateway/gatewaytest"
	"trendgate/internal/clock"
	"trendgate/internal/testing/redistest"
)

// TestClusterPurgeReachesEveryInstance: a purge on instance 0, in each of
// its forms, reaches instance 1's local tier, so instance 1's next request
// for the purged whatsup reaches the upstream instead of answering from
// its own copy. It used to answer "Cache-Status: trendgate; hit" from that
// copy until its freshness ended (an hour for whatsup), though Redis's copy
// was gone.
func TestClusterPurgeReachesEveryInstance(t *testing.T) {
	const topic = "bitcoin"
	whatsup := fmt.Sprintf(whatsupFmt, topic)
	other := fmt.Sprintf(whatsupFmt, "ethereum")
	tests := []struct {
		name       string
		query      string
		purgeOther bool // whether the purge selects the other topic too
	}{
		{"all", "all=true", true},
		{"topic", "topic=" + topic, false},
		{"url", "url=" + whatsup, false},
		{"key", "key=" + url.QueryEscape("v2|whatsup|"+topic), false},
	}
	onEachRedis(t, func(t *testing.T, rc *redistest.Cluster) {
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				c := gatewaytest.NewCluster(t, gatewaytest.ClusterOptions{Instances: 2, Redis: rc})
				for _, target := range []string{whatsup, other} {
					// Instance 0 fetches; instance 1 copies the shared entry
					// into its local tier, then answers from it.
					for i, want := range []string{"fwd=miss", "hit", "hit"} {
						node := min(i, 1)
						if r := c.Send(node, target, c.Full); r.Status != http.StatusOK || !strings.Contains(r.Cache, want) {
							t.Fatalf("warm %s on node %d: %d %q; want 200 %q", target, node, r.Status, r.Cache, want)
						}
					}
				}
				resp, body := c.Nodes[0].AdminDo(http.MethodPost, "/purge?"+tc.query, "")
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("purge on node 0: %d %s", resp.StatusCode, body)
				}
				start := time.Now()
				reg := c.Nodes[1].Gateway.Registry()
				if !gatewaytest.WaitFor(func() bool {
					return gatewaytest.Metric(t, reg, "trendgate_cache_cluster_purges_total", "event", "received") >= 1
				}) {
					t.Fatal("node 1 never received the purge")
				}
				t.Logf("node 1 applied the purge %v after node 0 answered", time.Since(start))

				before := c.Up.Count()
				if r := c.Send(1, whatsup, c.Full); r.Status != http.StatusOK || strings.Contains(r.Cache, "; hit") {
					t.Errorf("node 1 after the purge: %d %q; want 200 from the upstream, not its purged copy", r.Status, r.Cache)
				}
				if got := c.Up.Count() - before; got != 1 {
					t.Errorf("upstream calls for the purged whatsup: %d; want 1", got)
				}
				before = c.Up.Count()
				r := c.Send(1, other, c.Full)
				if fetched := c.Up.Count() > before; r.Status != http.StatusOK || fetched != tc.purgeOther {
					t.Errorf("node 1, %s after the purge: %d %q, fetched %v; want 200, fetched %v", other, r.Status, r.Cache, fetched, tc.purgeOther)
				}
				if got := gatewaytest.Metric(t, reg, "trendgate_cache_cluster_purges_total", "event", "resync"); got != 0 {
					t.Errorf("node 1 resynced %v times; want 0 (no purge was missed)", got)
				}
			})
		}
	})
}

// TestClusterRestartSkipsSnapshotAfterPurge: an instance's cache snapshot
// records the purge generation it was saved under. Restarted after another
// instance purged while it was down, it must not load entries the purge
// removed; restarted with no purge in between, it loads them.
func TestClusterRestartSkipsSnapshotAfterPurge(t *testing.T) {
	tests := []struct {
		name       string
		purge      bool
		wantLoaded bool
	}{
		{"no purge while down", false, true},
		{"purge while down", true, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			db0 := redistest.Client(t, gatewaytest.SharedRedis)
			db1 := redis.NewClient(&redis.Options{Addr: gatewaytest.SharedRedis, DB: 1})
			t.Cleanup(func() { _ = db1.Close() })
			prefix := redistest.Prefix(t, db0, db1)
			clk := clock.NewFake(gatewaytest.Now)
			up, upSrv := gatewaytest.StartUpstream(t, clk, nil)
			path := filepath.Join(t.TempDir(), "cache.snap")
			clustered := func(persist bool) func(*config.Config) {
				return func(c *config.Config) {
					c.Redis.URL, c.Redis.Prefix, c.Redis.Timeout = "redis://"+gatewaytest.SharedRedis+"/0", prefix, time.Second
					if persist {
						c.Cache.PersistPath = path
					}
				}
			}
			whatsup := fmt.Sprintf(whatsupFmt, "bitcoin")
			client := &http.Client{Timeout: 20 * time.Second}
			t.Cleanup(client.CloseIdleConnections)
			get := func(s *gatewaytest.Served) string {
				t.Helper()
				resp, body, err := gatewaytest.GetWithKey(t, client, "http://"+s.Public+whatsup, s.Key)
				if err != nil || resp.StatusCode != http.StatusOK {
					t.Fatalf("%s: %v %v %s", whatsup, err, resp, body)
				}
				return resp.Header.Get("Cache-Status")
			}

			first := gatewaytest.StartGateway(t, upSrv.URL, clk, clustered(true))
			get(first)
			if err := first.Stop(30 * time.Second); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(first.Logs.String(), `"cache snapshot written"`) {
				t.Fatalf("no snapshot written at drain; logs:\n%s", first.Logs)
			}
			if tc.purge { // another instance, while this one is down
				other := gatewaytest.StartGateway(t, upSrv.URL, clk, clustered(false))
				req, _ := http.NewRequest(http.MethodPost, other.Admin+"/purge?topic=bitcoin", nil)
				resp, err := client.Do(req)
				if err != nil || resp.StatusCode != http.StatusOK {
					t.Fatalf("purge on the other instance: %v %v", err, resp)
				}
				resp.Body.Close()
			}
			before := up.Count()
			second := gatewaytest.StartGateway(t, upSrv.URL, clk, clustered(true))
			status := get(second)
			loaded := strings.Contains(second.Logs.String(), `"cache snapshot loaded"`)
			fetched := up.Count() > before
			if loaded != tc.wantLoaded || fetched == tc.wantLoaded {
				t.Errorf("after the restart: snapshot loaded %v, upstream fetched %v (Cache-Status %q); want loaded %v, fetched %v\nlogs:\n%s",
					loaded, fetched, status, tc.wantLoaded, !tc.wantLoaded, second.Logs)
			}
		})
	}
}
