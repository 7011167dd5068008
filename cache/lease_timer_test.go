package cache

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"trendgate/internal/clock"
	"trendgate/internal/testing/redistest"
)

// TestLeaseWaitPollsThenGivesUp drives a fill waiting on another
// instance's lease with the bubble's fake time (testing/synctest), so the
// lease poll and the lease wait pass without wall time: the waiter takes
// the holder's result at its next poll after the store, and fetches by
// itself once the lease wait is over.
func TestLeaseWaitPollsThenGivesUp(t *testing.T) {
	_, prefix := testRedis(t)
	synctest.Test(t, func(t *testing.T) {
		rdb := redis.NewClient(&redis.Options{Addr: redistest.Addr})
		defer rdb.Close()
		clk := clock.NewFake(t0) // freshness only; timers run on the bubble's time
		reg := prometheus.NewRegistry()
		m := NewMetrics(reg)
		shared := newRedisStore(t, rdb, RedisStoreOptions{Prefix: prefix, Clock: clk}, m)
		lease := NewRedisLease(rdb, prefix+"l:", 0, nil)
		const wait = time.Second
		var caches [2]*Cache
		for i := range caches {
			c, err := New(DefaultConfig(), Tiered(newLocal(t, 1<<20, nil), shared), clk, nil, m, WithLease(lease, shared, wait))
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			defer c.Close(context.Background())
			caches[i] = c
		}

		type got struct {
			body string
			err  error
		}
		// holder fills key on instance 0 and returns when release closes.
		holder := func(key string, release <-chan struct{}) <-chan got {
			ch := make(chan got, 1)
			go func() {
				res, err := caches[0].Get(context.Background(), key, func(context.Context, bool) (*Entry, error) {
					<-release
					return entry(key, "bitcoin", clk.Now(), time.Minute, `{"by":"holder"}`), nil
				})
				if err != nil {
					ch <- got{err: err}
					return
				}
				ch <- got{body: string(res.Entry.Body)}
			}()
			return ch
		}
		var ownFetches atomic.Int32
		waiter := func(key string) <-chan got {
			ch := make(chan got, 1)
			go func() {
				res, err := caches[1].Get(context.Background(), key, func(context.Context, bool) (*Entry, error) {
					ownFetches.Add(1)
					return entry(key, "bitcoin", clk.Now(), time.Minute, `{"by":"waiter"}`), nil
				})
				if err != nil {
					ch <- got{err: err}
					return
				}
				ch <- got{body: string(res.Entry.Body)}
			}()
			return ch
		}

		// The waiter takes the holder's result at its next poll.
		{
			k := key + "poll"
			release := make(chan struct{})
			h := holder(k, release)
			synctest.Wait() // instance 0 holds the lease and is fetching
			w := waiter(k)
			time.Sleep(2*leasePoll + leasePoll/4) // two polls find nothing
			synctest.Wait()
			select {
			case r := <-w:
				t.Fatalf("waiter returned %+v while the holder was still fetching", r)
			default:
			}
			close(release)
			stored := time.Now()
			r := <-w
			if took := time.Since(stored); took <= 0 || took > leasePoll {
				t.Errorf("waiter answered %v after the store; want within one poll (%v]", took, leasePoll)
			}
			if r.err != nil || r.body != `{"by":"holder"}` {
				t.Errorf("waiter got %+v; want the holder's body", r)
			}
			if r := <-h; r.err != nil {
				t.Errorf("holder: %v", r.err)
			}
			if n := ownFetches.Load(); n != 0 {
				t.Errorf("waiter fetched %d times; want 0", n)
			}
			if got := metric(t, reg, "trendgate_cache_lease_waits_total", "result", "shared"); got != 1 {
				t.Errorf("lease_waits_total{result=shared} = %v; want 1", got)
			}
		}

		// The waiter fetches by itself after the lease wait.
		{
			k := key + "stuck"
			release := make(chan struct{})
			h := holder(k, release)
			synctest.Wait()
			start := time.Now()
			r := <-waiter(k)
			if took := time.Since(start); took < wait || took > wait+leasePoll {
				t.Errorf("waiter gave up after %v; want the lease wait (%v)", took, wait)
			}
			if r.err != nil || r.body != `{"by":"waiter"}` {
				t.Errorf("waiter got %+v; want its own fetch", r)
			}
			if n := ownFetches.Load(); n != 1 {
				t.Errorf("waiter fetched %d times; want 1", n)
			}
			if got := metric(t, reg, "trendgate_cache_lease_waits_total", "result", "timeout"); got != 1 {
				t.Errorf("lease_waits_total{result=timeout} = %v; want 1", got)
			}
			close(release)
			<-h
		}
	})
}
