package gateway_test

import (
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	"trendgate/config"
	"trendgate/internal/breaker"

	"trendgate/gateway/gatewaytest"
	"trendgate/internal/testing/redistest"
)

// TestClusterRedisHang hangs a private Redis (SIGSTOP: connections are
// accepted, nothing is answered) under one cluster-mode gateway. Every
// request must still be answered; once a Redis client's breaker has
// opened, no use of that client waits on Redis again; after SIGCONT one
// probe closes it. The latencies of cache hits and cold misses are
// measured in each phase and logged (figures, not assertions: see the
// docs/cluster.md).
func TestClusterRedisHang(t *testing.T) {
	srv := redistest.StartServer(t, false)
	c := gatewaytest.NewCluster(t, gatewaytest.ClusterOptions{Instances: 1, Addr: srv.Addr(), Mutate: func(cfg *config.Config) {
		gatewaytest.RoomyFullPlan(cfg)
		cfg.Redis.Timeout = 50 * time.Millisecond // the default
	}})
	reg := c.Nodes[0].Gateway.Registry()
	state := func(dep string) breaker.State {
		return breaker.State(gatewaytest.Metric(t, reg, "trendgate_breaker_state", "dependency", dep))
	}
	topics := plainTopics(c.Up.Topics(), 100)
	next := 0 // cold targets: whatsup then daily series of each topic but the first
	cold := func() string {
		next++
		format := whatsupFmt
		if next >= len(topics) {
			format = seriesFmt
		}
		return fmt.Sprintf(format, topics[1+(next-1)%(len(topics)-1)])
	}
	hot := fmt.Sprintf(whatsupFmt, topics[0])

	// measure sends n hits and n cold misses and returns their latencies.
	measure := func(phase string, n int) (hits, misses []time.Duration) {
		for range n {
			for _, target := range []string{hot, cold()} {
				start := time.Now()
				r := c.Send(0, target, c.Full)
				took := time.Since(start)
				if r.Err != nil || r.Status != 200 {
					t.Fatalf("%s: %s: %d %q %v; want 200", phase, target, r.Status, r.Code, r.Err)
				}
				if target == hot {
					hits = append(hits, took)
				} else {
					misses = append(misses, took)
				}
			}
		}
		t.Logf("%-28s hit p50 %-9v p99 %-9v max %-9v | miss p50 %-9v p99 %-9v max %v", phase,
			pct(hits, 50), pct(hits, 99), slices.Max(hits), pct(misses, 50), pct(misses, 99), slices.Max(misses))
		return hits, misses
	}

	if r := c.Send(0, hot, c.Full); r.Status != 200 {
		t.Fatalf("warming: %d %q", r.Status, r.Code)
	}
	measure("redis up", 40)

	if err := srv.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := true
	defer func() {
		if stopped {
			_ = srv.Signal(syscall.SIGCONT)
		}
	}()
	// The first requests wait out redis.timeout on each use until each
	// client's breaker has seen its failures.
	measure("redis hung, breakers opening", 3)
	for _, dep := range []string{"redis", "redis-cache"} {
		if s := state(dep); s != breaker.Open {
			t.Fatalf("breaker %s: %v during the hang; want open", dep, s)
		}
	}
	fallbacks := gatewaytest.Metric(t, reg, "trendgate_limits_redis_fallbacks_total")
	measure("redis hung, breakers open", 40)
	if got := gatewaytest.Metric(t, reg, "trendgate_limits_redis_fallbacks_total") - fallbacks; got < 80 {
		t.Errorf("limiter fallbacks while open: %v; want one per request (80)", got)
	}

	if err := srv.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	stopped = false
	c.Clock.Advance(time.Minute) // past the longest back-off: the next use probes
	if r := c.Send(0, cold(), c.Full); r.Status != 200 {
		t.Fatalf("first request after resume: %d %q", r.Status, r.Code)
	}
	for _, dep := range []string{"redis", "redis-cache"} {
		if s := state(dep); s != breaker.Closed {
			t.Errorf("breaker %s: %v after Redis resumed and a probe; want closed", dep, s)
		}
	}
	measure("redis resumed", 40)
	for _, dep := range []string{"redis", "redis-cache"} {
		if n := gatewaytest.Metric(t, reg, "trendgate_breaker_transitions_total", "dependency", dep, "to", "open"); n != 1 {
			t.Errorf("breaker %s opened %v times; want once", dep, n)
		}
	}
}

// pct returns the p-th percentile of ds (nearest rank).
func pct(ds []time.Duration, p int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[max(i-1, 0)]
}
