package proxy_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"trendgate/config"
	"trendgate/demo"
	"trendgate/internal/clock"
	"trendgate/internal/testing/redistest"
	"trendgate/proxy"

	"trendgate/internal/testing/syncbuf"
	"trendgate/internal/testing/testcert"
)

// served is a gateway whose Serve call the test controls: stop cancels its
// context and returns Serve's result.
type served struct {
	t      testing.TB
	gw     *proxy.Gateway
	cfg    *config.Config
	key    string // a full-plan key
	public string // host:port of the public listener
	plain  string // host:port of the plain-HTTP listener ("" with TLS off)
	admin  string // base URL of the admin listener
	logs   *syncbuf.Buffer
	cancel context.CancelFunc
	done   chan error
	err    error // Serve's result, set by stop
	halted bool
}

// startGateway builds a gateway in front of upstreamURL (the demo upstream
// with key upstreamKey) and runs Serve on random loopback ports. mutate may
// change the config first. The gateway is stopped when the test ends.
func startGateway(t testing.TB, upstreamURL string, clk clock.Clock, mutate func(*config.Config)) *served {
	t.Helper()
	s := &served{t: t, key: newKey(t)}
	cfg := baseConfig(upstreamURL, s.key, "")
	cfg.Log.Level = config.Default().Log.Level
	if mutate != nil {
		mutate(cfg)
	}
	s.cfg = cfg
	gw, logs := buildGateway(t, clk, cfg)
	s.gw, s.logs = gw, logs
	ls := proxy.Listeners{Public: listenLoopback(t), Admin: listenLoopback(t)}
	if cfg.TLS.Mode == config.TLSModeFiles || cfg.TLS.Mode == config.TLSModeACME {
		ls.HTTP = listenLoopback(t)
		s.plain = ls.HTTP.Addr().String()
	}
	s.public, s.admin = ls.Public.Addr().String(), "http://"+ls.Admin.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel, s.done = cancel, make(chan error, 1)
	go func() { s.done <- gw.Serve(ctx, ls) }()
	t.Cleanup(func() {
		if err := s.stop(30 * time.Second); err != nil {
			t.Errorf("serve: %v", err)
		}
		_ = gw.Close()
	})
	return s
}

// stop cancels Serve's context and waits up to bound for it to return.
func (s *served) stop(bound time.Duration) error {
	if s.halted {
		return s.err
	}
	s.cancel()
	select {
	case s.err = <-s.done:
	case <-time.After(bound):
		s.err = fmt.Errorf("Serve did not return within %v", bound)
	}
	s.halted = true
	return s.err
}

func listenLoopback(t testing.TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// startUpstream serves the demo upstream on a loopback httptest server;
// wrap, when not nil, wraps its handler.
func startUpstream(t testing.TB, clk clock.Clock, wrap func(http.Handler) http.Handler) (*demo.Server, *httptest.Server) {
	t.Helper()
	up, err := demo.New(demo.Options{Clock: clk, APIKey: upstreamKey})
	if err != nil {
		t.Fatal(err)
	}
	var h http.Handler = up
	if wrap != nil {
		h = wrap(up)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() { up.Close(); srv.Close() })
	return up, srv
}

// httpsGateways starts one fake clock, one demo upstream and one
// self-signed certificate (for tg.test), then, for each mutate, a gateway
// serving HTTPS with that certificate in front of that upstream (mutate
// applied after the TLS settings). It returns the gateways, in order, and
// the pool that trusts the certificate.
func httpsGateways(t *testing.T, mutates ...func(*config.Config)) ([]*served, *x509.CertPool) {
	t.Helper()
	clk := clock.NewFake(testNow)
	_, upSrv := startUpstream(t, clk, nil)
	certFile, keyFile, pool := selfSigned(t, t.TempDir())
	gws := make([]*served, len(mutates))
	for i, mutate := range mutates {
		gws[i] = startGateway(t, upSrv.URL, clk, func(c *config.Config) {
			c.TLS.Mode = config.TLSModeFiles
			c.TLS.CertFile, c.TLS.KeyFile = certFile, keyFile
			mutate(c)
		})
	}
	return gws, pool
}

// selfSigned writes a self-signed ECDSA certificate for tg.test and
// 127.0.0.1 into dir and returns the file names and a pool trusting it.
func selfSigned(t testing.TB, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	p := testcert.New(t, testcert.Options{})
	certFile, keyFile = p.Write(t, dir)
	return certFile, keyFile, p.Pool()
}

// httpsClient trusts roots and sends serverName in the handshake; it tries
// HTTP/2 first.
func httpsClient(roots *x509.CertPool, serverName string, minV, maxV uint16) *http.Client {
	return &http.Client{
		Timeout: 20 * time.Second,
		Transport: &http.Transport{
			TLSClientConfig:   &tls.Config{RootCAs: roots, ServerName: serverName, MinVersion: minV, MaxVersion: maxV},
			ForceAttemptHTTP2: true,
		},
	}
}

// getWithKey sends GET url with the API key and returns the response with
// its body read.
func getWithKey(t testing.TB, c *http.Client, url, key string) (*http.Response, []byte, error) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp, body, err
}

const listPath = "/api4/public/topics/list/v1"

// TestTLSFiles serves HTTPS from a certificate file pair: TLS 1.2 and 1.3
// clients get HTTP/2 with HSTS, a TLS 1.1 client is refused, and the
// plain-HTTP listener refuses the API with 403 https_required and no
// redirect.
func TestTLSFiles(t *testing.T) {
	clk := clock.NewFake(testNow)
	_, upSrv := startUpstream(t, clk, nil)
	certFile, keyFile, pool := selfSigned(t, t.TempDir())
	s := startGateway(t, upSrv.URL, clk, func(c *config.Config) {
		c.TLS.Mode = config.TLSModeFiles
		c.TLS.CertFile, c.TLS.KeyFile = certFile, keyFile
		c.TLS.HTTPListen = "127.0.0.1:0"
		c.TLS.HSTSMaxAge = 24 * time.Hour
	})

	tests := []struct {
		name       string
		minV, maxV uint16
		wantErr    bool
	}{
		{"tls 1.2 only", tls.VersionTLS12, tls.VersionTLS12, false},
		{"tls 1.3 only", tls.VersionTLS13, tls.VersionTLS13, false},
		{"tls 1.1 refused", tls.VersionTLS10, tls.VersionTLS11, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := httpsClient(pool, "tg.test", tc.minV, tc.maxV)
			defer c.CloseIdleConnections()
			resp, body, err := getWithKey(t, c, "https://"+s.public+listPath, s.key)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("got status %d over TLS version %x; want a refused handshake", resp.StatusCode, resp.TLS.Version)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status: got %d; want 200 (body %s)", resp.StatusCode, body)
			}
			if resp.ProtoMajor != 2 {
				t.Errorf("protocol: got %s; want HTTP/2", resp.Proto)
			}
			if resp.TLS == nil || resp.TLS.Version != tc.maxV {
				t.Errorf("TLS version: got %+v; want %x", resp.TLS, tc.maxV)
			}
			if got := resp.Header.Get("Strict-Transport-Security"); got != "max-age=86400" {
				t.Errorf("Strict-Transport-Security: got %q; want %q", got, "max-age=86400")
			}
			checkList(t, body)
		})
	}

	t.Run("plain http refused without redirect", func(t *testing.T) {
		c := &http.Client{
			Timeout:       10 * time.Second,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
		defer c.CloseIdleConnections()
		resp, body, err := getWithKey(t, c, "http://"+s.plain+listPath, s.key)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("status: got %d; want 403", resp.StatusCode)
		}
		if loc := resp.Header.Get("Location"); loc != "" {
			t.Errorf("Location: got %q; want none (no redirect)", loc)
		}
		if hsts := resp.Header.Get("Strict-Transport-Security"); hsts != "" {
			t.Errorf("Strict-Transport-Security over plain HTTP: got %q; want none", hsts)
		}
		if e := decodeError(t, body); e.Code != "https_required" || !strings.Contains(e.Error, "HTTPS") {
			t.Errorf("error body: got %+v; want code https_required and a message naming HTTPS", e)
		}
	})

	t.Run("public listener speaks only TLS", func(t *testing.T) {
		c := &http.Client{Timeout: 10 * time.Second}
		defer c.CloseIdleConnections()
		resp, _, err := getWithKey(t, c, "http://"+s.public+listPath, s.key)
		if err == nil && resp.StatusCode == http.StatusOK {
			t.Fatal("plain HTTP to the HTTPS listener got 200; want a refusal")
		}
	})
}

// TestTLSFilesBadCert checks that Serve refuses an unreadable key pair,
// closes the listeners and returns an error instead of serving plain HTTP.
func TestTLSFilesBadCert(t *testing.T) {
	clk := clock.NewFake(testNow)
	_, upSrv := startUpstream(t, clk, nil)
	dir := t.TempDir()
	cfg := config.Default()
	cfg.Upstream.BaseURL, cfg.Upstream.APIKey = upSrv.URL, upstreamKey
	cfg.TLS.Mode = config.TLSModeFiles
	cfg.TLS.CertFile, cfg.TLS.KeyFile = filepath.Join(dir, "missing.pem"), filepath.Join(dir, "missing.key")
	gw, err := proxy.New(cfg, proxy.Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Close()
	pub := listenLoopback(t)
	done := make(chan error, 1)
	go func() { done <- gw.Serve(context.Background(), proxy.Listeners{Public: pub}) }()
	select {
	case err := <-done:
		if err == nil || !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("Serve: got %v; want an error wrapping os.ErrNotExist", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return for a missing certificate")
	}
	if c, err := net.DialTimeout("tcp", pub.Addr().String(), 2*time.Second); err == nil {
		c.Close()
		t.Fatal("the public listener is still open after Serve failed")
	}
}

// pebble is a running Pebble ACME test server.
type pebble struct {
	dir    string // Pebble's module directory (test certificates)
	acme   string // the directory URL
	mgmt   string // the management base URL
	minica string // the root for Pebble's own HTTPS endpoints
}

// pebbleModule is the Pebble module fetched and built by startPebble.
const pebbleModule = "github.com/letsencrypt/pebble/v2"

// needPebble skips (outside CI) or fails (CI=true) when Pebble is
// unavailable.
func needPebble(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") == "true" {
		t.Fatalf("pebble is required in CI: %s", msg)
	}
	t.Skipf("skipping the ACME test: pebble unavailable: %s", msg)
}

// startPebble fetches Pebble's module (latest v2) from the Go module proxy,
// builds cmd/pebble (or uses $PEBBLE_BIN) and runs it on random loopback
// ports with challenge validation switched off. It is stopped when the test
// ends.
func startPebble(t *testing.T) *pebble {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("building Pebble needs the go command on PATH: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	work := t.TempDir()
	// Outside any module, so trendgate's go.mod is never touched.
	dl := exec.CommandContext(ctx, goBin, "mod", "download", "-json", pebbleModule+"@latest")
	dl.Dir = work
	dl.Env = append(os.Environ(), "GO111MODULE=on", "GOFLAGS=-mod=mod")
	out, err := dl.Output()
	var mod struct{ Dir, Version, Error string }
	if err == nil {
		err = json.Unmarshal(out, &mod)
	}
	if err != nil || mod.Dir == "" {
		needPebble(t, "go mod download %s: %v %s", pebbleModule, err, mod.Error)
	}
	bin := os.Getenv("PEBBLE_BIN")
	if bin == "" {
		gobin := filepath.Join(work, "bin")
		build := exec.CommandContext(ctx, goBin, "install", pebbleModule+"/cmd/pebble@"+mod.Version)
		build.Dir = work
		build.Env = append(os.Environ(), "GOBIN="+gobin, "GO111MODULE=on", "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			needPebble(t, "go install: %v: %s", err, out)
		}
		bin = filepath.Join(gobin, "pebble")
	}

	acmeLn, mgmtLn := listenLoopback(t), listenLoopback(t)
	acmeAddr, mgmtAddr := acmeLn.Addr().String(), mgmtLn.Addr().String()
	acmeLn.Close() // Pebble binds the ports itself; a tiny race is acceptable
	mgmtLn.Close()
	conf := map[string]any{"pebble": map[string]any{
		"listenAddress":                  acmeAddr,
		"managementListenAddress":        mgmtAddr,
		"certificate":                    filepath.Join(mod.Dir, "test/certs/localhost/cert.pem"),
		"privateKey":                     filepath.Join(mod.Dir, "test/certs/localhost/key.pem"),
		"httpPort":                       5002, // unused: PEBBLE_VA_ALWAYS_VALID
		"tlsPort":                        5001,
		"ocspResponderURL":               "",
		"externalAccountBindingRequired": false,
		"retryAfter":                     map[string]int{"authz": 1, "order": 1},
	}}
	confFile := filepath.Join(work, "pebble.json")
	b, _ := json.Marshal(conf)
	if err := os.WriteFile(confFile, b, 0o600); err != nil {
		t.Fatal(err)
	}
	logs := &syncbuf.Buffer{}
	cmd := exec.Command(bin, "-config", confFile)
	cmd.Env = append(os.Environ(), "PEBBLE_VA_ALWAYS_VALID=1", "PEBBLE_VA_NOSLEEP=1", "PEBBLE_WFE_NONCEREJECT=0")
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		needPebble(t, "start %s: %v", bin, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("pebble output:\n%s", logs.String())
		}
	})
	// Wait (bounded) for Pebble to accept connections.
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", acmeAddr, time.Second)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pebble did not listen on %s: %v\n%s", acmeAddr, err, logs.String())
		}
		time.Sleep(20 * time.Millisecond) // polling a child process, not waiting for time to pass
	}
	return &pebble{
		dir:    mod.Dir,
		acme:   "https://" + acmeAddr + "/dir",
		mgmt:   "https://" + mgmtAddr,
		minica: filepath.Join(mod.Dir, "test/certs/pebble.minica.pem"),
	}
}

// issuingRoot fetches the root that signs Pebble's certificates.
func (p *pebble) issuingRoot(t *testing.T) *x509.CertPool {
	t.Helper()
	minica, err := os.ReadFile(p.minica)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(minica) {
		t.Fatal("pebble minica: no certificate")
	}
	c := httpsClient(pool, "localhost", 0, 0)
	defer c.CloseIdleConnections()
	resp, body, err := getWithKey(t, c, p.mgmt+"/roots/0", "")
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("pebble /roots/0: status %d", resp.StatusCode)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(body) {
		t.Fatalf("pebble /roots/0: no PEM certificate in %q", body)
	}
	return roots
}

// TestTLSACMEPebble obtains a certificate from a local Pebble through
// certmagic and serves HTTPS with it: readiness waits for the certificate,
// a client trusting Pebble's root gets HTTP/2 with HSTS. The certificate
// is stored on disk, or in Redis in cluster mode.
func TestTLSACMEPebble(t *testing.T) {
	if testing.Short() && os.Getenv("CI") != "true" {
		t.Skip("skipping the ACME test in -short mode (it builds Pebble)")
	}
	p := startPebble(t)
	roots := p.issuingRoot(t)
	tests := []struct {
		name    string
		cluster bool
	}{
		{"file storage", false},
		{"redis storage", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var rdb *redis.Client
			var prefix string
			if tc.cluster {
				rdb, prefix = testRedis(t)
			}
			clk := clock.NewFake(testNow)
			_, upSrv := startUpstream(t, clk, nil)
			storage := t.TempDir()
			s := startGateway(t, upSrv.URL, clk, func(c *config.Config) {
				c.TLS.Mode = config.TLSModeACME
				c.TLS.HTTPListen = "127.0.0.1:0"
				c.TLS.ACME.DirectoryURL = p.acme
				c.TLS.ACME.CARoot = p.minica
				c.TLS.ACME.Email = "ops@example.com"
				c.TLS.ACME.Domains = []string{"tg.test"}
				c.TLS.ACME.Storage = storage
				if tc.cluster {
					c.TLS.ACME.Storage = ""
					c.Redis.URL = "redis://127.0.0.1:6379/0"
					c.Redis.Prefix = prefix
					c.Redis.Timeout = time.Second
				}
			})
			waitACMEReady(t, s)

			c := httpsClient(roots, "tg.test", tls.VersionTLS12, 0)
			defer c.CloseIdleConnections()
			resp, body, err := getWithKey(t, c, "https://"+s.public+listPath, s.key)
			if err != nil {
				t.Fatalf("HTTPS with the ACME certificate: %v", err)
			}
			if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 {
				t.Fatalf("got %s %d; want HTTP/2 200 (body %s)", resp.Proto, resp.StatusCode, body)
			}
			if err := resp.TLS.PeerCertificates[0].VerifyHostname("tg.test"); err != nil {
				t.Errorf("served certificate: %v", err)
			}
			if resp.Header.Get("Strict-Transport-Security") == "" {
				t.Error("no Strict-Transport-Security on an HTTPS response")
			}
			checkList(t, body)
			// certmagic's cert_obtained event reached the certificate metrics.
			if got := metric(t, s.gw.Registry(), "trendgate_certs_obtained_total", "operation", "obtain"); got != 1 {
				t.Errorf("trendgate_certs_obtained_total{operation=obtain} = %v; want 1", got)
			}
			if got := metric(t, s.gw.Registry(), "trendgate_certs_failing", "domain", "tg.test"); got != 0 {
				t.Errorf("trendgate_certs_failing{domain=tg.test} = %v; want 0", got)
			}

			// A handshake without SNI gets the first domain's certificate.
			conn, err := tls.Dial("tcp", s.public, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12})
			if err != nil {
				t.Fatalf("handshake without SNI: %v", err)
			}
			chain := conn.ConnectionState().PeerCertificates
			inter := x509.NewCertPool()
			for _, c := range chain[1:] {
				inter.AddCert(c)
			}
			_, verr := chain[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, DNSName: "tg.test"})
			conn.Close()
			if verr != nil {
				t.Errorf("certificate without SNI: %v", verr)
			}

			if tc.cluster {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				keys, err := rdb.Keys(ctx, prefix+"certs:f:certificates/*tg.test.crt").Result()
				if err != nil || len(keys) != 1 {
					t.Errorf("certificate in Redis: got %q, %v; want one key", keys, err)
				}
				if _, err := os.Stat(filepath.Join(storage, "certificates")); err == nil {
					t.Error("cluster mode wrote certificates to the file storage")
				}
			} else if _, err := os.Stat(filepath.Join(storage, "certificates")); err != nil {
				t.Errorf("certificate storage: %v", err)
			}
			if err := s.stop(30 * time.Second); err != nil {
				t.Fatalf("Serve: %v", err)
			}
		})
	}
}

// waitACMEReady waits (bounded) for certmagic to obtain the certificate:
// /readyz answers 503 naming the certificate until it is cached, then 200.
func waitACMEReady(t *testing.T, s *served) {
	t.Helper()
	admin := &http.Client{Timeout: 5 * time.Second}
	defer admin.CloseIdleConnections()
	start := time.Now()
	deadline := start.Add(90 * time.Second)
	for {
		resp, body, err := getWithKey(t, admin, s.admin+"/readyz", "")
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode == http.StatusOK {
			t.Logf("certificate ready after %v", time.Since(start).Round(time.Millisecond))
			return
		}
		if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "certificate") {
			t.Fatalf("/readyz before the certificate: got %d %s; want 503 naming the certificate", resp.StatusCode, body)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no certificate within 90s; gateway logs:\n%s", s.logs.String())
		}
		time.Sleep(50 * time.Millisecond) // polling an external issuance, not waiting for time to pass
	}
}

// testRedis connects to the shared test Redis (skipping when unreachable
// unless CI=true) and returns a client and a unique "tg:test:<random>:"
// prefix whose keys, in databases 0 and 1, are deleted when the test ends.
func testRedis(t testing.TB) (*redis.Client, string) {
	t.Helper()
	rdb := redistest.Client(t, redistest.Addr)
	db1 := redis.NewClient(&redis.Options{Addr: redistest.Addr, DB: 1})
	t.Cleanup(func() { _ = db1.Close() })
	return rdb, redistest.Prefix(t, rdb, db1)
}

// BenchmarkServeCached measures one cached list request through the real
// servers, over plain HTTP/1.1, over HTTPS with HTTP/1.1 (the lane) and
// with HTTP/2 (the HTTP/2 lane, and Go's HTTP/2 with server.fast_http2
// off); connections are reused, so handshakes are not in the figure. The
// allocations per request include Go's client's.
func BenchmarkServeCached(b *testing.B) {
	clk := clock.NewFake(testNow)
	_, upSrv := startUpstream(b, clk, nil)
	certFile, keyFile, pool := selfSigned(b, b.TempDir())
	many, manyInt, manyUnits := 1e9, 1_000_000_000, int64(1e15)
	limits := func(c *config.Config) {
		k := &c.Keys[0]
		k.PerSecond, k.Burst, k.Daily, k.Monthly = &many, &manyInt, &manyUnits, &manyUnits
		c.Log.Access = new(bool)
	}
	plain := startGateway(b, upSrv.URL, clk, limits)
	secure := startGateway(b, upSrv.URL, clk, func(c *config.Config) {
		limits(c)
		c.TLS.Mode = config.TLSModeFiles
		c.TLS.CertFile, c.TLS.KeyFile = certFile, keyFile
		c.TLS.HTTPListen = "127.0.0.1:0"
	})
	off := false
	secureStd := startGateway(b, upSrv.URL, clk, func(c *config.Config) {
		limits(c)
		c.TLS.Mode = config.TLSModeFiles
		c.TLS.CertFile, c.TLS.KeyFile = certFile, keyFile
		c.TLS.HTTPListen = "127.0.0.1:0"
		c.Server.FastHTTP2 = &off
	})
	https1 := &http.Client{Transport: &http.Transport{
		MaxIdleConnsPerHost: 64,
		TLSClientConfig:     &tls.Config{RootCAs: pool, ServerName: "tg.test", NextProtos: []string{"http/1.1"}},
	}}
	tests := []struct {
		name   string
		url    string
		client *http.Client
		key    string
	}{
		{"http1", "http://" + plain.public + listPath, &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}, plain.key},
		{"https-h1", "https://" + secure.public + listPath, https1, secure.key},
		{"https-h2", "https://" + secure.public + listPath, httpsClient(pool, "tg.test", tls.VersionTLS12, 0), secure.key},
		{"https-h2-nethttp", "https://" + secureStd.public + listPath, httpsClient(pool, "tg.test", tls.VersionTLS12, 0), secureStd.key},
	}
	for _, tc := range tests {
		b.Run(tc.name, func(b *testing.B) {
			defer tc.client.CloseIdleConnections()
			if resp, _, err := getWithKey(b, tc.client, tc.url, tc.key); err != nil || resp.StatusCode != http.StatusOK {
				b.Fatalf("warm: %v %v", resp, err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					resp, _, err := getWithKey(b, tc.client, tc.url, tc.key)
					if err != nil || resp.StatusCode != http.StatusOK {
						b.Errorf("got %v %v; want 200", resp, err)
						return
					}
				}
			})
		})
	}
}

// TestListenOpensPlainHTTPWithTLS: Listen opens tls.http_listen only when
// TLS is on, and admin.listen unless it is "off".
func TestListenOpensPlainHTTPWithTLS(t *testing.T) {
	certFile, keyFile, _ := selfSigned(t, t.TempDir())
	tests := []struct {
		name             string
		mode, admin      string
		wantHTTP, wantAd bool
	}{
		{"tls off", config.TLSModeOff, "localhost:0", false, true},
		{"tls files", config.TLSModeFiles, "localhost:0", true, true},
		{"tls files, admin off", config.TLSModeFiles, "off", true, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config.Default()
			cfg.Server.Listen, cfg.Admin.Listen = "127.0.0.1:0", tc.admin
			cfg.TLS.Mode, cfg.TLS.HTTPListen = tc.mode, "127.0.0.1:0"
			cfg.TLS.CertFile, cfg.TLS.KeyFile = certFile, keyFile
			gw, err := proxy.New(cfg, proxy.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer gw.Close()
			ls, err := gw.Listen()
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range []net.Listener{ls.Public, ls.HTTP, ls.Admin} {
				if l != nil {
					defer l.Close()
				}
			}
			if ls.Public == nil || (ls.HTTP != nil) != tc.wantHTTP || (ls.Admin != nil) != tc.wantAd {
				t.Errorf("got public %v http %v admin %v; want http %v admin %v", ls.Public != nil, ls.HTTP != nil, ls.Admin != nil, tc.wantHTTP, tc.wantAd)
			}
		})
	}
}
