package h2_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"trendgate/internal/testing/testcert"
	"trendgate/internal/transport/h2"
)

// echo answers with the method, path, protocol and host of the request,
// and with a body of ?n= bytes when asked.
var echo = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	if n, err := strconv.Atoi(r.URL.Query().Get("n")); err == nil {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.Itoa(n))
		_, _ = w.Write(bytes.Repeat([]byte("x"), n))
		return
	}
	w.Header().Set("X-Body", strconv.FormatInt(r.ContentLength, 10))
	_, _ = io.WriteString(w, r.Method+" "+r.URL.RequestURI()+" "+r.Proto+" "+r.Host)
})

// TestServeWithGoClient: Go's own HTTP/2 client gets GET and HEAD
// answers over TLS, through the batching connection, with what net/http
// puts in a request and a response.
func TestServeWithGoClient(t *testing.T) {
	pair := testcert.New(t, testcert.Options{Hosts: []string{"127.0.0.1"}})
	var sawCtx atomic.Bool
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, okSrv := r.Context().Value(http.ServerContextKey).(*http.Server)
		_, okAddr := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
		sawCtx.Store(okSrv && okAddr && r.TLS != nil && r.TLS.NegotiatedProtocol == "h2" && r.RemoteAddr != "")
		if r.URL.Path == "/flush" {
			_, _ = io.WriteString(w, "part one;")
			w.(http.Flusher).Flush()
			_, _ = io.WriteString(w, "part two")
			return
		}
		echo.ServeHTTP(w, r)
	})
	srv := &h2.Server{Handler: h, Base: &http.Server{IdleTimeout: guard}}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				tc := tls.Server(c, &tls.Config{Certificates: []tls.Certificate{pair.TLS}, NextProtos: []string{"h2"}})
				if tc.Handshake() != nil {
					tc.Close()
					return
				}
				srv.ServeConn(tc)
			}()
		}
	}()
	defer func() {
		l.Close()
		<-done
		if err := srv.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	c := &http.Client{Timeout: guard, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pair.Pool(), NextProtos: []string{"h2"}}, ForceAttemptHTTP2: true,
	}}
	defer c.CloseIdleConnections()
	base := "https://" + l.Addr().String()
	tests := []struct {
		method, path string
		status       int
		body         string
		clen         string
	}{
		{"GET", "/a?b=c", 200, "GET /a?b=c HTTP/2.0 " + l.Addr().String(), strconv.Itoa(len("GET /a?b=c HTTP/2.0 " + l.Addr().String()))},
		{"HEAD", "/a", 200, "", strconv.Itoa(len("HEAD /a HTTP/2.0 " + l.Addr().String()))},
		{"GET", "/big?n=70000", 200, strings.Repeat("x", 70000), "70000"},
		{"HEAD", "/big?n=70000", 200, "", "70000"},
		{"GET", "/flush", 200, "part one;part two", ""},
	}
	for _, tc := range tests {
		t.Run(tc.method+tc.path, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, base+tc.path, nil)
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			if resp.ProtoMajor != 2 || resp.StatusCode != tc.status || string(b) != tc.body {
				t.Errorf("got %s %d %.60q; want HTTP/2 %d %.60q", resp.Proto, resp.StatusCode, b, tc.status, tc.body)
			}
			if got := resp.Header.Get("Content-Length"); got != tc.clen {
				t.Errorf("content-length %q; want %q", got, tc.clen)
			}
			if resp.Header.Get("Date") == "" {
				t.Error("no Date")
			}
			if !sawCtx.Load() {
				t.Error("the request lacks the server, local address or TLS state")
			}
		})
	}
}

// TestPing: a PING is answered with the same data.
func TestPing(t *testing.T) {
	c := handshake(t, startLane(t, echo, nil))
	data := [8]byte{1, 2, 3, 4, 5, 6, 7, 8}
	if err := c.fr.WritePing(false, data); err != nil {
		t.Fatal(err)
	}
	f := c.readUntil("PING", func(f http2.Frame) bool { _, ok := f.(*http2.PingFrame); return ok }).(*http2.PingFrame)
	if !f.IsAck() || f.Data != data {
		t.Errorf("got PING ack=%v %v; want an ack of %v", f.IsAck(), f.Data, data)
	}
}

// TestAdvertisedSettings: the server's SETTINGS carry the stream limit
// and the header list limit.
func TestAdvertisedSettings(t *testing.T) {
	ln := startLane(t, echo, func(s *h2.Server) { s.MaxConcurrentStreams = 7; s.Base.MaxHeaderBytes = 9000 })
	c := handshake(t, ln)
	if got := c.settings[http2.SettingMaxConcurrentStreams]; got != 7 {
		t.Errorf("MAX_CONCURRENT_STREAMS %d; want 7", got)
	}
	if got := c.settings[http2.SettingMaxHeaderListSize]; got != 9000 {
		t.Errorf("MAX_HEADER_LIST_SIZE %d; want 9000", got)
	}
}

// TestProtocolErrors: requests that break RFC 9113's rules get the
// answer it prescribes.
func TestProtocolErrors(t *testing.T) {
	ln := startLane(t, echo, nil)
	streamErrs := []struct {
		name   string
		fields []string
	}{
		{"upper-case name", []string{":method", "GET", ":scheme", "https", ":path", "/", "X-Up", "1"}},
		{"connection field", []string{":method", "GET", ":scheme", "https", ":path", "/", "connection", "close"}},
		{"te not trailers", []string{":method", "GET", ":scheme", "https", ":path", "/", "te", "gzip"}},
		{"no :path", []string{":method", "GET", ":scheme", "https"}},
		{"empty :path", []string{":method", "GET", ":scheme", "https", ":path", ""}},
		{"pseudo after regular", []string{":method", "GET", ":scheme", "https", "accept", "*/*", ":path", "/"}},
		{"repeated pseudo", []string{":method", "GET", ":method", "GET", ":scheme", "https", ":path", "/"}},
		{"response pseudo", []string{":status", "200", ":method", "GET", ":scheme", "https", ":path", "/"}},
	}
	for _, tc := range streamErrs {
		t.Run(tc.name, func(t *testing.T) {
			c := handshake(t, ln)
			if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: c.block(tc.fields...), EndStream: true, EndHeaders: true}); err != nil {
				t.Fatal(err)
			}
			if code := c.reset(1); code != http2.ErrCodeProtocol {
				t.Errorf("RST_STREAM %v; want PROTOCOL_ERROR", code)
			}
			// The connection goes on.
			c.request(3, "GET", "/ok", true)
			if r := c.response(3); r.status != 200 {
				t.Errorf("next request: %d; want 200", r.status)
			}
		})
	}
	connErrs := []struct {
		name string
		code http2.ErrCode
		send func(c *client)
	}{
		{"even stream id", http2.ErrCodeProtocol, func(c *client) { c.request(2, "GET", "/", true) }},
		{"decreasing stream id", http2.ErrCodeProtocol, func(c *client) {
			c.request(5, "GET", "/", true)
			c.request(3, "GET", "/", true)
		}},
		{"DATA on an idle stream", http2.ErrCodeProtocol, func(c *client) { _ = c.fr.WriteData(1, true, []byte("x")) }},
		{"WINDOW_UPDATE of 0", http2.ErrCodeProtocol, func(c *client) { _ = c.fr.WriteWindowUpdate(0, 0) }},
		{"connection window past 2^31-1", http2.ErrCodeFlowControl, func(c *client) { _ = c.fr.WriteWindowUpdate(0, 1<<31-1) }},
		{"INITIAL_WINDOW_SIZE too large", http2.ErrCodeFlowControl, func(c *client) {
			_ = c.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 31})
		}},
		{"frame over MAX_FRAME_SIZE", http2.ErrCodeFrameSize, func(c *client) {
			_ = c.fr.WriteData(1, true, make([]byte, 16385))
		}},
		{"PUSH_PROMISE from the client", http2.ErrCodeProtocol, func(c *client) {
			_ = c.fr.WritePushPromise(http2.PushPromiseParam{StreamID: 1, PromiseID: 2, BlockFragment: c.block(":method", "GET"), EndHeaders: true})
		}},
		{"HEADERS padding longer than the frame", http2.ErrCodeProtocol, func(c *client) {
			_ = c.fr.WriteRawFrame(http2.FrameHeaders, http2.FlagHeadersPadded|http2.FlagHeadersEndHeaders|http2.FlagHeadersEndStream, 1, []byte{10, 0x82})
		}},
		{"bad HPACK", http2.ErrCodeCompression, func(c *client) {
			_ = c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: []byte{0xff, 0xff, 0xff, 0xff}, EndStream: true, EndHeaders: true})
		}},
	}
	for _, tc := range connErrs {
		t.Run(tc.name, func(t *testing.T) {
			c := handshake(t, ln)
			tc.send(c)
			if g := c.goAway(); g.ErrCode != tc.code {
				t.Errorf("GOAWAY %v; want %v", g.ErrCode, tc.code)
			}
			if !c.closed() {
				t.Error("the connection stayed open after GOAWAY")
			}
		})
	}
}

// TestRequestBody: a request whose HEADERS leave the stream open reaches
// the handler with its length (or -1) and its DATA is discarded with the
// connection's credit given back; DATA that disagrees with the
// content-length resets the stream.
func TestRequestBody(t *testing.T) {
	ln := startLane(t, echo, nil)
	c := handshake(t, ln)
	c.request(1, "POST", "/body", false)
	r := c.response(1)
	if string(r.body) != "POST /body HTTP/2.0 lane.test" || r.header["x-body"] != "-1" {
		t.Fatalf("got %q with x-body %q; want the echo and -1", r.body, r.header["x-body"])
	}
	// More than the connection's window in total: the server must give
	// credit back or this stalls.
	chunk := make([]byte, 16000)
	for range 10 {
		if err := c.fr.WriteData(1, false, chunk); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.fr.WriteData(1, true, nil); err != nil {
		t.Fatal(err)
	}
	c.request(3, "GET", "/after", true, "content-length", "0")
	if r := c.response(3); r.status != 200 {
		t.Fatalf("after the body: %d", r.status)
	}

	c.request(5, "POST", "/cl", false, "content-length", "3")
	if r := c.response(5); r.header["x-body"] != "3" {
		t.Errorf("x-body %q; want 3", r.header["x-body"])
	}
	_ = c.fr.WriteData(5, true, []byte("toolong"))
	if code := c.reset(5); code != http2.ErrCodeProtocol {
		t.Errorf("content-length 3 with 7 bytes: RST_STREAM %v; want PROTOCOL_ERROR", code)
	}
}

// TestFlowControl: a response goes out as the client's windows allow,
// never beyond its SETTINGS_MAX_FRAME_SIZE, and a change of
// SETTINGS_INITIAL_WINDOW_SIZE applies to open streams.
func TestFlowControl(t *testing.T) {
	ln := startLane(t, echo, nil)
	c := handshake(t, ln, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	c.request(1, "GET", "/?n=40000", true)
	c.readUntil("HEADERS", func(f http2.Frame) bool { _, ok := f.(*http2.MetaHeadersFrame); return ok })
	if err := c.fr.WriteWindowUpdate(1, 100); err != nil {
		t.Fatal(err)
	}
	f := c.readUntil("DATA", func(f http2.Frame) bool { _, ok := f.(*http2.DataFrame); return ok }).(*http2.DataFrame)
	if len(f.Data()) != 100 || f.StreamEnded() {
		t.Fatalf("first DATA: %d bytes, end %v; want 100 bytes, not the end", len(f.Data()), f.StreamEnded())
	}
	// Raise every stream's window by 50000: 39900 bytes left, in frames
	// of at most 16384.
	if err := c.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 50000}); err != nil {
		t.Fatal(err)
	}
	got := 100
	for got < 40000 {
		f := c.read()
		d, ok := f.(*http2.DataFrame)
		if !ok {
			continue
		}
		if len(d.Data()) > 16384 {
			t.Fatalf("DATA of %d bytes; the frame size is 16384", len(d.Data()))
		}
		got += len(d.Data())
		if d.StreamEnded() != (got == 40000) {
			t.Fatalf("END_STREAM %v at %d bytes", d.StreamEnded(), got)
		}
	}

	t.Run("a large body through a small window", func(t *testing.T) {
		// The handler writes 300000 bytes at once; the lane keeps at most
		// 64 KiB of them waiting and the handler waits for the rest.
		c := handshake(t, ln, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
		c.request(1, "GET", "/?n=300000", true)
		got := 0
		for got < 300000 {
			if err := c.fr.WriteWindowUpdate(1, 10000); err != nil {
				t.Fatal(err)
			}
			if err := c.fr.WriteWindowUpdate(0, 10000); err != nil {
				t.Fatal(err)
			}
			want := got + 10000
			for got < want {
				f := c.read()
				if d, ok := f.(*http2.DataFrame); ok && d.StreamID == 1 {
					got += len(d.Data())
					if d.StreamEnded() != (got == 300000) {
						t.Fatalf("END_STREAM %v at %d bytes", d.StreamEnded(), got)
					}
				}
			}
			if got > want {
				t.Fatalf("%d bytes with credit for %d", got, want)
			}
		}
	})

	t.Run("window past 2^31-1 on a stream", func(t *testing.T) {
		c := handshake(t, ln, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
		c.request(1, "POST", "/?n=0", false) // open until the client ends it
		_ = c.fr.WriteWindowUpdate(1, 1<<31-1)
		_ = c.fr.WriteWindowUpdate(1, 1)
		if code := c.reset(1); code != http2.ErrCodeFlowControl {
			t.Errorf("RST_STREAM %v; want FLOW_CONTROL_ERROR", code)
		}
	})
}

// TestStalledResponse: a response whose window never opens is reset after
// the write timeout, and the connection, idle then, closes after the idle
// timeout.
func TestStalledResponse(t *testing.T) {
	ln := startLane(t, echo, func(s *h2.Server) {
		s.Base.WriteTimeout = 100 * time.Millisecond
		s.Base.IdleTimeout = 200 * time.Millisecond
	})
	c := handshake(t, ln, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	c.request(1, "GET", "/?n=1000", true)
	if code := c.reset(1); code != http2.ErrCodeCancel {
		t.Errorf("RST_STREAM %v; want CANCEL", code)
	}
	if g := c.goAway(); g.ErrCode != http2.ErrCodeNo {
		t.Errorf("GOAWAY %v; want NO_ERROR", g.ErrCode)
	}
	if !c.closed() {
		t.Error("an idle connection stayed open")
	}
}

// TestSettingsAckTimeout: a client that never acknowledges the server's
// SETTINGS gets GOAWAY SETTINGS_TIMEOUT.
func TestSettingsAckTimeout(t *testing.T) {
	ln := startLane(t, echo, func(s *h2.Server) { s.Base.ReadHeaderTimeout = 100 * time.Millisecond })
	c := dial(t, ln)
	if g := c.goAway(); g.ErrCode != http2.ErrCodeSettingsTimeout {
		t.Errorf("GOAWAY %v; want SETTINGS_TIMEOUT", g.ErrCode)
	}
}

// TestBadPreface: a connection that does not start with the client
// preface gets GOAWAY PROTOCOL_ERROR and is closed.
func TestBadPreface(t *testing.T) {
	ln := startLane(t, echo, nil)
	conn, err := net.Dial("tcp", ln.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(guard))
	if _, err := io.WriteString(conn, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(nil, conn)
	var codes []http2.ErrCode
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			break
		}
		if g, ok := f.(*http2.GoAwayFrame); ok {
			codes = append(codes, g.ErrCode)
		}
	}
	if len(codes) != 1 || codes[0] != http2.ErrCodeProtocol {
		t.Errorf("GOAWAY codes %v; want one PROTOCOL_ERROR", codes)
	}
}

// TestConcurrencyLimit: streams beyond SETTINGS_MAX_CONCURRENT_STREAMS
// are refused while the earlier ones wait, and served once they are done.
func TestConcurrencyLimit(t *testing.T) {
	release := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/wait" {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		_, _ = io.WriteString(w, "done")
	})
	ln := startLane(t, h, func(s *h2.Server) { s.MaxConcurrentStreams = 2 })
	c := handshake(t, ln)
	c.request(1, "GET", "/wait", true)
	c.request(3, "GET", "/wait", true)
	c.request(5, "GET", "/wait", true)
	if code := c.reset(5); code != http2.ErrCodeRefusedStream {
		t.Errorf("third stream: RST_STREAM %v; want REFUSED_STREAM", code)
	}
	close(release)
	for _, id := range []uint32{1, 3} {
		if r := c.response(id); string(r.body) != "done" {
			t.Errorf("stream %d: %q", id, r.body)
		}
	}
	c.request(7, "GET", "/now", true)
	if r := c.response(7); string(r.body) != "done" {
		t.Errorf("after the limit freed: %q", r.body)
	}
}

// TestResetCancelsContext: RST_STREAM from the client cancels the
// request's context while its handler waits, and the connection keeps
// serving.
func TestResetCancelsContext(t *testing.T) {
	canceled := make(chan error, 1)
	waiting := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/wait" {
			close(waiting)
			<-r.Context().Done()
			canceled <- r.Context().Err()
			return
		}
		_, _ = io.WriteString(w, "ok")
	})
	c := handshake(t, startLane(t, h, nil))
	c.request(1, "GET", "/wait", true)
	<-waiting
	if err := c.fr.WriteRSTStream(1, http2.ErrCodeCancel); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-canceled:
		if err != context.Canceled {
			t.Errorf("context error %v; want context.Canceled", err)
		}
	case <-time.After(guard):
		t.Fatal("the handler's context was not canceled")
	}
	c.request(3, "GET", "/", true)
	if r := c.response(3); string(r.body) != "ok" {
		t.Errorf("after the reset: %q", r.body)
	}
}

// TestRapidReset (CVE-2023-44487): a client that opens and resets streams
// without end is told to calm down and disconnected.
func TestRapidReset(t *testing.T) {
	c := handshake(t, startLane(t, echo, nil))
	go func() {
		for id := uint32(1); id < 20000; id += 2 {
			if c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.block(":method", "GET", ":scheme", "https", ":path", "/", ":authority", "x"), EndHeaders: true}) != nil {
				return
			}
			if c.fr.WriteRSTStream(id, http2.ErrCodeCancel) != nil {
				return
			}
		}
	}()
	if g := c.goAway(); g.ErrCode != http2.ErrCodeEnhanceYourCalm {
		t.Errorf("GOAWAY %v; want ENHANCE_YOUR_CALM", g.ErrCode)
	}
}

// TestContinuationFlood (CVE-2024-27316): a header block that goes on
// and on ends the connection, whether in many small CONTINUATION frames
// or in large ones.
func TestContinuationFlood(t *testing.T) {
	ln := startLane(t, echo, func(s *h2.Server) { s.Base.MaxHeaderBytes = 16 << 10 })
	for _, size := range []int{0, 16384} {
		t.Run(strconv.Itoa(size), func(t *testing.T) {
			c := handshake(t, ln)
			go func() {
				head := c.block(":method", "GET", ":scheme", "https", ":path", "/", "x-a", strings.Repeat("a", 100))
				if c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: head}) != nil {
					return
				}
				// 'a' (0x61) starts a literal field of a 97-byte value:
				// the fragments decode, and only their size and number
				// can stop them.
				frag := bytes.Repeat([]byte("a"), size)
				for range 10000 {
					if c.fr.WriteContinuation(1, false, frag) != nil {
						return
					}
				}
			}()
			if g := c.goAway(); g.ErrCode != http2.ErrCodeEnhanceYourCalm {
				t.Errorf("GOAWAY %v; want ENHANCE_YOUR_CALM", g.ErrCode)
			}
		})
	}
}

// TestHPACKBomb: a small header block that decodes to a huge list (one
// large field in the dynamic table, then indexed many times) gets 431 and
// never reaches the handler.
func TestHPACKBomb(t *testing.T) {
	var called atomic.Bool
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { called.Store(true) })
	c := handshake(t, startLane(t, h, func(s *h2.Server) { s.Base.MaxHeaderBytes = 16 << 10 }))
	block := c.block(":method", "GET", ":scheme", "https", ":path", "/", "x-big", strings.Repeat("z", 4000))
	// 0xbe indexes the first dynamic-table entry, x-big, 4 KB each time.
	block = append(block, bytes.Repeat([]byte{0xbe}, 1000)...)
	if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block, EndStream: true, EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	if r := c.response(1); r.status != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("status %d; want 431", r.status)
	}
	if called.Load() {
		t.Error("the handler ran")
	}
}

// TestPingFloodWithoutReading: a client that sends PINGs and reads
// nothing is disconnected once the server cannot write (write timeout),
// and the server's memory for it stays bounded by backpressure.
func TestPingFloodWithoutReading(t *testing.T) {
	ln := startLane(t, echo, func(s *h2.Server) { s.Base.WriteTimeout = 200 * time.Millisecond })
	c := handshake(t, ln)
	var err error
	for i := 0; i < 2_000_000 && err == nil; i++ {
		err = c.fr.WritePing(false, [8]byte{byte(i)})
	}
	if err == nil {
		t.Fatal("two million PINGs unread, and the connection still takes more")
	}
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("the client's writes blocked until its own deadline (%v): the server kept the connection", err)
	}
}

// TestShutdown: Shutdown sends GOAWAY naming the last stream, lets the
// stream in progress finish, then the connection closes and Shutdown
// returns.
func TestShutdown(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		select {
		case <-release:
		case <-r.Context().Done():
		}
		_, _ = io.WriteString(w, "finished")
	})
	ln := startLane(t, h, nil)
	c := handshake(t, ln)
	c.request(1, "GET", "/", true)
	<-started
	shut := make(chan error, 1)
	go func() { shut <- ln.srv.Shutdown(context.Background()) }()
	g := c.goAway()
	if g.ErrCode != http2.ErrCodeNo || g.LastStreamID != 1 {
		t.Errorf("GOAWAY %v last %d; want NO_ERROR last 1", g.ErrCode, g.LastStreamID)
	}
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned (%v) with a stream in progress", err)
	default:
	}
	close(release)
	if r := c.response(1); string(r.body) != "finished" {
		t.Errorf("the stream in progress got %q", r.body)
	}
	if !c.closed() {
		t.Error("the connection stayed open")
	}
	awaitShutdown(t, shut)
}

// TestShutdownIdle: an idle connection gets GOAWAY and is closed at
// once, and Shutdown returns.
func TestShutdownIdle(t *testing.T) {
	ln := startLane(t, echo, nil)
	c := handshake(t, ln)
	c.request(1, "GET", "/", true)
	if r := c.response(1); r.status != 200 {
		t.Fatalf("status %d", r.status)
	}
	shut := make(chan error, 1)
	go func() { shut <- ln.srv.Shutdown(context.Background()) }()
	if g := c.goAway(); g.ErrCode != http2.ErrCodeNo || g.LastStreamID != 1 {
		t.Errorf("GOAWAY %v last %d; want NO_ERROR last 1", g.ErrCode, g.LastStreamID)
	}
	if !c.closed() {
		t.Error("the connection stayed open")
	}
	awaitShutdown(t, shut)
}

// TestConnectionLossCancelsContext: when the client goes away, the
// context of a request whose handler waits is canceled.
func TestConnectionLossCancelsContext(t *testing.T) {
	canceled := make(chan error, 1)
	waiting := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(waiting)
		<-r.Context().Done()
		canceled <- r.Context().Err()
	})
	c := handshake(t, startLane(t, h, nil))
	c.request(1, "GET", "/wait", true)
	<-waiting
	c.conn.Close()
	select {
	case err := <-canceled:
		if err != context.Canceled {
			t.Errorf("context error %v; want context.Canceled", err)
		}
	case <-time.After(guard):
		t.Fatal("the handler's context was not canceled")
	}
}

// awaitShutdown waits up to guard for the result of a Shutdown call on
// shut and fails the test on an error or when none comes.
func awaitShutdown(t *testing.T, shut <-chan error) {
	t.Helper()
	select {
	case err := <-shut:
		if err != nil {
			t.Error(err)
		}
	case <-time.After(guard):
		t.Fatal("Shutdown did not return")
	}
}
