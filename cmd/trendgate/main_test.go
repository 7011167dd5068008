package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"trendgate/auth"

	"github.com/redis/go-redis/v9"
)

// TestKeysNewAndHash: the printed secret is a valid key, its digest is the
// one in the printed config lines, and "keys hash" reproduces it.
func TestKeysNewAndHash(t *testing.T) {
	var out bytes.Buffer
	if err := run([]string{"keys", "new", "-id", "team-a", "-plan", "full"}, nil, &out, &out); err != nil {
		t.Fatal(err)
	}
	var secret, digest string
	for _, line := range strings.Split(out.String(), "\n") {
		if s, ok := strings.CutPrefix(line, "secret: "); ok {
			secret = s
		}
		if d, ok := strings.CutPrefix(strings.TrimSpace(line), "sha256: "); ok {
			digest = d
		}
	}
	if err := auth.CheckFormat(secret); err != nil {
		t.Fatalf("printed secret %q: %v", secret, err)
	}
	if digest != auth.Digest(secret) {
		t.Fatalf("printed digest %q; want %q", digest, auth.Digest(secret))
	}
	if !strings.Contains(out.String(), "- id: team-a") || !strings.Contains(out.String(), "plan: full") {
		t.Errorf("config lines missing:\n%s", out.String())
	}

	var hashed bytes.Buffer
	if err := run([]string{"keys", "hash"}, strings.NewReader(secret+"\n"), &hashed, &hashed); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(hashed.String()); got != digest {
		t.Errorf("keys hash: got %q; want %q", got, digest)
	}
	// A non-key on stdin is refused without echoing it.
	err := run([]string{"keys", "hash"}, strings.NewReader("hunter2\n"), &hashed, &hashed)
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("keys hash of a non-key: %v", err)
	}
	if err := run([]string{"keys", "new", "-id", "x"}, nil, &out, &out); err == nil {
		t.Error("keys new without -plan succeeded")
	}
}

// TestConfigCheck: the example passes; a broken file fails with its path.
func TestConfigCheck(t *testing.T) {
	t.Setenv("TRENDGATE_UPSTREAM_KEY", "test-upstream-key")
	var out bytes.Buffer
	if err := run([]string{"config", "check", "../../config.example.yaml"}, nil, &out, &out); err != nil {
		t.Fatalf("example config: %v", err)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("server:\n  listen: nowhere\nkeys:\n  - id: a\n    sha256: xyz\n    plan: gold\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := run([]string{"config", "check", bad}, nil, &out, &out)
	if err == nil {
		t.Fatal("broken config passed the check")
	}
	for _, want := range []string{"server.listen", "keys[0].sha256", "keys[0].plan"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

// TestConfigCheckWarnsOfSharedClientAddress: a public listener with no
// trusted proxies passes the check with a warning naming the setting; a
// loopback listener gets none.
func TestConfigCheckWarnsOfSharedClientAddress(t *testing.T) {
	t.Setenv("TRENDGATE_UPSTREAM_KEY", "test-upstream-key")
	example, err := os.ReadFile("../../config.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		listen string
		warn   bool
	}{{"127.0.0.1:8080", false}, {"[::1]:8080", false}, {"localhost:8080", false}, {"0.0.0.0:443", true}, {":443", true}} {
		file := filepath.Join(t.TempDir(), "c.yaml")
		body := strings.Replace(string(example), "listen: 127.0.0.1:8080", "listen: \""+c.listen+"\"", 1)
		if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		if err := run([]string{"config", "check", file}, nil, &out, &out); err != nil {
			t.Fatalf("listen %s: %v", c.listen, err)
		}
		got := strings.Contains(out.String(), "warning: server.trusted_proxies: empty")
		if got != c.warn {
			t.Errorf("listen %s: warning %v; want %v\n%s", c.listen, got, c.warn, out.String())
		}
	}
}

// TestConfigCheckPersistPath: config check passes with cache.persist_path
// in a writable directory and warns (still passing) when the directory is
// missing or the path is a directory; see cache.CheckPersistPath.
func TestConfigCheckPersistPath(t *testing.T) {
	t.Setenv("TRENDGATE_UPSTREAM_KEY", "test-upstream-key")
	example, err := os.ReadFile("../../config.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, c := range []struct {
		name, path string
		warn       bool
	}{
		{"writable directory", filepath.Join(dir, "cache.snap"), false},
		{"missing directory", filepath.Join(dir, "missing", "cache.snap"), true},
		{"a directory", dir, true},
	} {
		file := filepath.Join(t.TempDir(), "c.yaml")
		body := strings.Replace(string(example), `persist_path: ""`, `persist_path: "`+c.path+`"`, 1)
		if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		if err := run([]string{"config", "check", file}, nil, &out, &out); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		got := strings.Contains(out.String(), "warning: cache.persist_path: ")
		if got != c.warn {
			t.Errorf("%s: warning %v; want %v\n%s", c.name, got, c.warn, out.String())
		}
	}
}

// TestUnknownCommand and help.
func TestUnknownCommandAndHelp(t *testing.T) {
	var out bytes.Buffer
	if err := run([]string{"frobnicate"}, nil, &out, &out); err == nil {
		t.Error("unknown command accepted")
	}
	out.Reset()
	if err := run([]string{"-help"}, nil, &out, &out); err != nil || !strings.Contains(out.String(), "trendgate serve -config FILE") {
		t.Errorf("help: %v\n%s", err, out.String())
	}
}

// TestRedisClientLinesAreJSON: go-redis's own log lines (here a failed
// dial to a closed loopback port) reach the JSON log, not plain stderr.
func TestRedisClientLinesAreJSON(t *testing.T) {
	var out bytes.Buffer
	log, stop, err := newLogger("info", &out)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	_ = rdb.Ping(context.Background()).Err()
	_ = rdb.Close()
	_ = log.Sync()
	stop()
	found := false
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if !json.Valid([]byte(line)) {
			t.Errorf("not JSON: %q", line)
		}
		found = found || strings.Contains(line, `"logger":"redis"`)
	}
	if !found {
		t.Errorf("no go-redis line in the JSON log:\n%s", out.String())
	}
}
