package gatewaytest

import (
	"crypto/tls"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"trendgate/api"
	"trendgate/config"
	"trendgate/internal/clock"
	"trendgate/internal/testing/h2test"
	"trendgate/internal/testing/promtest"
)

// h2Servers are the HTTP/2 servers the HTTPS listener can run: the lane
// (internal/transport/h2, the default) and Go's net/http HTTP/2 (fast_http2: false).
// Every attack regression and the drain after it runs once per entry, its
// set applied before the test's own changes.
var h2Servers = []struct {
	name string
	set  func(*config.Config)
}{
	{"lane", nil},
	{"net/http", func(c *config.Config) { off := false; c.Server.FastHTTP2 = &off }},
}

// ForEachH2Server runs test once per entry of h2Servers, as a subtest.
func ForEachH2Server(t *testing.T, test func(t *testing.T, set func(*config.Config))) {
	for _, s := range h2Servers {
		t.Run(s.name, func(t *testing.T) { test(t, s.set) })
	}
}

// TLSGateway is a gateway serving HTTPS (tls.mode files, a self-signed
// certificate for tg.test and 127.0.0.1) in front of the demo upstream,
// whose requests it counts.
type TLSGateway struct {
	*Served
	TLS       *tls.Config   // trusts the certificate; ServerName tg.test
	Upstream  *atomic.Int64 // requests the upstream received
	Authority string        // :authority for frame-level requests
	// held, when set, makes the upstream hold every request for its path
	// until its channel is closed (see hold).
	held *atomic.Pointer[UpstreamHold]
}

// UpstreamHold is a path whose upstream requests wait for release.
type UpstreamHold struct {
	Path    string
	Match   func(path string) bool // when set, holds the paths it matches instead
	release chan struct{}
	Arrived chan struct{} // closed when the first held request arrives
	once    sync.Once
}

// arrive records that a held request reached the upstream.
func (h *UpstreamHold) arrive() { h.once.Do(func() { close(h.Arrived) }) }

// holds reports whether h holds the upstream's requests for path.
func (h *UpstreamHold) holds(path string) bool {
	if h.Match != nil {
		return h.Match(path)
	}
	return path == h.Path
}

// StartTLSGateway starts a TLS gateway whose key never meets a rate limit
// or quota (the attacks exercise the HTTP/2 server, not the limiter), with
// set (an h2Servers entry, nil for none) and then mutate applied to the
// config. It is stopped when the test ends.
func StartTLSGateway(t testing.TB, set, mutate func(*config.Config)) *TLSGateway {
	t.Helper()
	clk := clock.NewFake(Now)
	calls, held := &atomic.Int64{}, &atomic.Pointer[UpstreamHold]{}
	_, upSrv := StartUpstream(t, clk, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			calls.Add(1)
			if h := held.Load(); h != nil && h.holds(r.URL.Path) {
				h.arrive()
				select {
				case <-h.release:
				case <-r.Context().Done():
					return
				}
			}
			next.ServeHTTP(w, r)
		})
	})
	certFile, keyFile, pool := SelfSigned(t, t.TempDir())
	many, manyInt, manyUnits := 1e9, 1_000_000_000, int64(1e12)
	s := StartGateway(t, upSrv.URL, clk, func(c *config.Config) {
		c.TLS.Mode = config.TLSModeFiles
		c.TLS.CertFile, c.TLS.KeyFile = certFile, keyFile
		k := &c.Keys[0]
		k.PerSecond, k.Burst, k.Daily, k.Monthly = &many, &manyInt, &manyUnits, &manyUnits
		if set != nil {
			set(c)
		}
		if mutate != nil {
			mutate(c)
		}
	})
	return &TLSGateway{
		Served:    s,
		TLS:       &tls.Config{RootCAs: pool, ServerName: "tg.test", NextProtos: []string{"h2"}},
		Upstream:  calls,
		Authority: "tg.test",
		held:      held,
	}
}

// Hold makes the upstream hold every request for path until the returned
// func is called (at the latest when the test ends).
func (g *TLSGateway) Hold(t testing.TB, path string) (release func()) {
	return g.HoldMatching(t, &UpstreamHold{Path: path})
}

// HoldMatching is hold for every path h holds.
func (g *TLSGateway) HoldMatching(t testing.TB, h *UpstreamHold) (release func()) {
	h.release, h.Arrived = make(chan struct{}), make(chan struct{})
	g.held.Store(h)
	var once sync.Once
	release = func() { once.Do(func() { close(h.release) }) }
	t.Cleanup(release)
	return release
}

// Dial opens a frame-level HTTP/2 connection to the gateway.
func (g *TLSGateway) Dial(t testing.TB) *h2test.Conn {
	t.Helper()
	return h2test.Dial(t, g.Public, g.TLS)
}

// Prime makes listPath a cache hit: one ordinary request fetches it.
func (g *TLSGateway) Prime(t *testing.T) {
	t.Helper()
	g.MustServe(t, "before the attack")
}

// MustServe requires an ordinary HTTP/2 client on a fresh connection to get
// a whole 200 for listPath from a cache hit or a fill: the attack before it
// (when) left the server able to serve others.
func (g *TLSGateway) MustServe(t *testing.T, when string) {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: g.TLS.Clone(), ForceAttemptHTTP2: true,
	}}
	defer c.CloseIdleConnections()
	resp, body, err := GetWithKey(t, c, "https://"+g.Public+ListPath, g.Key)
	if err != nil {
		t.Fatalf("a fresh HTTP/2 client %s: %v", when, err)
	}
	if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 {
		t.Fatalf("a fresh HTTP/2 client %s: got %s %d; want HTTP/2 200", when, resp.Proto, resp.StatusCode)
	}
	CheckList(t, body)
}

// DrainsWithin cancels Serve's context, as SIGTERM does in trendgate
// serve, while the attack's connections (the test's to keep open) still
// hold whatever they hold, and requires Serve to return nil (the drain
// completed: no connection held it past server.shutdown_timeout) within
// the configured shutdown timeout.
func (g *TLSGateway) DrainsWithin(t *testing.T) {
	t.Helper()
	limit := g.Config.Server.ShutdownTimeout
	start := time.Now()
	// Stop's own bound is only there to end a broken test; the assertion
	// is on the elapsed time and Serve's result.
	err := g.Stop(limit + 10*time.Second)
	took := time.Since(start)
	if err != nil {
		t.Fatalf("drain after the attack: Serve returned %v after %v; want nil within server.shutdown_timeout %v", err, took, limit)
	}
	if took > limit {
		t.Fatalf("drain after the attack took %v; want at most server.shutdown_timeout %v", took, limit)
	}
	t.Logf("drained in %v (shutdown_timeout %v)", took.Round(time.Millisecond), limit)
}

// SeriesPath is the largest ordinary answer (a week of hourly rows, about
// 61 KB), for the attacks that need the server to have much to write.
const SeriesPath = "/api4/public/topic/bitcoin/time-series/v1"

// Handled is how many requests the gateway's handler has finished
// (trendgate_requests_total, every route and status).
func (g *TLSGateway) Handled(t *testing.T) int {
	t.Helper()
	n, _ := promtest.Sum(t, g.Gateway.Registry(), "trendgate_requests_total")
	return int(n)
}

// HandledList is handled for the list route only (listPath's requests).
func (g *TLSGateway) HandledList(t *testing.T) int {
	t.Helper()
	n, _ := promtest.Sum(t, g.Gateway.Registry(), "trendgate_requests_total", "route", api.EndpointList.String())
	return int(n)
}

// LiveHeap is the heap still in use after a collection: what the process
// (the gateway among it) retains.
func LiveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// AttackTimeouts are the server timeouts of the attack tests: short, so
// that what they bound shows within a test's time, and write_timeout below
// shutdown_timeout, so a write the client never lets finish cannot outlast
// the drain (with the defaults, 60 s and 20 s, it can; see docs/http-lanes.md).
func AttackTimeouts(c *config.Config) {
	c.Server.ReadHeaderTimeout = time.Second
	c.Server.ReadTimeout = time.Second
	c.Server.WriteTimeout = time.Second
	c.Server.IdleTimeout = time.Second
	c.Server.ShutdownTimeout = 5 * time.Second
}

// Margin is added to a configured timeout to make the deadline a test
// waits on: the server's timers, a GOAWAY's grace and a loaded CI host fit
// in it, a connection held for good does not.
const Margin = 5 * time.Second

// MetricOf sums a gateway metric's samples.
func (g *TLSGateway) MetricOf(t *testing.T, name string, labels ...string) int {
	t.Helper()
	n, _ := promtest.Sum(t, g.Gateway.Registry(), name, labels...)
	return int(n)
}

// WaitingFills is how many fills have a caller waiting on them.
func (g *TLSGateway) WaitingFills(t *testing.T) int {
	return g.MetricOf(t, "trendgate_cache_fills") - g.MetricOf(t, "trendgate_cache_detached_fills")
}
