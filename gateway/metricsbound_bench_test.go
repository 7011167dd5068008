package gateway_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"trendgate/auth"
	"trendgate/config"
	"trendgate/demo"
	"trendgate/gateway/gatewaytest"
	"trendgate/internal/clock"
)

// BenchmarkMetricsScrape is one GET /metrics of a gateway with 1,000,
// 10,000 and 100,000 configured keys (each an account of its own), 2,000
// of them used (all of them at 1,000); it reports the scrape's size as
// bytes/scrape (the target: under 1 MB at 100,000 keys) beside
// its time and allocations.
func BenchmarkMetricsScrape(b *testing.B) {
	up, err := demo.New(demo.Options{Clock: clock.NewFake(gatewaytest.Now), APIKey: gatewaytest.UpstreamKey})
	if err != nil {
		b.Fatal(err)
	}
	upSrv := httptest.NewServer(up)
	defer upSrv.Close()
	for _, n := range []int{1000, 10000, 100000} {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			cfg := gatewaytest.BaseConfig(upSrv.URL, gatewaytest.NewKey(b), "")
			gatewaytest.RoomyFullPlan(cfg)
			secrets := make([]string, min(n, 2000))
			for i := range n {
				s := gatewaytest.NewKey(b)
				if i < len(secrets) {
					secrets[i] = s
				}
				cfg.Keys = append(cfg.Keys, config.Key{ID: fmt.Sprintf("load-%d", i), SHA256: auth.Digest(s), Plan: config.PlanFull})
			}
			gw, _ := gatewaytest.Build(b, clock.NewFake(gatewaytest.Now), cfg)
			defer gw.Close()
			for _, s := range secrets {
				r := httptest.NewRequest(http.MethodGet, "/api4/public/topics/list/v1", nil)
				r.Header.Set("Authorization", "Bearer "+s)
				w := &gatewaytest.DiscardWriter{Hdr: http.Header{}}
				gw.ServeHTTP(w, r)
				if w.Status != 0 && w.Status != http.StatusOK {
					b.Fatalf("a request: got %d; want 200", w.Status)
				}
			}
			adm := gw.AdminHandler()
			size := 0
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				w, r := httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "http://127.0.0.1:9090/metrics", nil)
				r.RemoteAddr = "127.0.0.1:40000" // no admin token: loopback only
				adm.ServeHTTP(w, r)
				if w.Code != http.StatusOK {
					b.Fatalf("GET /metrics: got %d; want 200", w.Code)
				}
				size = w.Body.Len()
			}
			b.ReportMetric(float64(size), "bytes/scrape")
		})
	}
}
