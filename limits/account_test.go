package limits

import (
	"context"
	"strconv"
	"testing"
	"time"

	"trendgate/internal/clock"
	"trendgate/internal/testing/redistest"
)

// accountLimiters returns the limiters an account's sharing must hold on:
// the in-memory one, one instance on a single Redis, and one on a Redis
// Cluster (skipped, like every Redis test, when Redis is absent).
func accountLimiters(t *testing.T) map[string]func(t *testing.T) Limiter {
	return map[string]func(t *testing.T) Limiter{
		"local": func(t *testing.T) Limiter { return newLocal(t, clock.NewFake(t0), nil) },
		"redis": func(t *testing.T) Limiter {
			c := redisOrSkip(t, sharedRedis)
			r, _ := newLimiterOn(t, c, RedisOptions{Prefix: testPrefix(t, c), Timeout: 10 * time.Second}, clock.Real{})
			return r
		},
		"redis cluster": func(t *testing.T) Limiter {
			cl := redistest.StartCluster(t)
			r, _ := newLimiterOn(t, cl.Client(), RedisOptions{Prefix: "tg:", Timeout: 10 * time.Second}, clock.Real{})
			return r
		},
	}
}

// TestAccountSharesOneQuota: ten keys of one account draw on one daily
// quota (7 units admit exactly 7 of 30 requests spread over the keys),
// while another account's quota is untouched, and a refund through any key
// goes back to the account.
func TestAccountSharesOneQuota(t *testing.T) {
	for name, newLimiter := range accountLimiters(t) {
		t.Run(name, func(t *testing.T) {
			lim := newLimiter(t)
			ctx := context.Background()
			p := Policy{Daily: 7, Monthly: 100}
			admitted := 0
			var last Decision
			for i := range 30 {
				s := Subject{Key: "acme-" + strconv.Itoa(i%10), Account: "acme"}
				d, err := lim.Admit(ctx, s, p, 1)
				if err != nil {
					t.Fatal(err)
				}
				if d.Allowed {
					admitted++
					last = d
				} else if d.Reason != ReasonDaily {
					t.Fatalf("request %d: refused %q; want %q", i, d.Reason, ReasonDaily)
				}
			}
			if admitted != 7 {
				t.Errorf("admitted %d of 30 over ten keys; want 7 (one account quota)", admitted)
			}
			if d, err := lim.Admit(ctx, Subject{Key: "solo"}, p, 1); err != nil || !d.Allowed {
				t.Errorf("another account: got %+v, %v; want admitted", d, err)
			}
			if err := lim.Refund(ctx, Subject{Key: "acme-3", Account: "acme"}, last); err != nil {
				t.Fatal(err)
			}
			if d, err := lim.Admit(ctx, Subject{Key: "acme-9", Account: "acme"}, p, 1); err != nil || !d.Allowed || d.DailyRemaining != 0 {
				t.Errorf("after a refund through another key: got %+v, %v; want admitted with 0 remaining", d, err)
			}
			u, err := lim.(UsageReader).Usage(ctx, []KeyPolicy{{Key: "acme-0", Account: "acme", Policy: p}, {Key: "solo", Policy: p}})
			if err != nil {
				t.Fatal(err)
			}
			if u[0].DayUsed != 7 || u[1].DayUsed != 1 {
				t.Errorf("usage: day used %d, %d; want 7 (the account's), 1", u[0].DayUsed, u[1].DayUsed)
			}
		})
	}
}

// TestAccountKeysHaveOwnBuckets: the token bucket stays per key, so one
// key of an account spending its burst does not slow another key down.
func TestAccountKeysHaveOwnBuckets(t *testing.T) {
	for name, newLimiter := range accountLimiters(t) {
		t.Run(name, func(t *testing.T) {
			lim := newLimiter(t)
			ctx := context.Background()
			p := Policy{PerSecond: 0.001, Burst: 2, Daily: 100}
			web := Subject{Key: "web", Account: "acme"}
			batch := Subject{Key: "batch", Account: "acme"}
			for i, s := range []Subject{web, web, web, batch, batch, batch} {
				d, err := lim.Admit(ctx, s, p, 1)
				if err != nil {
					t.Fatal(err)
				}
				if want := i%3 != 2; d.Allowed != want {
					t.Errorf("request %d by %s: allowed %v (%q); want %v", i, s.Key, d.Allowed, d.Reason, want)
				}
			}
		})
	}
}
