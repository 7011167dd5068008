package gateway

import (
	"testing"

	"trendgate/config"
	"trendgate/internal/testing/promtest"
)

// TestInflightGauges checks that the in-flight bound the gateway builds is
// exported: its capacity, and nothing held or waited for at rest. (That
// derivations take and wait for its bytes is proxy's
// TestDeriveWaitsForInflightBytes.)
func TestInflightGauges(t *testing.T) {
	cfg := config.Default()
	cfg.Upstream.BaseURL = "http://127.0.0.1:1" // never called here
	g, err := New(cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	for name, want := range map[string]float64{
		"trendgate_inflight_bytes":       0,
		"trendgate_inflight_limit_bytes": float64(max(cfg.Cache.MaxBytes/4, cfg.Upstream.MaxBodyBytes)),
		"trendgate_inflight_waits_total": 0,
	} {
		if got, _ := promtest.Sum(t, g.Registry(), name); got != want {
			t.Errorf("%s = %v; want %v", name, got, want)
		}
	}
}
