package h2

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"trendgate/internal/transport/batchconn"
	"trendgate/internal/transport/hosted"
)

// Protocol constants (RFC 9113).
const (
	clientPreface     = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
	frameHeaderLen    = 9
	defaultWindow     = 65535
	maxWindow         = 1<<31 - 1
	defaultFrameSize  = 16384
	defaultTableSize  = 4096
	readFrameSize     = defaultFrameSize // our SETTINGS_MAX_FRAME_SIZE (the default)
	connRecvWindow    = defaultWindow    // we never raise the connection's receive window
	streamRecvWindow  = defaultWindow    // nor a stream's
	windowUpdateAfter = defaultWindow / 2
	// readBufSize is the reading buffer of a connection: a whole frame of
	// readFrameSize with its header (readFrame waits for whole frames)
	// and the start of the next, 18 KiB, an allocation size class of its
	// own. Two frames' worth (32,777 bytes) took the 40 KiB class.
	readBufSize = 18 << 10
)

// Limits that bound what one client can make a connection do.
const (
	// maxContinuations bounds the CONTINUATION frames of one header
	// block (CVE-2024-27316): a block is at most
	// SETTINGS_MAX_HEADER_LIST_SIZE of encoded bytes as well, checked
	// as the fragments arrive, so nothing beyond one fragment is ever
	// buffered.
	maxContinuations = 64
	// resetBurst and resetRate bound the streams a client may reset or
	// have refused (CVE-2023-44487, rapid reset): a token bucket of
	// resetBurst tokens refilled at resetRate a second; a client past it
	// gets GOAWAY ENHANCE_YOUR_CALM.
	resetBurst = 200
	resetRate  = 50
	// maxPending is how much of a response body may wait for
	// flow-control credit (copied) before the handler's Write blocks.
	maxPending = 64 << 10
	// maxConnPending bounds the copies waiting for credit on all the
	// streams of a connection together: past it, handlers' writes wait
	// (holding only their own, usually cached, bytes), so a client that
	// opens every stream it may with a zero window (CVE-2019-9517) does
	// not make the connection hold maxPending per stream.
	maxConnPending = 256 << 10
	// maxOut is how much output may wait for the connection before the
	// reading goroutine stops reading and writes it (backpressure
	// against floods of PING or SETTINGS from a client that does not
	// read).
	maxOut = 256 << 10
	// flushAt is how much output the reader collects before it writes,
	// even while more requests are waiting to be read.
	flushAt = 64 << 10
	// lingerTimeout is how long a connection ended with GOAWAY keeps
	// reading (and discarding) before it closes, so that the client
	// sees the GOAWAY rather than a reset.
	lingerTimeout = time.Second
)

// aLongTimeAgo is a deadline in the past: it ends a pending read at once.
var aLongTimeAgo = time.Unix(1, 0)

// Connection-wide error for a client that breaks a limit.
var errCalm = http2.ConnectionError(http2.ErrCodeEnhanceYourCalm)

// errDetached unwinds a reading goroutine whose reading moved to another
// goroutine while it ran a handler.
var errDetached = errors.New("h2: reading moved to another goroutine")

// conn is one HTTP/2 connection. One goroutine at a time reads frames
// (the reader); handlers run on it or, once they wait, on their own. The
// fields under "reader only" belong to the reader; mu guards the rest.
type conn struct {
	s        *Server
	nc       net.Conn
	host     hosted.Host     // the loops it parks on between frames; nil: it never does
	batch    *batchconn.Conn // under nc with TLS: one write system call per flush; nil without
	remote   string
	tlsState *tls.ConnectionState
	base     context.Context // values every request context carries
	done     chan struct{}   // closed when the connection ended and its handlers returned
	handlers sync.WaitGroup  // handlers started and not returned

	// reader only
	br          *bufio.Reader
	rfr         *http2.Framer
	hdec        *hpack.Decoder
	hb          headerBlock
	sawSettings bool
	recvWindow  int64 // connection receive window
	recvUnacked int64 // received bytes not yet given back
	resetTokens float64
	resetAt     time.Time
	closedIDs   [32]uint32 // recently closed stream ids, a ring
	closedNext  int
	canon       nameMemo // lower-case field name -> canonical key
	maxHdrList  uint32

	mu                sync.Mutex // guards the fields below
	out               []byte     // frames not written yet; nil (none from outPool) while there are none
	outBox            *[]byte    // the outPool entry out came from
	outw              outWriter
	wfr               *http2.Framer // writes frames into out
	henc              *hpack.Encoder
	hbuf              bytes.Buffer // hpack output for one header block
	lower             nameMemo     // header key -> lower-case field name
	litSrc, litOut    []byte       // the last fields WriteHeaderFields sent, and their HPACK coding
	lenOf             int64        // the last content-length the lane computed ...
	lenValue          string       // ... formatted: a connection's hits of one answer share it
	writing           bool         // a goroutine is writing out to the connection
	werr              error        // the first write error; the connection is over
	writeFailed       bool         // werr came from a write to the connection
	closed            bool
	streams           map[uint32]*stream
	blocked           []*stream // streams with data waiting for credit, by stallSince (oldest first)
	sendWindow        int64
	pendingBytes      int // the streams' pending data, together
	peerInitialWindow int64
	peerMaxFrame      uint32
	maxClientStream   uint32
	running           int  // handlers not returned
	lingering         int  // returned handlers off the reader still flushing their response
	due               bool // on the loops, a deadline passed (LoopDue): its reader meets it off them
	opening           bool // the reader is taking a new stream: its handler is about to run
	idleSince         time.Time
	goingAway         bool // GOAWAY sent or received: no new streams
	closeAfterFlush   bool // going away and done: close once out is written
	settingsAckDue    time.Time
	hbDue             time.Time // when a header block being read must end; zero: none (the reader sets it)
	readDeadline      time.Time // armed on nc; zero: none
	writeDeadline     time.Time
	flushed           sync.Cond // signalled after each write to the connection
}

// outWriter is the writing Framer's io.Writer: it appends to c.out. Its
// conn's mu is held whenever the Framer writes.
type outWriter struct{ c *conn }

func (w outWriter) Write(p []byte) (int, error) {
	w.c.takeOut()
	w.c.out = append(w.c.out, p...)
	return len(p), nil
}

// outPool holds output buffers between batches: a connection takes one
// when it queues its first frame and puts it back once the batch is
// written, so an idle connection keeps none and the busy ones reuse the
// few buffers still warm in the processor's caches.
var outPool = sync.Pool{New: func() any { b := make([]byte, 0, flushAt+32<<10); return &b }}

// maxPooledOut is the largest output buffer put back in outPool (a batch
// is written once it passes flushAt, so it ends up to one response beyond
// it); one that a burst grew further is left to the collector.
const maxPooledOut = 4 * flushAt

// takeOut gives c.out a buffer from outPool if it has none. c.mu must be
// held.
func (c *conn) takeOut() {
	if c.out == nil {
		c.outBox = outPool.Get().(*[]byte)
		c.out = (*c.outBox)[:0]
	}
}

// releaseOut puts buf, an output buffer written or dropped, back in
// outPool in box, the entry it came from.
func releaseOut(box *[]byte, buf []byte) {
	if box != nil && cap(buf) <= maxPooledOut {
		*box = buf[:0]
		outPool.Put(box)
	}
}

// maxMemoNames bounds a nameMemo: a peer sending ever new field names
// gets them transformed each time, not remembered.
const maxMemoNames = 256

// nameMemo remembers the result of one transformation of header field
// names (lower-casing, canonicalizing) for up to maxMemoNames names, so a
// connection's repeated names cost a map lookup. Its owner guards it.
type nameMemo struct {
	m  map[string]string
	of func(string) string
}

func newNameMemo(of func(string) string) nameMemo {
	return nameMemo{m: make(map[string]string), of: of}
}

func (n nameMemo) get(name string) string {
	if v, ok := n.m[name]; ok {
		return v
	}
	v := n.of(name)
	if len(n.m) < maxMemoNames {
		n.m[name] = v
	}
	return v
}

func newConn(s *Server, nc net.Conn) *conn {
	c := &conn{s: s, nc: nc, remote: nc.RemoteAddr().String(), done: make(chan struct{})}
	if tc, ok := nc.(*tls.Conn); ok {
		st := tc.ConnectionState()
		c.tlsState = &st
		if b, ok := tc.NetConn().(*batchconn.Conn); ok {
			c.batch = b
		}
	}
	c.base = context.WithValue(context.WithValue(context.Background(),
		http.ServerContextKey, s.Base), http.LocalAddrContextKey, nc.LocalAddr())
	if s.ConnContext != nil {
		c.base = s.ConnContext(c.base, nc)
	}
	c.br = bufio.NewReaderSize(nc, readBufSize)
	c.rfr = http2.NewFramer(nil, c.br)
	c.rfr.SetMaxReadFrameSize(readFrameSize)
	c.maxHdrList = s.maxHeaderListSize()
	c.hdec = hpack.NewDecoder(defaultTableSize, c.emitField)
	c.hdec.SetMaxStringLength(int(c.maxHdrList))
	c.recvWindow = connRecvWindow
	c.resetTokens = resetBurst
	c.canon = newNameMemo(http.CanonicalHeaderKey)

	c.outw = outWriter{c}
	c.wfr = http2.NewFramer(c.outw, nil)
	c.henc = hpack.NewEncoder(&c.hbuf)
	c.lower = newNameMemo(strings.ToLower)
	c.streams = make(map[uint32]*stream)
	c.sendWindow = defaultWindow
	c.peerInitialWindow = defaultWindow
	c.peerMaxFrame = defaultFrameSize
	c.flushed.L = &c.mu
	return c
}

// serve runs the connection: preface, SETTINGS, then frames until it
// ends. It returns once the connection is over and every handler it
// started has returned.
func (c *conn) serve() {
	now := time.Now()
	c.mu.Lock()
	c.idleSince = now
	c.settingsAckDue = now.Add(c.s.settingsAckTimeout())
	_ = c.wfr.WriteSettings(
		http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: c.s.maxStreams()},
		http2.Setting{ID: http2.SettingMaxHeaderListSize, Val: c.maxHdrList},
	)
	c.mu.Unlock()
	if err := c.flush(); err != nil {
		c.finish()
		<-c.done
		return
	}
	if d := c.s.headerTimeout(); d > 0 {
		c.setReadDeadline(now.Add(d))
	}
	var pre [len(clientPreface)]byte
	if _, err := io.ReadFull(c.br, pre[:]); err != nil || string(pre[:]) != clientPreface {
		if err == nil {
			c.goAway(http2.ErrCodeProtocol, "invalid client preface")
		}
		c.finish()
		<-c.done
		return
	}
	c.readLoop()
	<-c.done
}

// readLoop reads and handles frames on the calling goroutine until the
// connection ends (it then finishes it), its reading moves to another
// goroutine, or it parks on the loops.
func (c *conn) readLoop() { c.readFrames() }

// maxLoopFrames bounds the frames a loop reads for one event of a
// connection: a client that keeps sending goes on on a goroutine of its
// own, not at the cost of the loop's other connections.
const maxLoopFrames = 64

// readFrames is readLoop's work, and a loop's while the connection is on
// the loops (c.host). It reports hosted.Waits when the connection is on
// the loops with nothing more to read, hosted.Ended when it ended there
// and hosted.Left otherwise: it ended, parked, or its reading moved,
// from Go's poller.
func (c *conn) readFrames() hosted.Outcome {
	frames := 0
	for {
		if c.br.Buffered() == 0 {
			// Everything the batch read produced leaves in one write.
			if err := c.flush(); err != nil {
				return c.end()
			}
			if c.host != nil && !c.host.OnLoop() && c.park() {
				return hosted.Left // a loop has it now
			}
		}
		onLoop := c.onLoop()
		if onLoop && frames == maxLoopFrames {
			c.host.Leave()
			onLoop = false
		}
		f, err := c.readFrame(onLoop)
		if err != nil {
			if onLoop && hosted.WouldBlock(err) {
				// Part of a frame may be buffered, after frames whose
				// answers are queued: they go out now, not with the rest.
				if c.outLen() == 0 {
					return hosted.Waits
				}
				if err := c.flush(); err != nil {
					return c.end()
				}
				if c.onLoop() {
					return hosted.Waits
				}
				continue // it left on the way: read on from Go's poller
			}
			if errors.Is(err, os.ErrDeadlineExceeded) {
				if c.timedOut(time.Now()) {
					return c.end()
				}
				continue
			}
			if c.frameError(err) {
				continue
			}
			return c.end()
		}
		frames++
		if err := c.processFrame(f); err != nil {
			if err == errDetached {
				return hosted.Left
			}
			if c.frameError(err) {
				continue
			}
			return c.end()
		}
		if c.outLen() >= flushAt {
			// Enough for one large write: send it rather than grow the
			// buffer while the client keeps sending.
			if err := c.flush(); err != nil {
				return c.end()
			}
		}
	}
}

// onLoop reports whether the connection is on the loops.
func (c *conn) onLoop() bool { return c.host != nil && c.host.OnLoop() }

// end finishes the connection for readFrames.
func (c *conn) end() hosted.Outcome {
	c.finish()
	if c.onLoop() {
		return hosted.Ended
	}
	return hosted.Left
}

// park moves the connection onto the loops when it waits for nothing but
// its next frames: no handler runs or flushes, nothing is queued, no
// deadline but the idle one is armed, and it is not going away. It
// reports whether it did; the caller then lets go of the connection.
func (c *conn) park() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || c.goingAway || c.closeAfterFlush || c.werr != nil || c.writing || len(c.out) > 0 ||
		c.running > 0 || c.lingering > 0 || c.opening || len(c.blocked) > 0 || c.hb.active ||
		!c.settingsAckDue.IsZero() || !c.hbDue.IsZero() {
		return false
	}
	if t, _ := c.nextDeadlineLocked(); !t.IsZero() && !time.Now().Before(t) {
		return false // due: the reader meets it here
	}
	// The socket under TLS is a new one after Park, on the loops or back
	// in Go's poller, with no deadline armed.
	c.readDeadline, c.writeDeadline = time.Time{}, time.Time{}
	c.due = false
	if c.host.Park(c, c.peek) {
		return true
	}
	_ = c.nc.SetDeadline(time.Time{}) // in case it is the old one
	return false
}

// peek reads one byte ahead for Park.
func (c *conn) peek() error {
	_, err := c.br.Peek(1)
	return err
}

// LoopReady serves the frames that arrived on the loops (hosted.Guest).
func (c *conn) LoopReady() hosted.Outcome {
	c.mu.Lock()
	off := c.goingAway || c.due
	c.due = false
	c.mu.Unlock()
	if off {
		// Going away, or a deadline passed: its reader meets that in Go's
		// poller, where it can wait.
		c.host.Leave()
		c.readLoop()
		return hosted.Left
	}
	return c.readFrames()
}

// LoopDue reports whether a deadline of the connection passed at now
// (hosted.Guest).
func (c *conn) LoopDue(now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, _ := c.nextDeadlineLocked()
	if t.IsZero() || now.Before(t) {
		return false
	}
	c.due = true
	return true
}

// LoopResume serves the connection from Go's poller once the loops moved
// it off (hosted.Guest).
func (c *conn) LoopResume() {
	c.mu.Lock()
	c.due = false
	c.mu.Unlock()
	c.readLoop()
}

// LoopAbandon ends the connection, writing nothing (hosted.Guest).
func (c *conn) LoopAbandon() {
	c.mu.Lock()
	c.writeFailed = true // finish closes the socket without a close_notify
	c.mu.Unlock()
	c.finish()
}

// outLen is how many bytes of frames wait to be written.
func (c *conn) outLen() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.out)
}

// readFrame waits, within the deadline readDeadlineFor arms, until a
// whole frame is buffered, then decodes it. Waiting happens only at a
// frame boundary, so a deadline never leaves half a frame read. On the
// loops (onLoop) it does not wait: a frame not all there yet fails it
// with an error that hosted.WouldBlock.
func (c *conn) readFrame(onLoop bool) (http2.Frame, error) {
	if !onLoop { // the loops keep deadlines themselves (LoopDue)
		c.armReadDeadline()
	}
	hdr, err := c.br.Peek(frameHeaderLen)
	if err != nil {
		return nil, err
	}
	n := int(hdr[0])<<16 | int(hdr[1])<<8 | int(hdr[2])
	if n <= readFrameSize {
		if _, err := c.br.Peek(frameHeaderLen + n); err != nil {
			return nil, err
		}
	}
	// A larger frame fails in ReadFrame with ErrFrameTooLarge before
	// its payload is read.
	typ := http2.FrameType(hdr[3])
	f, err := c.rfr.ReadFrame()
	if err != nil && (typ == http2.FrameHeaders || typ == http2.FrameContinuation) {
		// A header block that was not decoded leaves the HPACK state
		// unknown: the connection cannot go on.
		if se := (http2.StreamError{}); errors.As(err, &se) {
			return nil, http2.ConnectionError(http2.ErrCodeProtocol)
		}
	}
	return f, err
}

// frameError handles an error from reading or processing a frame. A
// stream error resets that stream and the connection goes on (true);
// anything else ends it, with a GOAWAY when the protocol was broken.
func (c *conn) frameError(err error) bool {
	var se http2.StreamError
	var ce http2.ConnectionError
	switch {
	case errors.As(err, &se):
		c.resetStream(se.StreamID, se.Code)
		return true
	case errors.As(err, &ce):
		c.goAway(http2.ErrCode(ce), "")
	case errors.Is(err, http2.ErrFrameTooLarge):
		c.goAway(http2.ErrCodeFrameSize, "")
	}
	return false
}

// goAway sends GOAWAY with code and, for an error, keeps reading (and
// discarding) for a moment so that the client reads it before the
// connection closes. The caller then finishes the connection.
func (c *conn) goAway(code http2.ErrCode, debug string) {
	c.mu.Lock()
	c.goingAway = true
	_ = c.wfr.WriteGoAway(c.maxClientStream, code, []byte(debug))
	c.mu.Unlock()
	if c.flush() != nil || code == http2.ErrCodeNo {
		return
	}
	if c.host != nil {
		c.host.Leave() // the linger waits: in Go's poller
	}
	_ = c.nc.SetReadDeadline(time.Now().Add(lingerTimeout))
	_, _ = io.Copy(io.Discard, io.LimitReader(c.nc, 1<<20))
}

// goAwayGraceful starts a graceful shutdown of the connection: GOAWAY
// with the last stream it took, and a close once its streams are done.
func (c *conn) goAwayGraceful() {
	c.mu.Lock()
	if c.closed || c.goingAway {
		c.mu.Unlock()
		return
	}
	c.goingAway = true
	_ = c.wfr.WriteGoAway(c.maxClientStream, http2.ErrCodeNo, nil)
	c.mu.Unlock()
	if c.host != nil && c.host.Wake() {
		return // on the loops: its reader, moved off them, sends it
	}
	_ = c.flush()
	// With nothing left to do, the reader's deadline is now: it wakes
	// and finishes (timedOut). Otherwise the last stream to end closes
	// the connection.
	c.mu.Lock()
	c.armReadDeadlineLocked()
	c.mu.Unlock()
}

// finish ends the connection: it closes it, cancels every request
// context, waits for the handlers to return and closes done. The reader
// calls it once, when it stops reading.
func (c *conn) finish() {
	c.mu.Lock()
	c.closed = true
	if c.werr == nil {
		c.werr = net.ErrClosed
	}
	streams := make([]*stream, 0, len(c.streams))
	for _, st := range c.streams {
		streams = append(streams, st)
	}
	ctxs := make([]*streamCtx, 0, len(streams))
	for _, st := range streams {
		ctxs = append(ctxs, st.ctx)
		c.closeStreamLocked(st) // wakes a handler waiting for credit
	}
	c.flushed.Broadcast()
	writeFailed := c.writeFailed
	c.mu.Unlock()
	for _, ctx := range ctxs {
		ctx.cancel(context.Canceled)
	}
	if writeFailed {
		c.abort()
	} else {
		_ = c.nc.Close()
	}
	c.handlers.Wait()
	close(c.done)
}

// abort closes the transport under the connection at once, without a
// TLS close_notify: once a write failed (a client that stopped reading,
// past the write timeout) there is nothing more to tell the client, and
// tls.Conn.Close would first try to send the alert, waiting up to 5 s on
// a full socket.
func (c *conn) abort() {
	if tc, ok := c.nc.(*tls.Conn); ok {
		_ = tc.NetConn().Close()
		return
	}
	_ = c.nc.Close()
}

// flush writes out, the frames written so far, to the connection. Only
// one goroutine writes at a time; one that finds another writing leaves
// its frames to it, unless they make out too large to wait
// (backpressure), in which case it waits until they were written.
func (c *conn) flush() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.writing {
		for c.writing && len(c.out) > maxOut && c.werr == nil {
			c.flushed.Wait()
		}
		return c.werr
	}
	c.writing = true
	for len(c.out) > 0 && c.werr == nil {
		buf, box := c.out, c.outBox
		c.out, c.outBox = nil, nil // frames queued meanwhile take another buffer
		c.mu.Unlock()
		err := c.write(buf)
		releaseOut(box, buf)
		c.mu.Lock()
		if err != nil && c.werr == nil {
			c.werr, c.writeFailed = err, true
			// The reader may be waiting for a frame: wake it.
			c.abort()
		}
		c.flushed.Broadcast()
	}
	c.writing = false
	c.flushed.Broadcast()
	if c.werr != nil && c.out != nil {
		// Frames queued for a broken connection are dropped.
		releaseOut(c.outBox, c.out)
		c.out, c.outBox = nil, nil
	}
	if c.closeAfterFlush && c.werr == nil {
		c.werr = net.ErrClosed
		_ = c.nc.Close()
		return nil
	}
	return c.werr
}

// write sends b to the connection within the write timeout, in one
// system call under TLS. Only the goroutine that set writing calls it.
func (c *conn) write(b []byte) error {
	if d := c.s.Base.WriteTimeout; d > 0 && !c.onLoop() {
		// On the loops a write never waits (a socket that does not take
		// it all moves the connection off them, with a deadline). Here,
		// re-arming costs a timer update: a deadline up to d/64 earlier
		// than asked is as good.
		t := time.Now().Add(d)
		if dd := t.Sub(c.writeDeadline); c.writeDeadline.IsZero() || dd < 0 || dd >= d/64 {
			c.writeDeadline = t
			_ = c.nc.SetWriteDeadline(t)
		}
	}
	if c.batch != nil {
		c.batch.Hold()
	}
	_, err := c.nc.Write(b)
	if c.batch != nil {
		if ferr := c.batch.Flush(); err == nil {
			err = ferr
		}
	}
	return err
}

// armReadDeadline sets the read deadline to the earliest of the ones
// that apply now (see deadlines); it may stay up to 1/64 of the idle
// timeout later than asked, which spares a timer update per read.
func (c *conn) armReadDeadline() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.armReadDeadlineLocked()
}

func (c *conn) armReadDeadlineLocked() {
	if c.onLoop() {
		// The loops keep its deadlines (LoopDue); the socket it reads
		// once it leaves them has none armed, as the cleared cache says.
		return
	}
	t, idle := c.nextDeadlineLocked()
	slack := c.s.idleTimeout() / 64
	if d := c.readDeadline.Sub(t); !t.IsZero() && !c.readDeadline.IsZero() && d >= 0 && d <= slack || t.IsZero() && c.readDeadline.IsZero() {
		return
	}
	if idle {
		// Armed up to slack late, the idle deadline stays good for the
		// requests that follow within slack, each asking a little later:
		// one timer update per slack rather than per request.
		t = t.Add(slack)
	}
	c.readDeadline = t
	_ = c.nc.SetReadDeadline(t)
}

// setReadDeadline arms t now.
func (c *conn) setReadDeadline(t time.Time) {
	c.mu.Lock()
	c.readDeadline = t
	c.mu.Unlock()
	_ = c.nc.SetReadDeadline(t)
}

// nextDeadlineLocked is the earliest time something must happen without
// the client: its SETTINGS acknowledgement, the end of a header block,
// credit for a stalled response, or (with no request in progress) the
// idle timeout. Zero means none. idle reports that t is the idle timeout's.
func (c *conn) nextDeadlineLocked() (t time.Time, idle bool) {
	if c.goingAway && c.quietLocked() {
		return aLongTimeAgo, false // a graceful shutdown with nothing left: wake up
	}
	earliest := func(u time.Time) {
		if !u.IsZero() && (t.IsZero() || u.Before(t)) {
			t = u
		}
	}
	earliest(c.settingsAckDue)
	earliest(c.hbDue)
	if d := c.s.stallTimeout(); d > 0 && len(c.blocked) > 0 {
		earliest(c.blocked[0].stallSince.Add(d)) // the longest stalled
	}
	if d := c.s.idleTimeout(); d > 0 && c.running == 0 && len(c.blocked) == 0 {
		u := c.idleSince.Add(d)
		earliest(u)
		idle = t.Equal(u)
	}
	return t, idle
}

// timedOut handles a read deadline that fired at now. It reports whether
// the connection is over.
func (c *conn) timedOut(now time.Time) bool {
	c.mu.Lock()
	c.readDeadline = time.Time{} // fired: armed again before the next read
	if !c.settingsAckDue.IsZero() && !now.Before(c.settingsAckDue) {
		c.mu.Unlock()
		c.goAway(http2.ErrCodeSettingsTimeout, "no SETTINGS acknowledgement")
		return true
	}
	if !c.hbDue.IsZero() && !now.Before(c.hbDue) {
		c.mu.Unlock()
		c.goAway(http2.ErrCodeNo, "header block timeout")
		return true
	}
	var stalled []*stream
	if d := c.s.stallTimeout(); d > 0 {
		for _, st := range c.blocked { // oldest first
			if now.Before(st.stallSince.Add(d)) {
				break
			}
			stalled = append(stalled, st)
		}
	}
	idle := false
	if d := c.s.idleTimeout(); d > 0 && c.running == 0 && len(c.blocked) == 0 && !now.Before(c.idleSince.Add(d)) {
		idle = true
	}
	done := c.goingAway && c.quietLocked()
	c.mu.Unlock()
	if done {
		return true // a graceful shutdown with nothing left to serve
	}
	for _, st := range stalled {
		c.resetStream(st.id, http2.ErrCodeCancel)
	}
	if idle {
		c.goAway(http2.ErrCodeNo, "")
		return true
	}
	return false
}

// processFrame handles one frame on the reader.
func (c *conn) processFrame(f http2.Frame) error {
	if !c.sawSettings {
		sf, ok := f.(*http2.SettingsFrame)
		if !ok || sf.IsAck() {
			return http2.ConnectionError(http2.ErrCodeProtocol)
		}
		c.sawSettings = true
	}
	switch f := f.(type) {
	case *http2.SettingsFrame:
		return c.processSettings(f)
	case *http2.HeadersFrame:
		return c.processHeaders(f)
	case *http2.ContinuationFrame:
		return c.processContinuation(f)
	case *http2.DataFrame:
		return c.processData(f)
	case *http2.WindowUpdateFrame:
		return c.processWindowUpdate(f)
	case *http2.RSTStreamFrame:
		return c.processReset(f)
	case *http2.PingFrame:
		if f.IsAck() {
			return nil
		}
		c.mu.Lock()
		err := c.wfr.WritePing(true, f.Data)
		c.mu.Unlock()
		return c.relieve(err)
	case *http2.PriorityFrame:
		if f.StreamDep == f.StreamID {
			return http2.StreamError{StreamID: f.StreamID, Code: http2.ErrCodeProtocol}
		}
		return nil
	case *http2.GoAwayFrame:
		// The client goes away: finish what it asked for; it closes.
		c.mu.Lock()
		c.goingAway = true
		c.mu.Unlock()
		return nil
	case *http2.PushPromiseFrame:
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	return nil // unknown frame types are ignored
}

// relieve is called after queueing a reply to the client: a client that
// makes us queue more than maxOut without reading it is made to wait for
// the connection (and is dropped by the write timeout if it never reads).
func (c *conn) relieve(err error) error {
	if err != nil {
		return err
	}
	c.mu.Lock()
	big := len(c.out) > maxOut
	c.mu.Unlock()
	if big {
		return c.flush()
	}
	return nil
}

func (c *conn) processSettings(f *http2.SettingsFrame) error {
	if f.IsAck() {
		c.mu.Lock()
		c.settingsAckDue = time.Time{}
		c.mu.Unlock()
		return nil
	}
	if err := f.ForeachSetting(func(s http2.Setting) error { return s.Valid() }); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var err error
	_ = f.ForeachSetting(func(s http2.Setting) error {
		switch s.ID {
		case http2.SettingHeaderTableSize:
			c.henc.SetMaxDynamicTableSizeLimit(s.Val)
		case http2.SettingInitialWindowSize:
			delta := int64(s.Val) - c.peerInitialWindow
			c.peerInitialWindow = int64(s.Val)
			for _, st := range c.streams {
				st.sendWindow += delta
				if st.sendWindow > maxWindow {
					err = http2.ConnectionError(http2.ErrCodeFlowControl)
				}
			}
		case http2.SettingMaxFrameSize:
			c.peerMaxFrame = s.Val
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := c.wfr.WriteSettingsAck(); err != nil {
		return err
	}
	c.drainBlockedLocked()
	if len(c.out) > maxOut {
		c.mu.Unlock()
		err := c.flush()
		c.mu.Lock()
		return err
	}
	return nil
}

func (c *conn) processWindowUpdate(f *http2.WindowUpdateFrame) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f.StreamID == 0 {
		c.sendWindow += int64(f.Increment)
		if c.sendWindow > maxWindow {
			return http2.ConnectionError(http2.ErrCodeFlowControl)
		}
		c.drainBlockedLocked()
		return nil
	}
	st := c.streams[f.StreamID]
	if st == nil {
		if c.idleLocked(f.StreamID) {
			return http2.ConnectionError(http2.ErrCodeProtocol)
		}
		return nil // a closed stream: credit no longer matters
	}
	st.sendWindow += int64(f.Increment)
	if st.sendWindow > maxWindow {
		return http2.StreamError{StreamID: f.StreamID, Code: http2.ErrCodeFlowControl}
	}
	if st.blocked && c.sendWindow > 0 { // otherwise nothing can be sent yet
		c.drainBlockedLocked()
	}
	return nil
}

// idleLocked reports whether id names a stream that was never opened.
func (c *conn) idleLocked(id uint32) bool {
	return id > c.maxClientStream || id%2 == 0
}

func (c *conn) processReset(f *http2.RSTStreamFrame) error {
	c.mu.Lock()
	if c.idleLocked(f.StreamID) {
		c.mu.Unlock()
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	st := c.streams[f.StreamID]
	if st == nil {
		c.mu.Unlock()
		return nil
	}
	ctx := st.ctx
	c.closeStreamLocked(st)
	c.mu.Unlock()
	ctx.cancel(context.Canceled)
	return c.chargeReset()
}

// chargeReset takes a token for a stream the client reset or had
// refused, and fails the connection when none is left.
func (c *conn) chargeReset() error {
	now := time.Now()
	if !c.resetAt.IsZero() {
		c.resetTokens = min(resetBurst, c.resetTokens+now.Sub(c.resetAt).Seconds()*resetRate)
	}
	c.resetAt = now
	if c.resetTokens < 1 {
		return errCalm
	}
	c.resetTokens--
	return nil
}

func (c *conn) processData(f *http2.DataFrame) error {
	n := int64(f.Length) // padding included: it counts for flow control
	if n > c.recvWindow {
		return http2.ConnectionError(http2.ErrCodeFlowControl)
	}
	c.recvWindow -= n
	c.recvUnacked += n
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.recvWindow < windowUpdateAfter {
		// The data is discarded: give the credit back at once.
		_ = c.wfr.WriteWindowUpdate(0, uint32(c.recvUnacked))
		c.recvWindow += c.recvUnacked
		c.recvUnacked = 0
	}
	id := f.StreamID
	st := c.streams[id]
	if st == nil {
		if c.idleLocked(id) {
			return http2.ConnectionError(http2.ErrCodeProtocol)
		}
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeStreamClosed}
	}
	if st.remoteEnded {
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeStreamClosed}
	}
	if n > st.recvWindow {
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeFlowControl}
	}
	st.recvWindow -= n
	st.received += int64(len(f.Data()))
	if st.declaredLen >= 0 && st.received > st.declaredLen {
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeProtocol}
	}
	if f.StreamEnded() {
		if st.declaredLen >= 0 && st.received != st.declaredLen {
			return http2.StreamError{StreamID: id, Code: http2.ErrCodeProtocol}
		}
		c.remoteEndLocked(st)
		return nil
	}
	if st.recvWindow < windowUpdateAfter {
		_ = c.wfr.WriteWindowUpdate(id, uint32(streamRecvWindow-st.recvWindow))
		st.recvWindow = streamRecvWindow
	}
	return nil
}

// resetStream sends RST_STREAM for id with code and closes the stream.
func (c *conn) resetStream(id uint32, code http2.ErrCode) {
	c.mu.Lock()
	var ctx *streamCtx
	if st := c.streams[id]; st != nil {
		ctx = st.ctx
		c.closeStreamLocked(st)
	}
	_ = c.wfr.WriteRSTStream(id, code)
	c.mu.Unlock()
	if ctx != nil {
		ctx.cancel(context.Canceled)
	}
}

// remoteEndLocked records the client's END_STREAM on st.
func (c *conn) remoteEndLocked(st *stream) {
	st.remoteEnded = true
	if st.localEnded {
		c.closeStreamLocked(st)
	}
}

// localEndLocked records our END_STREAM on st.
func (c *conn) localEndLocked(st *stream) {
	st.localEnded = true
	if st.remoteEnded {
		c.closeStreamLocked(st)
	}
}

// closeStreamLocked removes st from the connection: its state is closed.
// Its handler may still run; its output is dropped.
func (c *conn) closeStreamLocked(st *stream) {
	if c.streams[st.id] != st {
		return
	}
	delete(c.streams, st.id)
	c.closedIDs[c.closedNext] = st.id
	c.closedNext = (c.closedNext + 1) % len(c.closedIDs)
	st.closed = true
	c.setPendingLocked(st, st.pending[:0])
	if st.blocked {
		c.unblockLocked(st)
	}
	st.wakeUp()
	c.maybeIdleLocked()
	c.unrefLocked(st)
}

// quietLocked reports whether no stream is open or about to be, and no
// handler runs.
func (c *conn) quietLocked() bool {
	return c.running == 0 && len(c.blocked) == 0 && len(c.streams) == 0 && !c.opening
}

// recentlyClosed reports whether id is a stream closed lately.
func (c *conn) recentlyClosed(id uint32) bool {
	for _, x := range c.closedIDs {
		if x == id {
			return true
		}
	}
	return false
}

// maybeIdleLocked notes the start of an idle period, and closes a
// connection going away that has nothing left to do.
func (c *conn) maybeIdleLocked() {
	if c.running != 0 || len(c.blocked) != 0 {
		return
	}
	c.idleSince = time.Now()
	if c.goingAway && c.quietLocked() && !c.closed {
		// A graceful shutdown is done; the reader sees the close and
		// finishes. Output queued (the last responses) is written first
		// by whoever flushes next: the reader, before its next read.
		c.closeAfterFlush = true
	}
}
