package proxy_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"trendgate/config"
	"trendgate/internal/h2test"
	"trendgate/internal/promtest"
)

// seriesPath is the largest ordinary answer (a week of hourly rows, about
// 61 KB), for the attacks that need the server to have much to write.
const seriesPath = "/api4/public/topic/bitcoin/time-series/v1"

// handled is how many requests the gateway's handler has finished
// (trendgate_requests_total, every route and status).
func (g *tlsGateway) handled(t *testing.T) int {
	t.Helper()
	n, _ := promtest.Sum(t, g.gw.Registry(), "trendgate_requests_total")
	return int(n)
}

// ping writes a PING with data and waits for its ACK: every frame sent
// before it has been read by the server. It returns false when the
// connection ended first (or after within).
func ping(t *testing.T, c *h2test.Conn, data [8]byte, within time.Duration) bool {
	t.Helper()
	if err := c.Framer.WritePing(false, data); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(); err != nil {
		return false
	}
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		f, err := c.ReadFrame(time.Until(deadline))
		if err != nil {
			return false
		}
		if p, ok := f.(*http2.PingFrame); ok && p.IsAck() && p.Data == data {
			return true
		}
	}
	return false
}

// TestH2RapidReset is the regression test for CVE-2023-44487: a client
// opens streams and resets each at once, so they never count against
// SETTINGS_MAX_CONCURRENT_STREAMS (RFC 9113 §5.1.2) while the server may
// still start work for every one. The mitigation (Go's; nginx and h2o add
// a GOAWAY ENHANCE_YOUR_CALM) keeps the reset streams inside the limit: a
// handler runs at most once per stream, a reset ends its handler at once
// (its request is canceled), so a connection never has more handlers
// running than SETTINGS_MAX_CONCURRENT_STREAMS, however many streams it
// opens and resets.
//
// Every stream asks for the same uncached answer while the upstream holds
// it, so a handler that outlived its stream's reset would still be waiting
// when the burst is over. The test counts the handler runs that had
// finished once the server had read the whole burst (it answered a PING
// sent behind it), then releases the upstream: the runs that finish after
// that are the ones a reset did not end, and there must be no more of them
// than the advertised limit. The upstream sees one coalesced request, and
// an ordinary client on another connection is served during the burst.
func TestH2RapidReset(t *testing.T) {
	const streams = 10_000
	const held = "/api4/public/topic/bitcoin/whatsup/v1"
	forEachH2Server(t, func(t *testing.T, set func(*config.Config)) {
		g := startTLSGateway(t, set, func(c *config.Config) {
			c.Server.ShutdownTimeout = 5 * time.Second
		})
		g.prime(t)
		release := g.hold(t, held)
		upBefore, handledBefore := g.upstream.Load(), g.handled(t)

		c := g.dial(t)
		settings := c.Handshake()
		maxStreams, ok := settings[http2.SettingMaxConcurrentStreams]
		if !ok {
			maxStreams = 1 << 31 // unlimited, as advertised
		}
		block := c.Encode(h2test.GET(g.authority, held, g.key)...)
		start := time.Now()
		var sent int
		var writeErr error
		for sent < streams && writeErr == nil {
			for range 500 {
				id := c.NextStreamID()
				c.WriteRequest(id, block, true)
				_ = c.Framer.WriteRSTStream(id, http2.ErrCodeCancel)
				sent++
			}
			writeErr = c.Flush()
		}
		// Another client is served while the burst is being processed.
		g.mustServe(t, "during the rapid reset")
		caughtUp := writeErr == nil && ping(t, c, [8]byte{'r', 'a', 'p', 'i', 'd'}, 30*time.Second)
		finished := g.handled(t) - handledBefore - 1 // less the ordinary request
		if !caughtUp {
			// The server ended the connection instead: as good a bound.
			e := c.AwaitClose(30 * time.Second)
			t.Logf("the server ended the connection during the burst: %v", e)
			finished = g.handled(t) - handledBefore - 1
		}
		t.Logf("%d streams opened and reset in %v; the server read them all and answered a PING: %v", sent, time.Since(start).Round(time.Millisecond), caughtUp)
		release()
		g.mustServe(t, "after the rapid reset")
		g.drainsWithin(t)

		// Serve has returned, so every handler run is over.
		ran := g.handled(t) - handledBefore - 2 // less the ordinary requests
		if ran > sent {
			t.Errorf("handler runs for the attacking connection: got %d; want at most one per stream (%d)", ran, sent)
		}
		if outlived := ran - finished; outlived > int(maxStreams) {
			t.Errorf("handler runs still going after the burst was read: %d; want at most SETTINGS_MAX_CONCURRENT_STREAMS (%d): a reset must end its stream's work", outlived, maxStreams)
		}
		if up := g.upstream.Load() - upBefore; up > 1 {
			t.Errorf("upstream requests during the attack: got %d; want at most 1 (every stream asked for the same answer)", up)
		}
		t.Logf("handler runs: %d for %d streams, %d of them finished before the upstream answered (SETTINGS_MAX_CONCURRENT_STREAMS %d)", ran, sent, finished, maxStreams)
	})
}

// continuationFields returns header fields that HPACK-encode (literal,
// never indexed) to about n bytes, for filling CONTINUATION frames.
func continuationFields(n int) []hpack.HeaderField {
	var fs []hpack.HeaderField
	for i := 0; n > 0; i++ {
		v := strings.Repeat("c", min(1000, n))
		fs = append(fs, hpack.HeaderField{Name: fmt.Sprintf("x-flood-%d", i), Value: v, Sensitive: true})
		n -= len(v) + 16
	}
	return fs
}

// TestH2ContinuationFlood is the regression test for CVE-2024-27316 (and
// Go's CVE-2023-45288): a client sends a HEADERS frame without
// END_HEADERS and then CONTINUATION frames that never end it. RFC 9113
// §10.5.1 lets a server refuse a header section larger than it is willing
// to handle; the CVEs' mitigation is to stop reading and close the
// connection once the section exceeds the limit (server.max_header_bytes
// here), never buffering or decoding without bound. The client sends four
// times max_header_bytes of CONTINUATION and requires the connection to
// end without more.
func TestH2ContinuationFlood(t *testing.T) {
	forEachH2Server(t, func(t *testing.T, set func(*config.Config)) {
		g := startTLSGateway(t, set, func(c *config.Config) {
			c.Server.ShutdownTimeout = 5 * time.Second
		})
		limit := g.cfg.Server.MaxHeaderBytes
		c := g.dial(t)
		settings := c.Handshake()
		frameMax := 16384 // RFC 9113 §6.5.2 initial value
		if v, ok := settings[http2.SettingMaxFrameSize]; ok {
			frameMax = min(frameMax, int(v))
		}
		id := c.NextStreamID()
		if err := c.Framer.WriteHeaders(http2.HeadersFrameParam{
			StreamID: id, BlockFragment: c.Encode(h2test.GET(g.authority, listPath, g.key)...), EndStream: true,
		}); err != nil {
			t.Fatal(err)
		}
		var sent int
		var writeErr error
		for sent < 4*limit && writeErr == nil {
			frag := c.Encode(continuationFields(frameMax - 200)...)
			if err := c.Framer.WriteContinuation(id, false, frag); err != nil {
				t.Fatal(err)
			}
			sent += len(frag)
			writeErr = c.Flush()
		}
		e := c.AwaitClose(10 * time.Second)
		t.Logf("%d bytes of CONTINUATION sent (max_header_bytes %d, write error %v); %v", sent, limit, writeErr, e)
		g.mustServe(t, "after the CONTINUATION flood")
		g.drainsWithin(t)
	})
}
