// Package redistest connects tests to the Redis that the development and CI
// machines run on 127.0.0.1:6379, and starts private Redis Clusters (three
// primaries on loopback ports, from the redis-server and redis-cli
// binaries). Without a reachable Redis or the binaries a test is skipped
// with a message, except when CI=true, where it fails: there the
// Redis-backed tests must run (.ci/run installs and starts Redis first).
package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Addr is the shared test Redis.
const Addr = "127.0.0.1:6379"

// Client returns a client for the Redis at addr, closed when the test ends.
// It skips the test when addr does not answer, or fails it when CI=true.
func Client(t testing.TB, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		_ = c.Close()
		if os.Getenv("CI") == "true" {
			t.Fatalf("redis at %s unreachable (CI=true requires it): %v", addr, err)
		}
		t.Skipf("redis at %s unreachable, skipping: %v", addr, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Prefix returns a fresh "tg:test:<random>:" key prefix. When the test ends
// every key under it is deleted through each of clients (one per database
// the test wrote to), which must still be open then: get them from Client
// before calling Prefix.
func Prefix(t testing.TB, clients ...*redis.Client) string {
	t.Helper()
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	prefix := "tg:test:" + hex.EncodeToString(b[:]) + ":"
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for _, c := range clients {
			iter := c.Scan(ctx, 0, prefix+"*", 500).Iterator()
			for iter.Next(ctx) {
				if err := c.Del(ctx, iter.Val()).Err(); err != nil {
					t.Errorf("redistest: cleanup %s: %v", prefix, err)
					return
				}
			}
			if err := iter.Err(); err != nil {
				t.Errorf("redistest: cleanup %s: %v", prefix, err)
			}
		}
	})
	return prefix
}
