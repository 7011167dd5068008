package gateway_test

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"trendgate/config"
	"trendgate/demo"
	"trendgate/gateway"
	"trendgate/gateway/gatewaytest"
	"trendgate/internal/clock"
	"trendgate/internal/testing/redistest"
	"trendgate/limits"
)

// BenchmarkClusterHit measures what Redis adds to a cache hit: one hit
// through the whole handler chain (in process, no HTTP client) on a
// gateway without Redis, on one private Redis, and on a private 3-primary
// Redis Cluster, with a plan that has a rate limit and daily and monthly
// quotas (the full admission script runs). It reports the p50 and p99 of
// the hits.
func BenchmarkClusterHit(b *testing.B) {
	for _, kind := range []string{"local", "redis", "redis-cluster"} {
		b.Run(kind, func(b *testing.B) {
			hit, _ := hitGateway(b, kind, false)
			lat := make([]time.Duration, 0, b.N)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				start := time.Now()
				hit()
				lat = append(lat, time.Since(start))
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
		})
	}
}

// TestClusterHitOneRoundTrip: a cache hit costs exactly one Redis round
// trip (the admission script), on one Redis and on a Redis Cluster.
func TestClusterHitOneRoundTrip(t *testing.T) {
	for _, kind := range []string{"redis", "redis-cluster"} {
		t.Run(kind, func(t *testing.T) {
			hit, trips := hitGateway(t, kind, true)
			before := trips()
			const n = 50
			for range n {
				hit()
			}
			if got := trips() - before; got != n {
				t.Errorf("Redis round trips for %d hits: got %d; want %d", n, got, n)
			}
		})
	}
}

// BenchmarkClusterHitRoundTrips counts the Redis round trips of one cache
// hit: the gateway reaches Redis (every cluster node) through a relay that
// counts the writes it forwards from the gateway, one per command sent or
// pipeline flushed. The relay adds a hop, so latency is BenchmarkClusterHit's.
func BenchmarkClusterHitRoundTrips(b *testing.B) {
	for _, kind := range []string{"redis", "redis-cluster"} {
		b.Run(kind, func(b *testing.B) {
			hit, trips := hitGateway(b, kind, true)
			before := trips()
			b.ResetTimer()
			for range b.N {
				hit()
			}
			b.StopTimer()
			b.ReportMetric(float64(trips()-before)/float64(b.N), "roundtrips/op")
		})
	}
}

// hitGateway builds a gateway of kind ("local", "redis", "redis-cluster";
// with relay, Redis is reached through counting relays), fills the cache
// with one miss and returns a func serving one hit (failing the benchmark
// on anything else) and one returning the relays' forwarded writes.
func hitGateway(b testing.TB, kind string, relay bool) (hit func(), trips func() int64) {
	b.Helper()
	var relays []*chaosRelay
	via := func(target string) string {
		if !relay {
			return target
		}
		r := newChaosRelay(b, target)
		relays = append(relays, r)
		return r.addr()
	}
	cfgRedis := func(*config.Config) {}
	switch kind {
	case "redis":
		srv := redistest.StartServer(b, false)
		addr := via(srv.Addr())
		cfgRedis = func(c *config.Config) { c.Redis.URL = "redis://" + addr + "/0" }
	case "redis-cluster":
		o := redistest.ClusterOptions{}
		if relay {
			o.Relay = via
		}
		rc := redistest.StartClusterWith(b, o)
		cfgRedis = func(c *config.Config) { c.Redis.URL = rc.URL() }
	}
	clk := clock.NewFake(time.Now().UTC()) // Redis TIME decides the quota windows
	up, err := demo.New(demo.Options{Clock: clk, APIKey: gatewaytest.UpstreamKey})
	if err != nil {
		b.Fatal(err)
	}
	upSrv := httptest.NewServer(up)
	b.Cleanup(func() { up.Close(); upSrv.Close() })
	full := gatewaytest.NewKey(b)
	cfg := gatewaytest.BaseConfig(upSrv.URL, full, "")
	noAccess := false
	cfg.Log.Access = &noAccess
	pl := cfg.Plans["full"]
	pl.Policy = limits.Policy{PerSecond: 1e9, Burst: 1e9, Daily: 1e12, Monthly: 1e13}
	cfg.Plans["full"] = pl
	cfg.Redis.Prefix = "tg:bench:"
	cfgRedis(cfg)
	gw, err := gateway.New(cfg, gateway.Options{Clock: clk, Logger: zap.NewNop()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = gw.Close() })

	req := httptest.NewRequest(http.MethodGet, listTarget, nil)
	req.Header.Set("Authorization", "Bearer "+full)
	serve := func() *gatewaytest.DiscardWriter {
		w := &gatewaytest.DiscardWriter{Hdr: http.Header{}}
		gw.ServeHTTP(w, req)
		return w
	}
	if w := serve(); w.Status != http.StatusOK { // the miss that fills the cache
		b.Fatalf("warm-up: got %d; want 200", w.Status)
	}
	hit = func() {
		w := serve()
		if w.Status != http.StatusOK || !strings.HasPrefix(w.Hdr.Get("Cache-Status"), "trendgate; hit") {
			b.Fatalf("got %d %q; want 200 and a hit", w.Status, w.Hdr.Get("Cache-Status"))
		}
	}
	hit() // the first hit, outside any measurement

	trips = func() int64 {
		var n int64
		for _, r := range relays {
			n += r.forwarded.Load()
		}
		return n
	}
	return hit, trips
}
