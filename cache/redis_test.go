package cache

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"trendgate/internal/clock"
	"trendgate/internal/testing/redistest"
)

// testRedis returns a client for the local Redis and a unique key prefix
// under "tg:test:", deleting everything under it when the test ends. Without
// a reachable Redis the test is skipped, or failed when CI=true.
func testRedis(t testing.TB) (*redis.Client, string) {
	t.Helper()
	rdb := redistest.Client(t, redistest.Addr)
	return rdb, redistest.Prefix(t, rdb)
}

func newRedisStore(t testing.TB, rdb redis.UniversalClient, opts RedisStoreOptions, m *Metrics) *RedisStore {
	t.Helper()
	s, err := NewRedisStore(rdb, opts, m)
	if err != nil {
		t.Fatalf("NewRedisStore: %v", err)
	}
	return s
}

func TestRedisStoreRoundTrip(t *testing.T) {
	rdb, prefix := testRedis(t)
	clk := clock.NewFake(t0)
	s := newRedisStore(t, rdb, RedisStoreOptions{Prefix: prefix, Clock: clk, MaxStale: time.Hour}, nil)
	ctx := context.Background()
	e := entry(key, "bitcoin", t0, 10*time.Minute, `{"data":[1]}`)
	e.Generated = 1763800000
	s.Set(ctx, e)
	got, ok := s.Get(ctx, key)
	if !ok || !sameEntry(got, e) {
		t.Fatalf("Get = %+v, %v; want %+v", got, ok, e)
	}
	pttl := rdb.PTTL(ctx, prefix+"e:"+key).Val()
	if want := 70 * time.Minute; pttl > want || pttl < want-time.Minute {
		t.Errorf("entry PTTL = %s; want about %s (until FreshUntil+MaxStale)", pttl, want)
	}
	if got := s.TopicKeys(ctx, "bitcoin"); len(got) != 1 || got[0] != key {
		t.Errorf("TopicKeys = %q; want [%q]", got, key)
	}
	if ttl := rdb.PTTL(ctx, prefix+"t:bitcoin").Val(); ttl <= 0 {
		t.Errorf("topic index PTTL = %s; want > 0 (every key we create expires)", ttl)
	}
	s.Delete(ctx, key)
	if _, ok := s.Get(ctx, key); ok {
		t.Errorf("Get after Delete hit")
	}
	s.Set(ctx, e)
	s.Clear(ctx)
	if n := len(rdb.Keys(ctx, prefix+"*").Val()); n != 0 {
		t.Errorf("%d keys left after Clear; want 0", n)
	}
	// An entry already past FreshUntil+MaxStale is not written.
	clk.Advance(2 * time.Hour)
	s.Set(ctx, e)
	if _, ok := s.Get(ctx, key); ok {
		t.Errorf("entry past its retention was stored")
	}
}

func TestRedisStoreInvalidEntriesAreMisses(t *testing.T) {
	rdb, prefix := testRedis(t)
	reg := prometheus.NewRegistry()
	s := newRedisStore(t, rdb, RedisStoreOptions{Prefix: prefix, MaxEntryBytes: 4096}, NewMetrics(reg))
	ctx := context.Background()
	good := encodeEntry(entry(key, "bitcoin", t0, time.Minute, `{}`))
	oldSchema := append([]byte(nil), good...)
	oldSchema[len(codecMagic)] = schemaVersion + 1
	big := encodeEntry(entry(key, "bitcoin", t0, time.Minute, string(make([]byte, 5000))))
	tests := []struct {
		name string
		raw  []byte
	}{
		{"wrong key", encodeEntry(entry("v2|list||||", "", t0, time.Minute, `{}`))},
		{"bad bytes", []byte("not an entry")},
		{"other schema", oldSchema},
		{"oversized", big},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := rdb.Set(ctx, prefix+"e:"+key, tc.raw, time.Minute).Err(); err != nil {
				t.Fatalf("SET: %v", err)
			}
			if e, ok := s.Get(ctx, key); ok {
				t.Errorf("Get = %+v; want miss", e)
			}
			if got := metric(t, reg, "trendgate_cache_shared_reads_total", "result", "invalid"); got != float64(i+1) {
				t.Errorf("shared_reads_total{result=invalid} = %v; want %d", got, i+1)
			}
		})
	}
	rdb.Set(ctx, prefix+"e:"+key, good, time.Minute)
	if _, ok := s.Get(ctx, key); !ok {
		t.Errorf("valid entry missed")
	}
	s.Set(ctx, entry(key, "bitcoin", time.Now(), time.Minute, string(make([]byte, 5000))))
	if n := rdb.StrLen(ctx, prefix+"e:"+key).Val(); n > 4096 {
		t.Errorf("oversized entry written (%d bytes); want it skipped", n)
	}
}

func TestRedisErrorsAreCountedMisses(t *testing.T) {
	// Nothing listens on port 1 of loopback: every command fails fast.
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", DialTimeout: 100 * time.Millisecond, MaxRetries: -1})
	defer rdb.Close()
	reg := prometheus.NewRegistry()
	s := newRedisStore(t, rdb, RedisStoreOptions{}, NewMetrics(reg))
	ctx := context.Background()
	s.Set(ctx, entry(key, "bitcoin", time.Now(), time.Minute, `{}`))
	if _, ok := s.Get(ctx, key); ok {
		t.Errorf("Get on a dead Redis hit")
	}
	if got := metric(t, reg, "trendgate_cache_shared_reads_total", "result", "error"); got != 2 {
		t.Errorf("shared_reads_total{result=error} = %v; want 2 (one Set, one Get)", got)
	}
	// A Cache on it still fetches, and a lease error just fetches.
	c, err := New(DefaultConfig(), Tiered(newLocal(t, 1<<20, nil), s), nil, nil, nil,
		WithLease(NewRedisLease(rdb, "", 0, nil), s, time.Second))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	defer c.Close(ctx)
	var n atomic.Int32
	res, err := c.Get(ctx, key, func(context.Context, bool) (*Entry, error) {
		n.Add(1)
		return entry(key, "bitcoin", time.Now(), time.Minute, `{}`), nil
	})
	if err != nil || res.Outcome != Miss || n.Load() != 1 {
		t.Errorf("Get with dead Redis = %s, %v after %d fetches; want miss after 1", res.Outcome, err, n.Load())
	}
}

func TestTiered(t *testing.T) {
	rdb, prefix := testRedis(t)
	ctx := context.Background()
	shared := newRedisStore(t, rdb, RedisStoreOptions{Prefix: prefix}, nil)
	local := newMapStore()
	tier := Tiered(local, shared)
	e := entry(key, "bitcoin", time.Now(), time.Minute, `{}`)

	shared.Set(ctx, e)
	got, ok := tier.Get(ctx, key)
	if !ok || !sameEntry(got, e) {
		t.Fatalf("Get via shared = %+v, %v; want the entry", got, ok)
	}
	if _, ok := local.Get(ctx, key); !ok {
		t.Errorf("shared hit was not copied into local")
	}
	shared.Delete(ctx, key)
	if _, ok := tier.Get(ctx, key); !ok {
		t.Errorf("Get after shared delete missed; want the local copy")
	}
	tier.Delete(ctx, key)
	if _, ok := tier.Get(ctx, key); ok {
		t.Errorf("Get after Delete hit")
	}
	other := entry("v2|whatsup|bitcoin||||", "bitcoin", time.Now(), time.Minute, `{}`)
	tier.Set(ctx, other)
	if _, ok := shared.Get(ctx, other.Key); !ok {
		t.Errorf("Set did not reach the shared tier")
	}
	if _, ok := local.Get(ctx, other.Key); !ok {
		t.Errorf("Set did not reach the local tier")
	}
	tier.Clear(ctx)
	_, inShared := shared.Get(ctx, other.Key)
	_, inLocal := local.Get(ctx, other.Key)
	if inShared || inLocal {
		t.Errorf("after Clear shared=%v local=%v; want both empty", inShared, inLocal)
	}
}

func TestPurgeTopicReachesSharedTier(t *testing.T) {
	rdb, prefix := testRedis(t)
	ctx := context.Background()
	shared := newRedisStore(t, rdb, RedisStoreOptions{Prefix: prefix}, nil)
	// Another instance stored these; this instance's local tier never saw them.
	for _, k := range []string{"v2|whatsup|bitcoin||||", "v2|series|bitcoin|hour|1w||"} {
		shared.Set(ctx, entry(k, "bitcoin", time.Now(), time.Minute, `{}`))
	}
	c, err := New(DefaultConfig(), Tiered(newLocal(t, 1<<20, nil), shared), nil, nil, nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if got := c.Purge(ctx, Selector{Topic: "bitcoin"}); got != 2 {
		t.Errorf("Purge(topic) = %d; want 2", got)
	}
	if _, ok := c.Peek(ctx, "v2|whatsup|bitcoin||||"); ok {
		t.Errorf("purged entry still readable")
	}
}

func TestRedisLease(t *testing.T) {
	rdb, prefix := testRedis(t)
	ctx := context.Background()
	l := NewRedisLease(rdb, prefix+"l:", 0, nil)
	release, ok, err := l.Acquire(ctx, key, time.Minute)
	if err != nil || !ok {
		t.Fatalf("first Acquire = %v, %v; want ok", ok, err)
	}
	if _, ok, err := l.Acquire(ctx, key, time.Minute); err != nil || ok {
		t.Errorf("second Acquire = %v, %v; want not ok", ok, err)
	}
	release()
	release2, ok, err := l.Acquire(ctx, key, time.Minute)
	if err != nil || !ok {
		t.Fatalf("Acquire after release = %v, %v; want ok", ok, err)
	}
	// Another instance took the lease over (ours expired): our release must
	// leave its lease alone.
	rdb.Set(ctx, prefix+"l:"+key, "someone-else", time.Minute)
	release2()
	if v := rdb.Get(ctx, prefix+"l:"+key).Val(); v != "someone-else" {
		t.Errorf("lease after stale release = %q; want someone-else's", v)
	}
}

func TestLeaseCoalescesAcrossInstances(t *testing.T) {
	rdb, prefix := testRedis(t)
	clk := clock.NewFake(t0)
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	shared := newRedisStore(t, rdb, RedisStoreOptions{Prefix: prefix, Clock: clk}, m)
	lease := &leaseSpy{Lease: NewRedisLease(rdb, prefix+"l:", 0, nil), denied: make(chan struct{}, 2)}
	var caches [2]*Cache
	for i := range caches {
		c, err := New(DefaultConfig(), Tiered(newLocal(t, 1<<20, nil), shared), clk, nil, m,
			WithLease(lease, shared, time.Minute)) // a bound a loaded CI host cannot reach; the wait ends when the entry lands
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		defer c.Close(context.Background())
		caches[i] = c
	}
	const callers = 100
	release := make(chan struct{})
	started := make(chan struct{}, callers)
	var fetches atomic.Int32
	fetch := func(ctx context.Context, background bool) (*Entry, error) {
		fetches.Add(1)
		started <- struct{}{}
		<-release
		return entry(key, "bitcoin", clk.Now(), time.Minute, `{"ok":1}`), nil
	}
	var ready, wg sync.WaitGroup
	ready.Add(callers - 2)
	errs := make(chan error, callers)
	get := func(i int) {
		res, err := caches[i%2].Get(context.Background(), key, fetch)
		if err == nil && string(res.Entry.Body) != `{"ok":1}` {
			err = fmt.Errorf("body %q", res.Entry.Body)
		}
		errs <- err
	}
	// Instance 0 takes the lease and fetches; instance 1's fill is then
	// denied the lease and must wait for the shared tier.
	wg.Go(func() { get(0) })
	watchdog(t, started, "instance 0's fetch")
	wg.Go(func() { get(1) })
	watchdog(t, lease.denied, "instance 1's lease attempt")
	for i := 2; i < callers; i++ {
		wg.Go(func() {
			ready.Done()
			get(i)
		})
	}
	ready.Wait()
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("Get: %v", err)
		}
	}
	if got := fetches.Load(); got != 1 {
		t.Errorf("fetches across two instances = %d; want 1", got)
	}
	if got := metric(t, reg, "trendgate_cache_lease_waits_total", "result", "timeout"); got != 0 {
		t.Errorf("lease_waits_total{result=timeout} = %v; want 0", got)
	}
	if got := metric(t, reg, "trendgate_cache_lease_waits_total", "result", "shared"); got != 1 {
		t.Errorf("lease_waits_total{result=shared} = %v; want 1 (instance 1 took instance 0's result)", got)
	}
}

// leaseSpy reports every Acquire that found the lease held.
type leaseSpy struct {
	Lease
	denied chan struct{}
}

func (l *leaseSpy) Acquire(ctx context.Context, key string, ttl time.Duration) (func(), bool, error) {
	release, ok, err := l.Lease.Acquire(ctx, key, ttl)
	if err == nil && !ok {
		select {
		case l.denied <- struct{}{}:
		default:
		}
	}
	return release, ok, err
}
