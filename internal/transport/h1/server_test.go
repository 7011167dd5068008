package h1_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"trendgate/internal/testing/syncbuf"
	"trendgate/internal/transport/h1"
)

// guard bounds every wait on the server; reaching it is a failure, never
// the way a test passes.
const guard = 10 * time.Second

// laneServer is an h1.Server serving on a loopback port.
type laneServer struct {
	addr     string
	srv      *h1.Server
	fallback *http.Server
	// handedOff counts the connections Fallback was given: its ConnState
	// sees StateNew only for those.
	handedOff atomic.Int32
	logs      syncbuf.Buffer // Fallback.ErrorLog, which the lane logs to as well
}

// startLane serves h on the lane until the test ends; tune, if not nil,
// adjusts Fallback first.
func startLane(t *testing.T, h http.Handler, tune func(*http.Server)) *laneServer {
	t.Helper()
	return startLaneOn(t, listen(t), h, tune)
}

func startLaneOn(t *testing.T, l net.Listener, h http.Handler, tune func(*http.Server)) *laneServer {
	t.Helper()
	return startLaneWith(t, l, h, tune, nil)
}

// startLaneWith is startLaneOn with lane, if not nil, adjusting the lane
// before it serves.
func startLaneWith(t testing.TB, l net.Listener, h http.Handler, tune func(*http.Server), lane func(*h1.Server)) *laneServer {
	t.Helper()
	ls := &laneServer{addr: l.Addr().String()}
	ls.fallback = &http.Server{
		Handler:  h,
		ErrorLog: log.New(&ls.logs, "", 0),
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				ls.handedOff.Add(1)
			}
		},
	}
	if tune != nil {
		tune(ls.fallback)
	}
	ls.srv = &h1.Server{Handler: h, Fallback: ls.fallback, TLSConfig: ls.fallback.TLSConfig, Loops: testLoops}
	if lane != nil {
		lane(ls.srv)
	}
	served := make(chan error, 1)
	go func() { served <- ls.srv.Serve(l) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), guard)
		defer cancel()
		if err := ls.srv.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: got %v; want nil", err)
		} else if done := h1.LoopsDone(ls.srv); done != nil {
			select {
			case <-done:
			default:
				t.Error("Shutdown returned nil with its event loops still running")
			}
		}
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve: got %v; want ErrServerClosed", err)
		}
	})
	return ls
}

// startPlain serves h with net/http alone until the test ends.
func startPlain(t *testing.T, h http.Handler, tune func(*http.Server)) string {
	t.Helper()
	l := listen(t)
	srv := &http.Server{Handler: h, ErrorLog: log.New(io.Discard, "", 0)}
	if tune != nil {
		tune(srv)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	t.Cleanup(func() {
		_ = srv.Close()
		<-served
	})
	return l.Addr().String()
}

func listen(t testing.TB) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// waitEntered waits until entered is closed, as a handler under test
// closes it when it runs; a guard timeout is a failure.
func waitEntered(t *testing.T, entered <-chan struct{}) {
	t.Helper()
	select {
	case <-entered:
	case <-time.After(guard):
		t.Fatal("the handler never ran")
	}
}

// client is one raw connection to a server under test.
type client struct {
	t  *testing.T
	c  net.Conn
	br *bufio.Reader
}

func dial(t *testing.T, addr string) *client {
	t.Helper()
	c := dialConn(t, addr)
	return &client{t: t, c: c, br: bufio.NewReader(c)}
}

// dialConn connects to addr with the guard deadline set; the connection
// is closed when the test ends.
func dialConn(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(guard))
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func (c *client) send(raw string) {
	c.t.Helper()
	if _, err := io.WriteString(c.c, raw); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// read reads one response to a request with method, body included.
func (c *client) read(method string) (*http.Response, string) {
	c.t.Helper()
	resp, err := http.ReadResponse(c.br, &http.Request{Method: method})
	if err != nil {
		c.t.Fatalf("read response: %v", err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatalf("read body: %v", err)
	}
	return resp, string(body)
}

// waitClosed reads until the server ends the connection and returns what
// came before the end. A guard timeout is a failure.
func (c *client) waitClosed() []byte {
	c.t.Helper()
	rest, err := io.ReadAll(c.br)
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		c.t.Fatalf("the server did not close the connection (read %q)", rest)
	case err != nil && !isReset(err):
		c.t.Errorf("read until close: %v", err)
	}
	return rest
}

func isReset(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// echoed is what echo saw of a request.
type echoed struct {
	Method, Proto, RequestURI    string
	Path, RawPath, RawQuery      string
	Host                         string
	Header                       http.Header // encoding/json sorts the keys
	ContentLength                int64
	Close, RemoteAddr, HasServer bool
	LocalAddr                    bool
	Body                         string
}

// echo answers with what it saw of the request, as JSON, setting neither
// Content-Length nor Content-Type: the server computes and sniffs them.
var echo = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	ctx := r.Context()
	_, hasLocal := ctx.Value(http.LocalAddrContextKey).(net.Addr)
	b, err := json.Marshal(echoed{
		Method: r.Method, Proto: r.Proto, RequestURI: r.RequestURI,
		Path: r.URL.Path, RawPath: r.URL.RawPath, RawQuery: r.URL.RawQuery,
		Host: r.Host, Header: r.Header, ContentLength: r.ContentLength,
		Close: r.Close, RemoteAddr: r.RemoteAddr != "",
		HasServer: ctx.Value(http.ServerContextKey) != nil, LocalAddr: hasLocal,
		Body: string(body),
	})
	if err != nil {
		panic(err)
	}
	_, _ = w.Write(b)
})

// TestLaneMatchesNetHTTP sends the same raw requests to the lane and to
// net/http alone, both serving echo: status, body and framing headers must
// agree, and the lane must serve its subset itself and hand off the rest.
func TestLaneMatchesNetHTTP(t *testing.T) {
	const maxHeaderBytes = 16 << 10 // above the lane's 8 KiB
	tune := func(s *http.Server) { s.MaxHeaderBytes = maxHeaderBytes }
	ls := startLane(t, echo, tune)
	plainAddr := startPlain(t, echo, tune)

	const host = "Host: gw\r\n"
	for _, tc := range []struct {
		name string
		raw  string
		lane bool // served by the lane, not handed off
	}{
		// The lane's subset.
		{"minimal GET", "GET / HTTP/1.1\r\n" + host + "\r\n", true},
		{"API request", "GET /api4/public/topic/%23ai/time-series/v1?bucket=day&q=a+b HTTP/1.1\r\n" + host +
			"Authorization: Bearer k\r\nX-A: 1\r\nx-a: 2\r\naccept-encoding:  gzip \t\r\n\r\n", true},
		{"escaped slash keeps RawPath", "GET /topic/a%2Fb/x.tsv HTTP/1.1\r\n" + host + "\r\n", true},
		{"HEAD", "HEAD /x HTTP/1.1\r\n" + host + "\r\n", true},
		{"Connection keep-alive", "GET /x HTTP/1.1\r\n" + host + "Connection: keep-alive\r\n\r\n", true},
		{"Connection close", "GET /x HTTP/1.1\r\n" + host + "Connection: close\r\n\r\n", true},
		{"IPv6 Host", "GET /x HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n", true},
		{"empty Host", "GET /x HTTP/1.1\r\nHost:\r\n\r\n", true},
		{"obs-text value", "GET /x HTTP/1.1\r\n" + host + "X-A: caf\xc3\xa9\r\n\r\n", true},
		{"double slash path", "GET //x/y HTTP/1.1\r\n" + host + "\r\n", true},
		{"Pragma no-cache", "GET /x HTTP/1.1\r\n" + host + "Pragma: no-cache\r\n\r\n", true},
		// Handed off to net/http.
		{"POST with body", "POST /x HTTP/1.1\r\n" + host + "Content-Length: 3\r\n\r\nabc", false},
		{"GET with Content-Length 0", "GET /x HTTP/1.1\r\n" + host + "Content-Length: 0\r\n\r\n", false},
		{"chunked GET", "GET /x HTTP/1.1\r\n" + host + "Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", false},
		{"Expect", "GET /x HTTP/1.1\r\n" + host + "Expect: 100-continue\r\n\r\n", false},
		{"Upgrade", "GET /x HTTP/1.1\r\n" + host + "Connection: Upgrade\r\nUpgrade: websocket\r\n\r\n", false},
		{"HTTP/1.0", "GET /x HTTP/1.0\r\n\r\n", false},
		{"HTTP/1.0 keep-alive", "GET /x HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", false},
		{"bare LF", "GET /x HTTP/1.1\n" + "Host: gw\n\n", false},
		{"obs-fold", "GET /x HTTP/1.1\r\n" + host + "X-A: a\r\n b\r\n\r\n", false},
		{"absolute-form target", "GET http://gw/x?y HTTP/1.1\r\nHost: other\r\n\r\n", false},
		{"OPTIONS *", "OPTIONS * HTTP/1.1\r\n" + host + "\r\n", false},
		{"UTF-8 in target", "GET /caf\xc3\xa9 HTTP/1.1\r\n" + host + "\r\n", false},
		{"bad escape in target", "GET /%zz HTTP/1.1\r\n" + host + "\r\n", false},
		{"no Host", "GET /x HTTP/1.1\r\n\r\n", false},
		{"two Hosts", "GET /x HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", false},
		{"invalid Host", "GET /x HTTP/1.1\r\nHost: a b\r\n\r\n", false},
		{"space before colon", "GET /x HTTP/1.1\r\n" + host + "X-A : b\r\n\r\n", false},
		{"control byte in value", "GET /x HTTP/1.1\r\n" + host + "X-A: \x01\r\n\r\n", false},
		{"more fields than the lane takes", "GET /x HTTP/1.1\r\n" + host + strings.Repeat("X-A: b\r\n", 64) + "\r\n", false},
		{"head over 8 KiB", "GET /x HTTP/1.1\r\n" + host + "X-Big: " + strings.Repeat("a", 9000) + "\r\n\r\n", false},
		{"head over MaxHeaderBytes", "GET /x HTTP/1.1\r\n" + host + "X-Big: " + strings.Repeat("a", 2*maxHeaderBytes) + "\r\n\r\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			method, _, _ := strings.Cut(tc.raw, " ")
			before := ls.handedOff.Load()
			lc := dial(t, ls.addr)
			lc.send(tc.raw)
			got, gotBody := lc.read(method)
			pc := dial(t, plainAddr)
			pc.send(tc.raw)
			want, wantBody := pc.read(method)

			if got.StatusCode != want.StatusCode || gotBody != wantBody {
				t.Errorf("got %d %s\nwant (net/http) %d %s", got.StatusCode, gotBody, want.StatusCode, wantBody)
			}
			for _, k := range []string{"Content-Length", "Content-Type", "Connection", "Transfer-Encoding"} {
				if g, w := got.Header.Values(k), want.Header.Values(k); !equalStrings(g, w) {
					t.Errorf("%s: got %q; want (net/http) %q", k, g, w)
				}
			}
			if g, w := got.Header.Get("Date") != "", want.Header.Get("Date") != ""; g != w {
				t.Errorf("Date present: got %v; want (net/http) %v", g, w)
			}
			if got.ContentLength != want.ContentLength || !equalStrings(got.TransferEncoding, want.TransferEncoding) {
				t.Errorf("framing: got length %d %q; want (net/http) %d %q",
					got.ContentLength, got.TransferEncoding, want.ContentLength, want.TransferEncoding)
			}
			if got.Close != want.Close {
				t.Errorf("response Close: got %v; want (net/http) %v", got.Close, want.Close)
			}
			if servedByLane := ls.handedOff.Load() == before; servedByLane != tc.lane {
				t.Errorf("served by the lane: got %v; want %v", servedByLane, tc.lane)
			}
		})
	}
}

func equalStrings(a, b []string) bool {
	return strings.Join(a, "\x00") == strings.Join(b, "\x00") && len(a) == len(b)
}

// TestKeepAlive: sequential requests on one connection are all served by
// the lane, in order.
func TestKeepAlive(t *testing.T) {
	ls := startLane(t, echo, nil)
	c := dial(t, ls.addr)
	for i := range 5 {
		c.send(fmt.Sprintf("GET /seq%d HTTP/1.1\r\nHost: x\r\n\r\n", i))
		_, body := c.read("GET")
		if got, want := decodeEcho(t, body).RequestURI, fmt.Sprintf("/seq%d", i); got != want {
			t.Errorf("request %d: got %q; want %q", i, got, want)
		}
	}
	if n := ls.handedOff.Load(); n != 0 {
		t.Errorf("handed-off connections: got %d; want 0", n)
	}
}

// TestPipelining writes several requests in one Write: every one is
// answered once, in order, on the lane or, from the first request outside
// its subset on, by net/http.
func TestPipelining(t *testing.T) {
	for _, tc := range []struct {
		name      string
		raw       string
		want      []string // the request line each response answers
		closes    bool     // the server closes after the last answer
		handedOff int32
	}{
		{name: "two GETs",
			raw:  "GET /1 HTTP/1.1\r\nHost: x\r\n\r\nGET /2 HTTP/1.1\r\nHost: x\r\n\r\n",
			want: []string{"GET /1", "GET /2"}},
		{name: "GET, HEAD, GET",
			raw:  "GET /1 HTTP/1.1\r\nHost: x\r\n\r\nHEAD /2 HTTP/1.1\r\nHost: x\r\n\r\nGET /3 HTTP/1.1\r\nHost: x\r\n\r\n",
			want: []string{"GET /1", "HEAD /2", "GET /3"}},
		{name: "nothing after Connection: close",
			raw:  "GET /1 HTTP/1.1\r\nHost: x\r\n\r\nGET /2 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\nGET /3 HTTP/1.1\r\nHost: x\r\n\r\n",
			want: []string{"GET /1", "GET /2"}, closes: true},
		{name: "lane, then POST handed off, then GET",
			raw: "GET /1 HTTP/1.1\r\nHost: x\r\n\r\nPOST /2 HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi" +
				"GET /3 HTTP/1.1\r\nHost: x\r\n\r\n",
			want: []string{"GET /1", "POST /2", "GET /3"}, handedOff: 1},
		{name: "lane, then a head over 8 KiB",
			raw: "GET /1 HTTP/1.1\r\nHost: x\r\n\r\nGET /2 HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("b", 9000) + "\r\n\r\n" +
				"GET /3 HTTP/1.1\r\nHost: x\r\n\r\n",
			want: []string{"GET /1", "GET /2", "GET /3"}, handedOff: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var served []string // guarded by mu
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				served = append(served, r.Method+" "+r.RequestURI)
				mu.Unlock()
				echo(w, r)
			})
			ls := startLane(t, h, nil)
			c := dial(t, ls.addr)
			c.send(tc.raw)
			for _, want := range tc.want {
				method, _, _ := strings.Cut(want, " ")
				resp, body := c.read(method)
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("%s: got status %d; want 200", want, resp.StatusCode)
				}
				if method == http.MethodHead {
					continue
				}
				e := decodeEcho(t, body)
				if got := e.Method + " " + e.RequestURI; got != want {
					t.Errorf("got a response to %q; want one to %q", got, want)
				}
			}
			if tc.closes {
				if rest := c.waitClosed(); len(rest) != 0 {
					t.Errorf("after the last answer: got %q; want the connection closed", rest)
				}
			} else {
				c.send("GET /last HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
				if _, body := c.read("GET"); decodeEcho(t, body).RequestURI != "/last" {
					t.Errorf("last request: got %s; want an answer to /last", body)
				}
				c.waitClosed()
				tc.want = append(tc.want, "GET /last")
			}
			mu.Lock()
			defer mu.Unlock()
			if !equalStrings(served, tc.want) {
				t.Errorf("handler calls: got %q; want %q (each once)", served, tc.want)
			}
			if n := ls.handedOff.Load(); n != tc.handedOff {
				t.Errorf("handed-off connections: got %d; want %d", n, tc.handedOff)
			}
		})
	}
}

// TestHandOffMidConnection: a request outside the subset after lane
// requests on the same connection is handed off with its bytes and
// answered exactly once; net/http then serves that connection.
func TestHandOffMidConnection(t *testing.T) {
	var posts atomic.Int32
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			posts.Add(1)
		}
		echo(w, r)
	})
	ls := startLane(t, h, nil)
	c := dial(t, ls.addr)
	for _, step := range []struct {
		raw, method, uri, body string
		handedOff              int32
	}{
		{"GET /a HTTP/1.1\r\nHost: x\r\n\r\n", "GET", "/a", "", 0},
		{"GET /b HTTP/1.1\r\nHost: x\r\n\r\n", "GET", "/b", "", 0},
		{"POST /c HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello", "POST", "/c", "hello", 1},
		{"GET /d HTTP/1.1\r\nHost: x\r\n\r\n", "GET", "/d", "", 1},
	} {
		c.send(step.raw)
		_, body := c.read(step.method)
		e := decodeEcho(t, body)
		if e.Method != step.method || e.RequestURI != step.uri || e.Body != step.body {
			t.Errorf("got %s %s body %q; want %s %s body %q", e.Method, e.RequestURI, e.Body, step.method, step.uri, step.body)
		}
		if n := ls.handedOff.Load(); n != step.handedOff {
			t.Errorf("after %s %s: handed-off connections %d; want %d", step.method, step.uri, n, step.handedOff)
		}
	}
	if n := posts.Load(); n != 1 {
		t.Errorf("POST handled %d times; want 1", n)
	}
}

// TestSmallMaxHeaderBytes: with Fallback.MaxHeaderBytes under 8 KiB the
// lane takes no head larger than that; net/http, which allows 4 KiB more,
// serves those.
func TestSmallMaxHeaderBytes(t *testing.T) {
	ls := startLane(t, echo, func(s *http.Server) { s.MaxHeaderBytes = 1024 })
	for _, tc := range []struct {
		name string
		pad  int
		lane bool
	}{
		{"head under MaxHeaderBytes", 600, true},
		{"head over MaxHeaderBytes", 1500, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := ls.handedOff.Load()
			c := dial(t, ls.addr)
			c.send("GET /x HTTP/1.1\r\nHost: x\r\nX-Pad: " + strings.Repeat("p", tc.pad) + "\r\n\r\n")
			resp, body := c.read("GET")
			if resp.StatusCode != http.StatusOK || len(decodeEcho(t, body).Header.Get("X-Pad")) != tc.pad {
				t.Errorf("got %d %.80s; want 200 echoing X-Pad", resp.StatusCode, body)
			}
			if servedByLane := ls.handedOff.Load() == before; servedByLane != tc.lane {
				t.Errorf("served by the lane: got %v; want %v", servedByLane, tc.lane)
			}
		})
	}
}

func decodeEcho(t *testing.T, body string) echoed {
	t.Helper()
	var e echoed
	if err := json.Unmarshal([]byte(body), &e); err != nil {
		t.Fatalf("echo body %q: %v", body, err)
	}
	return e
}

// TestHandlerPanic: a panicking handler costs its connection, not the
// server; http.ErrAbortHandler is not logged.
func TestHandlerPanic(t *testing.T) {
	for _, tc := range []struct {
		name    string
		handler http.HandlerFunc
		logged  bool
	}{
		{"panic", func(w http.ResponseWriter, r *http.Request) { panic("boom") }, true},
		{"ErrAbortHandler", func(w http.ResponseWriter, r *http.Request) { panic(http.ErrAbortHandler) }, false},
		{"panic after part of the body", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "10000")
			_, _ = w.Write(bytes.Repeat([]byte("x"), 5000))
			panic("boom")
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/panic" {
					tc.handler(w, r)
				}
				_, _ = io.WriteString(w, "alive")
			})
			ls := startLane(t, h, nil)
			c := dial(t, ls.addr)
			c.send("GET /panic HTTP/1.1\r\nHost: x\r\n\r\n")
			if resp, err := http.ReadResponse(c.br, nil); err == nil {
				if _, err := io.ReadAll(resp.Body); err == nil {
					t.Errorf("got a whole response %d; want the connection closed", resp.StatusCode)
				}
			}
			c.waitClosed()

			c2 := dial(t, ls.addr)
			c2.send("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
			if _, body := c2.read("GET"); body != "alive" {
				t.Errorf("after the panic: got %q; want %q", body, "alive")
			}
			logs := ls.logs.String()
			want := 0
			if tc.logged {
				want = 1
			}
			if got := strings.Count(logs, "panic serving"); got != want {
				t.Errorf("logged panics: got %d; want %d\n%s", got, want, logs)
			}
			if tc.logged && !strings.Contains(logs, "boom") {
				t.Errorf("log %q does not name the panic value", logs)
			}
		})
	}
}

// TestServeArguments covers Serve's refusals.
func TestServeArguments(t *testing.T) {
	for _, tc := range []struct {
		name     string
		srv      *h1.Server
		shutdown bool // call Shutdown before Serve
		want     error
	}{
		{name: "no Handler", srv: &h1.Server{Fallback: &http.Server{}}},
		{name: "no Fallback", srv: &h1.Server{Handler: echo}},
		{name: "after Shutdown", srv: &h1.Server{Handler: echo, Fallback: &http.Server{}}, shutdown: true, want: http.ErrServerClosed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := listen(t)
			t.Cleanup(func() { _ = l.Close() })
			if tc.shutdown {
				if err := tc.srv.Shutdown(context.Background()); err != nil {
					t.Fatalf("Shutdown: %v", err)
				}
			}
			err := tc.srv.Serve(l)
			if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Errorf("Serve: got %v; want %v", err, orText(tc.want, "an error"))
			}
			if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
				t.Errorf("Accept after Serve: got %v; want net.ErrClosed (Serve closes l)", err)
			}
		})
	}
}

func orText(err error, otherwise string) any {
	if err != nil {
		return err
	}
	return otherwise
}

// TestShutdown: the idle connection is closed, the request in flight
// completes with Connection: close, Serve returns ErrServerClosed, and no
// goroutine is left behind.
func TestShutdown(t *testing.T) {
	goroutines := runtime.NumGoroutine()
	entered, release := make(chan struct{}), make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(entered)
			<-release
		}
		_, _ = io.WriteString(w, "ok")
	})
	l := listen(t)
	addr := l.Addr().String()
	s := &h1.Server{Handler: h, Fallback: &http.Server{Handler: h, ErrorLog: log.New(io.Discard, "", 0)}, Loops: testLoops}
	served := make(chan error, 1)
	go func() { served <- s.Serve(l) }()
	t.Cleanup(func() { _ = s.Shutdown(context.Background()) }) // if the test fails early

	idle := dial(t, addr)
	idle.send("GET /fast HTTP/1.1\r\nHost: x\r\n\r\n")
	if _, body := idle.read("GET"); body != "ok" {
		t.Fatalf("idle connection's request: got %q; want ok", body)
	}
	busy := dial(t, addr)
	busy.send("GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
	<-entered

	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(context.Background()) }()
	if rest := idle.waitClosed(); len(rest) != 0 {
		t.Errorf("idle connection: got %q; want it closed", rest)
	}
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned %v with a request in flight", err)
	default:
	}
	close(release)
	resp, body := busy.read("GET")
	if resp.StatusCode != http.StatusOK || body != "ok" || !resp.Close {
		t.Errorf("in-flight request: got %d %q close %v; want 200 \"ok\" with Connection: close", resp.StatusCode, body, resp.Close)
	}
	busy.waitClosed()
	if err := <-shut; err != nil {
		t.Errorf("Shutdown: got %v; want nil", err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		t.Errorf("Serve: got %v; want ErrServerClosed", err)
	}
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Error("dial after Shutdown succeeded; want the listener closed")
	}

	idle.c.Close()
	busy.c.Close()
	start := time.Now()
	for runtime.NumGoroutine() > goroutines {
		if time.Since(start) > guard {
			buf := make([]byte, 1<<20)
			t.Fatalf("goroutines: %d after Shutdown; want at most %d as before\n%s",
				runtime.NumGoroutine(), goroutines, buf[:runtime.Stack(buf, true)])
		}
		runtime.Gosched()
	}
}

// TestShutdownContextEnds: Shutdown gives up with ctx's error while a
// request is still in flight; the request still completes.
func TestShutdownContextEnds(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-release
		_, _ = io.WriteString(w, "ok")
	})
	ls := startLane(t, h, nil)
	c := dial(t, ls.addr)
	c.send("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	<-entered

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := ls.srv.Shutdown(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Shutdown with an ended context: got %v; want context.Canceled", err)
	}
	close(release)
	if resp, body := c.read("GET"); resp.StatusCode != http.StatusOK || body != "ok" || !resp.Close {
		t.Errorf("in-flight request: got %d %q close %v; want 200 \"ok\" with Connection: close", resp.StatusCode, body, resp.Close)
	}
	// The cleanup's Shutdown must now succeed.
}

// TestShutdownWaitsForHandedOffRequest: Shutdown also waits for a request
// Fallback is serving on a connection the lane handed over.
func TestShutdownWaitsForHandedOffRequest(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			close(entered)
			<-release
		}
		echo(w, r)
	})
	ls := startLane(t, h, nil)
	c := dial(t, ls.addr)
	c.send("POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi")
	<-entered

	shut := make(chan error, 1)
	go func() { shut <- ls.srv.Shutdown(context.Background()) }()
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned %v with a handed-off request in flight", err)
	default:
	}
	close(release)
	resp, body := c.read("POST")
	if e := decodeEcho(t, body); resp.StatusCode != http.StatusOK || e.Body != "hi" {
		t.Errorf("handed-off request: got %d %q; want 200 echoing body \"hi\"", resp.StatusCode, body)
	}
	if err := <-shut; err != nil {
		t.Errorf("Shutdown: got %v; want nil", err)
	}
}

// TestTimeouts: the server closes a connection idle longer than
// IdleTimeout and one whose head takes longer than ReadHeaderTimeout.
func TestTimeouts(t *testing.T) {
	const d = 50 * time.Millisecond
	for _, tc := range []struct {
		name  string
		tune  func(*http.Server)
		first string // a request served before the wait, if any
		send  string // then sent, and never completed
	}{
		{name: "idle new connection", tune: func(s *http.Server) { s.IdleTimeout = d }},
		{name: "idle after a request", tune: func(s *http.Server) { s.IdleTimeout = d },
			first: "GET / HTTP/1.1\r\nHost: x\r\n\r\n"},
		{name: "idle by ReadTimeout", tune: func(s *http.Server) { s.ReadTimeout = d },
			first: "GET / HTTP/1.1\r\nHost: x\r\n\r\n"},
		{name: "half a head", tune: func(s *http.Server) { s.ReadHeaderTimeout = d },
			send: "GET / HTTP/1.1\r\nHo"},
		{name: "half a head after a request", tune: func(s *http.Server) { s.ReadHeaderTimeout = d },
			first: "GET / HTTP/1.1\r\nHost: x\r\n\r\n", send: "GET / HTTP/1.1\r\nHost: x\r\n"},
		{name: "half a head by ReadTimeout", tune: func(s *http.Server) { s.ReadTimeout = d },
			send: "GET / HTTP/1.1\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ls := startLane(t, echo, tc.tune)
			c := dial(t, ls.addr)
			if tc.first != "" {
				c.send(tc.first)
				c.read("GET")
			}
			if tc.send != "" {
				c.send(tc.send)
			}
			if rest := c.waitClosed(); len(rest) != 0 {
				t.Errorf("got %q; want the connection closed with nothing sent", rest)
			}
			if n := ls.handedOff.Load(); n != 0 {
				t.Errorf("handed-off connections: got %d; want 0", n)
			}
		})
	}
}
