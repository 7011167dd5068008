package limits

import (
	"context"
	"testing"
	"time"

	"trendgate/internal/clock"
)

func TestLocalUsage(t *testing.T) {
	p := Policy{PerSecond: 1, Burst: 10, Daily: 100, Monthly: 1000}
	tests := []struct {
		name       string
		admits     int           // cost 2 each, at t0
		readAfter  time.Duration // after t0
		wantTokens int
		wantDay    int64
		wantMonth  int64
	}{
		{name: "unknown key: full bucket, nothing used", readAfter: 0, wantTokens: 10},
		{name: "after three admits", admits: 3, wantTokens: 4, wantDay: 6, wantMonth: 6},
		{name: "bucket refills, quota stays", admits: 3, readAfter: 3 * time.Second, wantTokens: 7, wantDay: 6, wantMonth: 6},
		{name: "next day: day restarts, month stays", admits: 3, readAfter: 24 * time.Hour, wantTokens: 10, wantDay: 0, wantMonth: 6},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk := clock.NewFake(t0)
			l := newLocal(t, clk, nil)
			for range tc.admits {
				if d, err := l.Admit(context.Background(), Subject{Key: "k"}, p, 2); err != nil || !d.Allowed {
					t.Fatalf("Admit: %+v %v", d, err)
				}
			}
			clk.Advance(tc.readAfter)
			got, err := l.Usage(context.Background(), []KeyPolicy{{Key: "k", Policy: p}})
			if err != nil {
				t.Fatal(err)
			}
			u := got[0]
			if u.BurstTokens != tc.wantTokens || u.DayUsed != tc.wantDay || u.MonthUsed != tc.wantMonth {
				t.Errorf("got tokens %d, day %d, month %d; want %d, %d, %d", u.BurstTokens, u.DayUsed, u.MonthUsed, tc.wantTokens, tc.wantDay, tc.wantMonth)
			}
			now := clk.Now()
			if want := now.UTC().Truncate(24 * time.Hour).Add(24 * time.Hour); !u.DayEnd.Equal(want) {
				t.Errorf("got day end %v; want %v", u.DayEnd, want)
			}
			if want := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC); !u.MonthEnd.Equal(want) {
				t.Errorf("got month end %v; want %v", u.MonthEnd, want)
			}
			if u.Source != SourceLocal || u.Policy != p {
				t.Errorf("got source %q policy %+v; want local, %+v", u.Source, u.Policy, p)
			}
		})
	}
}

// TestRedisUsageSameOnEveryInstance: what one instance admitted, another
// reports, from Redis.
// TestRedisUsageSameOnEveryInstance runs on one Redis and on a Redis
// Cluster, where each key id's keys live in their own slot (one script per
// key; a single script over both keys failed there with CROSSSLOT).
func TestRedisUsageSameOnEveryInstance(t *testing.T) {
	for _, be := range backends() {
		t.Run(be.name, func(t *testing.T) {
			c, prefix := be.client(t)
			opts := RedisOptions{Prefix: prefix, Timeout: 10 * time.Second}
			a, _ := newLimiterOn(t, c, opts, clock.Real{})
			b, _ := newLimiterOn(t, c, opts, clock.Real{})
			ctx := context.Background()
			p := Policy{PerSecond: 0.001, Burst: 20, Daily: 100, Monthly: 1000}
			for range 4 {
				if d, err := a.Admit(ctx, Subject{Key: "team-a"}, p, 3); err != nil || !d.Allowed || d.fallback {
					t.Fatalf("Admit: %+v %v", d, err)
				}
			}
			keys := []KeyPolicy{{Key: "team-a", Policy: p}, {Key: "team-b", Policy: Policy{Daily: 5}}}
			ua, err := a.Usage(ctx, keys)
			if err != nil {
				t.Fatal(err)
			}
			ub, err := b.Usage(ctx, keys)
			if err != nil {
				t.Fatal(err)
			}
			for i, want := range []Usage{
				{Policy: p, BurstTokens: 8, DayUsed: 12, MonthUsed: 12, Source: SourceRedis},
				{Policy: Policy{Daily: 5}, Source: SourceRedis},
			} {
				for name, got := range map[string]Usage{"a": ua[i], "b": ub[i]} {
					got.DayEnd, got.MonthEnd = time.Time{}, time.Time{}
					if got != want {
						t.Errorf("instance %s, key %d: got %+v; want %+v", name, i, got, want)
					}
				}
			}
			if !ua[0].DayEnd.Equal(ub[0].DayEnd) || time.Until(ua[0].DayEnd) > 24*time.Hour {
				t.Errorf("got day ends %v and %v; want the same, within a day", ua[0].DayEnd, ub[0].DayEnd)
			}
		})
	}
}

// TestRedisUsageFallback: with Redis unreachable, the figures are the
// fallback's, at its local share, and say so.
func TestRedisUsageFallback(t *testing.T) {
	clk := clock.NewFake(t0)
	r, _ := newRedisLimiter(t, "127.0.0.1:1", RedisOptions{Timeout: 200 * time.Millisecond, LocalShare: 0.5, FailureThreshold: 1}, clk)
	ctx := context.Background()
	p := Policy{PerSecond: 2, Burst: 10, Daily: 100}
	if d, err := r.Admit(ctx, Subject{Key: "k"}, p, 1); err != nil || !d.Allowed || !d.fallback {
		t.Fatalf("Admit: %+v %v; want allowed by the fallback", d, err)
	}
	got, err := r.Usage(ctx, []KeyPolicy{{Key: "k", Policy: p}})
	if err != nil {
		t.Fatal(err)
	}
	want := Usage{Policy: Policy{PerSecond: 1, Burst: 5, Daily: 50}, BurstTokens: 4, DayUsed: 1, Source: SourceFallback}
	got[0].DayEnd, got[0].MonthEnd = time.Time{}, time.Time{}
	if got[0] != want {
		t.Errorf("got %+v; want %+v", got[0], want)
	}
}
