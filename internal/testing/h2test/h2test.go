// Package h2test is a frame-level HTTP/2 client for tests: it dials a TLS
// server with ALPN h2, sends the connection preface, and lets a test write
// any frame, conforming or not, and read what the server answers, every
// read and write bounded by a deadline. Production code never imports it.
package h2test

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// IOTimeout bounds every single read and write of a Conn unless the
// method says otherwise: a server that stops talking fails the test
// instead of hanging it.
const IOTimeout = 10 * time.Second

// Conn is one client connection speaking raw frames. Frames written
// through Framer are buffered until Flush. Reads decode header blocks
// (HEADERS with its CONTINUATIONs arrive as one *http2.MetaHeadersFrame).
// A Conn is used by one goroutine.
type Conn struct {
	// Framer writes to the buffer Flush sends and reads from the
	// connection.
	Framer *http2.Framer

	t      testing.TB
	nc     *tls.Conn
	bw     *bufio.Writer
	read   atomic.Int64 // bytes read from the connection, TLS-decrypted
	enc    *hpack.Encoder
	encBuf bytes.Buffer
	nextID uint32 // the next client stream id
}

// Dial connects to addr over TLS with cfg (NextProtos is replaced by
// "h2") and requires h2 to be negotiated. The client preface is buffered:
// Handshake sends it with the client's SETTINGS, which must follow it.
// The connection is closed when the test ends.
func Dial(t testing.TB, addr string, cfg *tls.Config) *Conn {
	t.Helper()
	cfg = cfg.Clone()
	cfg.NextProtos = []string{"h2"}
	d := &net.Dialer{Timeout: IOTimeout}
	raw, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("h2test: dial %s: %v", addr, err)
	}
	nc := tls.Client(raw, cfg)
	t.Cleanup(func() { _ = nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(IOTimeout))
	if err := nc.Handshake(); err != nil {
		t.Fatalf("h2test: TLS handshake with %s: %v", addr, err)
	}
	_ = nc.SetDeadline(time.Time{})
	if p := nc.ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Fatalf("h2test: negotiated %q; want h2", p)
	}
	c := &Conn{t: t, nc: nc, bw: bufio.NewWriterSize(nc, 64<<10), nextID: 1}
	c.Framer = http2.NewFramer(c.bw, &countingReader{r: nc, n: &c.read})
	c.Framer.AllowIllegalWrites = true
	c.Framer.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.Framer.MaxHeaderListSize = 1 << 20
	c.Framer.SetMaxReadFrameSize(1 << 24)
	c.enc = hpack.NewEncoder(&c.encBuf)
	if _, err := c.bw.WriteString(http2.ClientPreface); err != nil {
		t.Fatalf("h2test: preface: %v", err)
	}
	return c
}

// Flush sends the buffered frames within IOTimeout. Its error is the
// test's to judge: a server that closed the connection makes it fail.
func (c *Conn) Flush() error {
	_ = c.nc.SetWriteDeadline(time.Now().Add(IOTimeout))
	return c.bw.Flush()
}

// MustFlush is Flush that fails the test on an error.
func (c *Conn) MustFlush() {
	c.t.Helper()
	if err := c.Flush(); err != nil {
		c.t.Fatalf("h2test: write: %v", err)
	}
}

// BytesRead is how many bytes of frames have been read so far.
func (c *Conn) BytesRead() int64 { return c.read.Load() }

// Close closes the connection.
func (c *Conn) Close() error { return c.nc.Close() }

// Handshake sends the client's SETTINGS (with settings), waits for the
// server's SETTINGS, acknowledges them and returns them. Frames the server
// sends before its SETTINGS other than a WINDOW_UPDATE fail the test.
func (c *Conn) Handshake(settings ...http2.Setting) map[http2.SettingID]uint32 {
	c.t.Helper()
	if err := c.Framer.WriteSettings(settings...); err != nil {
		c.t.Fatal(err)
	}
	c.MustFlush()
	got := map[http2.SettingID]uint32{}
	for {
		f, err := c.ReadFrame(IOTimeout)
		if err != nil {
			c.t.Fatalf("h2test: waiting for the server's SETTINGS: %v", err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if f.IsAck() {
				continue
			}
			_ = f.ForeachSetting(func(s http2.Setting) error {
				got[s.ID] = s.Val
				return nil
			})
			if err := c.Framer.WriteSettingsAck(); err != nil {
				c.t.Fatal(err)
			}
			c.MustFlush()
			return got
		case *http2.WindowUpdateFrame:
		default:
			c.t.Fatalf("h2test: got %v before the server's SETTINGS", f.Header())
		}
	}
}

// ReadFrame reads the next frame, waiting at most within.
func (c *Conn) ReadFrame(within time.Duration) (http2.Frame, error) {
	_ = c.nc.SetReadDeadline(time.Now().Add(within))
	return c.Framer.ReadFrame()
}

// Ping writes a PING with data and waits, at most within, for its ACK,
// discarding the frames before it: once it is back, the server has read
// every frame sent before the PING. It reports false when the connection
// ended (or within passed) first.
func (c *Conn) Ping(data [8]byte, within time.Duration) bool {
	if err := c.Framer.WritePing(false, data); err != nil {
		c.t.Fatal(err)
	}
	if err := c.Flush(); err != nil {
		return false
	}
	deadline := time.Now().Add(within)
	for {
		f, err := c.ReadFrame(time.Until(deadline))
		if err != nil {
			return false
		}
		if p, ok := f.(*http2.PingFrame); ok && p.IsAck() && p.Data == data {
			return true
		}
	}
}

// NextStreamID returns a new client stream id (odd, increasing).
func (c *Conn) NextStreamID() uint32 {
	id := c.nextID
	c.nextID += 2
	return id
}

// Encode returns fields as a header block, compressed with this
// connection's HPACK encoder (so its dynamic table follows what was sent
// before, as the server's decoder does).
func (c *Conn) Encode(fields ...hpack.HeaderField) []byte {
	c.t.Helper()
	c.encBuf.Reset()
	for _, f := range fields {
		if err := c.enc.WriteField(f); err != nil {
			c.t.Fatal(err)
		}
	}
	return bytes.Clone(c.encBuf.Bytes())
}

// GET returns the fields of an ordinary GET of path on authority with an
// API key, then extra, for Encode.
func GET(authority, path, key string, extra ...hpack.HeaderField) []hpack.HeaderField {
	fields := []hpack.HeaderField{
		{Name: ":method", Value: "GET"},
		{Name: ":scheme", Value: "https"},
		{Name: ":authority", Value: authority},
		{Name: ":path", Value: path},
		{Name: "authorization", Value: "Bearer " + key},
	}
	return append(fields, extra...)
}

// WriteRequest buffers a HEADERS frame with the whole header block and
// END_HEADERS, ending the stream when endStream is set.
func (c *Conn) WriteRequest(streamID uint32, block []byte, endStream bool) {
	c.t.Helper()
	if err := c.Framer.WriteHeaders(http2.HeadersFrameParam{
		StreamID: streamID, BlockFragment: block, EndHeaders: true, EndStream: endStream,
	}); err != nil {
		c.t.Fatal(err)
	}
}

// WriteRaw buffers b as it is, for bytes no Framer call writes: a frame
// cut short, sent with the frames before it in one write.
func (c *Conn) WriteRaw(b []byte) {
	c.t.Helper()
	if _, err := c.bw.Write(b); err != nil {
		c.t.Fatal(err)
	}
}

// Response is what the server sent on one stream.
type Response struct {
	Status int
	Header []hpack.HeaderField
	Body   []byte
	Reset  http2.ErrCode // the RST_STREAM code, when the stream was reset
	// WasReset says whether the stream ended with RST_STREAM.
	WasReset bool
}

// Get sends a GET on a new stream (after Handshake) and reads its
// response whole (see ReadResponse).
func (c *Conn) Get(authority, path, key string) Response {
	c.t.Helper()
	id := c.Send(authority, path, key)
	return c.ReadResponse(id)
}

// Send sends a GET on a new stream (after Handshake) and returns the
// stream's id, for ReadResponse.
func (c *Conn) Send(authority, path, key string) uint32 {
	c.t.Helper()
	id := c.NextStreamID()
	c.WriteRequest(id, c.Encode(GET(authority, path, key)...), true)
	c.MustFlush()
	return id
}

// ReadResponse reads the response of stream id whole, acking DATA with
// WINDOW_UPDATEs so a body of any size arrives, and skipping frames of
// other streams and connection-level frames (PINGs are answered, SETTINGS
// acked). It fails the test on a connection error or GOAWAY.
func (c *Conn) ReadResponse(id uint32) Response {
	c.t.Helper()
	var r Response
	for {
		f, err := c.ReadFrame(IOTimeout)
		if err != nil {
			c.t.Fatalf("h2test: reading the response of stream %d: %v", id, err)
		}
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			if f.StreamID != id {
				continue
			}
			if st := f.PseudoValue("status"); st != "" && r.Status == 0 {
				r.Status, _ = strconv.Atoi(st)
			}
			r.Header = append(r.Header, f.RegularFields()...)
			if f.StreamEnded() {
				return r
			}
		case *http2.DataFrame:
			if n := uint32(len(f.Data())); n > 0 {
				_ = c.Framer.WriteWindowUpdate(0, n)
				_ = c.Framer.WriteWindowUpdate(f.StreamID, n)
				c.MustFlush()
			}
			if f.StreamID != id {
				continue
			}
			r.Body = append(r.Body, f.Data()...)
			if f.StreamEnded() {
				return r
			}
		case *http2.RSTStreamFrame:
			if f.StreamID == id {
				r.Reset, r.WasReset = f.ErrCode, true
				return r
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				_ = c.Framer.WritePing(true, f.Data)
				c.MustFlush()
			}
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = c.Framer.WriteSettingsAck()
				c.MustFlush()
			}
		case *http2.GoAwayFrame:
			c.t.Fatalf("h2test: GOAWAY %v (%q) while waiting for stream %d", f.ErrCode, f.DebugData(), id)
		}
	}
}

// Ending is how a connection ended, as AwaitClose saw it.
type Ending struct {
	// GoAway is the last GOAWAY the server sent, nil when none.
	GoAway *GoAway
	// Frames counts the frames read while waiting, and Resets the
	// RST_STREAMs among them.
	Frames, Resets int
	// Err is the read error that ended the connection: io.EOF, a reset,
	// or a framing error on a connection the server abandoned.
	Err error
	// After is how long the connection took to end, from the call.
	After time.Duration
}

// AwaitClose reads and discards frames until the server ends the
// connection, and fails the test when it is still open after within (the
// bound the test derives from the server's configured limits; never a
// pause, only a deadline).
func (c *Conn) AwaitClose(within time.Duration) Ending {
	c.t.Helper()
	e, ended := c.WaitEnd(within)
	if !ended {
		c.t.Fatalf("h2test: the connection is still open %v after the attack (%d frames read, GOAWAY %v)", within, e.Frames, e.GoAway)
	}
	return e
}

// WaitEnd is AwaitClose that leaves the verdict to the caller: ended is
// false when the connection was still open after within.
func (c *Conn) WaitEnd(within time.Duration) (e Ending, ended bool) {
	start := time.Now()
	_ = c.nc.SetReadDeadline(start.Add(within))
	for {
		f, err := c.Framer.ReadFrame()
		if err != nil {
			e.Err, e.After = err, time.Since(start)
			return e, !errors.Is(err, os.ErrDeadlineExceeded)
		}
		e.Frames++
		switch f := f.(type) {
		case *http2.GoAwayFrame:
			e.GoAway = &GoAway{Code: f.ErrCode, LastStreamID: f.LastStreamID, Debug: string(f.DebugData())}
		case *http2.RSTStreamFrame:
			e.Resets++
		}
	}
}

// AwaitClosedUnread waits, without reading anything, until the server has
// closed the connection: every 5 ms it writes a PRIORITY frame (which asks
// for no reply), and a write fails once the server is gone. Reading would
// let the server's stalled writes finish, which a slow-read test must not.
// It reports how long that took, and false when the connection was still
// open after within.
func (c *Conn) AwaitClosedUnread(within time.Duration) (time.Duration, bool) {
	start := time.Now()
	for time.Since(start) < within {
		err := c.Framer.WritePriority(1, http2.PriorityParam{Weight: 15})
		if err == nil {
			err = c.Flush()
		}
		if Closed(err) {
			return time.Since(start), true
		}
		time.Sleep(5 * time.Millisecond) // polling the connection, not waiting for time to pass
	}
	return time.Since(start), false
}

// Closed reports whether err, from a write or a read, means the peer
// ended the connection (rather than a deadline of ours passing).
func Closed(err error) bool {
	return err != nil && !errors.Is(err, os.ErrDeadlineExceeded)
}

// GoAway is a GOAWAY frame's content.
type GoAway struct {
	Code         http2.ErrCode
	LastStreamID uint32
	Debug        string
}

func (g *GoAway) String() string {
	if g == nil {
		return "none"
	}
	return fmt.Sprintf("%v (last stream %d, %q)", g.Code, g.LastStreamID, g.Debug)
}

// String describes e for a test log.
func (e Ending) String() string {
	return fmt.Sprintf("closed after %v: GOAWAY %v, %d frames (%d RST_STREAM) read while waiting, ended by %v",
		e.After.Round(time.Millisecond), e.GoAway, e.Frames, e.Resets, e.Err)
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n *atomic.Int64
}

func (r *countingReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.n.Add(int64(n))
	return n, err
}
