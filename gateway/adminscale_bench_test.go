package gateway_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"trendgate/auth"
	"trendgate/config"
	"trendgate/gateway"
	"trendgate/gateway/gatewaytest"
	"trendgate/internal/clock"
)

// adminScaleGateway builds a gateway with n keys in n/10 accounts, each
// account with a daily quota, of which the first 50 keys have made
// requests (each a different number), and returns its admin handler.
func adminScaleGateway(b *testing.B, n int) http.Handler {
	b.Helper()
	clk := clock.NewFake(time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC))
	_, upSrv := gatewaytest.StartUpstream(b, clk, nil)
	cfg := config.Default()
	cfg.Upstream.BaseURL, cfg.Upstream.APIKey = upSrv.URL, gatewaytest.UpstreamKey
	cfg.Upstream.AllowPlainHTTP = true
	daily := int64(10_000)
	for a := range max(n/10, 1) {
		cfg.Accounts = append(cfg.Accounts, config.Account{ID: fmt.Sprintf("acct-%06d", a), Plan: "full", Daily: &daily})
	}
	const used = 50
	secrets := make([]string, 0, used)
	for i := range n {
		k := config.Key{ID: fmt.Sprintf("key-%06d", i), Account: fmt.Sprintf("acct-%06d", i/10), SHA256: fmt.Sprintf("%064x", i+1)}
		if i < used {
			s, err := auth.Generate()
			if err != nil {
				b.Fatal(err)
			}
			secrets = append(secrets, s)
			k.SHA256 = auth.Digest(s)
		}
		cfg.Keys = append(cfg.Keys, k)
	}
	g, err := gateway.New(cfg, gateway.Options{Clock: clk})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = g.Close() })
	for i, s := range secrets {
		for range 1 + i%7 {
			r := httptest.NewRequest(http.MethodGet, "/api4/public/topics/list/v1", nil)
			r.Header.Set("Authorization", "Bearer "+s)
			w := httptest.NewRecorder()
			g.ServeHTTP(w, r)
			if w.Code != http.StatusOK {
				b.Fatalf("request: %d %s", w.Code, w.Body)
			}
		}
	}
	return g.AdminHandler()
}

// BenchmarkAdminViews measures the admin views an operator (or the open
// dashboard, every 2 s) reads, through the admin handler with JSON encoding,
// at 100 and 100,000 keys: a GET /keys page of 100, a GET /keys/{id}
// lookup, a GET /accounts page of 100 and /summary. Each should cost about
// the same at both sizes. The key index the views share, built by the
// first read after each reload, is measured apart (BenchmarkKeyIndex).
// Building the 100,000-key gateway takes a while and over 1 GB (each key's
// 24 h counters, at this commit).
func BenchmarkAdminViews(b *testing.B) {
	for _, n := range []int{100, 100_000} {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			h := adminScaleGateway(b, n)
			for _, view := range []struct{ name, path string }{
				{"keys-page", "/keys?limit=100&state=active"},
				{"key-lookup", fmt.Sprintf("/keys/key-%06d", n/2)},
				{"accounts-page", "/accounts?limit=100"},
				{"summary", "/summary"},
			} {
				b.Run(view.name, func(b *testing.B) {
					r := httptest.NewRequest(http.MethodGet, view.path, nil)
					r.Host = "127.0.0.1:9090"
					w := httptest.NewRecorder()
					h.ServeHTTP(w, r) // the first view read after a reload builds the key index (BenchmarkKeyIndex)
					if w.Code != http.StatusOK {
						b.Fatalf("GET %s: %d %s", view.path, w.Code, w.Body)
					}
					size := w.Body.Len()
					b.ReportAllocs()
					b.ResetTimer()
					for range b.N {
						w := httptest.NewRecorder()
						h.ServeHTTP(w, r)
					}
					b.StopTimer()
					b.ReportMetric(float64(size), "resp-bytes")
				})
			}
		})
	}
}
