package proxy_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"trendgate/auth"
	"trendgate/config"
	"trendgate/demo"
	"trendgate/internal/clock"
	"trendgate/internal/testing/syncbuf"
	"trendgate/proxy"
)

// testNow is a Thursday mid-morning UTC, in the middle of an hour.
var testNow = time.Date(2026, 11, 19, 10, 30, 15, 0, time.UTC)

// upstreamKey is the gateway's own upstream credential in tests.
const upstreamKey = "upstream-test-credential"

// harness is the whole gateway in front of the recording demo upstream,
// each on its own loopback httptest server.
type harness struct {
	t       *testing.T
	clk     *clock.Fake
	up      *demo.Server
	upSrv   *httptest.Server
	gw      *proxy.Gateway
	base    string // the gateway's public base URL
	admin   string // the admin listener's base URL
	client  *http.Client
	cfg     *config.Config
	full    string // a full-plan key
	limited string // a limited-plan key
	logs    *syncbuf.Buffer
}

func newKey(t testing.TB) string {
	t.Helper()
	k, err := auth.Generate()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// newHarness starts the demo upstream and a gateway configured from
// config.Default with a full and a limited key; mutate may change the
// config before the gateway is built.
func newHarness(t *testing.T, mutate func(*config.Config), opts ...func(*demo.Options)) *harness {
	t.Helper()
	clk := clock.NewFake(testNow)
	dopts := demo.Options{Clock: clk, APIKey: upstreamKey}
	for _, o := range opts {
		o(&dopts)
	}
	up, err := demo.New(dopts)
	if err != nil {
		t.Fatal(err)
	}
	upSrv := httptest.NewServer(up)
	t.Cleanup(func() { up.Close(); upSrv.Close() })

	full, limited := newKey(t), newKey(t)
	cfg := baseConfig(upSrv.URL, full, limited)
	if mutate != nil {
		mutate(cfg)
	}
	return serveHarness(t, clk, up, upSrv, cfg, full, limited)
}

// baseConfig is config.Default in front of the upstream at upURL, with
// debug logs and the keys full (id team-full) and, unless "", limited
// (team-limited).
func baseConfig(upURL, full, limited string) *config.Config {
	cfg := config.Default()
	cfg.Upstream.BaseURL = upURL
	cfg.Upstream.APIKey = upstreamKey
	cfg.Log.Level = "debug"
	cfg.Keys = []config.Key{{ID: "team-full", SHA256: auth.Digest(full), Plan: "full"}}
	if limited != "" {
		cfg.Keys = append(cfg.Keys, config.Key{ID: "team-limited", SHA256: auth.Digest(limited), Plan: "limited"})
	}
	return cfg
}

// serveHarness builds a gateway from cfg on clk and serves it until the
// test ends; the single-gateway harness and every cluster node are made
// here.
func serveHarness(t *testing.T, clk *clock.Fake, up *demo.Server, upSrv *httptest.Server, cfg *config.Config, full, limited string) *harness {
	t.Helper()
	h := &harness{t: t, clk: clk, up: up, upSrv: upSrv, cfg: cfg, full: full, limited: limited}
	h.gw, h.logs = buildGateway(t, clk, cfg)
	h.serve()
	return h
}

// buildGateway is proxy.New on cfg and clk with a debug-level JSON logger
// writing to the returned buffer. Every test harness builds its gateways
// here.
func buildGateway(t testing.TB, clk clock.Clock, cfg *config.Config) (*proxy.Gateway, *syncbuf.Buffer) {
	t.Helper()
	logs := &syncbuf.Buffer{}
	core := zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), logs, zapcore.DebugLevel)
	gw, err := proxy.New(cfg, proxy.Options{Clock: clk, Logger: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	return gw, logs
}

// serve runs the gateway's real servers (timeouts, header limits, admin
// listener) on random loopback ports until the test ends.
func (h *harness) serve() {
	t := h.t
	pub, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	adm, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.base, h.admin = "http://"+pub.Addr().String(), "http://"+adm.Addr().String()
	h.client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 512, DisableCompression: true}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.gw.Serve(ctx, proxy.Listeners{Public: pub, Admin: adm}) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
		h.client.CloseIdleConnections()
		_ = h.gw.Close()
	})
}

// do sends a request with a raw request-target (so escapes reach the
// gateway exactly as written) and returns the response with its body read.
func (h *harness) do(method, target, key string, header ...string) (*http.Response, []byte) {
	h.t.Helper()
	req, err := http.NewRequest(method, h.base+"/", nil)
	if err != nil {
		h.t.Fatal(err)
	}
	// An opaque URL is sent as the request-target verbatim.
	path, query, _ := strings.Cut(target, "?")
	req.URL.Opaque = path
	req.URL.RawQuery = query
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	resp, err := h.client.Do(req)
	if err != nil {
		h.t.Fatalf("%s %s: %v", method, target, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		h.t.Fatal(err)
	}
	return resp, body
}

func (h *harness) get(target, key string, header ...string) (*http.Response, []byte) {
	h.t.Helper()
	return h.do(http.MethodGet, target, key, header...)
}
