//go:build linux

package h1_test

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"trendgate/internal/transport/h1"
)

// heldConn sends nothing it is written while held: Release sends all of
// it in one write, so that several TLS records reach the server in one
// segment, which it reads in one go.
type heldConn struct {
	net.Conn
	mu   sync.Mutex
	held *bytes.Buffer
}

func (c *heldConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.held != nil {
		return c.held.Write(p)
	}
	return c.Conn.Write(p)
}

func (c *heldConn) hold() {
	c.mu.Lock()
	c.held = new(bytes.Buffer)
	c.mu.Unlock()
}

func (c *heldConn) release() error {
	c.mu.Lock()
	b := c.held
	c.held = nil
	c.mu.Unlock()
	_, err := c.Conn.Write(b.Bytes())
	return err
}

// tlsLoopClient is an HTTP/1.1 connection over TLS to a lane on loops,
// which can send several records in one write.
type tlsLoopClient struct {
	t    *testing.T
	raw  *heldConn
	conn *tls.Conn
	br   *bufio.Reader
}

func dialTLSLoop(t *testing.T, ls *laneServer, cfg *tls.Config) *tlsLoopClient {
	t.Helper()
	raw := &heldConn{Conn: dialConn(t, ls.addr)}
	tc := tls.Client(raw, cfg)
	t.Cleanup(func() { _ = tc.Close() })
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	return &tlsLoopClient{t: t, raw: raw, conn: tc, br: bufio.NewReader(tc)}
}

// sendRecords writes each of parts as a TLS record of its own, all in one
// write on the socket.
func (c *tlsLoopClient) sendRecords(parts ...string) {
	c.t.Helper()
	c.raw.hold()
	for _, p := range parts {
		if _, err := io.WriteString(c.conn, p); err != nil {
			c.t.Fatal(err)
		}
	}
	if err := c.raw.release(); err != nil {
		c.t.Fatal(err)
	}
}

func (c *tlsLoopClient) read() string {
	c.t.Helper()
	resp, err := http.ReadResponse(c.br, &http.Request{Method: http.MethodGet})
	if err != nil {
		c.t.Fatalf("read response: %v", err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatalf("read body: %v", err)
	}
	return string(body)
}

// startTLSLoops serves h over TLS (HTTP/1.1 only) on one event loop.
func startTLSLoops(t *testing.T, h http.Handler) (*laneServer, *tls.Config) {
	t.Helper()
	cert, pool := selfSigned(t)
	ls := startLaneWith(t, listen(t), h, func(s *http.Server) {
		s.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"http/1.1"}}
	}, func(s *h1.Server) { s.Loops = 1 })
	return ls, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", NextProtos: []string{"http/1.1"}}
}

// Over TLS a loop reads records, not bytes: one read can bring records
// crypto/tls keeps for later, which no socket event announces. Requests
// in records that arrive together, a head cut across two records, and
// more requests in one segment than a loop reads for one event are all
// answered, in order, and the connection goes on after each.
func TestTLSLoopRecordsArrivingTogether(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("hit " + r.URL.Path))
	})
	ls, cfg := startTLSLoops(t, h)
	c := dialTLSLoop(t, ls, cfg)
	req := func(path string) string { return "GET " + path + " HTTP/1.1\r\nHost: x\r\n\r\n" }

	c.sendRecords(req("/first"))
	if body := c.read(); body != "hit /first" {
		t.Fatalf("got %q", body)
	}
	c.sendRecords(req("/a"), req("/b"), req("/c"))
	for _, p := range []string{"/a", "/b", "/c"} {
		if body := c.read(); body != "hit "+p {
			t.Fatalf("three records in one segment, %s: got %q", p, body)
		}
	}
	head := req("/cut")
	c.sendRecords(head[:10], head[10:])
	if body := c.read(); body != "hit /cut" {
		t.Fatalf("a head cut across two records: got %q", body)
	}
	var many []string
	for i := range 12 {
		many = append(many, req("/"+strconv.Itoa(i)))
	}
	c.sendRecords(many...)
	for i := range 12 {
		if body := c.read(); body != "hit /"+strconv.Itoa(i) {
			t.Fatalf("twelve records in one segment, request %d: got %q", i, body)
		}
	}
	for i := range 3 { // back on the loop, one request at a time
		c.sendRecords(req("/after"))
		if body := c.read(); body != "hit /after" {
			t.Fatalf("after, request %d: got %q", i, body)
		}
	}
	if n := ls.handedOff.Load(); n != 0 {
		t.Errorf("%d connections handed to net/http; want 0", n)
	}
}

// Over TLS, an answer the socket does not take at once leaves the loop
// and is written whole from Go's poller, and a request whose handler
// waits leaves it too; the connection goes on serving after each.
func TestTLSLoopAnswersThatLeave(t *testing.T) {
	answered := make(chan struct{})
	close(answered)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/big":
			w.Header().Set("Content-Length", strconv.Itoa(len(bigBody)))
			_, _ = w.Write(bigBody)
		case "/wait":
			select {
			case <-r.Context().Done():
				t.Error("the waiting request's context ended")
			case <-answered: // asking for Done is what leaves the loop
			}
			_, _ = w.Write([]byte("waited"))
		default:
			_, _ = w.Write([]byte("small"))
		}
	})
	ls, cfg := startTLSLoops(t, h)
	c := dialTLSLoop(t, ls, cfg)
	if err := c.raw.Conn.(*net.TCPConn).SetReadBuffer(256 << 10); err != nil {
		t.Fatal(err)
	}
	c.sendRecords("GET /big HTTP/1.1\r\nHost: x\r\n\r\nGET /small HTTP/1.1\r\nHost: x\r\n\r\n")
	if body := c.read(); body != string(bigBody) {
		t.Fatalf("the large answer: got %d bytes, not the body written", len(body))
	}
	if body := c.read(); body != "small" {
		t.Fatalf("the request behind it: got %q", body)
	}
	c.sendRecords("GET /wait HTTP/1.1\r\nHost: x\r\n\r\n")
	if body := c.read(); body != "waited" {
		t.Fatalf("the waiting request: got %q", body)
	}
	for i := range 3 {
		c.sendRecords("GET /small HTTP/1.1\r\nHost: x\r\n\r\n")
		if body := c.read(); body != "small" {
			t.Fatalf("after, request %d: got %q", i, body)
		}
	}
	// The large answer left the loop; the wait did too if its request
	// found the connection back on the loop (its goroutine may still have
	// served it, had it arrived before the connection went back).
	if n := ls.srv.LoopHandovers(); n < 1 || n > 2 {
		t.Errorf("requests that left the loop: got %d; want 1 or 2", n)
	}
}

// A TLS connection on a loop that goes idle is ended by the loops' sweep
// at the idle timeout, as a plain one is.
func TestTLSLoopIdleTimeout(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok")) })
	cert, pool := selfSigned(t)
	ls := startLaneWith(t, listen(t), h, func(s *http.Server) {
		s.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"http/1.1"}}
		s.IdleTimeout = 50 * time.Millisecond
	}, func(s *h1.Server) { s.Loops = 1 })
	c := dialTLSLoop(t, ls, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", NextProtos: []string{"http/1.1"}})
	c.sendRecords("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	if body := c.read(); body != "ok" {
		t.Fatalf("got %q", body)
	}
	rest, err := io.ReadAll(c.br) // the guard deadline fails it if the sweep never ends it
	if err != nil && !isReset(err) {
		t.Fatalf("waiting for the idle connection to end: %v (read %q)", err, rest)
	}
	if len(rest) != 0 {
		t.Fatalf("read %q before the end; want nothing", rest)
	}
}

// A TLS client that keeps sending is served off the loop once the loop
// has read for it a few times in one go, so the loop's other connections
// are not its hostages: here a request of the first client waits (without
// asking for Done) until the loop, the only one, has answered a second
// client.
func TestTLSLoopClientThatKeepsSendingMovesOff(t *testing.T) {
	entered, answered := make(chan struct{}), make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/8":
			close(entered)
			select {
			case <-answered:
			case <-time.After(guard):
				t.Error("the other client was not answered while this request waited")
			}
		case "/other":
			close(answered)
		}
		_, _ = w.Write([]byte("hit " + r.URL.Path))
	})
	ls, cfg := startTLSLoops(t, h)
	a, b := dialTLSLoop(t, ls, cfg), dialTLSLoop(t, ls, cfg)
	var many []string
	for i := range 12 {
		many = append(many, "GET /"+strconv.Itoa(i)+" HTTP/1.1\r\nHost: x\r\n\r\n")
	}
	a.sendRecords(many...)
	waitEntered(t, entered)
	b.sendRecords("GET /other HTTP/1.1\r\nHost: x\r\n\r\n")
	if body := b.read(); body != "hit /other" {
		t.Fatalf("the other client: got %q", body)
	}
	for i := range 12 {
		if body := a.read(); body != "hit /"+strconv.Itoa(i) {
			t.Fatalf("request %d: got %q", i, body)
		}
	}
}

// FuzzTLSLoopMatchesGoroutines is FuzzLoopMatchesGoroutines over TLS: the
// same bytes, cut in two records (sent in one segment or in two writes),
// to the lane on a goroutine per connection and on an event loop, and the
// same bytes back.
func FuzzTLSLoopMatchesGoroutines(f *testing.F) {
	for _, seed := range []string{
		"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /1 HTTP/1.1\r\nHost: x\r\n\r\nHEAD /2 HTTP/1.1\r\nHost: x\r\n\r\nGET /3?q=1 HTTP/1.1\r\nHost: x\r\nA: b\r\n\r\n",
		"GET /a HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\nGET /never HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /a HTTP/1.1\r\nHost: x\r\n\r\nPOST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabcGET /c HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET / HTTP/1.1\r\nHo",
		"GET / HTTP/1.1\r\nHost: x\r\n\r\nGET /half HTTP/1.1\r\n",
		"GET / HTTP/1.1\r\nHost: x\r\nBig: " + strings.Repeat("v", 9000) + "\r\n\r\nGET /after HTTP/1.1\r\nHost: x\r\n\r\n",
		"garbage\r\n\r\n",
	} {
		f.Add([]byte(seed), uint16(len(seed)/2), true)
		f.Add([]byte(seed), uint16(len(seed)/3), false)
	}
	cert, pool := selfSigned(f)
	serve := func(loops int) *laneServer {
		return startLaneWith(f, listen(f), echo, func(s *http.Server) {
			s.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"http/1.1"}}
		}, func(s *h1.Server) { s.Loops = loops })
	}
	goroutines, loops := serve(0), serve(1)
	cfg := &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", NextProtos: []string{"http/1.1"}}
	f.Fuzz(func(t *testing.T, in []byte, cut uint16, together bool) {
		if len(in) == 0 || len(in) > 32<<10 {
			return
		}
		at := int(cut) % len(in)
		want, reset := exchangeTLS(t, goroutines.addr, cfg, in, at, together)
		got, reset2 := exchangeTLS(t, loops.addr, cfg, in, at, together)
		if reset || reset2 {
			return // as in FuzzLoopMatchesGoroutines
		}
		if got != want {
			t.Errorf("sent %q in two records at %d (one segment: %v):\n on a loop: %q\n goroutines: %q", in, at, together, got, want)
		}
	})
}

// exchangeTLS is exchange over TLS: in as two records, the second from
// at, in one segment when together; then close_notify and all that came
// back.
func exchangeTLS(t *testing.T, addr string, cfg *tls.Config, in []byte, at int, together bool) (string, bool) {
	t.Helper()
	raw := &heldConn{Conn: dialConn(t, addr)}
	c := tls.Client(raw, cfg)
	if err := c.Handshake(); err != nil {
		t.Fatal(err)
	}
	if together {
		raw.hold()
	}
	if _, err := c.Write(in[:at]); err == nil && at < len(in) {
		_, _ = c.Write(in[at:])
	}
	if together {
		_ = raw.release()
	}
	_ = c.CloseWrite()
	out, err := readToClose(t, addr, c)
	return out, err != nil && (isReset(err) || errors.Is(err, io.ErrUnexpectedEOF))
}
