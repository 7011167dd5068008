package cache

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"trendgate/internal/clock"
	"trendgate/internal/testing/redistest"
)

// TestRedisStoreOnCluster runs the shared tier and the lease on a private
// 3-primary Redis Cluster: entries and topic indexes of 30 keys land on
// several primaries (their keys are not tagged: no command or script of the
// tier spans two keys that must share a slot), reads validate, a topic
// purge reaches them, and Clear scans and empties every primary.
func TestRedisStoreOnCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	rdb := cl.Client()
	const prefix = "tg:c:"
	ctx := context.Background()
	clk := clock.NewFake(time.Now())
	s := newRedisStore(t, rdb, RedisStoreOptions{Prefix: prefix, Clock: clk}, nil)

	var keys []string
	for i := range 30 {
		topic := fmt.Sprintf("topic%d", i%10)
		k := fmt.Sprintf("v2|series|%s|hour|%dd||", topic, i)
		keys = append(keys, k)
		s.Set(ctx, entry(k, topic, clk.Now(), time.Minute, `{"data":[]}`))
	}
	for _, k := range keys {
		if _, ok := s.Get(ctx, k); !ok {
			t.Fatalf("Get(%q): miss; want the entry just stored", k)
		}
	}
	perNode := keysPerPrimary(t, cl, prefix+"*")
	if len(perNode) < 2 {
		t.Errorf("keys on %d primaries (%v); want them spread over several", len(perNode), perNode)
	}

	c, err := New(DefaultConfig(), Tiered(newLocal(t, 1<<20, nil), s), clk, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Purge(ctx, Selector{Topic: "topic3"}); got != 3 {
		t.Errorf("Purge(topic3) = %d; want 3", got)
	}
	if _, ok := s.Get(ctx, keys[3]); ok {
		t.Errorf("purged entry %q still in the shared tier", keys[3])
	}

	l := NewRedisLease(rdb, "tg:lease:", time.Second, nil)
	release, ok, err := l.Acquire(ctx, keys[0], time.Minute)
	if err != nil || !ok {
		t.Fatalf("lease Acquire = %v, %v; want ok", ok, err)
	}
	release()

	s.Clear(ctx)
	if left := keysPerPrimary(t, cl, prefix+"*"); len(left) != 0 {
		t.Errorf("keys left after Clear: %v; want none on any primary", left)
	}
}

// keysPerPrimary counts the keys matching pattern on each primary.
func keysPerPrimary(t *testing.T, cl *redistest.Cluster, pattern string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, a := range cl.Addrs() {
		rc := redis.NewClient(&redis.Options{Addr: a})
		n, err := rc.Keys(context.Background(), pattern).Result()
		_ = rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		if len(n) > 0 {
			out[a] = len(n)
		}
	}
	return out
}
