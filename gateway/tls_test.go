package gateway_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"trendgate/config"
	"trendgate/gateway"
	"trendgate/gateway/gatewaytest"
	"trendgate/internal/clock"
	"trendgate/internal/testing/redistest"
	"trendgate/internal/testing/syncbuf"
)

// TestTLSFiles serves HTTPS from a certificate file pair: TLS 1.2 and 1.3
// clients get HTTP/2 with HSTS, a TLS 1.1 client is refused, and the
// plain-HTTP listener refuses the API with 403 https_required and no
// redirect.
func TestTLSFiles(t *testing.T) {
	clk := clock.NewFake(gatewaytest.Now)
	_, upSrv := gatewaytest.StartUpstream(t, clk, nil)
	certFile, keyFile, pool := gatewaytest.SelfSigned(t, t.TempDir())
	s := gatewaytest.StartGateway(t, upSrv.URL, clk, func(c *config.Config) {
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
			c := gatewaytest.HttpsClient(pool, "tg.test", tc.minV, tc.maxV)
			defer c.CloseIdleConnections()
			resp, body, err := gatewaytest.GetWithKey(t, c, "https://"+s.Public+gatewaytest.ListPath, s.Key)
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
			gatewaytest.CheckList(t, body)
		})
	}

	t.Run("plain http refused without redirect", func(t *testing.T) {
		c := &http.Client{
			Timeout:       10 * time.Second,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
		defer c.CloseIdleConnections()
		resp, body, err := gatewaytest.GetWithKey(t, c, "http://"+s.Plain+gatewaytest.ListPath, s.Key)
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
		if e := gatewaytest.DecodeError(t, body); e.Code != "https_required" || !strings.Contains(e.Error, "HTTPS") {
			t.Errorf("error body: got %+v; want code https_required and a message naming HTTPS", e)
		}
	})

	t.Run("public listener speaks only TLS", func(t *testing.T) {
		c := &http.Client{Timeout: 10 * time.Second}
		defer c.CloseIdleConnections()
		resp, _, err := gatewaytest.GetWithKey(t, c, "http://"+s.Public+gatewaytest.ListPath, s.Key)
		if err == nil && resp.StatusCode == http.StatusOK {
			t.Fatal("plain HTTP to the HTTPS listener got 200; want a refusal")
		}
	})
}

// TestTLSFilesBadCert checks that Serve refuses an unreadable key pair,
// closes the listeners and returns an error instead of serving plain HTTP.
func TestTLSFilesBadCert(t *testing.T) {
	clk := clock.NewFake(gatewaytest.Now)
	_, upSrv := gatewaytest.StartUpstream(t, clk, nil)
	dir := t.TempDir()
	cfg := config.Default()
	cfg.Upstream.BaseURL, cfg.Upstream.APIKey = upSrv.URL, gatewaytest.UpstreamKey
	cfg.TLS.Mode = config.TLSModeFiles
	cfg.TLS.CertFile, cfg.TLS.KeyFile = filepath.Join(dir, "missing.pem"), filepath.Join(dir, "missing.key")
	gw, err := gateway.New(cfg, gateway.Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Close()
	pub := gatewaytest.ListenLoopback(t)
	done := make(chan error, 1)
	go func() { done <- gw.Serve(context.Background(), gateway.Listeners{Public: pub}) }()
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

	acmeLn, mgmtLn := gatewaytest.ListenLoopback(t), gatewaytest.ListenLoopback(t)
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
	c := gatewaytest.HttpsClient(pool, "localhost", 0, 0)
	defer c.CloseIdleConnections()
	resp, body, err := gatewaytest.GetWithKey(t, c, p.mgmt+"/roots/0", "")
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
			clk := clock.NewFake(gatewaytest.Now)
			_, upSrv := gatewaytest.StartUpstream(t, clk, nil)
			storage := t.TempDir()
			s := gatewaytest.StartGateway(t, upSrv.URL, clk, func(c *config.Config) {
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

			c := gatewaytest.HttpsClient(roots, "tg.test", tls.VersionTLS12, 0)
			defer c.CloseIdleConnections()
			resp, body, err := gatewaytest.GetWithKey(t, c, "https://"+s.Public+gatewaytest.ListPath, s.Key)
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
			gatewaytest.CheckList(t, body)
			// certmagic's cert_obtained event reached the certificate metrics.
			if got := gatewaytest.Metric(t, s.Gateway.Registry(), "trendgate_certs_obtained_total", "operation", "obtain"); got != 1 {
				t.Errorf("trendgate_certs_obtained_total{operation=obtain} = %v; want 1", got)
			}
			if got := gatewaytest.Metric(t, s.Gateway.Registry(), "trendgate_certs_failing", "domain", "tg.test"); got != 0 {
				t.Errorf("trendgate_certs_failing{domain=tg.test} = %v; want 0", got)
			}

			// A handshake without SNI gets the first domain's certificate.
			conn, err := tls.Dial("tcp", s.Public, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12})
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
			if err := s.Stop(30 * time.Second); err != nil {
				t.Fatalf("Serve: %v", err)
			}
		})
	}
}

// waitACMEReady waits (bounded) for certmagic to obtain the certificate:
// /readyz answers 503 naming the certificate until it is cached, then 200.
func waitACMEReady(t *testing.T, s *gatewaytest.Served) {
	t.Helper()
	admin := &http.Client{Timeout: 5 * time.Second}
	defer admin.CloseIdleConnections()
	start := time.Now()
	deadline := start.Add(90 * time.Second)
	for {
		resp, body, err := gatewaytest.GetWithKey(t, admin, s.Admin+"/readyz", "")
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
			t.Fatalf("no certificate within 90s; gateway logs:\n%s", s.Logs.String())
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
	clk := clock.NewFake(gatewaytest.Now)
	_, upSrv := gatewaytest.StartUpstream(b, clk, nil)
	certFile, keyFile, pool := gatewaytest.SelfSigned(b, b.TempDir())
	many, manyInt, manyUnits := 1e9, 1_000_000_000, int64(1e15)
	limits := func(c *config.Config) {
		k := &c.Keys[0]
		k.PerSecond, k.Burst, k.Daily, k.Monthly = &many, &manyInt, &manyUnits, &manyUnits
		c.Log.Access = new(bool)
	}
	plain := gatewaytest.StartGateway(b, upSrv.URL, clk, limits)
	secure := gatewaytest.StartGateway(b, upSrv.URL, clk, func(c *config.Config) {
		limits(c)
		c.TLS.Mode = config.TLSModeFiles
		c.TLS.CertFile, c.TLS.KeyFile = certFile, keyFile
		c.TLS.HTTPListen = "127.0.0.1:0"
	})
	off := false
	secureStd := gatewaytest.StartGateway(b, upSrv.URL, clk, func(c *config.Config) {
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
		{"http1", "http://" + plain.Public + gatewaytest.ListPath, &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}, plain.Key},
		{"https-h1", "https://" + secure.Public + gatewaytest.ListPath, https1, secure.Key},
		{"https-h2", "https://" + secure.Public + gatewaytest.ListPath, gatewaytest.HttpsClient(pool, "tg.test", tls.VersionTLS12, 0), secure.Key},
		{"https-h2-nethttp", "https://" + secureStd.Public + gatewaytest.ListPath, gatewaytest.HttpsClient(pool, "tg.test", tls.VersionTLS12, 0), secureStd.Key},
	}
	for _, tc := range tests {
		b.Run(tc.name, func(b *testing.B) {
			defer tc.client.CloseIdleConnections()
			if resp, _, err := gatewaytest.GetWithKey(b, tc.client, tc.url, tc.key); err != nil || resp.StatusCode != http.StatusOK {
				b.Fatalf("warm: %v %v", resp, err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					resp, _, err := gatewaytest.GetWithKey(b, tc.client, tc.url, tc.key)
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
	certFile, keyFile, _ := gatewaytest.SelfSigned(t, t.TempDir())
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
			gw, err := gateway.New(cfg, gateway.Options{})
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
