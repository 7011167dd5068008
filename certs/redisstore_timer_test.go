package certs

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"

	"trendgate/internal/clock"
	"trendgate/internal/testing/redistest"
)

// The lock's keep-alive and poll run on real timers; these tests drive
// them with the bubble's fake time (testing/synctest), so they wait for no
// wall time. Redis itself runs on real time, so TTLs are read, never
// waited for.

// newBubbleStorage is a RedisStorage created inside the current bubble,
// with its own client, closed when the bubble's test ends.
func newBubbleStorage(t *testing.T, prefix string, ttl, poll time.Duration) (*RedisStorage, *redis.Client) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: redistest.Addr})
	s, err := NewRedisStorage(rdb, RedisStorageOptions{Prefix: prefix, LockTTL: ttl, LockPoll: poll, Clock: clock.Real{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(); _ = rdb.Close() })
	return s, rdb
}

// TestRedisStorageKeepAliveOnItsTicker: a held lock's TTL is extended
// every LockTTL/3 and, once another holder has taken the lock over, the
// keep-alive stops at its next tick.
func TestRedisStorageKeepAliveOnItsTicker(t *testing.T) {
	_, prefix := certRedis(t)
	synctest.Test(t, func(t *testing.T) {
		const ttl = 3 * time.Second
		s, rdb := newBubbleStorage(t, prefix, ttl, time.Second)
		ctx := context.Background()
		const name = "issue_cert_keepalive.test"
		key := prefix + "lock:" + name
		if err := s.Lock(ctx, name); err != nil {
			t.Fatal(err)
		}
		// A long TTL shows whether a refresh (back to LockTTL) happened.
		if err := rdb.PExpire(ctx, key, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(ttl/3 - time.Millisecond)
		synctest.Wait()
		if pttl, _ := rdb.PTTL(ctx, key).Result(); pttl <= ttl {
			t.Fatalf("TTL before the first tick: got %v; want the minute set by the test (no refresh yet)", pttl)
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if pttl, _ := rdb.PTTL(ctx, key).Result(); pttl <= 0 || pttl > ttl {
			t.Fatalf("TTL after the first tick: got %v; want within (0, %v] (refreshed)", pttl, ttl)
		}

		s.mu.Lock()
		h := s.held[name]
		s.mu.Unlock()
		if err := rdb.Set(ctx, key, "another-instance", redis.KeepTTL).Err(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(ttl / 3)
		synctest.Wait()
		select {
		case <-h.done:
		default:
			t.Fatal("keep-alive still running after the lock was taken over")
		}
		if got, _ := rdb.Get(ctx, key).Result(); got != "another-instance" {
			t.Errorf("lock value: got %q; want the new owner's", got)
		}
	})
}

// TestRedisStorageLockPollsEveryLockPoll: a Lock blocked by another holder
// tries again every LockPoll, and takes the lock at the first try after
// the holder released it.
func TestRedisStorageLockPollsEveryLockPoll(t *testing.T) {
	_, prefix := certRedis(t)
	synctest.Test(t, func(t *testing.T) {
		const poll = time.Second
		a, _ := newBubbleStorage(t, prefix, 30*time.Second, poll)
		b, _ := newBubbleStorage(t, prefix, 30*time.Second, poll)
		ctx := context.Background()
		const name = "issue_cert_poll.test"
		if err := a.Lock(ctx, name); err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		go func() { got <- b.Lock(ctx, name) }()
		synctest.Wait() // b tried once and waits for its poll timer
		if err := a.Unlock(ctx, name); err != nil {
			t.Fatal(err)
		}
		time.Sleep(poll - time.Millisecond)
		synctest.Wait()
		select {
		case err := <-got:
			t.Fatalf("Lock returned (%v) before its next poll", err)
		default:
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		select {
		case err := <-got:
			if err != nil {
				t.Fatalf("Lock after the holder released: %v", err)
			}
		default:
			t.Fatal("Lock still blocked one poll after the holder released")
		}
		if err := b.Unlock(ctx, name); err != nil {
			t.Fatal(err)
		}
	})
}
