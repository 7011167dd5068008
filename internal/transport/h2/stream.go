package h2

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"trendgate/internal/transport/target"
)

// How a stream's handler runs (streamCtx.mode).
const (
	modeInline   int32 = iota + 1 // on the reading goroutine
	modeDetached                  // reading moved on; the handler keeps its goroutine
	modeReturned                  // the inline handler returned before any move
)

// errStreamReset is what a handler's writes return once its stream was
// reset (by either side) or its connection ended.
var errStreamReset = errors.New("h2: stream reset")

// stream is one request and its response. Fields marked "c.mu" are
// guarded by the connection's mu; the handler's goroutine owns w.
type stream struct {
	c           *conn
	id          uint32
	declaredLen int64 // the request's content-length; -1 when none (reader only)
	received    int64 // request DATA bytes (reader only)
	recvWindow  int64 // reader only

	sendWindow  int64     // c.mu
	pending     []byte    // c.mu: body bytes waiting for credit
	pendingEnd  bool      // c.mu: END_STREAM goes after pending
	blocked     bool      // c.mu: in c.blocked
	stallSince  time.Time // c.mu: when it joined c.blocked
	localEnded  bool      // c.mu: END_STREAM (or RST_STREAM) sent
	remoteEnded bool      // c.mu: END_STREAM received
	closed      bool      // c.mu: out of c.streams; output is dropped
	refs        int       // c.mu: 2 while in c.streams and its handler runs; 0: back to the pool

	wake chan struct{} // cap 1: credit arrived or the stream closed
	ctx  *streamCtx    // new for each request: a context may outlive its stream
	w    response

	// The request's Header map and the values in it, reused by the
	// stream's next request: a handler must not use r.Header after it
	// returns (package doc).
	hdr  http.Header
	vals []string
}

// streamPool holds streams between requests, with their buffers and the
// request and response header maps.
var streamPool = sync.Pool{New: func() any { return &stream{wake: make(chan struct{}, 1)} }}

// maxPooledFields bounds the request header a pooled stream keeps for
// reuse: a request with more fields leaves its map and values to the
// collector.
const maxPooledFields = 64

// newStream returns a stream for id from the pool.
func (c *conn) newStream(id uint32) *stream {
	st := streamPool.Get().(*stream)
	st.c, st.id, st.declaredLen, st.recvWindow = c, id, -1, streamRecvWindow
	return st
}

// unrefLocked drops one of st's two references (its place in c.streams,
// its handler); the last one returns it to the pool.
func (c *conn) unrefLocked(st *stream) {
	st.refs--
	if st.refs > 0 {
		return
	}
	select {
	case <-st.wake:
	default:
	}
	pending, held, header := st.pending[:0], st.w.held[:0], st.w.header
	if cap(pending) > 64<<10 {
		pending = nil
	}
	if cap(held) > 16<<10 {
		held = nil
	}
	clear(header)
	hdr, vals := st.hdr, st.vals
	clear(vals) // the values would keep their strings alive
	if len(hdr) > maxPooledFields || cap(vals) > maxPooledFields {
		hdr, vals = nil, nil // an outsized request's maps are not kept
	}
	clear(hdr)
	*st = stream{wake: st.wake, pending: pending, hdr: hdr, vals: vals[:0]}
	st.w.held, st.w.header = held, header
	streamPool.Put(st)
}

func (st *stream) wakeUp() {
	select {
	case st.wake <- struct{}{}:
	default:
	}
}

// detach moves the connection's reading to a new goroutine when the
// stream's handler runs inline and is about to wait. It is a no-op
// otherwise, and safe from any goroutine while the handler runs.
func (st *stream) detach() { st.ctx.detach() }

// headerBlock is a header block being received (reader only): its
// fields are decoded as its fragments arrive.
type headerBlock struct {
	active    bool
	start     time.Time
	due       bool // c.hbDue is set for this block
	id        uint32
	st        *stream // the stream it belongs to, for trailers; nil for a new one
	endStream bool
	ignore    bool          // decode only (a stream refused, or going away)
	refuse    bool          // answer REFUSED_STREAM
	streamErr http2.ErrCode // non-zero: reset the stream with it
	frames    int
	encoded   int
	size      uint32 // decoded size as SETTINGS_MAX_HEADER_LIST_SIZE counts it
	tooLarge  bool
	regular   bool // a regular field was seen: no pseudo-header may follow
	trailers  bool

	method, scheme, path, authority string
	fields                          []hpack.HeaderField
}

// emitField receives each decoded field of the block being read.
func (c *conn) emitField(f hpack.HeaderField) {
	hb := &c.hb
	if hb.ignore || hb.tooLarge {
		return
	}
	hb.size += f.Size()
	if hb.size > c.maxHdrList {
		hb.tooLarge = true
		return
	}
	if hb.streamErr != 0 {
		return
	}
	if !httpguts.ValidHeaderFieldValue(f.Value) {
		hb.streamErr = http2.ErrCodeProtocol
		return
	}
	if strings.HasPrefix(f.Name, ":") {
		if hb.regular || hb.trailers {
			hb.streamErr = http2.ErrCodeProtocol
			return
		}
		var dst *string
		switch f.Name {
		case ":method":
			dst = &hb.method
		case ":scheme":
			dst = &hb.scheme
		case ":path":
			dst = &hb.path
		case ":authority":
			dst = &hb.authority
		default:
			hb.streamErr = http2.ErrCodeProtocol
			return
		}
		if *dst != "" || f.Value == "" {
			hb.streamErr = http2.ErrCodeProtocol // repeated or empty
			return
		}
		*dst = f.Value
		return
	}
	hb.regular = true
	if !validFieldName(f.Name) {
		hb.streamErr = http2.ErrCodeProtocol
		return
	}
	switch f.Name {
	case "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade":
		hb.streamErr = http2.ErrCodeProtocol // connection-specific (RFC 9113 §8.2.2)
		return
	case "te":
		if f.Value != "trailers" {
			hb.streamErr = http2.ErrCodeProtocol
			return
		}
	}
	hb.fields = append(hb.fields, f)
}

// validFieldName reports whether name is a valid field name in lower
// case, as HTTP/2 requires.
func validFieldName(name string) bool {
	if !httpguts.ValidHeaderFieldName(name) {
		return false
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; 'A' <= c && c <= 'Z' {
			return false
		}
	}
	return true
}

func (c *conn) processHeaders(f *http2.HeadersFrame) error {
	id := f.StreamID
	if id%2 == 0 {
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	hb := &c.hb
	fields := hb.fields[:0]
	*hb = headerBlock{active: true, start: time.Now(), id: id, endStream: f.StreamEnded(), frames: 1, fields: fields}
	c.mu.Lock()
	if d := c.s.headerTimeout(); d > 0 && !f.HeadersEnded() {
		// CONTINUATION frames follow: the block must end in time.
		c.hbDue, hb.due = hb.start.Add(d), true
	}
	st := c.streams[id]
	switch {
	case st != nil:
		// Trailers: they must end the stream, after its request.
		hb.st, hb.trailers = st, true
		if st.remoteEnded {
			hb.streamErr = http2.ErrCodeStreamClosed
		} else if !f.StreamEnded() {
			hb.streamErr = http2.ErrCodeProtocol
		}
	case id <= c.maxClientStream:
		closed := c.recentlyClosed(id)
		c.mu.Unlock()
		if closed {
			return http2.ConnectionError(http2.ErrCodeStreamClosed)
		}
		return http2.ConnectionError(http2.ErrCodeProtocol) // ids must increase
	default:
		c.maxClientStream = id
		if c.goingAway {
			hb.ignore = true
		} else if uint32(len(c.streams)) >= c.s.maxStreams() || c.running >= int(c.s.maxStreams()) {
			// Over the advertised limit, or (handlers of reset streams
			// still running) over the work it stands for.
			hb.ignore, hb.refuse = true, true
		} else {
			c.opening = true // until endHeaders: a GOAWAY has promised it
		}
	}
	c.mu.Unlock()
	if f.HasPriority() && f.Priority.StreamDep == id {
		hb.streamErr = http2.ErrCodeProtocol
	}
	return c.headerFragment(f.HeaderBlockFragment(), f.HeadersEnded())
}

func (c *conn) processContinuation(f *http2.ContinuationFrame) error {
	hb := &c.hb
	if !hb.active || f.StreamID != hb.id {
		// The Framer enforces CONTINUATION order; this cannot happen.
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	hb.frames++
	if hb.frames > maxContinuations {
		return errCalm
	}
	return c.headerFragment(f.HeaderBlockFragment(), f.HeadersEnded())
}

// headerFragment decodes one fragment of the block and, at its end,
// acts on the block.
func (c *conn) headerFragment(frag []byte, end bool) error {
	hb := &c.hb
	hb.encoded += len(frag)
	if hb.encoded > int(c.maxHdrList)+defaultFrameSize {
		return errCalm
	}
	if _, err := c.hdec.Write(frag); err != nil {
		return http2.ConnectionError(http2.ErrCodeCompression)
	}
	if !end {
		return nil
	}
	if err := c.hdec.Close(); err != nil {
		return http2.ConnectionError(http2.ErrCodeCompression)
	}
	hb.active = false
	if hb.due {
		c.mu.Lock()
		c.hbDue, hb.due = time.Time{}, false
		c.mu.Unlock()
	}
	return c.endHeaders()
}

// endHeaders acts on a complete header block.
func (c *conn) endHeaders() error {
	hb := &c.hb
	if hb.refuse {
		c.mu.Lock()
		_ = c.wfr.WriteRSTStream(hb.id, http2.ErrCodeRefusedStream)
		c.mu.Unlock()
		return c.chargeReset()
	}
	if hb.ignore {
		return nil
	}
	if hb.trailers {
		if hb.streamErr != 0 {
			return http2.StreamError{StreamID: hb.id, Code: hb.streamErr}
		}
		st := hb.st
		if st.declaredLen >= 0 && st.received != st.declaredLen {
			return http2.StreamError{StreamID: hb.id, Code: http2.ErrCodeProtocol}
		}
		c.mu.Lock()
		c.remoteEndLocked(st)
		c.mu.Unlock()
		return nil
	}
	if hb.streamErr != 0 {
		c.noteClosed(hb.id)
		return http2.StreamError{StreamID: hb.id, Code: hb.streamErr}
	}
	if hb.method == "" || (hb.method != http.MethodConnect && (hb.scheme == "" || hb.path == "")) ||
		(hb.method == http.MethodConnect && (hb.scheme != "" || hb.path != "" || hb.authority == "")) {
		c.noteClosed(hb.id)
		return http2.StreamError{StreamID: hb.id, Code: http2.ErrCodeProtocol}
	}
	st := c.newStream(hb.id)
	r, err := c.newRequest(st)
	if err != nil {
		c.noteClosed(hb.id)
		return err
	}
	ctx := st.ctx // st may be back in the pool when the handler returns
	c.mu.Lock()
	st.sendWindow = c.peerInitialWindow
	st.remoteEnded = hb.endStream
	st.refs = 2
	c.streams[st.id] = st
	c.running++
	c.opening = false
	c.mu.Unlock()
	if hb.tooLarge {
		// As net/http: 431, without calling the handler.
		ctx.mode.Store(modeReturned)
		c.handlers.Add(1)
		c.runHandler(st, r, http.HandlerFunc(headersTooLarge))
		return nil
	}
	ctx.mode.Store(modeInline)
	c.handlers.Add(1)
	c.runHandler(st, r, c.s.Handler)
	if !ctx.mode.CompareAndSwap(modeInline, modeReturned) {
		return errDetached // another goroutine reads now
	}
	return nil
}

func headersTooLarge(w http.ResponseWriter, _ *http.Request) {
	w.WriteHeader(http.StatusRequestHeaderFieldsTooLarge)
	_, _ = w.Write([]byte("<h1>HTTP Error 431</h1><p>Request Header Field(s) Too Large</p>"))
}

// noteClosed records id as a stream that was opened and is closed now
// (refused in its header block).
func (c *conn) noteClosed(id uint32) {
	c.mu.Lock()
	c.opening = false
	c.closedIDs[c.closedNext] = id
	c.closedNext = (c.closedNext + 1) % len(c.closedIDs)
	c.mu.Unlock()
}

// newRequest builds the request of the block just read for st.
func (c *conn) newRequest(st *stream) (*http.Request, error) {
	hb := &c.hb
	hdr := st.hdr
	if hdr == nil {
		hdr = make(http.Header, 8)
		st.hdr = hdr
	}
	if cap(st.vals) < len(hb.fields) {
		st.vals = make([]string, 0, len(hb.fields))
	}
	vals := st.vals[:len(hb.fields)]
	st.vals = vals
	var cookies []string
	for i, f := range hb.fields {
		if f.Name == "cookie" {
			cookies = append(cookies, f.Value)
			continue
		}
		vals[i] = f.Value
		k := c.canon.get(f.Name)
		if vv, ok := hdr[k]; ok {
			hdr[k] = append(vv, f.Value)
		} else {
			hdr[k] = vals[i : i+1 : i+1]
		}
	}
	if len(cookies) > 0 {
		// RFC 9113 §8.2.3: split cookie fields are joined for HTTP/1.1
		// semantics.
		hdr["Cookie"] = []string{strings.Join(cookies, "; ")}
	}
	ctx := &streamCtx{Context: c.base, c: c}
	var t http.Request
	t.Method = hb.method
	t.Proto, t.ProtoMajor, t.ProtoMinor = "HTTP/2.0", 2, 0
	t.Header = hdr
	t.Host = hb.authority
	if t.Host == "" {
		t.Host = hdr.Get("Host")
	}
	t.RemoteAddr = c.remote
	t.TLS = c.tlsState
	if hb.method == http.MethodConnect {
		t.URL = &url.URL{Host: hb.authority}
		t.RequestURI = hb.authority
	} else {
		if err := target.Parse(&ctx.url, hb.path); err != nil {
			return nil, http2.StreamError{StreamID: st.id, Code: http2.ErrCodeProtocol}
		}
		t.URL, t.RequestURI = &ctx.url, hb.path
	}
	if hb.endStream {
		t.Body = http.NoBody
	} else {
		// A body is coming, which the lane does not read: the handler
		// sees its length (net/http's rules) and a Body that fails.
		t.Body = unreadBody{}
		t.ContentLength = -1
		if vv := hdr["Content-Length"]; len(vv) > 0 {
			n, err := strconv.ParseUint(vv[0], 10, 63)
			if err != nil {
				return nil, http2.StreamError{StreamID: st.id, Code: http2.ErrCodeProtocol}
			}
			for _, v := range vv[1:] {
				if v != vv[0] {
					return nil, http2.StreamError{StreamID: st.id, Code: http2.ErrCodeProtocol}
				}
			}
			t.ContentLength = int64(n)
			st.declaredLen = int64(n)
		}
	}
	st.ctx = ctx
	if c.s.RequestContext != nil {
		return t.WithContext(c.s.RequestContext(st.ctx)), nil
	}
	return t.WithContext(st.ctx), nil
}

// unreadBody is the Body of a request whose body the lane does not read.
type unreadBody struct{}

var errBodyNotRead = errors.New("h2: request bodies are not read by this server")

func (unreadBody) Read([]byte) (int, error) { return 0, errBodyNotRead }
func (unreadBody) Close() error             { return nil }

// runHandler calls h for st's request on the calling goroutine and
// completes the response. A panic is logged as net/http logs it and
// resets the stream.
func (c *conn) runHandler(st *stream, r *http.Request, h http.Handler) {
	w := &st.w
	w.init(st, r.Method == http.MethodHead, time.Now())
	ctx := st.ctx
	defer func() {
		p := recover()
		if p != nil {
			if p != http.ErrAbortHandler {
				buf := make([]byte, 64<<10)
				buf = buf[:runtime.Stack(buf, false)]
				c.s.logf("h2: panic serving %s: %v\n%s", c.remote, p, buf)
			}
			c.resetStream(st.id, http2.ErrCodeInternal)
		}
		ctx.cancel(context.Canceled)
		if p == nil {
			w.finish()
		}
		off := ctx.mode.Load() != modeInline
		c.mu.Lock()
		c.running--
		if off {
			c.lingering++ // until its flush: the connection does not park before
		}
		c.maybeIdleLocked()
		c.unrefLocked(st)
		c.mu.Unlock()
		if off {
			// Not on the reader: nobody else flushes this response.
			_ = c.flush()
			c.mu.Lock()
			c.lingering--
			c.mu.Unlock()
		}
		c.handlers.Done()
	}()
	h.ServeHTTP(w, r)
}

// streamCtx is a request's context: the connection's values, done when
// the stream is reset, the connection ends or the handler returns.
// Asking for Done means the handler may wait: the connection's reading
// then moves off the handler's goroutine (stream.detach).
type streamCtx struct {
	context.Context // values only; never done
	c               *conn
	mode            atomic.Int32 // how the handler runs: modeInline, ...
	url             url.URL      // the request's URL, allocated with it

	mu   sync.Mutex // guards done and err
	done chan struct{}
	err  error
}

func (x *streamCtx) Deadline() (time.Time, bool) { return time.Time{}, false }

func (x *streamCtx) Done() <-chan struct{} {
	x.mu.Lock()
	if x.done == nil {
		x.done = make(chan struct{})
		if x.err != nil {
			close(x.done)
		}
	}
	d := x.done
	x.mu.Unlock()
	x.detach()
	return d
}

// detach moves the connection's reading to a new goroutine if the
// handler runs on the reading one: it is about to wait.
func (x *streamCtx) detach() {
	if x.mode.CompareAndSwap(modeInline, modeDetached) {
		if x.c.host != nil {
			x.c.host.Leave() // the handler waits: not on a loop
		}
		go x.c.readLoop()
	}
}

func (x *streamCtx) Err() error {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.err
}

func (x *streamCtx) cancel(err error) {
	x.mu.Lock()
	if x.err == nil {
		x.err = err
		if x.done != nil {
			close(x.done)
		}
	}
	x.mu.Unlock()
}

var _ context.Context = (*streamCtx)(nil)
