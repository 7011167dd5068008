package gateway_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"trendgate/config"
	"trendgate/gateway/gatewaytest"
	"trendgate/internal/testing/h2test"
)

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
	t.Parallel()
	const streams = 5000
	const held = "/api4/public/topic/bitcoin/whatsup/v1"
	gatewaytest.ForEachH2Server(t, func(t *testing.T, set func(*config.Config)) {
		g := gatewaytest.StartTLSGateway(t, set, gatewaytest.AttackTimeouts)
		g.Prime(t)
		release := g.Hold(t, held)
		upBefore, handledBefore := g.Upstream.Load(), g.Handled(t)

		c := g.Dial(t)
		settings := c.Handshake()
		maxStreams, ok := settings[http2.SettingMaxConcurrentStreams]
		if !ok {
			maxStreams = 1 << 31 // unlimited, as advertised
		}
		block := c.Encode(h2test.GET(g.Authority, held, g.Key)...)
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
		g.MustServe(t, "during the rapid reset")
		caughtUp := writeErr == nil && c.Ping([8]byte{'r', 'a', 'p', 'i', 'd'}, 30*time.Second)
		finished := g.Handled(t) - handledBefore - 1 // less the ordinary request
		if !caughtUp {
			// The server ended the connection, or stopped reading it,
			// instead: bounds as good, as long as the handlers it did run
			// obey the limit below.
			e, ended := c.WaitEnd(10 * time.Second)
			t.Logf("the server did not read the whole burst: connection ended %v (%v; writes: %v)", ended, e, writeErr)
			finished = g.Handled(t) - handledBefore - 1
		}
		t.Logf("%d streams opened and reset in %v; the server read them all and answered a PING: %v", sent, time.Since(start).Round(time.Millisecond), caughtUp)
		release()
		g.MustServe(t, "after the rapid reset")
		g.DrainsWithin(t)

		// Serve has returned, so every handler run is over.
		ran := g.Handled(t) - handledBefore - 2 // less the ordinary requests
		if ran > sent {
			t.Errorf("handler runs for the attacking connection: got %d; want at most one per stream (%d)", ran, sent)
		}
		if outlived := ran - finished; outlived > int(maxStreams) {
			t.Errorf("handler runs still going after the burst was read: %d; want at most SETTINGS_MAX_CONCURRENT_STREAMS (%d): a reset must end its stream's work", outlived, maxStreams)
		}
		if up := g.Upstream.Load() - upBefore; up > 1 {
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
	t.Parallel()
	gatewaytest.ForEachH2Server(t, func(t *testing.T, set func(*config.Config)) {
		g := gatewaytest.StartTLSGateway(t, set, gatewaytest.AttackTimeouts)
		limit := g.Config.Server.MaxHeaderBytes
		c := g.Dial(t)
		settings := c.Handshake()
		frameMax := 16384 // RFC 9113 §6.5.2 initial value
		if v, ok := settings[http2.SettingMaxFrameSize]; ok {
			frameMax = min(frameMax, int(v))
		}
		id := c.NextStreamID()
		if err := c.Framer.WriteHeaders(http2.HeadersFrameParam{
			StreamID: id, BlockFragment: c.Encode(h2test.GET(g.Authority, gatewaytest.ListPath, g.Key)...), EndStream: true,
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
		g.MustServe(t, "after the CONTINUATION flood")
		g.DrainsWithin(t)
	})
}

// TestH2FloodsFromAClientThatDoesNotRead are the regression tests for the
// 2019 HTTP/2 flood advisories: a client sends frames each of which asks
// the server for a reply, and never reads, so the replies can only queue
// up. RFC 9113 §10.5 lets a server treat such activity as a connection
// error (ENHANCE_YOUR_CALM); the advisories' mitigation is to bound what
// is queued per connection. One of three outcomes is required: the server
// closes the connection, or it stops reading (the client's writes stall),
// or it keeps reading while what it retains stays well under the replies'
// own size (half the bytes of the frames it owes, which any queue of them
// holds at least).
//
//   - PING (CVE-2019-9512): each PING is owed a PING ACK (§6.7).
//   - SETTINGS (CVE-2019-9515): each SETTINGS is owed an ACK (§6.5.3).
//   - WINDOW_UPDATE, the data dribble (CVE-2019-9511): streams of a large
//     answer opened with SETTINGS_INITIAL_WINDOW_SIZE 0, then one-byte
//     WINDOW_UPDATEs, each letting the server send one more byte in a DATA
//     frame of its own.
//
// It weighs the whole process's heap, so it does not run in parallel
// (parallel tests run only alongside each other).
func TestH2FloodsFromAClientThatDoesNotRead(t *testing.T) {
	tests := []struct {
		name string
		// steps is how many times flood is called: enough that half the
		// replies owed stand well above the heap's noise between two
		// collections here (under 200 KB).
		steps int
		// replyBytes is the wire size of the smallest reply one step asks
		// for.
		replyBytes int
		// initialWindow, when set, is the client's
		// SETTINGS_INITIAL_WINDOW_SIZE.
		initialWindow *uint32
		// open, when not nil, starts the attack (after the handshake) and
		// returns the stream ids the flood may use.
		open  func(t *testing.T, g *gatewaytest.TLSGateway, c *h2test.Conn, maxStreams uint32) []uint32
		flood func(c *h2test.Conn, i int, streams []uint32) error
	}{
		{
			name: "PING", steps: 100_000, replyBytes: 9 + 8,
			flood: func(c *h2test.Conn, i int, _ []uint32) error {
				return c.Framer.WritePing(false, [8]byte{byte(i), byte(i >> 8), byte(i >> 16)})
			},
		},
		{
			name: "SETTINGS", steps: 100_000, replyBytes: 9,
			flood: func(c *h2test.Conn, _ int, _ []uint32) error {
				return c.Framer.WriteSettings(http2.Setting{ID: http2.SettingHeaderTableSize, Val: 4096})
			},
		},
		{
			name: "WINDOW_UPDATE", steps: 100_000, replyBytes: 9 + 1, initialWindow: new(uint32),
			open: func(t *testing.T, g *gatewaytest.TLSGateway, c *h2test.Conn, maxStreams uint32) []uint32 {
				var ids []uint32
				block := c.Encode(h2test.GET(g.Authority, gatewaytest.SeriesPath, g.Key)...)
				for range min(maxStreams, 100) {
					id := c.NextStreamID()
					c.WriteRequest(id, block, true)
					ids = append(ids, id)
				}
				c.MustFlush()
				return ids
			},
			flood: func(c *h2test.Conn, i int, streams []uint32) error {
				// The connection's window opens by 1 and so does one
				// stream's: one more byte may be sent.
				if err := c.Framer.WriteWindowUpdate(0, 1); err != nil {
					return err
				}
				return c.Framer.WriteWindowUpdate(streams[i%len(streams)], 1)
			},
		},
	}
	gatewaytest.ForEachH2Server(t, func(t *testing.T, set func(*config.Config)) {
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				g := gatewaytest.StartTLSGateway(t, set, func(c *config.Config) {
					gatewaytest.AttackTimeouts(c)
					// A flood opens no stream: the idle timeout would
					// end it before its replies could pile up.
					c.Server.IdleTimeout = time.Minute
				})
				g.Prime(t)
				c := g.Dial(t)
				var settings []http2.Setting
				if tc.initialWindow != nil {
					settings = append(settings, http2.Setting{ID: http2.SettingInitialWindowSize, Val: *tc.initialWindow})
				}
				server := c.Handshake(settings...)
				maxStreams, ok := server[http2.SettingMaxConcurrentStreams]
				if !ok {
					maxStreams = 1 << 31
				}
				var streams []uint32
				if tc.open != nil {
					streams = tc.open(t, g, c, maxStreams)
				}
				before := gatewaytest.LiveHeap()
				start := time.Now()
				var sent int
				var writeErr error
				for sent < tc.steps && writeErr == nil {
					for range 1000 {
						if err := tc.flood(c, sent, streams); err != nil {
							t.Fatal(err)
						}
						sent++
					}
					writeErr = c.Flush()
				}
				owed := int64(sent) * int64(tc.replyBytes)
				t.Logf("%d flood steps sent in %v (write error: %v); the replies owed take %d bytes", sent, time.Since(start).Round(time.Millisecond), writeErr, owed)
				// A request behind the flood: once its handler has run,
				// the server has read every frame before it, and what it
				// retains for them can be weighed. It is the only list
				// request (the flood's streams, reset when they stall,
				// are series).
				handledBefore := g.HandledList(t)
				if writeErr == nil {
					c.WriteRequest(c.NextStreamID(), c.Encode(h2test.GET(g.Authority, gatewaytest.ListPath, g.Key)...), true)
					writeErr = c.Flush()
				}
				read := false
				for deadline := time.Now().Add(30 * time.Second); writeErr == nil && !read && time.Now().Before(deadline); {
					if read = g.HandledList(t) > handledBefore; !read {
						time.Sleep(5 * time.Millisecond) // polling a counter, not waiting for time to pass
						// Still open? A WINDOW_UPDATE asks for no reply.
						_ = c.Framer.WriteWindowUpdate(0, 1)
						writeErr = c.Flush()
					}
				}
				switch {
				case h2test.Closed(writeErr):
					t.Logf("the server closed the connection: %v", c.AwaitClose(10*time.Second))
				case writeErr != nil || !read:
					t.Logf("the server stopped reading (writes stalled: %v)", writeErr)
				default:
					grew := int64(gatewaytest.LiveHeap()) - int64(before)
					t.Logf("the server read the whole flood in %v and kept the connection; live heap grew by %d bytes", time.Since(start).Round(time.Millisecond), grew)
					if grew > owed/2 {
						t.Errorf("the server read %d flood steps from a client that reads nothing, kept the connection open and retained %d more bytes of heap (the replies owed: %d bytes): its replies queue without bound", sent, grew, owed)
					}
				}
				g.MustServe(t, "after the "+tc.name+" flood")
				g.DrainsWithin(t)
			})
		}
	})
}

// TestH2HPACKBomb: a header block of one-byte references to a 4 KB entry
// of the dynamic table (RFC 7541 §2.3.2) decodes to a header list of
// gigabytes from a few kilobytes on the wire. RFC 9113 §10.5.1 lets the
// server refuse a header list over its SETTINGS_MAX_HEADER_LIST_SIZE
// (here server.max_header_bytes) with 431 or a stream or connection error;
// it must do so without building the list: the process allocates less than
// a quarter of what the list would take.
//
// It counts the whole process's allocations, so it does not run in
// parallel.
func TestH2HPACKBomb(t *testing.T) {
	gatewaytest.ForEachH2Server(t, func(t *testing.T, set func(*config.Config)) {
		g := gatewaytest.StartTLSGateway(t, set, gatewaytest.AttackTimeouts)
		g.Prime(t)
		c := g.Dial(t)
		settings := c.Handshake()
		frameMax := 16384 // RFC 9113 §6.5.2 initial value
		if v, ok := settings[http2.SettingMaxFrameSize]; ok {
			frameMax = min(frameMax, int(v))
		}
		// The request, then one 4 KB field the encoder adds to the
		// dynamic table (the newest entry: index 62), then references to
		// it, one byte each (RFC 7541 §6.1), to the end of the frame.
		bomb := hpack.HeaderField{Name: "x-bomb", Value: strings.Repeat("b", 4000)}
		block := c.Encode(append(h2test.GET(g.Authority, gatewaytest.ListPath, g.Key), bomb)...)
		refs := frameMax - len(block)
		block = append(block, bytes.Repeat([]byte{0x80 | 62}, refs)...)
		decoded := int64(refs) * int64(bomb.Size())

		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		allocBefore := m.TotalAlloc
		id := c.NextStreamID()
		c.WriteRequest(id, block, true)
		c.MustFlush()
		var outcome string
		for outcome == "" {
			f, err := c.ReadFrame(10 * time.Second)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("no reaction to the HPACK bomb within 10s")
			}
			switch f := f.(type) {
			case nil:
				outcome = fmt.Sprintf("connection closed (%v)", err)
			case *http2.MetaHeadersFrame:
				if f.StreamID != id {
					continue
				}
				if st := f.PseudoValue("status"); st != "431" {
					t.Fatalf("the HPACK bomb got status %s; want 431, RST_STREAM or GOAWAY", st)
				}
				outcome = "431"
			case *http2.RSTStreamFrame:
				if f.StreamID == id {
					outcome = "RST_STREAM " + f.ErrCode.String()
				}
			case *http2.GoAwayFrame:
				outcome = "GOAWAY " + f.ErrCode.String()
			}
		}
		runtime.ReadMemStats(&m)
		allocated := int64(m.TotalAlloc - allocBefore)
		t.Logf("a %d-byte header block decoding to %d bytes: %s; the process allocated %d bytes meanwhile", len(block), decoded, outcome, allocated)
		if allocated > decoded/4 {
			t.Errorf("the process allocated %d bytes while refusing a header list of %d bytes; want under a quarter of it (the list must not be built)", allocated, decoded)
		}
		g.MustServe(t, "after the HPACK bomb")
		g.DrainsWithin(t)
	})
}

// TestH2ZeroWindowStall: a client that sets SETTINGS_INITIAL_WINDOW_SIZE
// to 0 and never sends a WINDOW_UPDATE lets no DATA through (RFC 9113
// §6.9), so a response body can never finish. server.write_timeout bounds
// it: the stream must end (RST_STREAM, or the connection closed) within
// write_timeout, and the connection, then idle, within idle_timeout more.
// A second stalled connection is left open for the drain.
func TestH2ZeroWindowStall(t *testing.T) {
	t.Parallel()
	gatewaytest.ForEachH2Server(t, func(t *testing.T, set func(*config.Config)) {
		g := gatewaytest.StartTLSGateway(t, set, gatewaytest.AttackTimeouts)
		g.Prime(t)
		sc := g.Config.Server
		stall := func() (*h2test.Conn, uint32) {
			c := g.Dial(t)
			c.Handshake(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
			id := c.NextStreamID()
			c.WriteRequest(id, c.Encode(h2test.GET(g.Authority, gatewaytest.ListPath, g.Key)...), true)
			c.MustFlush()
			return c, id
		}
		c, id := stall()
		start := time.Now()
		deadline := start.Add(sc.WriteTimeout + gatewaytest.Margin)
		var ended string
		for ended == "" {
			f, err := c.ReadFrame(time.Until(deadline))
			if errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("the stalled stream is still open %v later; want it ended within write_timeout %v", time.Since(start).Round(time.Millisecond), sc.WriteTimeout)
			}
			switch f := f.(type) {
			case nil:
				ended = fmt.Sprintf("connection closed (%v)", err)
			case *http2.DataFrame:
				if f.StreamID == id && len(f.Data()) > 0 {
					t.Fatalf("got %d bytes of DATA on stream %d through a zero window", len(f.Data()), id)
				}
			case *http2.RSTStreamFrame:
				if f.StreamID == id {
					ended = "RST_STREAM " + f.ErrCode.String()
				}
			case *http2.GoAwayFrame:
				ended = "GOAWAY " + f.ErrCode.String()
			}
		}
		t.Logf("the stalled stream ended after %v: %s", time.Since(start).Round(time.Millisecond), ended)
		if !strings.HasPrefix(ended, "connection closed") {
			e := c.AwaitClose(sc.IdleTimeout + gatewaytest.Margin)
			t.Logf("the connection then %v", e)
		}
		g.MustServe(t, "after the zero-window stall")
		stall()
		g.DrainsWithin(t)
	})
}

// TestH2IdleConnection: a connection that opens no stream is closed after
// server.idle_timeout (RFC 9113 §9.1: a server may close an idle
// connection, with a GOAWAY). A second idle connection is left open for
// the drain.
func TestH2IdleConnection(t *testing.T) {
	t.Parallel()
	gatewaytest.ForEachH2Server(t, func(t *testing.T, set func(*config.Config)) {
		g := gatewaytest.StartTLSGateway(t, set, gatewaytest.AttackTimeouts)
		c := g.Dial(t)
		c.Handshake()
		e := c.AwaitClose(g.Config.Server.IdleTimeout + gatewaytest.Margin)
		t.Logf("idle connection %v (idle_timeout %v)", e, g.Config.Server.IdleTimeout)
		g.MustServe(t, "after the idle connection")
		g.Dial(t).Handshake()
		g.DrainsWithin(t)
	})
}

// TestH2SlowRead: a client opens as many streams as it may for the
// largest answer, with windows wide open, and reads nothing, so the
// server's writes stall once the socket buffers are full (the slow-read
// attack, and CVE-2019-9517's internal data buffering). server.write_timeout
// bounds those writes: the server must give the connection up (a server
// that stops reading the requests it cannot answer, as the lane does, after
// write_timeout; one that still answers them all, as Go's HTTP/2 does, once
// it is idle, after idle_timeout more), and no response may then be left
// running, which the drain checks. The connection is watched without
// reading it, since reading would let the writes finish.
func TestH2SlowRead(t *testing.T) {
	t.Parallel()
	gatewaytest.ForEachH2Server(t, func(t *testing.T, set func(*config.Config)) {
		g := gatewaytest.StartTLSGateway(t, set, gatewaytest.AttackTimeouts)
		g.Prime(t)
		pc := g.Dial(t)
		pc.Handshake()
		r := pc.Get(g.Authority, gatewaytest.SeriesPath, g.Key) // a cache hit from now on
		if r.Status != 200 {
			t.Fatalf("priming the series: status %d", r.Status)
		}
		sc := g.Config.Server
		c := g.Dial(t)
		settings := c.Handshake(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1<<31 - 1})
		if err := c.Framer.WriteWindowUpdate(0, 1<<31-1-65535); err != nil {
			t.Fatal(err)
		}
		streams := uint32(250)
		if v, ok := settings[http2.SettingMaxConcurrentStreams]; ok {
			streams = min(streams, v)
		}
		before := g.Handled(t)
		block := c.Encode(h2test.GET(g.Authority, gatewaytest.SeriesPath, g.Key)...)
		for range streams {
			c.WriteRequest(c.NextStreamID(), block, true)
		}
		c.MustFlush()
		took, closed := c.AwaitClosedUnread(sc.WriteTimeout + sc.IdleTimeout + gatewaytest.Margin)
		if !closed {
			t.Fatalf("the connection of a client that reads nothing is still open %v later; want it closed within write_timeout %v + idle_timeout %v",
				took.Round(time.Millisecond), sc.WriteTimeout, sc.IdleTimeout)
		}
		t.Logf("the server closed the connection after %v; %d of the %d requests were answered in part or whole",
			took.Round(time.Millisecond), g.Handled(t)-before, streams)
		g.MustServe(t, "after the slow read")
		g.DrainsWithin(t)
	})
}
