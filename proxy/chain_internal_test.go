package proxy

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"trendgate/activity"
	"trendgate/cache"
	"trendgate/config"
	"trendgate/demo"
	"trendgate/internal/clock"
	"trendgate/internal/inflight"
	"trendgate/limits"
	"trendgate/rangecut"
	"trendgate/series"
	"trendgate/upstream"
)

// testChain is a chain on real single-instance dependencies (no Redis),
// for the tests of its internals; package gateway builds the same pieces
// for the process, with cluster mode and the rest.
type testChain struct {
	*Chain
	reg   *prometheus.Registry
	store *cache.Cache
}

// newTestChain builds the chain for cfg on clk. Everything it starts
// stops when the test ends.
func newTestChain(t testing.TB, cfg *config.Config, clk clock.Clock) *testChain {
	t.Helper()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	set, err := Compile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	reg, log := prometheus.NewRegistry(), zap.NewNop()
	cm := cache.NewMetrics(reg)
	limiter, err := limits.NewLocal(cfg.Limits, clk, limits.NewMetrics(reg))
	if err != nil {
		t.Fatal(err)
	}
	local, err := cache.NewLocal(cfg.Cache.MaxBytes, cm)
	if err != nil {
		t.Fatal(err)
	}
	bound := inflight.New(max(cfg.Cache.MaxBytes/4, cfg.Upstream.MaxBodyBytes))
	up, err := upstream.New(cfg.Upstream, clk, log, upstream.NewMetrics(reg), upstream.WithInflight(bound))
	if err != nil {
		t.Fatal(err)
	}
	store, err := cache.New(cfg.Cache, local, clk, log, cm)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = store.Close(context.Background())
		local.Close()
		up.Close()
	})
	stated, err := series.Named(cfg.Upstream.WindowReading.Start, cfg.Upstream.WindowReading.End)
	if err != nil {
		t.Fatal(err)
	}
	c := New(set, Deps{
		Clock: clk, Logger: log, Registry: reg, Upstream: up, Cache: store, Local: local,
		Limiter: limiter, Usage: limiter, AuthFailures: limits.NewAuthFailures(cfg.Limits.AuthFailures, clk, 1000),
		Inflight: bound, Activity: activity.New(clk.Now()),
		Ranges: rangecut.New(rangecut.Options{Clock: clk, Logger: log, Registry: reg, Cache: store, Stated: stated}),
	})
	return &testChain{Chain: c, reg: reg, store: store}
}

// startDemo serves the demo upstream on a fake clock set to a fixed
// instant until the test ends, and returns the clock, the upstream and its
// URL.
func startDemo(t testing.TB) (*clock.Fake, *demo.Server, string) {
	t.Helper()
	clk := clock.NewFake(time.Date(2026, 11, 19, 10, 30, 0, 0, time.UTC))
	up, err := demo.New(demo.Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	upSrv := httptest.NewServer(up)
	t.Cleanup(func() { up.Close(); upSrv.Close() })
	return clk, up, upSrv.URL
}
