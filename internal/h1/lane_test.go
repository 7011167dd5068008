package h1

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"reflect"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestLaneParseHead(t *testing.T) {
	for _, tc := range []struct {
		name   string
		in     string
		want   verdict
		method string
		target string
		host   string
		fields []field
		close  bool
	}{
		{name: "plain GET", in: "GET /a?b=c HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\n\r\n",
			want: lane, method: "GET", target: "/a?b=c", host: "x", fields: []field{{"Authorization", "Bearer k"}}},
		{name: "HEAD, canonical names, trimmed values, close", in: "HEAD / HTTP/1.1\r\nhost:x \r\naccept-encoding: \tgzip\t\r\nconnection: Close\r\n\r\n",
			want: lane, method: "HEAD", target: "/", host: "x", fields: []field{{"Accept-Encoding", "gzip"}, {"Connection", "Close"}}, close: true},
		{name: "pipelined rest not consumed", in: "GET / HTTP/1.1\r\nHost: x\r\n\r\nGET /next HTTP/1.1\r\n",
			want: lane, method: "GET", target: "/", host: "x", fields: []field{}},
		{name: "no end yet", in: "GET / HTTP/1.1\r\nHost: x\r\n", want: needMore},
		{name: "empty", in: "", want: needMore},
		{name: "POST", in: "POST / HTTP/1.1\r\nHost: x\r\n\r\n", want: handOff},
		{name: "HTTP/1.0", in: "GET / HTTP/1.0\r\nHost: x\r\n\r\n", want: handOff},
		{name: "absolute form", in: "GET http://x/ HTTP/1.1\r\nHost: x\r\n\r\n", want: handOff},
		{name: "asterisk", in: "GET * HTTP/1.1\r\nHost: x\r\n\r\n", want: handOff},
		{name: "non-ASCII target", in: "GET /\xc3\xa9 HTTP/1.1\r\nHost: x\r\n\r\n", want: handOff},
		{name: "bare LF", in: "GET / HTTP/1.1\nHost: x\n\n", want: handOff},
		{name: "bare LF in a field", in: "GET / HTTP/1.1\r\nHost: x\nA: b\r\n\r\n", want: handOff},
		{name: "leading empty line", in: "\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n", want: handOff},
		{name: "obs-fold", in: "GET / HTTP/1.1\r\nHost: x\r\nA: b\r\n c\r\n\r\n", want: handOff},
		{name: "space before colon", in: "GET / HTTP/1.1\r\nHost: x\r\nA : b\r\n\r\n", want: handOff},
		{name: "control byte in value", in: "GET / HTTP/1.1\r\nHost: x\r\nA: b\x01\r\n\r\n", want: handOff},
		{name: "no Host", in: "GET / HTTP/1.1\r\nA: b\r\n\r\n", want: handOff},
		{name: "two Hosts", in: "GET / HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n", want: handOff},
		{name: "bad Host", in: "GET / HTTP/1.1\r\nHost: x y\r\n\r\n", want: handOff},
		{name: "Content-Length 0", in: "GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", want: handOff},
		{name: "Transfer-Encoding", in: "GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n", want: handOff},
		{name: "Expect", in: "GET / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n\r\n", want: handOff},
		{name: "Upgrade", in: "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n\r\n", want: handOff},
		{name: "Connection list", in: "GET / HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, Upgrade\r\n\r\n", want: handOff},
		{name: "bad escape in target", in: "GET /%0 HTTP/1.1\r\nHost: x\r\n\r\n", want: handOff}, // found by FuzzParseHead
		{name: "too many fields", in: "GET / HTTP/1.1\r\nHost: x\r\n" + strings.Repeat("A: b\r\n", maxFields+1) + "\r\n", want: handOff},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, n, v := parseHead([]byte(tc.in))
			if v != tc.want {
				t.Fatalf("verdict = %d; want %d", v, tc.want)
			}
			if v != lane {
				return
			}
			if end := strings.Index(tc.in, "\r\n\r\n") + 4; n != end {
				t.Errorf("n = %d; want %d", n, end)
			}
			if h.method != tc.method || h.target != tc.target || h.host != tc.host || h.close != tc.close {
				t.Errorf("got %q %q host %q close %v; want %q %q host %q close %v",
					h.method, h.target, h.host, h.close, tc.method, tc.target, tc.host, tc.close)
			}
			if h.url == nil || h.url.RequestURI() == "" {
				t.Errorf("url = %v; want the parsed target", h.url)
			}
			if !reflect.DeepEqual(h.fields, tc.fields) {
				t.Errorf("fields = %q; want %q", h.fields, tc.fields)
			}
		})
	}
}

// FuzzParseHead checks that whatever the lane accepts, net/http reads the
// same way: same method, target, host, fields and close flag, no body.
func FuzzParseHead(f *testing.F) {
	for _, seed := range []string{
		"GET / HTTP/1.1\r\nHost: x\r\n\r\n", // the minimum
		"GET /api4/public/topic/%23ai/time-series/v1?bucket=day HTTP/1.1\r\n" + // a real API request
			"Host: 127.0.0.1:8080\r\nAuthorization: Bearer tg_x\r\nAccept-Encoding: gzip\r\n\r\n",
		"HEAD /x HTTP/1.1\r\nhost: a\r\nx-a: 1\r\nX-A: 2\r\nconnection: close\r\n\r\n", // case, duplicates, close
		"GET / HTTP/1.1\r\nHost: x\r\nA:\t v \t\r\n\r\n",                               // value trimming
		"GET / HTTP/1.1\r\nHost: x\r\nA: \x80\xff\r\n\r\n",                             // obs-text in a value
		"GET /a#b HTTP/1.1\r\nHost: [::1]:80\r\n\r\n",                                  // raw '#', IPv6 host
		"GET / HTTP/1.1\r\nHost: x\r\n A: b\r\n\r\n",                                   // obs-fold
		"GET / HTTP/1.1\nHost: x\n\n",                                                  // bare LF
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		h, n, v := parseHead(in)
		if v != lane {
			return
		}
		r, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(in[:n])))
		if err != nil {
			t.Fatalf("lane accepted %q; net/http: %v", in[:n], err)
		}
		want := http.Header{}
		for _, f := range h.fields {
			want[f.name] = append(want[f.name], f.value)
		}
		if r.Method != h.method || r.RequestURI != h.target || r.Host != h.host || r.Close != h.close || r.ContentLength != 0 {
			t.Fatalf("%q: net/http %q %q host %q close %v len %d; lane %q %q host %q close %v",
				in[:n], r.Method, r.RequestURI, r.Host, r.Close, r.ContentLength, h.method, h.target, h.host, h.close)
		}
		if len(r.Header) != 0 || len(want) != 0 {
			if !reflect.DeepEqual(r.Header, want) {
				t.Fatalf("%q: net/http header %q; lane %q", in[:n], r.Header, want)
			}
		}
	})
}

// laneServer serves h on the lane and returns its address, a count of the
// connections handed to net/http, and the server.
func laneServer(t *testing.T, h http.Handler, tune func(*http.Server)) (string, *atomic.Int32, *Server) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var handedOff atomic.Int32
	fb := &http.Server{Handler: h, ErrorLog: log.New(io.Discard, "", 0),
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				handedOff.Add(1)
			}
		}}
	if tune != nil {
		tune(fb)
	}
	s := &Server{Handler: h, Fallback: fb}
	done := make(chan error, 1)
	go func() { done <- s.Serve(l) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve: %v; want ErrServerClosed", err)
		}
	})
	return l.Addr().String(), &handedOff, s
}

// echo answers with what it saw of the request.
var echo = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	keys := make([]string, 0, len(r.Header))
	for k := range r.Header {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s path=%q raw=%q query=%q host=%q remote=%v\n",
		r.Method, r.RequestURI, r.URL.Path, r.URL.RawPath, r.URL.RawQuery, r.Host, r.RemoteAddr != "")
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%q\n", k, r.Header[k])
	}
	body, _ := io.ReadAll(r.Body)
	fmt.Fprintf(&b, "body=%q\n", body)
	w.Header().Set("Content-Length", fmt.Sprint(b.Len()))
	_, _ = io.WriteString(w, b.String())
})

// roundTrip writes raw on a new connection and reads one response.
func roundTrip(t *testing.T, addr, raw string) (*http.Response, string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	method, _, _ := strings.Cut(raw, " ") // a HEAD response has no body to wait for
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: method})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

// TestLaneMatchesNetHTTP sends the same raw requests to the lane and to
// net/http alone: status, body and framing headers must agree, and the
// lane must serve exactly the requests of its subset itself.
func TestLaneMatchesNetHTTP(t *testing.T) {
	laneAddr, handedOff, _ := laneServer(t, echo, nil)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	plain := &http.Server{Handler: echo, ErrorLog: log.New(io.Discard, "", 0)}
	go func() { _ = plain.Serve(l) }()
	t.Cleanup(func() { _ = plain.Close() })

	for _, tc := range []struct {
		name string
		raw  string
		lane bool
	}{
		{"api request", "GET /api4/public/topic/%23ai/time-series/v1?bucket=day HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer k\r\nX-A: 1\r\nx-a: 2\r\n\r\n", true},
		{"escaped path", "GET /topic/a%2Fb/time-series/x.tsv HTTP/1.1\r\nHost: gw\r\n\r\n", true},
		{"HEAD", "HEAD /x HTTP/1.1\r\nHost: gw\r\n\r\n", true},
		{"POST with body", "POST /x HTTP/1.1\r\nHost: gw\r\nContent-Length: 3\r\n\r\nabc", false},
		{"chunked", "GET /x HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", false},
		{"HTTP/1.0", "GET /x HTTP/1.0\r\n\r\n", false},
		{"bare LF", "GET /x HTTP/1.1\nHost: gw\n\n", false},
		{"big head", "GET /x HTTP/1.1\r\nHost: gw\r\nX-Big: " + strings.Repeat("a", 9000) + "\r\n\r\n", false},
		{"too big for net/http", "GET /x HTTP/1.1\r\nHost: gw\r\nX-Big: " + strings.Repeat("a", 2<<20) + "\r\n\r\n", false},
		{"no Host", "GET /x HTTP/1.1\r\n\r\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := handedOff.Load()
			got, gotBody := roundTrip(t, laneAddr, tc.raw)
			want, wantBody := roundTrip(t, l.Addr().String(), tc.raw)
			if got.StatusCode != want.StatusCode || gotBody != wantBody {
				t.Errorf("lane: %d %q\nnet/http: %d %q", got.StatusCode, gotBody, want.StatusCode, wantBody)
			}
			for _, k := range []string{"Content-Length", "Content-Type"} {
				if got.Header.Get(k) != want.Header.Get(k) {
					t.Errorf("%s: lane %q; net/http %q", k, got.Header.Get(k), want.Header.Get(k))
				}
			}
			if tc.lane && got.Header.Get("Date") == "" { // net/http's own 400/431 have none
				t.Error("no Date header")
			}
			if servedByLane := handedOff.Load() == before; servedByLane != tc.lane {
				t.Errorf("served by the lane: %v; want %v", servedByLane, tc.lane)
			}
		})
	}
}

// TestLaneKeepAliveAndPipelining: sequential and pipelined requests on one
// connection are answered in order; a request outside the subset later on
// the same connection is handed over and answered exactly once.
func TestLaneKeepAliveAndPipelining(t *testing.T) {
	addr, handedOff, _ := laneServer(t, echo, nil)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	read := func(wantStart string) {
		t.Helper()
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		if !strings.HasPrefix(string(body), wantStart) {
			t.Fatalf("body %q; want it to start with %q", body, wantStart)
		}
	}
	for i := range 3 {
		fmt.Fprintf(c, "GET /seq%d HTTP/1.1\r\nHost: x\r\n\r\n", i)
		read(fmt.Sprintf("GET /seq%d ", i))
	}
	io.WriteString(c, "GET /p1 HTTP/1.1\r\nHost: x\r\n\r\nGET /p2 HTTP/1.1\r\nHost: x\r\n\r\nPOST /p3 HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi")
	read("GET /p1 ")
	read("GET /p2 ")
	read("POST /p3 ")
	if n := handedOff.Load(); n != 1 {
		t.Errorf("handed-off connections: %d; want 1", n)
	}
	io.WriteString(c, "GET /after HTTP/1.1\r\nHost: x\r\n\r\n")
	read("GET /after ")
}

// TestLaneResponseWriter covers the writer's framing through a real Serve.
func TestLaneResponseWriter(t *testing.T) {
	for _, tc := range []struct {
		name     string
		method   string
		handler  http.HandlerFunc
		status   int
		body     string
		header   map[string]string // "" means absent
		closes   bool
		writeErr error
	}{
		{name: "HEAD keeps Content-Length", method: "HEAD",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Length", "5")
			},
			status: 200, header: map[string]string{"Content-Length": "5"}},
		{name: "length computed", method: "GET",
			handler: func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello") },
			status:  200, body: "hello", header: map[string]string{"Content-Length": "5", "Content-Type": "text/plain; charset=utf-8"}},
		{name: "nothing written", method: "GET",
			handler: func(w http.ResponseWriter, r *http.Request) {},
			status:  200, header: map[string]string{"Content-Length": "0"}},
		{name: "304 has no body", method: "GET",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(304)
				if _, err := io.WriteString(w, "x"); !errors.Is(err, http.ErrBodyNotAllowed) {
					panic(fmt.Sprintf("write after 304: %v", err))
				}
			},
			status: 304, header: map[string]string{"Content-Length": ""}},
		{name: "header sanitized", method: "GET",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header()["X-Multi"] = []string{"a\r\nInjected: 1"}
				w.Header()["Bad Name"] = []string{"x"}
				w.Header()["Date"] = []string{"custom"}
			},
			status: 200, header: map[string]string{"X-Multi": "a  Injected: 1", "Injected": "", "Date": "custom"}},
		{name: "large body in one piece", method: "GET",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Length", "70000")
				w.Write(bytes.Repeat([]byte("z"), 70000))
			},
			status: 200, body: strings.Repeat("z", 70000), header: map[string]string{"Content-Length": "70000"}},
		{name: "too much body", method: "GET",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Length", "2")
				if _, err := io.WriteString(w, "abc"); !errors.Is(err, http.ErrContentLength) {
					panic(fmt.Sprintf("overlong write: %v", err))
				}
				io.WriteString(w, "ab")
			},
			status: 200, body: "ab"},
		{name: "short body closes", method: "GET",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Length", "10")
				io.WriteString(w, "abc")
			},
			status: 200, closes: true},
		{name: "handler asks to close", method: "GET",
			handler: func(w http.ResponseWriter, r *http.Request) { w.Header().Set("Connection", "close") },
			status:  200, closes: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr, _, _ := laneServer(t, tc.handler, nil)
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			fmt.Fprintf(c, "%s / HTTP/1.1\r\nHost: x\r\n\r\n", tc.method)
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, &http.Request{Method: tc.method})
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tc.status {
				t.Errorf("status %d; want %d", resp.StatusCode, tc.status)
			}
			for k, v := range tc.header {
				if got := strings.Join(resp.Header.Values(k), ","); got != v {
					t.Errorf("%s: %q; want %q", k, got, v)
				}
			}
			if tc.closes {
				_, _ = io.ReadAll(br) // whatever came, then EOF: the server closed
				return
			}
			body, err := io.ReadAll(resp.Body)
			if err != nil || string(body) != tc.body {
				t.Errorf("body %q (%v); want %q", body, err, tc.body)
			}
			fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n") // still open, then closed
			resp, err = http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("second request: %v", err)
			}
			if !resp.Close { // ReadResponse turns Connection: close into Close
				t.Error("second response does not say Connection: close")
			}
			io.Copy(io.Discard, resp.Body)
			if _, err := br.ReadByte(); err != io.EOF {
				t.Errorf("after Connection: close, read: %v; want EOF", err)
			}
		})
	}
}

// TestLaneContext: the request context ends when the handler returns; a
// handler that waits on Done learns that its client went away; a watch
// that found nothing leaves the connection usable, pipelined bytes kept.
func TestLaneContext(t *testing.T) {
	afterReturn := make(chan context.Context, 1)
	cancelled := make(chan error, 1)
	release := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/plain":
			afterReturn <- r.Context()
		case "/wait": // waits until the client is gone
			<-r.Context().Done()
			cancelled <- r.Context().Err()
		case "/watch": // watches, then returns normally
			select {
			case <-r.Context().Done():
				panic("cancelled while the client is there")
			case <-release:
			}
		}
		io.WriteString(w, r.URL.Path)
	})
	addr, _, _ := laneServer(t, h, nil)

	roundTrip(t, addr, "GET /plain HTTP/1.1\r\nHost: x\r\n\r\n")
	if err := (<-afterReturn).Err(); !errors.Is(err, context.Canceled) {
		t.Errorf("after the handler: Err() = %v; want Canceled", err)
	}

	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(c, "GET /wait HTTP/1.1\r\nHost: x\r\n\r\n")
	c.Close()
	select {
	case err := <-cancelled:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("client gone: Err() = %v; want Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the context was not cancelled when the client went away")
	}

	for _, pipelined := range []bool{false, true} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		br := bufio.NewReader(c)
		req := "GET /watch HTTP/1.1\r\nHost: x\r\n\r\n"
		if pipelined {
			req += "GET /plain HTTP/1.1\r\nHost: x\r\n\r\n"
		}
		io.WriteString(c, req)
		release <- struct{}{}
		if !pipelined {
			io.WriteString(c, "GET /plain HTTP/1.1\r\nHost: x\r\n\r\n")
		}
		for _, want := range []string{"/watch", "/plain"} {
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("pipelined=%v: %v", pipelined, err)
			}
			body, _ := io.ReadAll(resp.Body)
			if string(body) != want {
				t.Errorf("pipelined=%v: body %q; want %q", pipelined, body, want)
			}
		}
		<-afterReturn
		c.Close()
	}
}

// TestLaneShutdown: idle connections are closed, a request in flight
// completes with Connection: close, and Serve returns ErrServerClosed.
func TestLaneShutdown(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(entered)
			<-release
		}
		io.WriteString(w, "ok")
	})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Handler: h, Fallback: &http.Server{Handler: h}}
	served := make(chan error, 1)
	go func() { served <- s.Serve(l) }()

	idle, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	_ = idle.SetDeadline(time.Now().Add(10 * time.Second))
	idleR := bufio.NewReader(idle)
	io.WriteString(idle, "GET /fast HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp, err := http.ReadResponse(idleR, nil); err != nil {
		t.Fatal(err)
	} else {
		io.Copy(io.Discard, resp.Body)
	}

	busy, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	_ = busy.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(busy, "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
	<-entered

	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(context.Background()) }()
	if _, err := idleR.ReadByte(); err == nil {
		t.Error("idle connection: read a byte; want it closed")
	}
	expired, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Shutdown(expired); !errors.Is(err, context.Canceled) {
		t.Errorf("Shutdown with a request in flight and an ended context: %v; want Canceled", err)
	}
	close(release)
	resp, err := http.ReadResponse(bufio.NewReader(busy), nil)
	if err != nil {
		t.Fatalf("in-flight request: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || string(body) != "ok" || !resp.Close {
		t.Errorf("in-flight: %d %q close %v; want 200 \"ok\" with Connection: close", resp.StatusCode, body, resp.Close)
	}
	if err := <-shut; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		t.Errorf("Serve: %v; want ErrServerClosed", err)
	}
	if _, err := net.Dial("tcp", l.Addr().String()); err == nil {
		t.Error("dial after Shutdown succeeded")
	}
}

// TestLaneTimeouts: an idle connection and a head that stops halfway are
// both closed by the server.
func TestLaneTimeouts(t *testing.T) {
	addr, _, _ := laneServer(t, echo, func(s *http.Server) {
		s.IdleTimeout = 50 * time.Millisecond
		s.ReadHeaderTimeout = 50 * time.Millisecond
	})
	for _, send := range []string{"", "GET / HTTP/1.1\r\nHo"} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(10 * time.Second)) // failure guard only
		io.WriteString(c, send)
		var b [1]byte
		_, err = c.Read(b[:])
		var ne net.Error
		if err == nil || errors.As(err, &ne) && ne.Timeout() {
			t.Errorf("sent %q: read %v; want the server to close the connection", send, err)
		}
		c.Close()
	}
}

// TestLanePanic: a panicking handler costs its connection, not the server.
func TestLanePanic(t *testing.T) {
	var logs lockedBuffer
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/boom":
			panic("boom")
		case "/abort":
			panic(http.ErrAbortHandler)
		}
		io.WriteString(w, "alive")
	})
	addr, _, _ := laneServer(t, h, func(s *http.Server) { s.ErrorLog = log.New(&logs, "", 0) })
	for _, p := range []string{"/boom", "/abort"} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", p)
		if _, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
			t.Errorf("%s: got a response; want the connection closed", p)
		}
		c.Close()
	}
	if _, body := roundTrip(t, addr, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); body != "alive" {
		t.Errorf("after panics: %q; want alive", body)
	}
	if n := strings.Count(logs.String(), "panic serving"); n != 1 {
		t.Errorf("logged panics: %d; want 1 (ErrAbortHandler is silent)\n%s", n, logs.String())
	}
}

// lockedBuffer is a log sink the server writes while the test reads.
type lockedBuffer struct {
	mu  sync.Mutex // guards buf
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
