package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestQuantiles(t *testing.T) {
	lat := make([]time.Duration, 0, 200)
	for i := 200; i >= 1; i-- { // unsorted on purpose
		lat = append(lat, time.Duration(i)*time.Millisecond)
	}
	p50, p90, p99, mx := quantiles(lat)
	if p50 != 100*time.Millisecond || p90 != 180*time.Millisecond || p99 != 198*time.Millisecond || mx != 200*time.Millisecond {
		t.Errorf("quantiles = %v %v %v %v; want 100ms 180ms 198ms 200ms", p50, p90, p99, mx)
	}
	if p50, _, p99, mx := quantiles([]time.Duration{7}); p50 != 7 || p99 != 7 || mx != 7 {
		t.Errorf("quantiles of one = %v %v %v", p50, p99, mx)
	}
	if p50, _, _, _ := quantiles(nil); p50 != 0 {
		t.Errorf("quantiles of none = %v", p50)
	}
}

// leanServer answers 200 with a 20,000-byte body to requests with the key
// over want's protocol; every fifth request gets a 503, and with hangUp
// every seventh has its connection closed without an answer. It counts
// what it answered.
type leanServer struct {
	want       protocol
	hangUp     bool
	n, bad, ok atomic.Int64
}

func (s *leanServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := s.n.Add(1)
	wantMajor := 1
	if s.want == h2 {
		wantMajor = 2
	}
	switch {
	case r.Header.Get("Authorization") != "Bearer k1" || r.URL.RequestURI() != "/a?b=c" || r.ProtoMajor != wantMajor:
		s.bad.Add(1)
		http.Error(w, "wrong request", http.StatusBadRequest)
	case s.hangUp && n%7 == 0:
		s.bad.Add(1)
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
	case n%5 == 0:
		s.bad.Add(1)
		http.Error(w, "busy", http.StatusServiceUnavailable)
	default:
		s.ok.Add(1)
		w.Header().Set("Content-Length", "20000")
		w.Write([]byte(strings.Repeat("x", 20000)))
	}
}

func TestLeanStep(t *testing.T) {
	for _, tc := range []struct {
		pr     protocol
		hangUp bool
	}{{h1, false}, {h1, true}, {https, false}, {h2, false}} {
		name := string(tc.pr)
		if tc.hangUp {
			name += "-hang-up"
		}
		t.Run(name, func(t *testing.T) {
			srv := &leanServer{want: tc.pr, hangUp: tc.hangUp}
			ts := httptest.NewUnstartedServer(srv)
			var dialled atomic.Int64
			ts.Config.ConnState = func(_ net.Conn, st http.ConnState) {
				if st == http.StateNew {
					dialled.Add(1)
				}
			}
			var conf *tls.Config
			if tc.pr == h1 {
				ts.Start()
			} else {
				ts.EnableHTTP2 = tc.pr == h2
				ts.StartTLS()
				pool := x509.NewCertPool()
				pool.AddCert(ts.Certificate())
				conf = &tls.Config{RootCAs: pool}
			}
			defer ts.Close()
			const conns = 4
			c, err := newLeanClient(tc.pr, ts.URL+"/a?b=c", "k1", conns, conf)
			if err != nil {
				t.Fatal(err)
			}
			defer c.close()
			// Two steps of 150 requests each (300,000/s for 0.5 ms: the
			// dispatcher hardly waits) over the same connections.
			for round := range 2 {
				n0, bad0 := srv.n.Load(), srv.bad.Load()
				res, err := leanStep(context.Background(), c, 300_000, 500*time.Microsecond, nil)
				if err != nil {
					t.Fatal(err)
				}
				served, bad := srv.n.Load()-n0, srv.bad.Load()-bad0
				if res.requests != 150 || served != 150 {
					t.Fatalf("round %d: %d requests measured, %d served; want 150 each", round, res.requests, served)
				}
				// Every request the server failed failed in the generator,
				// and no other.
				if bad == 0 || res.errors != uint64(bad) {
					t.Fatalf("round %d: %d errors measured, %d failed by the server (first: %s)", round, res.errors, bad, res.firstError)
				}
				if res.p50 <= 0 || res.p50 > res.p99 || res.p99 > res.mx {
					t.Errorf("round %d: p50 %v, p99 %v, max %v", round, res.p50, res.p99, res.mx)
				}
			}
			// The second step reused the first one's connections; only
			// connections the server hung up on were dialled again.
			if n := dialled.Load(); !tc.hangUp && n != conns || tc.hangUp && n <= conns {
				t.Errorf("%d connections dialled over two steps (hang-ups: %v); want %d, more with hang-ups", n, tc.hangUp, conns)
			}
		})
	}
}

// TestLeanStepCountsErrors checks the error count request by request: a
// server that answers only 503s fails every request.
func TestLeanStepCountsErrors(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "down", http.StatusServiceUnavailable)
	}))
	defer ts.Close()
	c, err := newLeanClient(h1, ts.URL+"/", "k1", 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	res, err := leanStep(context.Background(), c, 100_000, time.Millisecond, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.requests != 100 || res.errors != 100 || !strings.Contains(res.firstError, "503") {
		t.Fatalf("%d requests, %d errors, first %q; want 100, 100, a 503", res.requests, res.errors, res.firstError)
	}
}
