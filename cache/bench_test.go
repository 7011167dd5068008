package cache

import (
	"context"
	"testing"
	"time"

	"trendgate/internal/clock"
)

// BenchmarkGetHit measures a fresh hit through Cache over the ristretto tier.
func BenchmarkGetHit(b *testing.B) {
	l := newLocal(b, 64<<20, nil)
	clk := clock.NewFake(t0)
	c, err := New(DefaultConfig(), l, clk, nil, nil)
	if err != nil {
		b.Fatalf("New: %v", err)
	}
	ctx := context.Background()
	l.Set(ctx, entry(key, "bitcoin", t0, time.Hour, `{"data":[]}`))
	l.Wait()
	fetch := func(context.Context, bool) (*Entry, error) {
		b.Fatal("fetch on a hit")
		return nil, nil
	}
	if res, err := c.Get(ctx, key, fetch); err != nil || res.Outcome != Hit {
		b.Fatalf("warm-up Get = %s, %v; want hit", res.Outcome, err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if res, _ := c.Get(ctx, key, fetch); res.Outcome != Hit {
			b.Fatalf("Outcome = %s; want hit", res.Outcome)
		}
	}
}

// BenchmarkGetHitParallel is BenchmarkGetHit from GOMAXPROCS goroutines.
func BenchmarkGetHitParallel(b *testing.B) {
	l := newLocal(b, 64<<20, nil)
	c, err := New(DefaultConfig(), l, clock.Real{}, nil, nil)
	if err != nil {
		b.Fatalf("New: %v", err)
	}
	ctx := context.Background()
	l.Set(ctx, entry(key, "bitcoin", time.Now(), time.Hour, `{"data":[]}`))
	l.Wait()
	fetch := func(context.Context, bool) (*Entry, error) { return nil, errUpstream }
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if res, _ := c.Get(ctx, key, fetch); res.Outcome != Hit {
				b.Errorf("Outcome = %s; want hit", res.Outcome)
				return
			}
		}
	})
}
