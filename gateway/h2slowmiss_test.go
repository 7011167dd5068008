package gateway_test

import (
	"net/http"
	"testing"
	"time"

	"trendgate/config"
	"trendgate/gateway/gatewaytest"
	"trendgate/internal/testing/h2test"
)

// slowMiss opens an HTTP/2 connection to g and sends, on its first stream,
// a request for gatewaytest.SeriesPath that misses the cache and that the upstream
// holds; it returns once the upstream has the request, with the connection,
// the miss's stream and the func that lets the upstream answer it.
func slowMiss(t testing.TB, g *gatewaytest.TLSGateway) (c *h2test.Conn, miss uint32, release func()) {
	t.Helper()
	h := &gatewaytest.UpstreamHold{Path: gatewaytest.SeriesPath}
	release = g.HoldMatching(t, h)
	c = g.Dial(t)
	c.Handshake()
	miss = c.Send(g.Authority, gatewaytest.SeriesPath, g.Key)
	select {
	case <-h.Arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("the miss did not reach the upstream within 10s")
	}
	return c, miss, release
}

// TestH2SlowMissBesideHits: a cache miss that waits for a slow upstream
// does not hold up the cache hits sent after it on the same HTTP/2
// connection. Every hit is answered whole while the upstream still holds
// the miss (a server that served the connection's streams in turn would
// never answer them: the test would fail on the hits' read timeout), and
// the miss is answered once the upstream lets it go.
func TestH2SlowMissBesideHits(t *testing.T) {
	t.Parallel()
	gatewaytest.ForEachH2Server(t, func(t *testing.T, set func(*config.Config)) {
		g := gatewaytest.StartTLSGateway(t, set, nil)
		g.Prime(t)
		c, miss, release := slowMiss(t, g)
		upstream := g.Upstream.Load()
		for i := range 20 {
			r := c.Get(g.Authority, gatewaytest.ListPath, g.Key)
			if r.Status != http.StatusOK {
				t.Fatalf("hit %d beside the waiting miss: status %d; want 200", i, r.Status)
			}
			gatewaytest.CheckList(t, r.Body)
		}
		if got := g.Upstream.Load(); got != upstream {
			t.Fatalf("the hits caused %d upstream requests; want none (cache hits)", got-upstream)
		}
		release()
		r := c.ReadResponse(miss)
		if r.Status != http.StatusOK || len(r.Body) == 0 {
			t.Fatalf("the miss after its release: status %d, %d bytes; want 200 with a body", r.Status, len(r.Body))
		}
	})
}

// BenchmarkH2HitBesideSlowMiss times cache hits on one HTTP/2 connection
// (a frame-level client, one request at a time) alone and while a miss on
// the same connection waits for the upstream: the two should cost the same.
func BenchmarkH2HitBesideSlowMiss(b *testing.B) {
	for _, beside := range []bool{false, true} {
		name := "alone"
		if beside {
			name = "beside-slow-miss"
		}
		b.Run(name, func(b *testing.B) {
			g := gatewaytest.StartTLSGateway(b, nil, nil)
			first := g.Dial(b)
			first.Handshake()
			if r := first.Get(g.Authority, gatewaytest.ListPath, g.Key); r.Status != http.StatusOK { // fills the cache
				b.Fatalf("priming the list: status %d", r.Status)
			}
			var c *h2test.Conn
			if beside {
				var release func()
				c, _, release = slowMiss(b, g)
				defer release()
			} else {
				c = g.Dial(b)
				c.Handshake()
			}
			for b.Loop() {
				if r := c.Get(g.Authority, gatewaytest.ListPath, g.Key); r.Status != http.StatusOK {
					b.Fatalf("hit: status %d", r.Status)
				}
			}
		})
	}
}
