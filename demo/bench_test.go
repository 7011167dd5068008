package demo

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"trendgate/internal/clock"
)

// discard is a minimal ResponseWriter so benchmarks measure the server,
// not a recorder's buffer growth.
type discard struct {
	h http.Header
	n int
}

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(b []byte) (int, error) { d.n += len(b); return len(b), nil }
func (d *discard) WriteHeader(int)             {}

func benchTarget(b *testing.B, target string) {
	s, err := New(Options{Clock: clock.NewFake(testNow)})
	if err != nil {
		b.Fatal(err)
	}
	r := httptest.NewRequest(http.MethodGet, target, nil)
	w := &discard{h: http.Header{}}
	s.ServeHTTP(w, r)
	b.SetBytes(int64(w.n))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		clear(w.h)
		s.ServeHTTP(w, r)
	}
	b.StopTimer()
	if s.Count() == 0 {
		b.Fatal("no requests served")
	}
}

// BenchmarkSeries renders the default bitcoin series: 1w hourly, 19 fields.
func BenchmarkSeries(b *testing.B) {
	benchTarget(b, "/api4/public/topic/bitcoin/time-series/v1")
}

// BenchmarkSeriesDayAll renders two years of daily buckets (each aggregated
// from 24 hourly samples).
func BenchmarkSeriesDayAll(b *testing.B) {
	benchTarget(b, "/api4/public/topic/bitcoin/time-series/v1?bucket=day&interval=all")
}

// BenchmarkList renders the default 300-topic list.
func BenchmarkList(b *testing.B) {
	benchTarget(b, "/api4/public/topics/list/v1")
}

// BenchmarkWhatsup renders one whatsup summary.
func BenchmarkWhatsup(b *testing.B) {
	benchTarget(b, "/api4/public/topic/bitcoin/whatsup/v1")
}
