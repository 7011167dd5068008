package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"trendgate/auth"
	"trendgate/internal/buildinfo"

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
	if err := run([]string{"-help"}, nil, &out, &out); err != nil || !strings.Contains(out.String(), "trendgate serve [-config] FILE") {
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

// TestHelpEverywhere is a regression test: trendgate -help did not list
// the demo-mode flags, "config check -help" and "keys -help" were errors,
// and demo-upstream -help listed fault names (5xx, 429) it rejects.
func TestHelpEverywhere(t *testing.T) {
	tests := []struct {
		args []string
		want []string
	}{
		{[]string{"-help"}, []string{"trendgate serve [-config] FILE", "healthcheck [-ready]", "-listen ADDR", "-admin ADDR", "-log-level LEVEL", "-upstream-latency"}},
		{[]string{"--help"}, []string{"Demo mode flags:", "-upstream-latency"}},
		{[]string{"help"}, []string{"trendgate version", "-listen ADDR"}},
		{[]string{"config", "check", "-help"}, []string{"Usage: trendgate config check [-config] FILE"}},
		{[]string{"config", "-h"}, []string{"Usage: trendgate config check [-config] FILE"}},
		{[]string{"keys", "-help"}, []string{"trendgate keys new -id ID -plan PLAN", "trendgate keys hash", "keys usage [-config FILE | -admin ADDR]"}},
		{[]string{"keys", "new", "-help"}, []string{"-id ID", "-plan PLAN"}},
		{[]string{"keys", "hash", "-h"}, []string{"Usage: trendgate keys hash"}},
		{[]string{"serve", "-help"}, []string{"-config FILE", "-watch"}},
		{[]string{"healthcheck", "-help"}, []string{"-config FILE", "-url URL", "-ready", "needs admin.token"}},
		{[]string{"demo-upstream", "-help"}, []string{"none, server-error, rate-limit, garbage, wrong-shape, oversize, hang, flap, reset"}},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var out, errOut bytes.Buffer
			if err := run(tc.args, nil, &out, &errOut); err != nil {
				t.Fatalf("run: %v; want help and no error", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("stdout lacks %q:\n%s", w, out.String())
				}
			}
			if strings.Contains(out.String(), "5xx") {
				t.Errorf("help lists the fault name 5xx, which is refused")
			}
		})
	}
	var out bytes.Buffer
	err := run([]string{"demo-upstream", "-fault", "5xx"}, nil, &out, &out)
	if err == nil || !strings.Contains(err.Error(), "server-error") {
		t.Errorf("demo-upstream -fault 5xx: %v; want an error listing the valid names", err)
	}
}

// TestKeysNewRefusesWhatConfigRefuses is a regression test: keys new
// printed lines for an id the config then refused, said nothing of a plan
// that is not built in, and keys hash of a mistyped key only said it was
// not a key.
func TestKeysNewRefusesWhatConfigRefuses(t *testing.T) {
	tests := []struct {
		args    []string
		wantErr string
		wantOut string
	}{
		{[]string{"keys", "new", "-id", "team a", "-plan", "full"}, `-id: config: "team a" is not a valid name`, ""},
		{[]string{"keys", "new", "-id", strings.Repeat("x", 65), "-plan", "full"}, "is not a valid name", ""},
		{[]string{"keys", "new", "-id", "team-b", "-plan", "gold plan"}, "-plan: config:", ""},
		{[]string{"keys", "new", "-id", "team-b", "-plan", "gold"}, "", `"gold" is not a built-in plan`},
		{[]string{"keys", "new", "-id", "team-c", "-plan", "limited"}, "", "plan: limited"},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var out bytes.Buffer
			err := run(tc.args, nil, &out, &out)
			switch {
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("err = %v; want %q", err, tc.wantErr)
			case tc.wantErr == "" && err != nil:
				t.Fatalf("err = %v", err)
			}
			if tc.wantErr != "" && strings.Contains(out.String(), "secret:") {
				t.Errorf("a refused key printed a secret:\n%s", out.String())
			}
			if !strings.Contains(out.String(), tc.wantOut) {
				t.Errorf("stdout lacks %q:\n%s", tc.wantOut, out.String())
			}
			if tc.wantOut == "plan: limited" && strings.Contains(out.String(), "not a built-in plan") {
				t.Errorf("built-in plan limited flagged as not built in")
			}
		})
	}
	key, err := auth.Generate()
	if err != nil {
		t.Fatal(err)
	}
	mistyped := key[:len(key)-1] + "a" // one wrong character of the checksum
	if key[len(key)-1] == 'a' {
		mistyped = key[:len(key)-1] + "b"
	}
	var out bytes.Buffer
	err = run([]string{"keys", "hash"}, strings.NewReader(mistyped+"\n"), &out, &out)
	if err == nil || !strings.Contains(err.Error(), "checksum does not match") {
		t.Errorf("keys hash of a mistyped key: %v; want a checksum mismatch", err)
	}
}

// TestVersion: "version" and "-version" print the build's version, commit
// and Go version (they were an unknown command and an undefined flag).
func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"-version"}, {"--version"}} {
		var out bytes.Buffer
		if err := run(args, nil, &out, &out); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		b := buildinfo.Read()
		if got, want := strings.TrimSpace(out.String()), b.String(); got != want || !strings.Contains(got, b.GoVersion) {
			t.Errorf("%v printed %q; want %q", args, got, want)
		}
	}
}

// TestHealthcheckFollowsAdminListen: with -config, the health check probes
// the admin listener the file configures (the Dockerfile's health check
// used a fixed 127.0.0.1:9090 whatever admin.listen said).
func TestHealthcheckFollowsAdminListen(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			http.NotFound(w, r)
			return
		}
		_, _ = io.WriteString(w, `{"status":"ok"}`)
	}), ReadHeaderTimeout: time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	_, port, _ := net.SplitHostPort(ln.Addr().String())

	t.Setenv("TG_TEST_ADMIN_PORT", port)
	tests := []struct {
		name, yaml string
		wantErr    string
	}{
		{"explicit", "admin:\n  listen: 127.0.0.1:" + port + "\n", ""},
		{"wildcard host, from env", "admin:\n  listen: \":${TG_TEST_ADMIN_PORT}\"\n", ""},
		{"invalid elsewhere", "server:\n  bogus: 1\nadmin:\n  listen: 127.0.0.1:" + port + "\n", ""},
		{"off", "admin:\n  listen: \"off\"\n", "admin.listen is off"},
		{"nothing there", "admin:\n  listen: 127.0.0.1:1\n", "connect"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "config.yaml")
			if err := os.WriteFile(file, []byte(tc.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			err := run([]string{"healthcheck", "-config", file}, nil, &out, &out)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("healthcheck: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("healthcheck: %v; want %q", err, tc.wantErr)
			}
		})
	}
}

// TestDockerfile keeps the Dockerfile (which CI cannot build here) true to
// the code: it stamps the variables buildinfo reads, its health check
// follows the admin.listen of the file the server is started with, and
// .dockerignore keeps .git out of the build context.
func TestDockerfile(t *testing.T) {
	df, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	text := string(df)
	for _, want := range []string{
		"-X trendgate/internal/buildinfo.version=${VERSION}",
		"-X trendgate/internal/buildinfo.commit=${COMMIT}",
		`CMD ["/usr/local/bin/trendgate", "healthcheck", "-config", "/etc/trendgate/config.yaml"]`,
		`CMD ["serve", "-config", "/etc/trendgate/config.yaml"]`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("Dockerfile lacks %s", want)
		}
	}
	ignore, err := os.ReadFile("../../.dockerignore")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains("\n"+string(ignore), "\n.git\n") {
		t.Errorf(".dockerignore does not exclude .git")
	}
}

// TestKeysNewForAccount: -account prints a key of that account (no plan
// line, which would have to match the account's) with its creation time.
func TestKeysNewForAccount(t *testing.T) {
	var out bytes.Buffer
	if err := run([]string{"keys", "new", "-id", "acme-web-2", "-account", "acme"}, nil, &out, &out); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); !strings.Contains(got, "    account: acme\n") || strings.Contains(got, "plan:") || !strings.Contains(got, "    created: ") {
		t.Errorf("config lines: got\n%s\nwant account: acme, created, and no plan", got)
	}
	if err := run([]string{"keys", "new", "-id", "x", "-plan", "full", "-account", "acme"}, nil, &out, &out); err == nil {
		t.Error("-plan with -account: got nil error; want one")
	}
}
