package rollup

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"trendgate/internal/clock"
)

// BenchmarkFileBytesPerKeyDay measures the rollups file's size per
// key-day: 100,000 keys (10 per account) used once a day each, for 30
// days, flushed (and synced) every 10,000 requests, then compacted as a restart would.
// Reports
// bytes/key-day of the appended file and of the compacted one. Run with
// -benchtime=1x: one iteration is 3 million events.
func BenchmarkFileBytesPerKeyDay(b *testing.B) {
	const keys, days, perFlush = 100_000, 30, 10_000
	ids := make([]string, keys)
	accts := make([]string, keys/10)
	for i := range ids {
		ids[i] = fmt.Sprintf("key-%06d", i)
	}
	for i := range accts {
		accts[i] = fmt.Sprintf("team-%05d", i)
	}
	for range b.N {
		path := filepath.Join(b.TempDir(), "state.usage")
		clk := clock.NewFake(t0)
		l, err := OpenLocal(path, Config{}, clk, nil)
		if err != nil {
			b.Fatal(err)
		}
		for d := range days {
			clk.Set(t0.AddDate(0, 0, d))
			for i, id := range ids {
				l.Record(Event{Account: accts[i/10], Key: id, Route: "trending", Requests: 1, Units: 1, Upstream: int64(i % 3 / 2), Bytes: 1800 + int64(i%400)})
				if i%perFlush == perFlush-1 {
					if err := l.Flush(); err != nil {
						b.Fatal(err)
					}
				}
			}
		}
		appended := l.FileSize()
		if err := l.Close(); err != nil {
			b.Fatal(err)
		}
		l2, err := OpenLocal(path, Config{}, clk, nil)
		if err != nil {
			b.Fatal(err)
		}
		compacted := l2.FileSize()
		_ = l2.Close()
		b.ReportMetric(float64(appended)/(keys*days), "appended-B/key-day")
		b.ReportMetric(float64(compacted)/(keys*days), "compacted-B/key-day")
	}
}

// BenchmarkRecord is the cost on the request path: one Record of a
// charged request.
func BenchmarkRecord(b *testing.B) {
	l, _ := OpenLocal(filepath.Join(b.TempDir(), "u"), Config{}, clock.NewFake(t0), nil)
	defer l.Close()
	ids := make([]string, 1000)
	for i := range ids {
		ids[i] = fmt.Sprintf("key-%04d", i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		l.Record(Event{Account: "acme", Key: ids[i%len(ids)], Route: "trending", Requests: 1, Units: 1, Bytes: 2000})
	}
}

// BenchmarkQueryMonth reads one month of 10,000 accounts (one key each,
// 31 days): what the usage report asks for.
func BenchmarkQueryMonth(b *testing.B) {
	clk := clock.NewFake(time.Date(2026, 10, 1, 12, 0, 0, 0, time.UTC))
	l, _ := OpenLocal("", Config{}, clk, nil)
	for d := range 31 {
		clk.Set(time.Date(2026, 10, 1+d, 12, 0, 0, 0, time.UTC))
		for i := range 10_000 {
			id := fmt.Sprintf("team-%05d", i)
			l.Record(Event{Key: id, Route: "trending", Requests: 1, Units: 1, Bytes: 2000})
		}
	}
	b.ResetTimer()
	for range b.N {
		got, err := l.Query(context.Background(), Query{From: 20261001, To: 20261031})
		if err != nil || len(got) != 10_000 {
			b.Fatalf("Query: %d series, %v", len(got), err)
		}
	}
}
