package gateway_test

import (
	"crypto/tls"
	"flag"
	"fmt"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"trendgate/config"
	"trendgate/gateway/gatewaytest"
	"trendgate/internal/testing/h2test"
)

var (
	soak      = flag.Bool("soak", false, "run TestAbandonedRequestFloods for -soak.for per server instead of one round")
	soakFor   = flag.Duration("soak.for", time.Minute, "how long -soak floods each server")
	floodSize = flag.Int("flood.size", 0, "abandoned requests per round of TestAbandonedRequestFloods (0: 1500 over HTTP/2, 400 over HTTP/1.1)")
	// floodNoBound measures the floods with the detached-fill bound out of
	// reach, as the code was before issue 31; the test then fails.
	floodNoBound = flag.Bool("flood.nobound", false, "flood with cache.max_detached_fills out of reach (the figures before issue 31; expected to fail)")
)

// floodPath is the i-th request of a flood: the whatsup of a topic of its
// own, so that every request needs a fill of its own.
func floodPath(i int) string { return fmt.Sprintf("/api4/public/topic/flood%d/whatsup/v1", i) }

// floodStats is what one flood sent.
type floodStats struct {
	sent, conns int
	goaways     int // connections the server sent GOAWAY on
	maxDetached int // the most detached fills seen between batches
}

// poll checks cond every millisecond, at most 10,000 times (a bound on
// the polling, not a wait for time to pass), and reports whether it held.
func poll(cond func() bool) bool {
	for range 1000 {
		if cond() {
			return true
		}
		time.Sleep(time.Millisecond) // polling, not waiting for time to pass
	}
	return cond()
}

// settle returns the goroutine count once it has stopped falling (at
// most a few hundred polls).
func settle() int {
	last, stable := runtime.NumGoroutine(), 0
	for i := 0; i < 2000 && stable < 50; i++ {
		time.Sleep(time.Millisecond) // polling, not waiting for time to pass
		if n := runtime.NumGoroutine(); n < last {
			last, stable = n, 0
		} else {
			stable++
		}
	}
	return last
}

// floodBatch is how many requests a flood has waiting at once before it
// abandons them: below the HTTP/2 servers' stream limits.
const floodBatch = 100

// floodH2 opens n HTTP/2 streams for distinct uncached answers, floodBatch
// at a time, waits until every one's handler waits on its fill, and resets
// them all (RST_STREAM CANCEL); a PING then tells when the server has read
// the resets. A connection the server sends GOAWAY on (its reset budget)
// or closes is replaced by a new one.
func floodH2(t *testing.T, g *gatewaytest.TLSGateway, from, n int) floodStats {
	var st floodStats
	var c *h2test.Conn
	defer func() {
		if c != nil {
			_ = c.Close()
		}
	}()
	served := false
	for i := from; i < from+n; {
		if c == nil {
			c = g.Dial(t)
			c.Handshake()
			st.conns++
		}
		var ids []uint32
		for ; len(ids) < floodBatch && i < from+n; i++ {
			id := c.NextStreamID()
			c.WriteRequest(id, c.Encode(h2test.GET(g.Authority, floodPath(i), g.Key)...), true)
			ids = append(ids, id)
		}
		if err := c.Flush(); err != nil {
			_ = c.Close()
			c = nil
			continue
		}
		poll(func() bool { return g.WaitingFills(t) >= len(ids) })
		for _, id := range ids {
			_ = c.Framer.WriteRSTStream(id, http2.ErrCodeCancel)
		}
		st.sent += len(ids)
		if goaway, open := pingThrough(c); goaway || !open {
			if goaway {
				st.goaways++
			}
			_ = c.Close()
			c = nil
		}
		st.maxDetached = max(st.maxDetached, g.MetricOf(t, "trendgate_cache_detached_fills"))
		if !served && i-from >= n/2 {
			g.MustServe(t, "during the flood")
			served = true
		}
	}
	return st
}

// pingThrough sends a PING and reads until its ACK: the server has read
// everything sent before. It reports whether a GOAWAY came first, and
// whether the connection is still open.
func pingThrough(c *h2test.Conn) (goaway, open bool) {
	data := [8]byte{'f', 'l', 'o', 'o', 'd'}
	if err := c.Framer.WritePing(false, data); err != nil || c.Flush() != nil {
		return false, false
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		f, err := c.ReadFrame(time.Until(deadline))
		if err != nil {
			return goaway, false
		}
		switch f := f.(type) {
		case *http2.GoAwayFrame:
			goaway = true
		case *http2.PingFrame:
			if f.IsAck() && f.Data == data {
				return goaway, true
			}
		}
	}
}

// floodH1 sends n HTTP/1.1 requests for distinct uncached answers, one per
// TLS connection, floodBatch/2 connections at a time; once every one's
// handler waits on its fill, it closes them all.
func floodH1(t *testing.T, g *gatewaytest.TLSGateway, from, n int) floodStats {
	var st floodStats
	cfg := g.TLS.Clone()
	cfg.NextProtos = []string{"http/1.1"}
	served := false
	for i := from; i < from+n; {
		var conns []net.Conn
		for ; len(conns) < floodBatch/2 && i < from+n; i++ {
			nc, err := tls.Dial("tcp", g.Public, cfg)
			if err != nil {
				t.Fatalf("dial: %v", err)
			}
			if _, err := fmt.Fprintf(nc, "GET %s HTTP/1.1\r\nHost: tg.test\r\nAuthorization: Bearer %s\r\n\r\n", floodPath(i), g.Key); err != nil {
				t.Fatalf("write: %v", err)
			}
			conns = append(conns, nc)
		}
		poll(func() bool { return g.WaitingFills(t) >= len(conns) })
		for _, nc := range conns {
			_ = nc.Close()
		}
		st.sent += len(conns)
		st.conns += len(conns)
		st.maxDetached = max(st.maxDetached, g.MetricOf(t, "trendgate_cache_detached_fills"))
		if !served && i-from >= n/2 {
			g.MustServe(t, "during the flood")
			served = true
		}
	}
	return st
}

// TestAbandonedRequestFloods is the soak of issue 31: clients that ask for
// uncached answers and go away (an HTTP/2 reset, a closed HTTP/1.1
// connection) while the upstream is slow. Each abandoned request gets 499
// and its fill runs on, detached; before the bound on detached fills
// (cache.max_detached_fills), every one ran until fetch_timeout waiting
// for an upstream connection, and one connection to Go's HTTP/2 server
// left 15,610 of them behind. Against the HTTP/2 lane, Go's HTTP/2 server
// (fast_http2: false) and the HTTP/1.1 lane, each round floods while the
// upstream holds every flood request, then checks, with the upstream still
// holding them: at most max_detached_fills fills detached at any time,
// the rest dropped, goroutines and live heap near their baseline; an
// ordinary client is served during the flood. Then the upstream answers,
// and goroutines and heap must return to the baseline, and the calls the
// detached fills made are counted as abandoned for the key. One round
// takes seconds; -soak repeats rounds for -soak.for per server.
//
// It weighs the whole process's goroutines and heap, so it does not run in
// parallel.
func TestAbandonedRequestFloods(t *testing.T) {
	servers := []struct {
		name  string
		set   func(*config.Config)
		flood func(t *testing.T, g *gatewaytest.TLSGateway, from, n int) floodStats
		size  int
	}{
		{"http2 lane", nil, floodH2, 1500},
		{"http2 net/http", func(c *config.Config) { off := false; c.Server.FastHTTP2 = &off }, floodH2, 1500},
		{"http1.1 lane", nil, floodH1, 400},
	}
	const maxConns = 4
	const bound = 4 * maxConns // the default: four times upstream.max_conns
	// What may stay alive beyond the baseline: with the upstream holding,
	// the detached fills and the upstream connections they use (client and
	// server side); once it answers, idle upstream connections.
	const heldGoroutines, afterGoroutines = 4*bound + 32, 32
	const heldHeap, afterHeap = 8 << 20, 8 << 20
	for _, s := range servers {
		t.Run(s.name, func(t *testing.T) {
			g := gatewaytest.StartTLSGateway(t, s.set, func(c *config.Config) {
				gatewaytest.AttackTimeouts(c)
				off := false
				c.Log.Access = &off // the test's log buffer would grow with the heap it weighs
				c.Upstream.MaxConns = maxConns
				// Only the bound may end an abandoned fill here.
				c.Cache.FetchTimeout = 5 * time.Minute
				c.Upstream.Timeout, c.Upstream.ResponseHeaderTimeout = 5*time.Minute, 5*time.Minute
				if *floodNoBound {
					c.Cache.MaxDetachedFills = 1 << 30
				}
			})
			g.Prime(t)
			size := s.size
			if *floodSize > 0 {
				size = *floodSize
			}
			baseG, baseH := settle(), gatewaytest.LiveHeap()
			t.Logf("baseline: %d goroutines, live heap %.1f MB", baseG, float64(baseH)/1e6)
			start := time.Now()
			for round := 0; round == 0 || *soak && time.Since(start) < *soakFor; round++ {
				release := g.HoldMatching(t, &gatewaytest.UpstreamHold{Match: func(p string) bool { return strings.Contains(p, "/topic/flood") }})
				began := time.Now()
				st := s.flood(t, g, round*size, size)
				if !poll(func() bool { return g.WaitingFills(t) == 0 }) {
					t.Errorf("round %d: %d fills still have a caller waiting after the flood's clients left", round, g.WaitingFills(t))
				}
				heldG, heldH := settle(), gatewaytest.LiveHeap()
				detached, dropped := g.MetricOf(t, "trendgate_cache_detached_fills"), g.MetricOf(t, "trendgate_cache_fills_dropped_total", "reason", "abandoned")
				t.Logf("round %d: %d requests abandoned on %d connections (%d GOAWAY) in %v; upstream holding: %d goroutines (+%d), live heap %.1f MB (%+.1f), %d fills detached (at most %d seen), %d dropped so far, %d reset-budget GOAWAYs (Go's HTTP/2)",
					round, st.sent, st.conns, st.goaways, time.Since(began).Round(time.Millisecond), heldG, heldG-baseG,
					float64(heldH)/1e6, (float64(heldH)-float64(baseH))/1e6, detached, st.maxDetached, dropped,
					g.MetricOf(t, "trendgate_http2_reset_budget_goaways_total"))
				if st.maxDetached > bound || detached > bound {
					t.Errorf("round %d: detached fills %d (at most %d seen); want at most cache.max_detached_fills, %d", round, detached, st.maxDetached, bound)
				}
				if heldG > baseG+heldGoroutines {
					t.Errorf("round %d: %d goroutines with the upstream holding, baseline %d; want at most %d more", round, heldG, baseG, heldGoroutines)
				}
				if int64(heldH) > int64(baseH)+heldHeap {
					t.Errorf("round %d: live heap %d bytes with the upstream holding, baseline %d; want at most %d more", round, heldH, baseH, heldHeap)
				}
				if dropped == 0 {
					t.Errorf("round %d: no fill dropped after %d abandoned requests; want all but %d", round, st.sent, bound)
				}
				if s.set != nil && g.MetricOf(t, "trendgate_http2_reset_budget_goaways_total") == 0 {
					t.Errorf("round %d: Go's HTTP/2 server sent no GOAWAY for the reset budget after %d abandoned streams", round, st.sent)
				}

				release()
				if !poll(func() bool { return g.MetricOf(t, "trendgate_cache_fills") == 0 }) {
					t.Errorf("round %d: %d fills still running after the upstream answered", round, g.MetricOf(t, "trendgate_cache_fills"))
				}
				afterG, afterH := settle(), gatewaytest.LiveHeap()
				t.Logf("round %d: upstream answered: %d goroutines (+%d), live heap %.1f MB (%+.1f); upstream calls abandoned so far: %d",
					round, afterG, afterG-baseG, float64(afterH)/1e6, (float64(afterH)-float64(baseH))/1e6,
					g.MetricOf(t, "trendgate_upstream_calls_abandoned_total", "account", g.Config.Keys[0].ID))
				if afterG > baseG+afterGoroutines {
					t.Errorf("round %d: %d goroutines after the flood, baseline %d; want at most %d more", round, afterG, baseG, afterGoroutines)
				}
				if int64(afterH) > int64(baseH)+afterHeap {
					t.Errorf("round %d: live heap %d bytes after the flood, baseline %d; want at most %d more", round, afterH, baseH, afterHeap)
				}
				if g.MetricOf(t, "trendgate_upstream_calls_abandoned_total", "account", g.Config.Keys[0].ID) == 0 {
					t.Errorf("round %d: no upstream call counted as abandoned for the key", round)
				}
			}
			g.MustServe(t, "after the floods")
			g.DrainsWithin(t)
		})
	}
}
