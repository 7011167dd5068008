package proxy_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"trendgate/auth"
	"trendgate/config"
	"trendgate/demo"
	"trendgate/gateway"
	"trendgate/gateway/gatewaytest"
	"trendgate/internal/clock"
	"trendgate/tracing"
	"trendgate/upstream"
)

// BenchmarkHit measures one cache hit through the whole handler chain
// (request id, parse, auth, limits, cache, projection memo, headers) with
// the access log off.
func BenchmarkHit(b *testing.B) { benchmarkHit(b, false, nil) }

// BenchmarkHitAccessLog is BenchmarkHit with the JSON access log on,
// encoded and written to a discarding sink.
func BenchmarkHitAccessLog(b *testing.B) { benchmarkHit(b, true, nil) }

// BenchmarkHitTracing is BenchmarkHit with tracing on, exporting over
// OTLP/HTTP to a loopback receiver that discards what it gets, at
// ratio 1 (every request traced: SERVER, auth, limits admit and cache
// lookup spans) and ratio 0.01. The batch span processor drops spans its
// queue cannot hold, so at high rates ratio 1 measures making spans more
// than exporting all of them.
func BenchmarkHitTracing(b *testing.B) {
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer rcv.Close()
	for _, ratio := range []float64{1, 0.01} {
		b.Run(fmt.Sprintf("ratio=%v", ratio), func(b *testing.B) {
			benchmarkHit(b, false, &tracing.Config{Exporter: tracing.ExporterOTLPHTTP, Endpoint: rcv.URL, Ratio: ratio})
		})
	}
}

func benchmarkHit(b *testing.B, accessLog bool, tc *tracing.Config) {
	up, err := demo.New(demo.Options{Clock: clock.NewFake(gatewaytest.Now)})
	if err != nil {
		b.Fatal(err)
	}
	upSrv := httptest.NewServer(up)
	defer upSrv.Close()
	full, limited := gatewaytest.NewKey(b), gatewaytest.NewKey(b)
	cfg := config.Default()
	cfg.Upstream.BaseURL = upSrv.URL
	// The demo's reading of window bounds, stated: a cut needs it known
	// (the series-range case was forwarded, and failed, without it).
	cfg.Upstream.WindowReading = upstream.WindowReading{Start: "floor", End: "inclusive"}
	cfg.Log.Access = &accessLog
	if tc != nil {
		cfg.Tracing = *tc
	}
	for name, p := range cfg.Plans { // never the limit under test here
		p.PerSecond, p.Burst, p.Daily, p.Monthly = 1e9, 1e9, 0, 0
		cfg.Plans[name] = p
	}
	cfg.Keys = []config.Key{
		{ID: "bench-full", SHA256: auth.Digest(full), Plan: "full"},
		{ID: "bench-limited", SHA256: auth.Digest(limited), Plan: "limited"},
	}
	log := zap.NewNop()
	if accessLog {
		log = zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(io.Discard), zapcore.InfoLevel))
	}
	gw, err := gateway.New(cfg, gateway.Options{Clock: clock.NewFake(gatewaytest.Now), Logger: log})
	if err != nil {
		b.Fatal(err)
	}
	defer gw.Close()

	// A forwarded window of another topic shows the gateway how the
	// upstream reads bounds inside a bucket, so the range case can be cut.
	teach := httptest.NewRequest(http.MethodGet, fmt.Sprintf("/api4/public/topic/ethereum/time-series/v1?start=%d&end=%d",
		gatewaytest.Now.Add(-72*time.Hour).Unix(), gatewaytest.Now.Add(-24*time.Hour).Unix()), nil)
	teach.Header.Set("Authorization", "Bearer "+full)
	gw.ServeHTTP(&gatewaytest.DiscardWriter{Hdr: http.Header{}}, teach)

	for _, bc := range []struct{ name, key, path string }{
		{"full/list", full, "/api4/public/topics/list/v1"},
		{"full/series", full, "/api4/public/topic/bitcoin/time-series/v1"},
		// Cut from the week cached by full/series (Cache-Status detail=range).
		{"full/series-range", full, fmt.Sprintf("/api4/public/topic/bitcoin/time-series/v1?start=%d&end=%d",
			gatewaytest.Now.Add(-72*time.Hour).Unix(), gatewaytest.Now.Add(-24*time.Hour).Unix())},
		{"limited/list", limited, "/api4/public/topics/list/v1"},
		{"limited/series", limited, "/api4/public/topic/bitcoin/time-series/v1"},
		{"full/series-gzip", full, "/api4/public/topic/bitcoin/time-series/v1"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			req := httptest.NewRequest(http.MethodGet, bc.path, nil)
			req.Header.Set("Authorization", "Bearer "+bc.key)
			if bc.name == "full/series-gzip" {
				req.Header.Set("Accept-Encoding", "gzip")
			}
			w := &gatewaytest.DiscardWriter{Hdr: http.Header{}}
			gw.ServeHTTP(w, req) // warm: miss, then memoized variants
			if w.Status != http.StatusOK {
				b.Fatalf("warm-up status %d", w.Status)
			}
			if strings.HasSuffix(bc.name, "-range") && w.Hdr.Get("Cache-Status") != "trendgate; hit; detail=range" {
				b.Fatalf("warm-up Cache-Status %q; want a range fill", w.Hdr.Get("Cache-Status"))
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				clear(w.Hdr)
				w.Status, w.Bytes = 0, 0
				gw.ServeHTTP(w, req)
				if w.Status != http.StatusOK {
					b.Fatalf("status %d", w.Status)
				}
			}
		})
	}
}
