package h1

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"trendgate/internal/transport/epoll"
)

// Event loops (Server.Loops) serve plain connections as nginx's workers
// do: a few goroutines, each waiting in epoll_wait on the connections it
// owns, reading what arrived and answering every whole request in it,
// with no goroutine parked per connection and nothing for the Go
// scheduler to do between requests. On the bench's host goroutines per
// connection cost a cached answer more CPU than the whole handler chain
// does (docs/performance.md).
//
// A loop runs a request's handler itself, so a handler must not wait on
// it: the moment a request would wait, its connection leaves the loop.
// Two things say so. The handler asks for its context's Done (everything
// in the gateway that waits, for the upstream, for Redis or for a fill,
// selects on it), or the socket does not take the whole answer. Then
// another goroutine takes the loop on from the next ready connection,
// the descriptor goes back into Go's poller, and the goroutine that ran
// the handler goes on serving that connection alone, exactly as a
// connection that never was on a loop. Once it waits for its next
// request with nothing buffered, it returns to a loop.
//
// A loop keeps the lane's deadlines itself: the idle and header timeouts
// are checked by a sweep over its connections (every 1/64 of the shorter
// timeout, between 5 ms and 1 s), so a connection may outlive either by
// that much. A loop never waits to write.

// maxLoopFD bounds the descriptors a loop serves: it finds its
// connections in a table indexed by descriptor. A connection on a
// higher one is served by a goroutine.
const maxLoopFD = 1 << 16

// loop is one event loop: an epoll instance and the connections it owns.
// One goroutine at a time, its leader, runs it. mu guards stopped and
// adds; the fields after hasAdds are the leader's.
type loop struct {
	s     *Server
	epfd  int
	stop  int                    // readable once the loops stop
	conns []atomic.Pointer[conn] // by descriptor

	mu      sync.Mutex
	stopped bool
	adds    []owned // added since the leader last took them
	hasAdds atomic.Bool

	owned  []owned // for the sweep; a conn that left is dropped from it there
	events []syscall.EpollEvent
	rest   []syscall.EpollEvent // the current batch's events not served yet
	sweep  time.Time            // when the next sweep is due
}

// owned is one of a loop's connections, as of its gen-th move onto a loop:
// an entry whose connection moved since is stale.
type owned struct {
	c   *conn
	gen uint32
}

// loopable reports whether a connection accepted as rwc may run on one of
// s's loops.
func (s *Server) loopable(rwc net.Conn) bool {
	if len(s.loops) == 0 || s.TLSConfig != nil {
		return false
	}
	_, ok := rwc.(syscall.Conn)
	return ok
}

// startLoops starts s.Loops loops once; Serve calls it with s.mu held.
// The loops' goroutines keep their processors, so GOMAXPROCS is raised
// to Loops+1 when it is lower.
func (s *Server) startLoops() error {
	if s.Loops <= 0 || s.TLSConfig != nil || s.loops != nil {
		return nil
	}
	if err := syscall.Pipe2(s.loopStop[:], syscall.O_CLOEXEC|syscall.O_NONBLOCK); err != nil {
		return fmt.Errorf("h1: loops: pipe2: %w", err)
	}
	loops := make([]*loop, s.Loops)
	for i := range loops {
		epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
		if err == nil {
			ev := syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(s.loopStop[0])}
			if err = syscall.EpollCtl(epfd, syscall.EPOLL_CTL_ADD, s.loopStop[0], &ev); err != nil {
				_ = syscall.Close(epfd)
			}
		}
		if err != nil {
			for _, l := range loops[:i] {
				_ = syscall.Close(l.epfd)
			}
			_ = syscall.Close(s.loopStop[0])
			_ = syscall.Close(s.loopStop[1])
			return fmt.Errorf("h1: loops: %w", err)
		}
		loops[i] = &loop{s: s, epfd: epfd, stop: s.loopStop[0], conns: make([]atomic.Pointer[conn], maxLoopFD),
			events: make([]syscall.EpollEvent, 128)}
	}
	if runtime.GOMAXPROCS(0) < s.Loops+1 {
		runtime.GOMAXPROCS(s.Loops + 1)
	}
	s.loops = loops
	s.loopsOpen.Store(int32(len(loops)))
	s.loopsDone = make(chan struct{})
	for _, l := range loops {
		go l.run(nil)
	}
	return nil
}

// stopLoops ends the loops once no connection is left (Shutdown, or the
// last connection to end after it); their last leaders close them. The
// channel it returns, nil without loops, is closed once they have.
func (s *Server) stopLoops() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.loops == nil {
		return nil
	}
	if s.loopStop[1] >= 0 {
		for _, l := range s.loops {
			l.mu.Lock()
			l.stopped = true
			l.mu.Unlock()
		}
		_ = syscall.Close(s.loopStop[1]) // the read end turns readable, at EOF
		s.loopStop[1] = -1
	}
	return s.loopsDone
}

// enterLoop moves c, which waits for its next request with nothing
// buffered, onto a loop. moved false means c stays with its goroutine as
// it was; otherwise out is what that goroutine must do.
func (c *conn) enterLoop() (out outcome, moved bool) {
	l := c.s.loops[c.s.nextLoop.Add(1)%uint32(len(c.s.loops))]
	l.mu.Lock()
	stopped := l.stopped
	l.mu.Unlock()
	if stopped {
		return ended, false
	}
	c.lmu.Lock()
	defer c.lmu.Unlock()
	fd, err := epoll.TakeFD(c.rwc) // closes rwc
	if err != nil {
		return ended, true
	}
	if fd >= maxLoopFD {
		// No room in the loop's table: serve it as it came, from Go's poller.
		rwc, err := epoll.GiveFD(fd)
		_ = syscall.Close(fd)
		if err != nil {
			return ended, true
		}
		c.rwc, c.loopable = rwc, false
		c.readDeadline, c.writeDeadline = time.Time{}, time.Time{}
		return ended, false
	}
	c.rwc, c.fd = nil, fd
	c.idleSince = time.Now()
	if !l.add(c) {
		_ = syscall.Close(fd)
		c.fd = -1
		return ended, true
	}
	return onLoop, true
}

// add gives c (its descriptor set, c.lmu held) to l; false when l has
// stopped or epoll refused it.
func (l *loop) add(c *conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped {
		return false
	}
	l.conns[c.fd].Store(c)
	c.lp.Store(l)
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(c.fd)}
	if err := syscall.EpollCtl(l.epfd, syscall.EPOLL_CTL_ADD, c.fd, &ev); err != nil {
		l.conns[c.fd].Store(nil)
		c.lp.Store(nil)
		return false
	}
	l.adds = append(l.adds, owned{c, c.moves.Add(1)})
	l.hasAdds.Store(true)
	return true
}

// loopConn is a connection's state between events on a loop, owned by
// the loop's leader.
type loopConn struct {
	idleSince time.Time // when it began to wait for a request
	headStart time.Time // when the first byte of the head it reads arrived
	wiov      [3]syscall.Iovec
	moves     atomic.Uint32 // times it moved onto a loop
}

// connReader is what a loopable connection's bufio.Reader reads: the
// bare descriptor, without blocking, while on a loop (syscall.EAGAIN
// when nothing is there), rwc otherwise.
type connReader struct{ c *conn }

func (r connReader) Read(p []byte) (int, error) {
	c := r.c
	if c.lp.Load() == nil {
		return c.rwc.Read(p)
	}
	n, err := epoll.Read(c.fd, p)
	if err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, io.EOF
	}
	return n, nil
}

// writeOnLoop writes bufs on c's descriptor without waiting. When the
// socket takes only part, c leaves the loop and the caller writes the rest
// on rwc; n is what was written. An error ends the connection.
func (c *conn) writeOnLoop(bufs [][]byte) (n int, err error) {
	n, err = epoll.Writev(c.fd, bufs, c.wiov[:])
	if err == syscall.EAGAIN || err == syscall.EINTR {
		n, err = 0, nil
	}
	if err != nil {
		return n, err
	}
	total := 0
	for _, b := range bufs {
		total += len(b)
	}
	if n < total {
		c.leaveLoop()
	}
	return n, nil
}

// leaveLoop takes c off its loop for the rest of the request in progress
// (the leader's), which then waits: a new goroutine leads the loop from
// the next ready connection on, and c's descriptor goes back into Go's
// poller as rwc, with the write deadline of its request. The descriptor
// itself stays open until the request is over (afterLoop). It does
// nothing for a connection not on a loop.
func (c *conn) leaveLoop() {
	c.lmu.Lock()
	defer c.lmu.Unlock()
	l := c.lp.Load()
	if l == nil {
		return
	}
	l.detach(c)
	rwc, err := epoll.GiveFD(c.fd)
	if err != nil {
		c.s.logf("h1: moving a connection off its loop: %v", err)
		rwc = failedConn{err: err}
	}
	c.rwc = rwc
	c.readDeadline, c.writeDeadline = time.Time{}, time.Time{}
	if d := c.s.Fallback.WriteTimeout; d > 0 {
		c.setWriteDeadline(c.headStart.Add(d), 0)
	}
	c.lp.Store(nil)
	c.s.loopHandovers.Add(1)
	l.handOver()
}

// detach removes c from l's epoll set and table.
func (l *loop) detach(c *conn) {
	_ = syscall.EpollCtl(l.epfd, syscall.EPOLL_CTL_DEL, c.fd, nil)
	l.conns[c.fd].Store(nil)
}

// handOver starts a new leader for l, which serves the current batch's
// remaining events first. The caller, the old leader, is then inside a
// handler of the one connection it keeps.
func (l *loop) handOver() {
	rest := l.rest
	l.rest = nil
	go l.run(rest)
}

// run leads l: it serves ready connections until the loops stop or it
// hands the loop over. pending are events already taken from epoll.
func (l *loop) run(pending []syscall.EpollEvent) {
	for {
		for len(pending) > 0 {
			ev := pending[0]
			pending = pending[1:]
			if int(ev.Fd) == l.stop {
				l.close()
				return
			}
			c := l.conns[ev.Fd].Load()
			if c == nil {
				continue // left or dropped since the event
			}
			l.rest = pending
			if !l.ready(c, ev.Events) {
				return // another goroutine leads l now
			}
		}
		l.rest = nil
		now := time.Now()
		if l.hasAdds.Load() {
			l.takeAdds()
		}
		if !now.Before(l.sweep) {
			l.sweepConns(now)
		}
		n, err := epoll.Wait(l.epfd, l.events, l.waitMillis(now))
		if err != nil && err != syscall.EINTR {
			l.s.logf("h1: loop: epoll_wait: %v", err)
			_ = l.s.stopLoops()
			continue // the stop pipe ends it
		}
		pending = l.events[:n]
	}
}

// waitMillis is how long the leader may wait in epoll_wait: until the
// next sweep.
func (l *loop) waitMillis(now time.Time) int {
	return int(max(l.sweep.Sub(now), 0)/time.Millisecond) + 1
}

// takeAdds moves the connections added since the last look into owned.
func (l *loop) takeAdds() {
	l.mu.Lock()
	l.owned = append(l.owned, l.adds...)
	clear(l.adds)
	l.adds = l.adds[:0]
	l.hasAdds.Store(false)
	l.mu.Unlock()
}

// sweepConns forgets the connections that left, ends those past their
// idle or header timeout or closed by Shutdown, and sets the next sweep.
func (l *loop) sweepConns(now time.Time) {
	idle, header := l.s.idleTimeout(), l.s.headerTimeout()
	kept := l.owned[:0]
	for _, o := range l.owned {
		c := o.c
		if c.lp.Load() != l || c.moves.Load() != o.gen {
			continue // left, and maybe back with a newer entry
		}
		switch c.state.Load() {
		case stateIdle:
			if idle > 0 && now.Sub(c.idleSince) >= idle {
				l.drop(c)
				continue
			}
		case stateActive: // a head in part
			if header > 0 && now.Sub(c.headStart) >= header {
				l.drop(c)
				continue
			}
		case stateClosed:
			l.drop(c)
			continue
		}
		kept = append(kept, o)
	}
	clear(l.owned[len(kept):])
	l.owned = kept
	every := time.Second
	for _, d := range []time.Duration{idle, header} {
		if d > 0 {
			every = min(every, d/64)
		}
	}
	l.sweep = now.Add(max(every, 5*time.Millisecond))
}

// drop ends c, one of l's connections.
func (l *loop) drop(c *conn) {
	c.lmu.Lock()
	l.detach(c)
	_ = syscall.Close(c.fd)
	c.fd = -1
	c.lp.Store(nil)
	c.lmu.Unlock()
	c.state.Store(stateClosed)
	c.s.untrack(c)
}

// close ends the loop once it stops: its connections and its epoll
// instance; the last loop to close closes the stop pipe.
func (l *loop) close() {
	for i := range l.conns {
		if c := l.conns[i].Load(); c != nil {
			l.drop(c)
		}
	}
	_ = syscall.Close(l.epfd)
	if l.s.loopsOpen.Add(-1) == 0 {
		_ = syscall.Close(l.stop)
		close(l.s.loopsDone)
	}
}

// ready serves what epoll reported on c. It reports whether the calling
// goroutine still leads l.
func (l *loop) ready(c *conn, events uint32) bool {
	if events&(syscall.EPOLLIN|syscall.EPOLLERR|syscall.EPOLLHUP) == 0 {
		return true
	}
	if c.state.Load() == stateClosed { // by Shutdown, which made it readable
		l.drop(c)
		return true
	}
	if _, err := c.br.Peek(c.br.Buffered() + 1); err != nil {
		switch {
		case err == syscall.EAGAIN || err == syscall.EINTR:
			return true // nothing arrived after all
		case errors.Is(err, bufio.ErrBufferFull): // a whole buffer, no head: below
		default: // EOF, reset: a head in part is lost, as net/http loses it
			l.drop(c)
			return true
		}
	}
	for c.br.Buffered() > 0 {
		if c.state.CompareAndSwap(stateIdle, stateActive) {
			c.headStart = time.Now()
		} else if c.state.Load() != stateActive {
			l.drop(c) // closed by Shutdown
			return true
		}
		buf, _ := c.br.Peek(c.br.Buffered())
		h, n, v := parseHead(buf, c.fields)
		if v == needMore {
			if c.br.Buffered() < c.limit {
				return true // the rest comes with a later event, or the sweep ends it
			}
			v = handOff // too large for the lane
		}
		if v == handOff {
			l.handOffConn(c)
			return true
		}
		_, _ = c.br.Discard(n)
		keep, leads := l.serve(c, &h)
		if !leads {
			return false
		}
		if !keep || c.s.inShutdown.Load() {
			l.drop(c)
			return true
		}
		c.state.Store(stateIdle)
		c.idleSince = time.Now()
	}
	return true
}

// serve runs one request of c on the loop. leads false means it left the
// loop on the way, and the calling goroutine has served c to its end (or
// to a loop again) since.
func (l *loop) serve(c *conn, h *head) (keep, leads bool) {
	defer func() {
		if p := recover(); p != nil {
			if c.lp.Load() == nil {
				leads = false
				c.afterLoop(p, false)
				return
			}
			c.end(p, onLoop) // logs it
			keep, leads = false, true
		}
	}()
	keep = c.serveRequest(h, c.headStart)
	if c.lp.Load() != nil {
		return keep, true
	}
	c.afterLoop(nil, keep)
	return false, false
}

// afterLoop goes on serving c, which left its loop while the calling
// goroutine ran its request, the way serve does: the descriptor the loop
// had is closed (rwc holds the socket), and unless the request was the
// connection's last, the connection's next requests follow.
func (c *conn) afterLoop(p any, keep bool) {
	out := ended
	defer func() { c.end(recover(), out) }()
	c.lmu.Lock()
	_ = syscall.Close(c.fd)
	c.fd = -1
	c.lmu.Unlock()
	if p != nil {
		panic(p) // for end to log
	}
	if !keep || c.s.inShutdown.Load() {
		return
	}
	c.state.Store(stateIdle)
	if c.s.inShutdown.Load() {
		return
	}
	out = c.serveRequests()
}

// handOffConn gives c, with every byte read, to Fallback as serve's
// handOff does, from a goroutine of its own: the loop does not wait for
// Fallback to accept.
func (l *loop) handOffConn(c *conn) {
	c.lmu.Lock()
	l.detach(c)
	rwc, err := epoll.GiveFD(c.fd)
	_ = syscall.Close(c.fd)
	c.fd = -1
	c.rwc = rwc
	c.lp.Store(nil)
	c.lmu.Unlock()
	if err != nil {
		c.s.logf("h1: handing a connection off its loop: %v", err)
		c.state.Store(stateClosed)
		c.s.untrack(c)
		return
	}
	go func() {
		out := ended
		if c.handOff(c.headStart) {
			out = handedOff
		}
		c.end(nil, out)
	}()
}

// closeIdle closes c for Shutdown, which found it idle: on a loop it
// shuts the socket down, so that the loop sees it and ends it (only the
// loop closes its descriptors).
func (c *conn) closeIdle() {
	c.lmu.Lock()
	defer c.lmu.Unlock()
	if c.lp.Load() != nil {
		_ = syscall.Shutdown(c.fd, syscall.SHUT_RDWR)
		return
	}
	if c.rwc != nil {
		_ = c.rwc.Close()
	}
}

// failedConn stands for a connection whose descriptor could not go back
// into Go's poller: it fails every read and write. Closing it does
// nothing: the descriptor, the socket's only one, is closed when the
// request is over (afterLoop).
type failedConn struct{ err error }

func (f failedConn) Read([]byte) (int, error)         { return 0, f.err }
func (f failedConn) Write([]byte) (int, error)        { return 0, f.err }
func (f failedConn) Close() error                     { return nil }
func (f failedConn) LocalAddr() net.Addr              { return nil }
func (f failedConn) RemoteAddr() net.Addr             { return nil }
func (f failedConn) SetDeadline(time.Time) error      { return nil }
func (f failedConn) SetReadDeadline(time.Time) error  { return nil }
func (f failedConn) SetWriteDeadline(time.Time) error { return nil }
