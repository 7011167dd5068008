//go:build linux

package h1_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"trendgate/internal/testing/h2test"
	"trendgate/internal/transport/h1"
	"trendgate/internal/transport/h2"
)

// startH2Loops serves h on the lane with TLS, its HTTP/2
// connections served by the HTTP/2 lane hosted on loops loops; tune, if
// not nil, adjusts Fallback (the HTTP/2 lane's Base) first.
func startH2Loops(t *testing.T, loops int, h http.Handler, tune func(*http.Server)) (*laneServer, *tls.Config) {
	t.Helper()
	cert, pool := selfSigned(t)
	ls := startLaneWith(t, listen(t), h, func(s *http.Server) {
		s.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1"}}
		if tune != nil {
			tune(s)
		}
	}, func(s *h1.Server) {
		s.Loops = loops
		s.H2 = &h2.Server{Handler: h, Base: s.Fallback}
	})
	return ls, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", NextProtos: []string{"h2"}}
}

// h2Conn is one HTTP/2 client connection to the lane; ended is closed
// once the connection can no longer be used (the server closed it).
type h2Conn struct {
	t     *testing.T
	cc    *http.ClientConn
	ended chan struct{}
}

func dialH2(t *testing.T, ls *laneServer, cfg *tls.Config) *h2Conn {
	t.Helper()
	tc := tls.Client(dialConn(t, ls.addr), cfg)
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	var protos http.Protocols
	protos.SetHTTP2(true)
	tr := &http.Transport{
		Protocols:      &protos,
		DialTLSContext: func(context.Context, string, string) (net.Conn, error) { return tc, nil },
	}
	cc, err := tr.NewClientConn(context.Background(), "https", ls.addr)
	if err != nil {
		t.Fatal(err)
	}
	c := &h2Conn{t: t, cc: cc, ended: make(chan struct{})}
	var once sync.Once
	cc.SetStateHook(func(cc *http.ClientConn) {
		if cc.Err() != nil {
			once.Do(func() { close(c.ended) })
		}
	})
	t.Cleanup(func() { _ = cc.Close() })
	return c
}

// get returns the status and body of GET path.
func (c *h2Conn) get(path string) (int, string) {
	c.t.Helper()
	req, err := http.NewRequest(http.MethodGet, "https://127.0.0.1"+path, nil)
	if err != nil {
		c.t.Fatal(err)
	}
	res, err := c.cc.RoundTrip(req)
	if err != nil {
		c.t.Fatalf("GET %s: %v", path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		c.t.Fatalf("GET %s: reading the body: %v", path, err)
	}
	return res.StatusCode, string(b)
}

// waitGuests waits until n HTTP/2 connections wait on ls's loops: the
// reader of each parks once it has flushed its last answer, which the
// client may read first.
func waitGuests(t *testing.T, ls *laneServer, n int) {
	t.Helper()
	deadline := time.Now().Add(guard)
	for h1.LoopGuests(ls.srv) != n {
		if time.Now().After(deadline) {
			t.Fatalf("connections of the HTTP/2 lane on the loops: %d; want %d", h1.LoopGuests(ls.srv), n)
		}
		runtime.Gosched()
	}
}

// hostedHandler answers /hit at once, /wait after asking for Done (a
// request that may wait, as a miss does), /big with a body larger than
// the client's flow-control window and the socket's buffers, and /hold
// once release is closed.
func hostedHandler(big []byte, release <-chan struct{}) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/wait":
			select {
			case <-r.Context().Done():
				return
			default:
			}
		case "/big":
			_, _ = w.Write(big)
			return
		case "/hold":
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
		}
		_, _ = io.WriteString(w, "hit "+r.URL.Path+"?"+r.URL.RawQuery)
	})
}

// An HTTP/2 connection waits for its frames on the loops and its
// requests run there: answers come back whole, a request that may wait
// (asks for Done) leaves the loop for the rest of its run, as one large
// answer does, and the connection comes back to the loops after each.
func TestH2OnLoops(t *testing.T) {
	big := bytes.Repeat([]byte("0123456789abcdef"), 6<<20/16) // beyond the client's 4 MB window
	ls, cfg := startH2Loops(t, 2, hostedHandler(big, nil), nil)
	c := dialH2(t, ls, cfg)
	for i := range 20 {
		path := fmt.Sprintf("/hit?i=%d", i)
		if status, body := c.get(path); status != http.StatusOK || body != "hit "+path {
			t.Fatalf("GET %s: %d %q", path, status, body)
		}
		waitGuests(t, ls, 1)
	}
	if n := ls.srv.LoopHandovers(); n != 0 {
		t.Fatalf("requests that left a loop after 20 hits: %d; want 0", n)
	}
	if status, body := c.get("/wait?x=1"); status != http.StatusOK || body != "hit /wait?x=1" {
		t.Fatalf("GET /wait: %d %q", status, body)
	}
	if n := ls.srv.LoopHandovers(); n != 1 {
		t.Fatalf("requests that left a loop after one that asked for Done: %d; want 1", n)
	}
	waitGuests(t, ls, 1)
	if status, body := c.get("/big"); status != http.StatusOK || body != string(big) {
		t.Fatalf("GET /big: %d, %d bytes, equal %v", status, len(body), body == string(big))
	}
	if n := ls.srv.LoopHandovers(); n != 2 {
		t.Fatalf("requests that left a loop after the large answer: %d; want 2", n)
	}
	waitGuests(t, ls, 1)
	if status, body := c.get("/hit?last"); status != http.StatusOK || body != "hit /hit?last" {
		t.Fatalf("GET /hit?last: %d %q", status, body)
	}
}

// Connections and streams at once, hits, waits and large answers mixed:
// every answer whole and right (run with -race).
func TestH2OnLoopsConcurrent(t *testing.T) {
	big := bytes.Repeat([]byte("x"), 300<<10)
	ls, cfg := startH2Loops(t, 2, hostedHandler(big, nil), nil)
	var wg sync.WaitGroup
	for ci := range 6 {
		c := dialH2(t, ls, cfg)
		for si := range 4 {
			wg.Go(func() {
				for i := range 40 {
					path := fmt.Sprintf("/hit?c=%d&s=%d&i=%d", ci, si, i)
					want := "hit " + path
					switch i % 10 {
					case 3:
						path = fmt.Sprintf("/wait?c=%d&s=%d&i=%d", ci, si, i)
						want = "hit " + path
					case 7:
						path, want = "/big", string(big)
					}
					req, _ := http.NewRequest(http.MethodGet, "https://127.0.0.1"+path, nil)
					res, err := c.cc.RoundTrip(req)
					if err != nil {
						t.Errorf("GET %s: %v", path, err)
						return
					}
					b, err := io.ReadAll(res.Body)
					res.Body.Close()
					if err != nil || res.StatusCode != http.StatusOK || string(b) != want {
						t.Errorf("GET %s: %d, %d bytes, %v", path, res.StatusCode, len(b), err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
}

// A connection waiting on the loops past the idle timeout is ended by the
// loops' sweep, which moves it off them for its reader to send GOAWAY.
func TestH2OnLoopsIdleTimeout(t *testing.T) {
	ls, cfg := startH2Loops(t, 1, hostedHandler(nil, nil), func(s *http.Server) { s.IdleTimeout = 50 * time.Millisecond })
	c := dialH2(t, ls, cfg)
	if status, body := c.get("/hit"); status != http.StatusOK || body != "hit /hit?" {
		t.Fatalf("GET /hit: %d %q", status, body)
	}
	select {
	case <-c.ended:
	case <-time.After(guard):
		t.Fatal("the idle connection was not closed")
	}
	if n := h1.LoopGuests(ls.srv); n != 0 {
		t.Errorf("connections on the loops after the idle timeout: %d; want 0", n)
	}
}

// Shutdown ends a connection waiting on the loops, lets a
// request in progress on another connection finish, and returns.
func TestH2OnLoopsShutdown(t *testing.T) {
	release := make(chan struct{})
	ls, cfg := startH2Loops(t, 2, hostedHandler(nil, release), nil)
	idle, busy := dialH2(t, ls, cfg), dialH2(t, ls, cfg)
	if status, _ := idle.get("/hit"); status != http.StatusOK {
		t.Fatalf("GET /hit: %d", status)
	}
	if status, _ := busy.get("/hit"); status != http.StatusOK {
		t.Fatalf("GET /hit: %d", status)
	}
	waitGuests(t, ls, 2)
	held := make(chan string, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodGet, "https://127.0.0.1/hold", nil)
		res, err := busy.cc.RoundTrip(req)
		if err != nil {
			held <- err.Error()
			return
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		held <- string(b)
	}()
	waitGuests(t, ls, 1) // /hold left its loop, with its connection
	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), guard)
		defer cancel()
		shut <- ls.srv.Shutdown(ctx)
	}()
	select {
	case <-idle.ended:
	case <-time.After(guard):
		t.Fatal("the idle connection on the loops was not closed by Shutdown")
	}
	close(release)
	if body := <-held; body != "hit /hold?" {
		t.Fatalf("the request in progress at Shutdown: %q", body)
	}
	if err := <-shut; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
}

// A loop that has read a request and the start of the next frame answers
// the request at once, not once the rest of that frame arrives.
func TestH2OnLoopsAnswersBeforeAPartialFrame(t *testing.T) {
	ls, cfg := startH2Loops(t, 1, hostedHandler(nil, nil), nil)
	c := h2test.Dial(t, ls.addr, cfg)
	c.Handshake()
	waitGuests(t, ls, 1)

	var ping bytes.Buffer
	_ = http2.NewFramer(&ping, nil).WritePing(false, [8]byte{7})
	id := c.NextStreamID()
	c.WriteRequest(id, c.Encode(h2test.GET("127.0.0.1", "/hit", "")...), true)
	c.WriteRaw(ping.Bytes()[:5]) // 5 bytes of the PING's 17, in the same write
	c.MustFlush()
	// Read without writing (ReadResponse would send WINDOW_UPDATEs into
	// the middle of the PING).
	var body []byte
	for done := false; !done; {
		f, err := c.ReadFrame(h2test.IOTimeout)
		if err != nil {
			t.Fatalf("waiting for the answer with a frame in part sent: %v", err)
		}
		if df, ok := f.(*http2.DataFrame); ok && df.StreamID == id {
			body = append(body, df.Data()...)
			done = df.StreamEnded()
		}
	}
	if string(body) != "hit /hit?" {
		t.Fatalf("body %q", body)
	}
	c.WriteRaw(ping.Bytes()[5:])
	c.MustFlush()
	for {
		f, err := c.ReadFrame(h2test.IOTimeout)
		if err != nil {
			t.Fatalf("waiting for the PING's answer: %v", err)
		}
		if pf, ok := f.(*http2.PingFrame); ok && pf.IsAck() && pf.Data == [8]byte{7} {
			return
		}
	}
}

// A response held up by the client's flow control on a connection that
// waits on the loops is reset at the stall timeout (the write timeout):
// the loops' sweep moves the connection off, and its reader, in Go's
// poller, arms that deadline.
func TestH2OnLoopsStalledResponseReset(t *testing.T) {
	ls, cfg := startH2Loops(t, 1, hostedHandler(nil, nil), func(s *http.Server) { s.WriteTimeout = 100 * time.Millisecond })
	c := h2test.Dial(t, ls.addr, cfg)
	c.Handshake(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	waitGuests(t, ls, 1)
	id := c.NextStreamID()
	c.WriteRequest(id, c.Encode(h2test.GET("127.0.0.1", "/hit", "")...), true)
	c.MustFlush()
	if r := c.ReadResponse(id); !r.WasReset || len(r.Body) != 0 {
		t.Fatalf("a response on a zero window: reset %v (%v), %d bytes of body; want a reset and none", r.WasReset, r.Reset, len(r.Body))
	}
}
