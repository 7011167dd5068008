package h1

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"trendgate/internal/transport/batchconn"
	"trendgate/internal/transport/hosted"
)

// Connection states, for Shutdown: an idle connection waits for a
// request and may be closed; an active one finishes its request first.
const (
	stateIdle int32 = iota
	stateActive
	stateClosed
	stateHead // on an event loop, waiting for the rest of a head
)

// conn is one client connection on the lane. Its fields are owned by its
// serve goroutine, except state (atomic) and what reqCtx documents.
type conn struct {
	s      *Server
	rwc    net.Conn
	batch  *batchconn.Conn // under rwc with TLS: one write per response; nil without
	br     *bufio.Reader
	state  atomic.Int32
	remote string
	base   context.Context // values every request context carries
	// tlsState is the connection's TLS state once its handshake is done,
	// shared by its requests as net/http shares it; nil without TLS.
	tlsState *tls.ConnectionState

	tmpl http.Request // fields of the request being built; never handed out
	// The request's header fields, its Header map and the map's values:
	// reused for each request, since a handler must not keep the
	// request's Header after it returns (Server.Handler).
	fields []field
	hdr    http.Header
	vals   []string
	res    response  // reused for each request
	head   []byte    // response head buffer, reused
	iov    [3][]byte // backing array for one writev
	limit  int       // largest head the lane reads

	// The deadlines armed on rwc (zero: none). Re-arming a deadline costs
	// a timer update, so one that would move by less than 1/64 of its
	// timeout stays as it is.
	readDeadline, writeDeadline time.Time

	// On the event loops (loop_linux.go), a connection is a bare
	// descriptor outside Go's poller: rwc is nil without TLS, and with TLS
	// batch's Conn reads and writes the descriptor without waiting
	// (fdConn). lmu guards moving it on and off the loops: fd and the
	// socket's net.Conn change only under it, and lp turns nil or non-nil
	// only under it, stored last (a loop that takes the connection stores
	// itself there without it).
	loopable bool // a socket, on a Server with loops
	lmu      sync.Mutex
	lp       atomic.Pointer[loop] // the loop that took the connection last; nil: a goroutine owns it
	fd       int                  // the descriptor, while on a loop or leaving one; -1 otherwise
	guest    hosted.Guest         // H2's connection, once it parked on the loops (set under lmu)
	loopConn
}

// setReadDeadline arms the read deadline at t (zero: none), or leaves the
// one armed when it is later than t by at most slack. It arms t+slack, so
// that a keep-alive connection's next requests, each asking a little later,
// find it still good: one timer update per slack rather than per request.
func (c *conn) setReadDeadline(t time.Time, slack time.Duration) {
	if d := c.readDeadline.Sub(t); !t.IsZero() && d >= 0 && d <= slack || t.IsZero() && c.readDeadline.IsZero() {
		return
	}
	if !t.IsZero() {
		t = t.Add(slack)
	}
	c.readDeadline = t
	_ = c.rwc.SetReadDeadline(t)
}

// setWriteDeadline is setReadDeadline for writes; the armed deadline may
// be earlier than t by less than slack.
func (c *conn) setWriteDeadline(t time.Time, slack time.Duration) {
	if d := t.Sub(c.writeDeadline); !c.writeDeadline.IsZero() && d >= 0 && d < slack {
		return
	}
	c.writeDeadline = t
	_ = c.rwc.SetWriteDeadline(t)
}

func (s *Server) newConn(rwc net.Conn) *conn {
	loopable := s.loopable(rwc)
	var batch *batchconn.Conn
	if s.TLSConfig != nil {
		batch = &batchconn.Conn{Conn: rwc}
		rwc = tls.Server(batch, s.TLSConfig)
	}
	c := &conn{s: s, rwc: rwc, batch: batch, remote: rwc.RemoteAddr().String(), limit: s.headLimit(), fd: -1, loopable: loopable}
	c.br = bufio.NewReaderSize(rwc, c.limit)
	if loopable {
		c.br = bufio.NewReaderSize(connReader{c}, c.limit)
	}
	c.base = context.WithValue(context.WithValue(context.Background(),
		http.ServerContextKey, s.Fallback), http.LocalAddrContextKey, rwc.LocalAddr())
	if s.ConnContext != nil {
		c.base = s.ConnContext(c.base, rwc)
	}
	c.res.c = c
	c.res.header = make(http.Header, 16)
	c.hdr = make(http.Header, 8)
	return c
}

// socket returns the net.Conn of c's socket: rwc without TLS, the one
// under TLS with it. nil while c is on a loop without TLS.
func (c *conn) socket() net.Conn {
	if c.batch != nil {
		return c.batch.Conn
	}
	return c.rwc
}

// setSocket makes sock c's socket (c.lmu held, or c not shared yet).
func (c *conn) setSocket(sock net.Conn) {
	if c.batch != nil {
		c.batch.Conn = sock
		return
	}
	c.rwc = sock
}

// How a connection's goroutine let go of it.
type outcome int

const (
	ended     outcome = iota // the connection is over: close it
	handedOff                // Fallback, or H2, took it
	onLoop                   // an event loop owns it now
)

// serve reads and answers requests until the connection ends or leaves
// the lane.
func (c *conn) serve() {
	out := ended
	defer func() { c.end(recover(), out) }()
	if tc, ok := c.rwc.(*tls.Conn); ok {
		switch c.handshake(tc) {
		case handshakeFailed:
			return
		case handshakeH2:
			if c.s.H2 != nil {
				// Shutdown waits for it as for a request in progress;
				// H2 sends its GOAWAY.
				if !c.state.CompareAndSwap(stateIdle, stateActive) {
					return // closed by Shutdown
				}
				c.serveH2(tc)
				return
			}
			if c.handOffTLS(tc) {
				out = handedOff
			}
			return
		case handshakeLane:
			if c.s.HTTP1ToFallback {
				if c.handOffTLS(tc) {
					out = handedOff
				}
				return
			}
		}
	}
	out = c.serveRequests()
}

// end is the last thing a connection's goroutine does: it logs a panic
// (net/http's way) and, unless someone else took the connection, forgets
// and closes it.
func (c *conn) end(p any, out outcome) {
	if p != nil && p != http.ErrAbortHandler {
		buf := make([]byte, 64<<10)
		buf = buf[:runtime.Stack(buf, false)]
		c.s.logf("h1: panic serving %s: %v\n%s", c.remote, p, buf)
		out = ended
	}
	switch out {
	case ended:
		c.s.untrack(c)
		c.lmu.Lock()
		if c.rwc != nil {
			_ = c.rwc.Close()
		}
		c.lmu.Unlock()
	case handedOff:
		c.s.untrack(c)
	}
}

// serveRequests reads and answers requests on the goroutine it runs on
// until the connection ends, leaves the lane, or, waiting for its next
// request, moves to an event loop.
func (c *conn) serveRequests() outcome {
	for {
		if c.br.Buffered() == 0 {
			if c.loopable && !c.s.inShutdown.Load() {
				if out, moved := c.enterLoop(); moved {
					return out
				}
			}
			// No yield before this read: one (runtime.Gosched) raised
			// closed-loop throughput but doubled p99 at saturation and
			// saved no CPU at the arrival rates clients send
			// (docs/performance.md, Open loop).
			if d := c.s.idleTimeout(); d > 0 {
				// A deadline up to d/64 later than asked is as good.
				c.setReadDeadline(time.Now().Add(d), d/64)
			} else {
				// No idle limit: drop a header deadline the last head armed.
				c.setReadDeadline(time.Time{}, 0)
			}
			if _, err := c.br.Peek(1); err != nil {
				return ended
			}
		}
		if !c.state.CompareAndSwap(stateIdle, stateActive) {
			return ended // closed by Shutdown
		}
		now := time.Now()
		h, v := c.readHead(now)
		switch v {
		case handOff:
			if c.handOff(now) {
				return handedOff
			}
			return ended
		case needMore: // the head never completed: timeout, EOF or reset
			return ended
		}
		if d := c.s.Fallback.WriteTimeout; d > 0 {
			// Up to d/64 earlier than asked, never later.
			c.setWriteDeadline(now.Add(d), d/64)
		}
		if !c.serveRequest(&h, now) || c.s.inShutdown.Load() {
			return ended
		}
		c.state.Store(stateIdle)
		if c.s.inShutdown.Load() {
			return ended
		}
	}
}

// Outcomes of handshake.
const (
	handshakeLane   = iota // HTTP/1.1 or no protocol: the lane serves it
	handshakeH2            // h2: H2, or Fallback's HTTP/2, serves it
	handshakeFailed        // failed, timed out, or another protocol: close
)

// handshake runs the TLS handshake within the handshake timeout and says
// who serves the connection. A failure is logged as net/http logs it.
func (c *conn) handshake(tc *tls.Conn) int {
	if d := c.s.handshakeTimeout(); d > 0 {
		dl := time.Now().Add(d)
		_ = tc.SetReadDeadline(dl)
		_ = tc.SetWriteDeadline(dl)
	}
	if err := tc.HandshakeContext(context.Background()); err != nil {
		// As net/http: a client speaking plain HTTP gets a plain 400.
		var re tls.RecordHeaderError
		if errors.As(err, &re) && re.Conn != nil && looksLikeHTTP(re.RecordHeader) {
			_, _ = io.WriteString(re.Conn, "HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n")
			return handshakeFailed
		}
		c.s.logf("http: TLS handshake error from %s: %v", c.remote, err)
		return handshakeFailed
	}
	_ = tc.SetDeadline(time.Time{})
	st := tc.ConnectionState()
	c.tlsState = &st
	switch st.NegotiatedProtocol {
	case "", "http/1.1":
		return handshakeLane
	case "h2":
		return handshakeH2
	}
	return handshakeFailed
}

// looksLikeHTTP reports whether a TLS record header is the start of a
// plain HTTP request.
func looksLikeHTTP(hdr [5]byte) bool {
	switch string(hdr[:]) {
	case "GET /", "HEAD ", "POST ", "PUT /", "OPTIO":
		return true
	}
	return false
}

// handOffTLS gives a connection, handshake done and nothing read, to
// Fallback as the *tls.Conn it is, so net/http serves it with the
// protocol it negotiated (HTTP/2 for h2). It reports whether Fallback took
// it.
func (c *conn) handOffTLS(tc *tls.Conn) bool {
	c.s.mu.Lock()
	hl := c.s.handoff
	c.s.mu.Unlock()
	return hl != nil && hl.deliver(tc)
}

// readHead reads one request head whose first byte arrived at start. On
// lane it has consumed the head from the reader; on handOff nothing is
// consumed; needMore means the head did not complete. The header timeout
// is armed only when the head did not arrive whole, which is rare.
func (c *conn) readHead(start time.Time) (head, verdict) {
	armed := false
	for {
		buf, _ := c.br.Peek(c.br.Buffered())
		h, n, v := parseHead(buf, c.fields)
		switch v {
		case lane:
			_, _ = c.br.Discard(n)
			return h, lane
		case handOff:
			return head{}, handOff
		}
		if c.br.Buffered() >= c.limit {
			return head{}, handOff // too large for the lane
		}
		if d := c.s.headerTimeout(); d > 0 && !armed {
			c.setReadDeadline(start.Add(d), 0)
			armed = true
		}
		if _, err := c.br.Peek(c.br.Buffered() + 1); err != nil {
			if errors.Is(err, bufio.ErrBufferFull) {
				return head{}, handOff
			}
			return head{}, needMore
		}
	}
}

// handOff gives the connection, with every byte read so far, to Fallback.
// The head whose first byte arrived at start keeps its deadline: net/http's
// own header timeout starts when it begins reading, so without the clamp a
// slow head could take the lane's timeout and then net/http's. It reports
// whether Fallback took it.
func (c *conn) handOff(start time.Time) bool {
	pending, _ := c.br.Peek(c.br.Buffered())
	rc := &replayConn{Conn: c.rwc, pending: bytes.Clone(pending), tlsState: c.tlsState}
	if d := c.s.headerTimeout(); d > 0 {
		rc.headDeadline = start.Add(d)
	}
	_ = c.rwc.SetDeadline(time.Time{}) // net/http sets its own
	c.readDeadline, c.writeDeadline = time.Time{}, time.Time{}
	c.s.mu.Lock()
	hl := c.s.handoff
	c.s.mu.Unlock()
	// A connection handed over while shutting down is closed unserved:
	// Fallback has stopped accepting.
	return hl != nil && hl.deliver(rc)
}

// serveRequest runs the handler for h and writes its response. It reports
// whether the connection may serve another request.
func (c *conn) serveRequest(h *head, now time.Time) (keepAlive bool) {
	c.fields = h.fields[:0] // the buffer, grown if it had to, for the next head
	hdr := c.hdr
	clear(hdr)
	if cap(c.vals) < len(h.fields) {
		c.vals = make([]string, len(h.fields))
	}
	vals := c.vals[:len(h.fields)]
	for i, f := range h.fields {
		vals[i] = f.value
		if vv, ok := hdr[f.name]; ok {
			hdr[f.name] = append(vv, f.value)
		} else {
			hdr[f.name] = vals[i : i+1 : i+1]
		}
	}
	ctx := &reqCtx{Context: c.base, c: c, url: h.url}
	t := &c.tmpl
	t.Method, t.URL, t.Header, t.Host, t.RequestURI = h.method, &ctx.url, hdr, h.host, h.target
	t.Proto, t.ProtoMajor, t.ProtoMinor = "HTTP/1.1", 1, 1
	t.Body, t.Close, t.RemoteAddr = http.NoBody, h.close, c.remote
	t.TLS = c.tlsState

	var rc context.Context = ctx
	if c.s.RequestContext != nil {
		rc = c.s.RequestContext(ctx)
	}
	r := t.WithContext(rc)
	w := &c.res
	w.reset(r.Method == http.MethodHead, h.close, now)
	defer ctx.finish()
	c.s.Handler.ServeHTTP(w, r)
	ctx.finish() // before writing: a watch on the connection must stop
	return w.finish()
}

// aLongTimeAgo is a deadline in the past: it ends a pending read at once.
var aLongTimeAgo = time.Unix(1, 0)

// reqCtx is the context of one request on the lane. It carries the
// connection's values, is never done before the handler returns unless the
// client goes away, and is canceled when the handler returns.
//
// Noticing that the client went away takes a read on the connection while
// the handler runs. That read starts only when someone first asks for
// Done, so a handler that never waits (a cache hit) pays nothing for it,
// and one that waits (a cache miss) gets net/http's behaviour.
type reqCtx struct {
	context.Context // values only; never done
	c               *conn
	url             url.URL // the request's URL, allocated with it

	mu        sync.Mutex    // guards the fields below
	done      chan struct{} // made on the first Done
	err       error
	finished  bool
	watchDone chan struct{} // closed when the watching read ended; nil if none
}

func (x *reqCtx) Deadline() (time.Time, bool) { return time.Time{}, false }

func (x *reqCtx) Done() <-chan struct{} {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.done == nil {
		x.done = make(chan struct{})
		if x.err != nil {
			close(x.done)
		} else {
			x.watch()
		}
	}
	return x.done
}

func (x *reqCtx) Err() error {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.err
}

// cancel ends the context with err unless it already ended. x.mu must be
// held.
func (x *reqCtx) cancel(err error) {
	if x.err == nil {
		x.err = err
		if x.done != nil {
			close(x.done)
		}
	}
}

// watch starts the read that notices a client going away. x.mu must be
// held. Bytes already buffered mean the client sent its next request: it
// is there, and nothing needs watching.
func (x *reqCtx) watch() {
	c := x.c
	if x.finished {
		return
	}
	if c.lp.Load() != nil {
		// A request that waits must not hold up the loop's other
		// connections: this one leaves it (and another goroutine takes
		// the loop on), to be watched and written in Go's poller.
		c.leaveLoop()
	}
	if c.br.Buffered() > 0 {
		return
	}
	done := make(chan struct{})
	x.watchDone = done
	c.setReadDeadline(time.Time{}, 0) // the head's deadline no longer applies
	go func() {
		defer close(done)
		// Peek keeps whatever arrives (a pipelined request) for the
		// connection's next read.
		if _, err := c.br.Peek(1); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			x.mu.Lock()
			x.cancel(context.Canceled)
			x.mu.Unlock()
		}
	}()
}

// finish cancels the context and stops the watching read, if any. The
// connection's reader is free again when it returns. It is idempotent.
func (x *reqCtx) finish() {
	x.mu.Lock()
	x.finished = true
	x.cancel(context.Canceled)
	watchDone := x.watchDone
	x.watchDone = nil
	x.mu.Unlock()
	if watchDone != nil {
		x.c.setReadDeadline(aLongTimeAgo, 0)
		<-watchDone
		x.c.setReadDeadline(time.Time{}, 0)
	}
}

var _ context.Context = (*reqCtx)(nil)
