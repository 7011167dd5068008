package limits

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"trendgate/internal/clock"
)

// BenchmarkAdmitWhileUsageReads measures admissions while an admin view
// reads the usage of 100,000 keys over and over in another goroutine: as
// Usage takes the limiter's lock once per key, an admission waits for at
// most one key's read, not for the whole list (max-ms is the longest an
// admission took, p99.9-µs their 99.9th percentile, usage-ms one read of
// every key). Timing figures: noisy on a shared machine.
func BenchmarkAdmitWhileUsageReads(b *testing.B) {
	l, err := NewLocal(DefaultConfig(), clock.NewFake(time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)), nil)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	p := Policy{PerSecond: 1e6, Burst: 1e6, Daily: 1e9}
	kps := make([]KeyPolicy, 100_000)
	for i := range kps {
		kps[i] = KeyPolicy{Key: fmt.Sprintf("k%06d", i), Policy: p}
		if _, err := l.Admit(ctx, kps[i].subject(), p, 1); err != nil {
			b.Fatal(err)
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var reads int
	var readTime time.Duration
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			start := time.Now()
			if _, err := l.Usage(ctx, kps); err != nil {
				panic(err)
			}
			readTime += time.Since(start)
			reads++
		}
	}()
	s := Subject{Key: "k000042"}
	lat := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		if _, err := l.Admit(ctx, s, p, 1); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	close(stop)
	wg.Wait()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)*999/1000].Nanoseconds())/1e3, "p99.9-µs")
	b.ReportMetric(float64(lat[len(lat)-1].Nanoseconds())/1e6, "max-ms")
	if reads > 0 {
		b.ReportMetric(float64(readTime.Milliseconds())/float64(reads), "usage-ms")
	}
}
