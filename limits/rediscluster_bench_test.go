package limits

import (
	"context"
	"flag"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"trendgate/internal/clock"
	"trendgate/internal/testing/redistest"
)

// accuracyDuration is how long BenchmarkRedisLimiterAccuracy drives its
// key; the figure is for 30 s.
var accuracyDuration = flag.Duration("limits.accuracy", 30*time.Second, "how long BenchmarkRedisLimiterAccuracy drives the key")

// benchBackend returns a fresh client factory and prefix on the shared
// single Redis or on a private Redis Cluster; each call of the factory is
// one instance's own client.
func benchBackend(b *testing.B, cluster bool) (func() redis.UniversalClient, string) {
	b.Helper()
	if cluster {
		cl := redistest.StartCluster(b)
		return func() redis.UniversalClient { return cl.Client() }, "tg:bench:"
	}
	c := redistest.Client(b, sharedRedis)
	prefix := redistest.Prefix(b, c)
	return func() redis.UniversalClient {
		rc := redis.NewClient(&redis.Options{Addr: sharedRedis})
		b.Cleanup(func() { _ = rc.Close() })
		return rc
	}, prefix
}

// benchInstances builds three limiters, each on its own client.
func benchInstances(b *testing.B, cluster bool) []*Redis {
	b.Helper()
	newClient, prefix := benchBackend(b, cluster)
	var out []*Redis
	for range 3 {
		fb, err := NewLocal(DefaultConfig(), nil, nil)
		if err != nil {
			b.Fatal(err)
		}
		r, err := NewRedis(newClient(), RedisOptions{Prefix: prefix, Timeout: time.Second}, fb, clock.Real{}, nil, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = r.Close() })
		out = append(out, r)
	}
	return out
}

// BenchmarkRedisLimiterAccuracy drives one key with rate R = 50/s and
// burst B = 25 at 3×R, spread evenly over three instances (each at R,
// paced by its own ticker), for -limits.accuracy (30 s), and reports the
// admitted count against B + R·t, t the time from the first to the last
// request. Run it with -benchtime=1x.
func BenchmarkRedisLimiterAccuracy(b *testing.B) {
	const rate, burst = 50.0, 25
	for _, cluster := range []bool{false, true} {
		b.Run(map[bool]string{false: "redis", true: "redis-cluster"}[cluster], func(b *testing.B) {
			lims := benchInstances(b, cluster)
			p := Policy{PerSecond: rate, Burst: burst}
			for range b.N {
				key := "acc-" + time.Now().Format("150405.000000")
				var admitted, sent, fallbacks atomic.Int64
				var first, last atomic.Int64 // unix ns
				start := time.Now()
				stop := start.Add(*accuracyDuration)
				var wg sync.WaitGroup
				for i, r := range lims {
					wg.Add(1)
					go func() {
						defer wg.Done()
						// Offset the instances by a third of the interval so the
						// three streams interleave evenly.
						interval := time.Duration(float64(time.Second) / rate)
						tk := time.NewTicker(interval)
						defer tk.Stop()
						time.Sleep(time.Duration(i) * interval / 3) // phase offset of a paced load generator
						for now := time.Now(); now.Before(stop); now = <-tk.C {
							first.CompareAndSwap(0, now.UnixNano())
							d, err := r.Admit(context.Background(), Subject{Key: key}, p, 1)
							last.Store(time.Now().UnixNano())
							sent.Add(1)
							if err != nil {
								b.Error(err)
								return
							}
							if d.fallback {
								fallbacks.Add(1)
							}
							if d.Allowed {
								admitted.Add(1)
							}
						}
					}()
				}
				wg.Wait()
				elapsed := time.Duration(last.Load() - first.Load())
				want := burst + rate*elapsed.Seconds()
				got := float64(admitted.Load())
				errPct := 100 * (got - want) / want
				b.ReportMetric(got, "admitted")
				b.ReportMetric(want, "expected")
				b.ReportMetric(errPct, "err%")
				b.ReportMetric(float64(sent.Load())/elapsed.Seconds(), "sent/s")
				b.ReportMetric(float64(fallbacks.Load()), "fallbacks")
				if math.Abs(errPct) > 1 {
					b.Logf("admitted %v of %d sent in %s; want %.1f ± 1%% (B + R·t)", got, sent.Load(), elapsed, want)
				}
			}
		})
	}
}

// BenchmarkRedisDailyQuotaExact sends requests for one key with a daily
// quota of 3,000 from three instances, eight goroutines each, until every
// instance is refused, and reports the units admitted (exact: 3,000) and
// the admissions per second the shared counter sustained.
func BenchmarkRedisDailyQuotaExact(b *testing.B) {
	const quota = 3000
	for _, cluster := range []bool{false, true} {
		b.Run(map[bool]string{false: "redis", true: "redis-cluster"}[cluster], func(b *testing.B) {
			lims := benchInstances(b, cluster)
			p := Policy{Daily: quota, Monthly: 10 * quota}
			for range b.N {
				key := "quota-" + time.Now().Format("150405.000000")
				var admitted, fallbacks atomic.Int64
				start := time.Now()
				var wg sync.WaitGroup
				for _, r := range lims {
					for range 8 {
						wg.Add(1)
						go func() {
							defer wg.Done()
							for range 2 * quota { // bounded: far more than the quota
								d, err := r.Admit(context.Background(), Subject{Key: key}, p, 1)
								if err != nil {
									b.Error(err)
									return
								}
								if d.fallback {
									fallbacks.Add(1)
								}
								if !d.Allowed {
									return
								}
								admitted.Add(1)
							}
						}()
					}
				}
				wg.Wait()
				elapsed := time.Since(start)
				b.ReportMetric(float64(admitted.Load()), "admitted")
				b.ReportMetric(quota, "quota")
				b.ReportMetric(float64(admitted.Load())/elapsed.Seconds(), "admits/s")
				b.ReportMetric(float64(fallbacks.Load()), "fallbacks")
				if admitted.Load() != quota {
					b.Errorf("admitted %d; want exactly %d", admitted.Load(), quota)
				}
			}
		})
	}
}
