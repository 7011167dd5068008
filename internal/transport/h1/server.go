// Package h1 serves the common shape of HTTP/1.1 requests on a lean
// per-connection loop and hands every other connection to a net/http
// server.
//
// A cache hit in a gateway is a few microseconds of work; net/http's
// per-request machinery (a background-read goroutine, a cancelable context,
// header sorting, a buffered writer that sends a large body in two
// syscalls) costs more than that. The lane serves the requests a hot API
// sees all day with the same http.Handler, and writes each response's head
// and body with one writev.
//
// With a TLSConfig the lane terminates TLS itself: after the handshake, a
// connection that negotiated HTTP/1.1 (or no protocol) runs on the lane as
// a plain one does, and one that negotiated h2 goes to the Server's H2
// (the HTTP/2 lane, package internal/transport/h2) or, without one,
// untouched to the net/http server, whose HTTP/2 serves it.
//
// With Loops (Linux), the lane's connections, plain or TLS once their
// handshake is done, are served from that many epoll event loops instead
// of a goroutine each, with the same parse, handler call and response
// writer; a request that has to wait moves its connection to a goroutine
// (loop_linux.go).
//
// # Invariants
//
// The lane frames no body. It serves a head only when it is "GET" or
// "HEAD", an origin-form target, "HTTP/1.1", CRLF line ends, at most 64
// fields valid by the checks net/http uses, exactly one valid Host, and
// no Content-Length (not even 0), Transfer-Encoding, Expect or Upgrade.
// Anything else, including every request that has or announces a body,
// is handed to the Fallback net/http server together with every byte
// already read, and net/http serves that connection from then on. So
// every request the lane itself serves has Body http.NoBody and
// ContentLength 0, and the lane never has to decide where a body ends.
//
// What the lane serves, it must answer as net/http would:
//   - the request: the same Method, URL, Host, RequestURI, Close and
//     Header (Host removed, "Pragma: no-cache" implying Cache-Control) as
//     http.ReadRequest reads from the same head
//     (TestParseHeadAgreesWithReadRequest, FuzzParseHead); RemoteAddr the
//     peer's address; r.TLS set on a TLS connection, also on one handed
//     to Fallback after the lane read from it; a context carrying
//     http.ServerContextKey
//     (Fallback) and http.LocalAddrContextKey, canceled when the handler
//     returns or, once the handler asked for Done, when the client goes
//     away;
//   - the response: net/http's rules for status codes, Content-Length,
//     a sniffed Content-Type, Date, Connection: close and HEAD
//     (TestLaneMatchesNetHTTP, TestResponseWriterMatchesNetHTTP), with two
//     deliberate differences: a body without a Content-Length is held
//     whole and sent with its length, never chunked, and the writer is no
//     http.Flusher; one addition: the writer's WriteHeaderFields takes
//     part of the head serialized by the handler, which then vouches for
//     those fields (the chain writes a hit's caching fields that way);
//   - one difference for the handler: the request's Header map (and the
//     values in it) is the connection's, cleared and refilled for its
//     next request, so a handler must not use r.Header after it
//     returns, as it must not use the ResponseWriter (the request itself,
//     its URL and its context stay its own);
//   - the connection: Fallback's ReadHeaderTimeout, ReadTimeout,
//     WriteTimeout, IdleTimeout and MaxHeaderBytes, as net/http applies
//     them (a head over 8 KiB, or over a smaller MaxHeaderBytes but at
//     least 512 bytes, goes to net/http, which then decides).
package h1

import (
	"context"
	"crypto/tls"
	"errors"
	"log"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Server serves the lane's subset of HTTP/1.1 itself and everything else
// through Fallback. The zero value is not usable: Handler and Fallback are
// required. Fallback's ReadHeaderTimeout, ReadTimeout, WriteTimeout,
// IdleTimeout, MaxHeaderBytes and ErrorLog apply to the lane too (zero
// meaning what it means there); its BaseContext and ConnContext apply only
// to the connections it is handed.
type Server struct {
	Handler  http.Handler
	Fallback *http.Server
	// TLSConfig, when not nil, makes Serve terminate TLS on every
	// connection it accepts. Requests then carry the connection's TLS
	// state in r.TLS, on the lane and on Fallback alike: for the
	// connections the lane hands over after reading from them (which
	// net/http cannot see as *tls.Conn), Serve wraps Fallback's Handler
	// and ConnContext, once, to set it. Its NextProtos decide what clients may
	// negotiate: "h2" connections go to Fallback (which must then have
	// the same TLSConfig, so that net/http sets up its HTTP/2), "http/1.1"
	// and none stay on the lane, and any other protocol is closed after
	// the handshake. The handshake is bounded as net/http bounds it: by the
	// shortest of Fallback's ReadHeaderTimeout, ReadTimeout and
	// WriteTimeout that is set.
	TLSConfig *tls.Config
	// H2, when not nil, serves the TLS connections that negotiated "h2"
	// instead of Fallback; Shutdown shuts it down with the lane and
	// waits for its connections. Nil hands them to Fallback.
	H2 ConnServer
	// HTTP1ToFallback hands TLS connections that negotiated HTTP/1.1 (or
	// nothing), handshake done and nothing read, to Fallback instead of
	// serving them on the lane: the lane then only terminates TLS and
	// routes h2 to H2. It has no effect without TLSConfig.
	HTTP1ToFallback bool
	// RequestContext, when not nil, wraps the context of each request the
	// lane builds: the request arrives at Handler with the context it
	// returns, which must keep ctx's values, deadline and cancellation. A
	// handler that would otherwise attach per-request state with
	// r.WithContext (a copy of the whole request) can get it this way
	// without the copy. Requests handed to Fallback do not pass through it.
	RequestContext func(ctx context.Context) context.Context
	// ConnContext, when not nil, wraps the context every request on one
	// lane connection starts from, once when the connection is accepted
	// (as net/http's Server.ConnContext): it must keep ctx's values. A
	// handler can keep there what one request leaves for the next on the
	// same connection, which the lane serves one request at a time. It
	// runs for every connection accepted, but requests served by Fallback
	// or H2 after a hand-off never see the context it returns.
	ConnContext func(ctx context.Context, c net.Conn) context.Context
	// Loops, when positive, serves the lane's connections (with
	// TLSConfig, those that stay on the lane after their handshake) from
	// that many event loops (Linux only) instead of a goroutine each. A
	// loop runs handlers itself: a request leaves it, for a goroutine of
	// its own, as soon as its handler asks for its context's Done or its
	// answer does not fit in the socket at once, so a handler must ask
	// for Done before it waits on anything (see loop_linux.go). Each loop
	// keeps a processor: Serve raises GOMAXPROCS to Loops+1 when it is
	// lower. Zero serves a goroutine per connection.
	Loops int

	inShutdown atomic.Bool
	date       atomic.Pointer[dateLine]

	mu       sync.Mutex // guards the fields below
	listener net.Listener
	handoff  *handoffListener
	conns    map[*conn]struct{}
	wrapped  bool // Fallback's Handler and ConnContext carry the TLS state

	// Event loops (loop_linux.go), started by the first Serve.
	loops         []*loop
	loopStop      [2]int        // a pipe: closing [1] stops the loops
	loopsOpen     atomic.Int32  // loops not closed yet
	loopsDone     chan struct{} // closed by the last loop to close
	loopHandovers atomic.Uint64
}

// LoopHandovers returns how many requests left an event loop to wait
// (Loops), counting the hosted HTTP/2 connections that left one between
// their frames (hosted.Host.Leave): a cached answer served on a loop
// never does, so a count that grows with the hits means the handler asks
// for Done on them.
func (s *Server) LoopHandovers() uint64 { return s.loopHandovers.Load() }

// ConnServer serves whole connections: the HTTP/2 lane's side of H2.
type ConnServer interface {
	// ServeConn serves c, whose TLS handshake is done, until it ends,
	// and closes it.
	ServeConn(c net.Conn)
	// Shutdown ends the served connections gracefully and waits for
	// them, or for ctx.
	Shutdown(ctx context.Context) error
}

// headBufferSize is the largest request head the lane reads; a larger one
// is handed to net/http, whose MaxHeaderBytes then decides.
const headBufferSize = 8 << 10

// ErrServerClosed is returned by Serve after Shutdown.
var ErrServerClosed = http.ErrServerClosed

// Serve accepts connections on l until Shutdown or an accept error, and
// runs Fallback on the connections the lane hands over. It closes l. After
// Shutdown it returns ErrServerClosed.
func (s *Server) Serve(l net.Listener) error {
	if s.Handler == nil || s.Fallback == nil {
		_ = l.Close()
		return errors.New("h1: Server needs a Handler and a Fallback")
	}
	hl := &handoffListener{addr: l.Addr(), conns: make(chan net.Conn), done: make(chan struct{})}
	s.mu.Lock()
	if s.inShutdown.Load() {
		s.mu.Unlock()
		_ = l.Close()
		return ErrServerClosed
	}
	s.listener, s.handoff = l, hl
	if s.conns == nil {
		s.conns = make(map[*conn]struct{})
	}
	if s.TLSConfig != nil && !s.wrapped {
		s.wrapped = true
		carryTLSState(s.Fallback)
	}
	if err := s.startLoops(); err != nil {
		s.mu.Unlock()
		_ = l.Close()
		return err
	}
	s.mu.Unlock()

	fallbackDone := make(chan struct{})
	go func() {
		defer close(fallbackDone)
		if err := s.Fallback.Serve(hl); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
			s.logf("h1: fallback server: %v", err)
		}
	}()
	defer func() {
		_ = hl.Close()
		<-fallbackDone
	}()

	var backoff time.Duration
	for {
		rwc, err := l.Accept()
		if err != nil {
			if s.inShutdown.Load() {
				return ErrServerClosed
			}
			// Out of file descriptors and the like: wait and go on, as
			// net/http does.
			if te, ok := err.(interface{ Temporary() bool }); ok && te.Temporary() {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				s.logf("h1: accept: %v; retrying in %v", err, backoff)
				time.Sleep(backoff)
				continue
			}
			_ = l.Close()
			return err
		}
		backoff = 0
		c := s.newConn(rwc)
		if !s.track(c) {
			_ = rwc.Close()
			continue
		}
		go c.serve()
	}
}

// Shutdown stops the lane gracefully: it closes the listener, closes idle
// connections, lets every request in progress finish (its connection then
// closes), and shuts Fallback and H2 down (the connections H2 serves count
// as the lane's until they end). It returns when all of that is done, or
// with ctx's error when ctx ends first.
func (s *Server) Shutdown(ctx context.Context) error {
	s.inShutdown.Store(true)
	s.mu.Lock()
	l := s.listener
	s.mu.Unlock()
	var lerr error
	if l != nil {
		lerr = l.Close()
		if errors.Is(lerr, net.ErrClosed) {
			lerr = nil
		}
	}
	fallbackErr := make(chan error, 1)
	go func() { fallbackErr <- s.Fallback.Shutdown(ctx) }()
	h2Err := make(chan error, 1)
	go func() {
		if s.H2 == nil {
			h2Err <- nil
			return
		}
		h2Err <- s.H2.Shutdown(ctx)
	}()

	// Poll as net/http does: connections finish their request and leave.
	wait := time.Millisecond
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for !s.closeIdle() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
			wait = min(2*wait, 500*time.Millisecond)
			timer.Reset(wait)
		}
	}
	if done := s.stopLoops(); done != nil {
		select {
		case <-done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return errors.Join(lerr, <-fallbackErr, <-h2Err)
}

// closeIdle closes the connections that wait for a request and reports
// whether no connection is left.
func (s *Server) closeIdle() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		if c.state.CompareAndSwap(stateIdle, stateClosed) {
			c.closeIdle()
		}
	}
	return len(s.conns) == 0
}

// track registers c; it reports false once Shutdown has begun.
func (s *Server) track(c *conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inShutdown.Load() {
		return false
	}
	s.conns[c] = struct{}{}
	return true
}

// untrack forgets c. The last connection to end after Shutdown stops the
// event loops, which Shutdown does itself unless its ctx ended first.
func (s *Server) untrack(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	last := s.inShutdown.Load() && len(s.conns) == 0
	s.mu.Unlock()
	if last {
		_ = s.stopLoops()
	}
}

func (s *Server) logf(format string, args ...any) {
	if s.Fallback != nil && s.Fallback.ErrorLog != nil {
		s.Fallback.ErrorLog.Printf(format, args...)
		return
	}
	log.Printf(format, args...)
}

// headLimit is the largest head the lane reads before handing off.
func (s *Server) headLimit() int {
	if m := s.Fallback.MaxHeaderBytes; m > 0 && m < headBufferSize {
		return max(m, 512)
	}
	return headBufferSize
}

// handshakeTimeout bounds a TLS handshake: the shortest of Fallback's
// positive ReadHeaderTimeout, ReadTimeout and WriteTimeout; 0 means none.
func (s *Server) handshakeTimeout() time.Duration {
	var d time.Duration
	for _, t := range []time.Duration{s.Fallback.ReadHeaderTimeout, s.Fallback.ReadTimeout, s.Fallback.WriteTimeout} {
		if t > 0 && (d == 0 || t < d) {
			d = t
		}
	}
	return d
}

// headerTimeout is how long a request head may take once its first byte
// arrived; idleTimeout is how long a connection may wait for that byte.
// Both follow net/http's rules for the Fallback's settings.
func (s *Server) headerTimeout() time.Duration {
	if d := s.Fallback.ReadHeaderTimeout; d > 0 {
		return d
	}
	return s.Fallback.ReadTimeout
}

func (s *Server) idleTimeout() time.Duration {
	if d := s.Fallback.IdleTimeout; d != 0 {
		return d
	}
	return s.Fallback.ReadTimeout
}

// dateLine is a formatted "Date: ...\r\n" header line and its second.
type dateLine struct {
	unix int64
	line []byte
}

// appendDate appends the Date header line for now, formatting it at most
// once per second per server.
func (s *Server) appendDate(b []byte, now time.Time) []byte {
	sec := now.Unix()
	d := s.date.Load()
	if d == nil || d.unix != sec {
		line := now.UTC().AppendFormat([]byte("Date: "), http.TimeFormat)
		d = &dateLine{unix: sec, line: append(line, "\r\n"...)}
		s.date.Store(d)
	}
	return append(b, d.line...)
}

// handoffListener is the listener Fallback serves: it yields the
// connections the lane hands over.
type handoffListener struct {
	addr      net.Addr
	conns     chan net.Conn
	done      chan struct{}
	closeOnce sync.Once
}

func (l *handoffListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *handoffListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return nil
}

func (l *handoffListener) Addr() net.Addr { return l.addr }

// deliver gives c to Fallback; it reports false when Fallback no longer
// accepts.
func (l *handoffListener) deliver(c net.Conn) bool {
	select {
	case l.conns <- c:
		return true
	case <-l.done:
		return false
	}
}

// replayConn is a handed-over connection: reads return the bytes the lane
// had already read before reading on, and the first read deadline net/http
// sets (the one for the head it is reading) is clamped to headDeadline.
type replayConn struct {
	net.Conn
	pending []byte
	// tlsState is the TLS state of the connection under it; nil without
	// TLS. carryTLSState gives it to the requests net/http reads.
	tlsState *tls.ConnectionState
	// headDeadline bounds the first request's head as the lane counted it;
	// zero means no bound. clamped is set once it has been applied. Only
	// net/http's serving goroutine calls SetReadDeadline.
	headDeadline time.Time
	clamped      bool
}

// SetReadDeadline applies t, except that the first call may not go past
// headDeadline (a zero t, no deadline, is clamped too).
func (c *replayConn) SetReadDeadline(t time.Time) error {
	if !c.clamped {
		c.clamped = true
		if !c.headDeadline.IsZero() && (t.IsZero() || t.After(c.headDeadline)) {
			t = c.headDeadline
		}
	}
	return c.Conn.SetReadDeadline(t)
}

func (c *replayConn) Read(p []byte) (int, error) {
	if len(c.pending) > 0 {
		n := copy(p, c.pending)
		c.pending = c.pending[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// CloseWrite lets net/http half-close the connection after an error
// response, as it does on a plain TCP connection.
func (c *replayConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// tlsStateKey is the context key under which a handed-over TLS
// connection's state reaches Fallback's handler.
type tlsStateKey struct{}

// carryTLSState wraps srv's ConnContext and Handler so that requests on a
// replayConn over TLS carry its state in r.TLS. net/http sets r.TLS only
// for a connection that is a *tls.Conn, and a replayConn, which must
// replay the bytes the lane already read, cannot be one. Requests on any
// other connection pass through unchanged.
func carryTLSState(srv *http.Server) {
	connContext := srv.ConnContext
	srv.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		if connContext != nil {
			ctx = connContext(ctx, c)
		}
		if rc, ok := c.(*replayConn); ok && rc.tlsState != nil {
			ctx = context.WithValue(ctx, tlsStateKey{}, rc.tlsState)
		}
		return ctx
	}
	next := srv.Handler
	if next == nil {
		next = http.DefaultServeMux // what net/http serves for a nil Handler
	}
	srv.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if st, ok := r.Context().Value(tlsStateKey{}).(*tls.ConnectionState); ok && r.TLS == nil {
			r2 := *r // net/http's handlers may not modify r itself
			r2.TLS = st
			r = &r2
		}
		next.ServeHTTP(w, r)
	})
}

var (
	_ net.Listener = (*handoffListener)(nil)
	_ net.Conn     = (*replayConn)(nil)
)
