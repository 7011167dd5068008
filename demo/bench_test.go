package demo

import (
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"

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
	cpu0 := cpuTime()
	b.ResetTimer()
	for b.Loop() {
		clear(w.h)
		s.ServeHTTP(w, r)
	}
	b.StopTimer()
	// Wall time is noisy on a shared machine; CPU time per op is not.
	if cpu := cpuTime() - cpu0; cpu > 0 {
		b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
	}
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

// cpuTime is the process's user plus system CPU time so far (0 if unknown).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
