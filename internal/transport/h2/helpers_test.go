package h2_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"trendgate/internal/transport/h2"
)

// guard bounds every wait in these tests; none is expected to come near it.
const guard = 10 * time.Second

// lane is an h2.Server serving prior-knowledge HTTP/2 on a loopback port.
type lane struct {
	srv  *h2.Server
	addr string
	wg   sync.WaitGroup // one per connection being served
}

// startLane serves h with the lane; mutate may set Base's timeouts and
// the lane's fields first. Everything stops when the test ends: Shutdown,
// then every connection must have ended.
func startLane(t testing.TB, h http.Handler, mutate func(*h2.Server)) *lane {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := &lane{srv: &h2.Server{Handler: h, Base: &http.Server{IdleTimeout: guard}}, addr: l.Addr().String()}
	if mutate != nil {
		mutate(ln.srv)
	}
	accepted := make(chan struct{})
	go func() {
		defer close(accepted)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			ln.wg.Add(1)
			go func() {
				defer ln.wg.Done()
				ln.srv.ServeConn(c)
			}()
		}
	}()
	t.Cleanup(func() {
		_ = l.Close()
		<-accepted
		ctx, cancel := context.WithTimeout(context.Background(), guard)
		defer cancel()
		if err := ln.srv.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		done := make(chan struct{})
		go func() { ln.wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(guard):
			t.Error("connections still served after Shutdown")
		}
	})
	return ln
}

// client is a raw HTTP/2 client: a Framer on a connection to a lane.
type client struct {
	t    testing.TB
	conn net.Conn
	fr   *http2.Framer
	enc  *hpack.Encoder
	ebuf bytes.Buffer
	// Settings the server sent in its first SETTINGS frame.
	settings map[http2.SettingID]uint32
	// Responses read while waiting for another stream's.
	got map[uint32]*response
}

// dial connects to ln and sends the preface and a SETTINGS frame with
// settings; it does not wait for anything.
func dial(t testing.TB, ln *lane, settings ...http2.Setting) *client {
	t.Helper()
	conn, err := net.DialTimeout("tcp", ln.addr, guard)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(guard))
	c := &client{t: t, conn: conn, fr: http2.NewFramer(conn, conn), settings: map[http2.SettingID]uint32{}}
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.fr.AllowIllegalWrites = true // some tests break the rules on purpose
	c.enc = hpack.NewEncoder(&c.ebuf)
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	if err := c.fr.WriteSettings(settings...); err != nil {
		t.Fatal(err)
	}
	return c
}

// handshake dials and completes the SETTINGS exchange both ways.
func handshake(t testing.TB, ln *lane, settings ...http2.Setting) *client {
	t.Helper()
	c := dial(t, ln, settings...)
	sawSettings, sawAck := false, false
	for !sawSettings || !sawAck {
		f := c.read()
		sf, ok := f.(*http2.SettingsFrame)
		if !ok {
			t.Fatalf("during the handshake got %v", f.Header())
		}
		if sf.IsAck() {
			sawAck = true
			continue
		}
		sawSettings = true
		_ = sf.ForeachSetting(func(s http2.Setting) error { c.settings[s.ID] = s.Val; return nil })
		if err := c.fr.WriteSettingsAck(); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// read returns the next frame; it fails the test on an error.
func (c *client) read() http2.Frame {
	c.t.Helper()
	f, err := c.fr.ReadFrame()
	if err != nil {
		c.t.Fatalf("reading a frame: %v", err)
	}
	return f
}

// readUntil reads frames until match accepts one, which it returns; it
// fails the test when the connection ends first.
func (c *client) readUntil(what string, match func(http2.Frame) bool) http2.Frame {
	c.t.Helper()
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			c.t.Fatalf("waiting for %s: %v", what, err)
		}
		if match(f) {
			return f
		}
	}
}

// goAway reads until a GOAWAY and returns it.
func (c *client) goAway() *http2.GoAwayFrame {
	c.t.Helper()
	return c.readUntil("GOAWAY", func(f http2.Frame) bool { _, ok := f.(*http2.GoAwayFrame); return ok }).(*http2.GoAwayFrame)
}

// reset reads until a RST_STREAM on id and returns its code.
func (c *client) reset(id uint32) http2.ErrCode {
	c.t.Helper()
	f := c.readUntil("RST_STREAM", func(f http2.Frame) bool {
		r, ok := f.(*http2.RSTStreamFrame)
		return ok && r.StreamID == id
	})
	return f.(*http2.RSTStreamFrame).ErrCode
}

// closedAfter reports whether the server closes the connection, reading
// and dropping whatever comes before.
func (c *client) closed() bool {
	for {
		if _, err := c.fr.ReadFrame(); err != nil {
			var ne net.Error
			return !(errors.As(err, &ne) && ne.Timeout())
		}
	}
}

// block encodes fields (name, value pairs) as a header block.
func (c *client) block(fields ...string) []byte {
	c.ebuf.Reset()
	for i := 0; i+1 < len(fields); i += 2 {
		_ = c.enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	return bytes.Clone(c.ebuf.Bytes())
}

// get sends a GET for path on stream id (END_STREAM set unless body),
// with extra fields.
func (c *client) request(id uint32, method, path string, endStream bool, extra ...string) {
	c.t.Helper()
	fields := append([]string{":method", method, ":scheme", "https", ":path", path, ":authority", "lane.test"}, extra...)
	if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.block(fields...), EndStream: endStream, EndHeaders: true}); err != nil {
		c.t.Fatal(err)
	}
}

// response is one response as the client read it.
type response struct {
	status int
	header map[string]string
	body   []byte
	ended  bool
}

// response returns the response on stream id, reading frames (and giving
// back flow-control credit for their data) until it ended; responses of
// other streams read meanwhile are kept for their turn.
func (c *client) response(id uint32) response {
	c.t.Helper()
	if c.got == nil {
		c.got = map[uint32]*response{}
	}
	for {
		if r := c.got[id]; r != nil && r.ended {
			delete(c.got, id)
			return *r
		}
		f := c.read()
		r := c.got[f.Header().StreamID]
		if r == nil {
			r = &response{}
			c.got[f.Header().StreamID] = r
		}
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			r.header = map[string]string{}
			for _, hf := range f.Fields {
				r.header[hf.Name] = hf.Value
			}
			r.status, _ = strconv.Atoi(r.header[":status"])
			r.ended = f.StreamEnded()
		case *http2.DataFrame:
			if n := len(f.Data()); n > 0 {
				_ = c.fr.WriteWindowUpdate(0, uint32(n))
				if !f.StreamEnded() {
					_ = c.fr.WriteWindowUpdate(f.StreamID, uint32(n))
				}
			}
			r.body = append(r.body, f.Data()...)
			r.ended = f.StreamEnded()
		case *http2.RSTStreamFrame:
			if f.StreamID == id {
				c.t.Fatalf("stream %d reset: %v", id, f.ErrCode)
			}
		case *http2.GoAwayFrame:
			c.t.Fatalf("GOAWAY %v while waiting for stream %d", f.ErrCode, id)
		}
	}
}
