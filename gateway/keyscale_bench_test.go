package gateway_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"go.uber.org/zap"
	"gopkg.in/yaml.v3"

	"trendgate/config"
	"trendgate/gateway"
	"trendgate/internal/clock"
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
		if _, err := g.CreateKey(context.Background(), "bench", keystore.NewKey{ID: "new-" + strconv.Itoa(i), Plan: "full"}); err != nil {
			b.Fatal(err)
		}
	}
}
