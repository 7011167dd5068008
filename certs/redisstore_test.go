package certs

import (
	"context"
	"errors"
	"io/fs"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"trendgate/internal/clock"
	"trendgate/internal/testing/redistest"
)

// certTestNow is the fake clock's time for Stat's Modified.
var certTestNow = time.Date(2026, 11, 19, 10, 30, 15, 0, time.UTC)

// certRedis connects to the shared test Redis, skipping when it is
// unreachable unless CI=true. It returns a client and a unique key prefix
// whose keys are deleted when the test ends.
func certRedis(t testing.TB) (*redis.Client, string) {
	t.Helper()
	rdb := redistest.Client(t, redistest.Addr)
	return rdb, redistest.Prefix(t, rdb) + "certs:"
}

func newTestStorage(t testing.TB, rdb redis.UniversalClient, prefix string, clk clock.Clock) *RedisStorage {
	t.Helper()
	s, err := NewRedisStorage(rdb, RedisStorageOptions{Prefix: prefix, LockTTL: 10 * time.Second, LockPoll: time.Millisecond, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestNewRedisStorageValidates(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never contacted
	defer rdb.Close()
	tests := []struct {
		name string
		rdb  redis.UniversalClient
		opts RedisStorageOptions
		ok   bool
	}{
		{"defaults", rdb, RedisStorageOptions{Prefix: "p:"}, true},
		{"nil client", nil, RedisStorageOptions{Prefix: "p:"}, false},
		{"empty prefix", rdb, RedisStorageOptions{}, false},
		{"ttl too short", rdb, RedisStorageOptions{Prefix: "p:", LockTTL: time.Millisecond}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := NewRedisStorage(tc.rdb, tc.opts)
			if (err == nil) != tc.ok {
				t.Fatalf("got error %v; want ok=%v", err, tc.ok)
			}
			if s != nil && (s.ttl != 30*time.Second || s.poll != time.Second) {
				t.Errorf("defaults: got ttl %v poll %v; want 30s and 1s", s.ttl, s.poll)
			}
		})
	}
}

// TestRedisStorageFiles checks the file-system semantics certmagic relies
// on: component-wise prefixes, implicit directories, recursive listing and
// directory deletion.
// TestRedisStorageFiles runs on the shared single Redis and on a private
// 3-primary Redis Cluster with the cluster prefix ("{certs}" tag), where
// the delete script's keys must share one slot.
func TestRedisStorageFiles(t *testing.T) {
	t.Run("single", func(t *testing.T) {
		rdb, prefix := certRedis(t)
		testRedisStorageFiles(t, rdb, prefix)
	})
	t.Run("cluster", func(t *testing.T) {
		cl := redistest.StartCluster(t)
		testRedisStorageFiles(t, cl.Client(), StoragePrefix("tg:", true))
	})
}

func testRedisStorageFiles(t *testing.T, rdb redis.UniversalClient, prefix string) {
	clk := clock.NewFake(certTestNow)
	s := newTestStorage(t, rdb, prefix, clk)
	ctx := context.Background()
	files := map[string]string{
		"certificates/acme/tg.test/tg.test.crt":  "CERT",
		"certificates/acme/tg.test/tg.test.key":  "KEY",
		"certificates/acme/tg.test/tg.test.json": "{}",
		"certificates-old/x":                     "sorts before certificates/",
		"certificates0":                          "sorts just after certificates/",
		"acme/accounts/ops/ops.key":              "ACCOUNT",
		"other":                                  "",
	}
	for k, v := range files {
		if err := s.Store(ctx, k, []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Store(ctx, "other", []byte("replaced")); err != nil {
		t.Fatal(err)
	}
	files["other"] = "replaced"

	t.Run("load", func(t *testing.T) {
		for k, want := range files {
			got, err := s.Load(ctx, k)
			if err != nil || string(got) != want {
				t.Errorf("Load(%q): got %q, %v; want %q", k, got, err, want)
			}
		}
		if _, err := s.Load(ctx, "certificates"); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("Load(directory): got %v; want fs.ErrNotExist", err)
		}
	})

	t.Run("exists and stat", func(t *testing.T) {
		tests := []struct {
			key              string
			exists, terminal bool
			size             int64
		}{
			{"certificates/acme/tg.test/tg.test.crt", true, true, 4},
			{"certificates/acme/tg.test", true, false, 0},
			{"certificates", true, false, 0},
			{"certificates/acme/tg", false, false, 0}, // not a whole component
			{"cert", false, false, 0},
			{"missing", false, false, 0},
			{"other", true, true, 8},
		}
		for _, tc := range tests {
			if got := s.Exists(ctx, tc.key); got != tc.exists {
				t.Errorf("Exists(%q): got %v; want %v", tc.key, got, tc.exists)
			}
			info, err := s.Stat(ctx, tc.key)
			if !tc.exists {
				if !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("Stat(%q): got %+v, %v; want fs.ErrNotExist", tc.key, info, err)
				}
				continue
			}
			if err != nil || info.Key != tc.key || info.IsTerminal != tc.terminal || info.Size != tc.size {
				t.Errorf("Stat(%q): got %+v, %v; want terminal=%v size=%d", tc.key, info, err, tc.terminal, tc.size)
			}
			if tc.terminal && !info.Modified.Equal(certTestNow) {
				t.Errorf("Stat(%q).Modified: got %v; want %v", tc.key, info.Modified, certTestNow)
			}
		}
	})

	t.Run("list", func(t *testing.T) {
		tests := []struct {
			dir       string
			recursive bool
			want      []string
		}{
			{"certificates", false, []string{"certificates/acme"}},
			{"certificates/acme/tg.test", false, []string{
				"certificates/acme/tg.test/tg.test.crt", "certificates/acme/tg.test/tg.test.json", "certificates/acme/tg.test/tg.test.key"}},
			{"certificates", true, []string{
				"certificates/acme", "certificates/acme/tg.test",
				"certificates/acme/tg.test/tg.test.crt", "certificates/acme/tg.test/tg.test.json", "certificates/acme/tg.test/tg.test.key"}},
			{"", false, []string{"acme", "certificates", "certificates-old", "certificates0", "other"}},
		}
		for _, tc := range tests {
			got, err := s.List(ctx, tc.dir, tc.recursive)
			if err != nil || !slices.Equal(got, tc.want) {
				t.Errorf("List(%q, %v): got %q, %v; want %q", tc.dir, tc.recursive, got, err, tc.want)
			}
		}
		if got, err := s.List(ctx, "missing", true); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("List(missing): got %q, %v; want fs.ErrNotExist", got, err)
		}
	})

	t.Run("delete", func(t *testing.T) {
		if err := s.Delete(ctx, "certificates"); err != nil {
			t.Fatal(err)
		}
		if err := s.Delete(ctx, "certificates"); err != nil {
			t.Errorf("deleting a missing key: got %v; want nil", err)
		}
		for k, want := range files {
			got, err := s.Load(ctx, k)
			gone := errors.Is(err, fs.ErrNotExist)
			inside := len(k) > len("certificates/") && k[:len("certificates/")] == "certificates/"
			if gone != inside || (!gone && string(got) != want) {
				t.Errorf("after Delete(certificates), Load(%q): got %q, %v; want deleted=%v", k, got, err, inside)
			}
		}
		if s.Exists(ctx, "certificates") {
			t.Error("the deleted directory still exists")
		}
		if err := s.Delete(ctx, "other"); err != nil || s.Exists(ctx, "other") {
			t.Errorf("Delete(file): err %v, still exists %v", err, s.Exists(ctx, "other"))
		}
	})
}

// TestRedisStorageLockContention has two storages (as two gateway
// instances) contend for one lock.
func TestRedisStorageLockContention(t *testing.T) {
	rdbA, prefix := certRedis(t)
	rdbB := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdbB.Close()
	clk := clock.NewFake(certTestNow)
	a := newTestStorage(t, rdbA, prefix, clk)
	b := newTestStorage(t, rdbB, prefix, clk)
	ctx := context.Background()
	const name = "issue_cert_tg.test"

	if err := a.Lock(ctx, name); err != nil {
		t.Fatal(err)
	}
	pttl, err := rdbA.PTTL(ctx, prefix+"lock:"+name).Result()
	if err != nil || pttl <= 0 || pttl > 10*time.Second {
		t.Errorf("lock TTL: got %v, %v; want within (0, 10s]", pttl, err)
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if err := b.Lock(canceled, name); !errors.Is(err, context.Canceled) {
		t.Fatalf("B.Lock while A holds it: got %v; want context.Canceled", err)
	}
	if err := b.Unlock(ctx, name); !errors.Is(err, ErrLockNotHeld) {
		t.Errorf("B.Unlock of A's lock: got %v; want ErrLockNotHeld", err)
	}
	if n, _ := rdbA.Exists(ctx, prefix+"lock:"+name).Result(); n != 1 {
		t.Fatal("B's Unlock removed A's lock")
	}

	got := make(chan error, 1)
	bctx, bcancel := context.WithTimeout(ctx, 10*time.Second)
	defer bcancel()
	go func() { got <- b.Lock(bctx, name) }()
	if err := a.Unlock(ctx, name); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("B.Lock after A unlocked: %v", err)
	}
	if err := b.Unlock(ctx, name); err != nil {
		t.Fatal(err)
	}

	// Mutual exclusion: a read-modify-write counter under the lock loses
	// no update.
	const perInstance = 25
	var wg sync.WaitGroup
	errc := make(chan error, 2)
	for _, s := range []*RedisStorage{a, b} {
		wg.Go(func() {
			for range perInstance {
				if err := incrementUnderLock(ctx, s, name, "counter"); err != nil {
					errc <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	v, err := a.Load(ctx, "counter")
	if err != nil || string(v) != strconv.Itoa(2*perInstance) {
		t.Errorf("counter: got %q, %v; want %d", v, err, 2*perInstance)
	}
}

func incrementUnderLock(ctx context.Context, s *RedisStorage, lock, key string) error {
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := s.Lock(lctx, lock); err != nil {
		return err
	}
	defer s.Unlock(ctx, lock)
	n := 0
	if b, err := s.Load(ctx, key); err == nil {
		n, _ = strconv.Atoi(string(b))
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return s.Store(ctx, key, []byte(strconv.Itoa(n+1)))
}

// TestRedisStorageLostLock: a holder whose lock expired and was taken over
// neither refreshes nor deletes the new owner's lock.
func TestRedisStorageLostLock(t *testing.T) {
	rdb, prefix := certRedis(t)
	clk := clock.NewFake(certTestNow)
	a := newTestStorage(t, rdb, prefix, clk)
	b := newTestStorage(t, rdb, prefix, clk)
	ctx := context.Background()
	const name = "renew"
	key := prefix + "lock:" + name

	if err := a.Lock(ctx, name); err != nil {
		t.Fatal(err)
	}
	tokenA := a.held[name].token
	if err := rdb.PExpire(ctx, key, 100*time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	if ok, err := a.refresh(ctx, name, tokenA); !ok || err != nil {
		t.Fatalf("refresh by the owner: got %v, %v; want true", ok, err)
	}
	if pttl, _ := rdb.PTTL(ctx, key).Result(); pttl <= time.Second {
		t.Errorf("TTL after refresh: got %v; want about 10s", pttl)
	}

	if err := rdb.Del(ctx, key).Err(); err != nil { // A's lock expires
		t.Fatal(err)
	}
	if err := b.Lock(ctx, name); err != nil {
		t.Fatal(err)
	}
	if ok, err := a.refresh(ctx, name, tokenA); ok || err != nil {
		t.Errorf("refresh by the former owner: got %v, %v; want false", ok, err)
	}
	if err := a.Unlock(ctx, name); err != nil {
		t.Errorf("A.Unlock of a lost lock: %v", err)
	}
	if got, _ := rdb.Get(ctx, key).Result(); got != b.held[name].token {
		t.Fatalf("after A's late Unlock the lock holds %q; want B's token", got)
	}
}

// TestRedisStorageClose: Close releases held locks and ends a blocked Lock.
func TestRedisStorageClose(t *testing.T) {
	rdb, prefix := certRedis(t)
	clk := clock.NewFake(certTestNow)
	a := newTestStorage(t, rdb, prefix, clk)
	b := newTestStorage(t, rdb, prefix, clk)
	ctx := context.Background()
	if err := a.Lock(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	blocked := make(chan error, 1)
	bctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	go func() { blocked <- b.Lock(bctx, "x") }()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-blocked; err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("blocked Lock after Close: got %v; want a storage-closed error", err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if n, _ := rdb.Exists(ctx, prefix+"lock:x").Result(); n != 0 {
		t.Error("Close left its lock in Redis")
	}
}

// BenchmarkRedisStorageLoad measures loading a 4 KiB certificate bundle
// from the local Redis (one round trip).
func BenchmarkRedisStorageLoad(b *testing.B) {
	rdb, prefix := certRedis(b)
	s := newTestStorage(b, rdb, prefix, clock.NewFake(certTestNow))
	ctx := context.Background()
	const key = "certificates/acme/tg.test/tg.test.crt"
	if err := s.Store(ctx, key, make([]byte, 4096)); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Load(ctx, key); err != nil {
			b.Fatal(err)
		}
	}
}
