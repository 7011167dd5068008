package gateway_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.yaml.in/yaml/v3"

	"trendgate/config"
	"trendgate/gateway"
	"trendgate/internal/clock"
	"trendgate/internal/testing/redistest"
	"trendgate/keystore"
)

// scaleKeys is the number of configured keys of the scale benchmarks.
const scaleKeys = 100_000

// scaleConfig writes a configuration file of n keys, each an account of
// its own on plan full, with a keys_file beside it, and returns its path.
func scaleConfig(b *testing.B, n int) string {
	b.Helper()
	dir := b.TempDir()
	cfg := config.Default()
	cfg.Upstream.BaseURL = "http://127.0.0.1:1"
	cfg.Upstream.APIKey = "upstream-key-for-benchmarks"
	cfg.Admin.Token = "admin-token-for-benchmarks"
	cfg.KeysFile = filepath.Join(dir, "keys.yaml")
	cfg.Keys = make([]config.Key, n)
	for i := range cfg.Keys {
		sum := sha256.Sum256([]byte("bench-key-" + strconv.Itoa(i)))
		cfg.Keys[i] = config.Key{ID: fmt.Sprintf("k%06d", i), SHA256: hex.EncodeToString(sum[:]), Plan: "full"}
	}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(dir, "trendgate.yaml")
	if err := os.WriteFile(path, out, 0o600); err != nil {
		b.Fatal(err)
	}
	return path
}

func scaleGateway(b *testing.B, path string) *gateway.Gateway {
	b.Helper()
	cfg, err := config.Load(path)
	if err != nil {
		b.Fatal(err)
	}
	g, err := gateway.New(cfg, gateway.Options{Clock: clock.Real{}, Logger: zap.NewNop()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = g.Close() })
	return g
}

// BenchmarkReload100k is what a SIGHUP costs with 100,000 configured
// keys and none of them changed: the file read and decoded again, then
// the gateway's Reload.
func BenchmarkReload100k(b *testing.B) {
	path := scaleConfig(b, scaleKeys)
	g := scaleGateway(b, path)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		cfg, err := config.Load(path)
		if err != nil {
			b.Fatal(err)
		}
		if err := g.Reload(cfg); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReloadOnly100k is the gateway's Reload alone, the file
// already decoded.
func BenchmarkReloadOnly100k(b *testing.B) {
	path := scaleConfig(b, scaleKeys)
	g := scaleGateway(b, path)
	cfg, err := config.Load(path)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if err := g.Reload(cfg); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCreateKeyAt100k is one key created through the key API with
// 100,000 keys configured: stored in keys_file and put in force.
func BenchmarkCreateKeyAt100k(b *testing.B) {
	path := scaleConfig(b, scaleKeys)
	g := scaleGateway(b, path)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if _, err := g.Keys().CreateKey(context.Background(), "bench", keystore.NewKey{ID: "new-" + strconv.Itoa(i), Plan: "full"}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkClusterCreateKeyAt100k is one key created through the key API
// in cluster mode, with 100,000 keys already made through the API (the
// shared document in Redis holds them all), on one instance, then put in
// force on a second instance by its poll: the issue 45 case where a
// create at this size answered 503 while Redis stored the key. It reports
// the create (ns/op) and the second instance's catch-up (sync-ns/op).
func BenchmarkClusterCreateKeyAt100k(b *testing.B) {
	counters := redistest.Client(b, redistest.Addr)
	cache := redis.NewClient(&redis.Options{Addr: redistest.Addr, DB: 1})
	b.Cleanup(func() { _ = cache.Close() })
	prefix := redistest.Prefix(b, counters, cache)
	path := scaleConfig(b, 0)
	cfg, err := config.Load(path)
	if err != nil {
		b.Fatal(err)
	}
	cfg.Redis.URL = "redis://" + redistest.Addr + "/0"
	cfg.Redis.Prefix = prefix
	// The shared document: 100,000 keys made through the API.
	d := &keystore.Doc{Version: 1}
	created := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	for i := range scaleKeys {
		sum := sha256.Sum256([]byte("api-key-" + strconv.Itoa(i)))
		d.Keys = append(d.Keys, keystore.Key{ID: fmt.Sprintf("api%06d", i), SHA256: hex.EncodeToString(sum[:]), Plan: "full", Created: created})
	}
	snap, err := keystore.Encode(d)
	if err != nil {
		b.Fatal(err)
	}
	if err := counters.HSet(context.Background(), prefix+"{keys}:doc", "version", 1, "snap", snap, "snap_version", 1).Err(); err != nil {
		b.Fatal(err)
	}
	if err := counters.Expire(context.Background(), prefix+"{keys}:doc", time.Hour).Err(); err != nil {
		b.Fatal(err)
	}
	open := func() *gateway.Gateway {
		c := *cfg
		c.KeysFile = filepath.Join(b.TempDir(), "keys.yaml")
		g, err := gateway.New(&c, gateway.Options{Clock: clock.Real{}, Logger: zap.NewNop()})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = g.Close() })
		return g
	}
	a, other := open(), open()
	if n := len(other.Config().Keys); n != scaleKeys {
		b.Fatalf("the second instance holds %d keys; want %d", n, scaleKeys)
	}
	b.ReportAllocs()
	b.ResetTimer()
	var syncing time.Duration
	for i := range b.N {
		id := fmt.Sprintf("new-%d-%d", b.N, i)
		if _, err := a.Keys().CreateKey(context.Background(), "bench", keystore.NewKey{ID: id, Plan: "full"}); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		t0 := time.Now()
		if err := other.Keys().SyncKeys(context.Background()); err != nil {
			b.Fatal(err)
		}
		syncing += time.Since(t0)
		if !slices.ContainsFunc(other.Config().Keys, func(k config.Key) bool { return k.ID == id }) {
			b.Fatalf("key %s is not in force on the second instance after its poll", id)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(syncing.Nanoseconds())/float64(b.N), "sync-ns/op")
}
