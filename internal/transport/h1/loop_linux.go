package h1

import (
	"bufio"
	"crypto/tls"
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
	"trendgate/internal/transport/hosted"
)

// Event loops (Server.Loops) serve plain connections as nginx's workers
// do: a few goroutines, each waiting in epoll_wait, reading what arrived
// on a connection and answering every whole request in it, with no
// goroutine parked per connection and nothing for the Go scheduler to do
// between requests. On the bench's host goroutines per connection cost a
// cached answer more CPU than the whole handler chain does
// (docs/performance.md).
//
// The loops share one epoll set, and each connection is in it one-shot:
// an event goes to one loop, which then holds the connection until it
// arms it again, having served what arrived. So a connection waits for
// whichever loop is free, not for one loop of its own, and a loop whose
// thread the kernel puts aside holds up only the connections it took.
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
// request with nothing buffered, it returns to the loops.
//
// A TLS connection joins the loops once its handshake is done (on its
// goroutine) and it waits for a request: its tls.Conn reads and writes
// the bare descriptor through fdConn. A loop reads records, not bytes,
// and crypto/tls may keep whole records it read for later, which no
// socket event announces: so on a TLS connection a loop reads on after
// serving until the socket has nothing (one read more than on a plain
// one), a connection joins the loops only when a read finds nothing, and
// one that is still sending after maxLoopReads reads for one event goes
// on on a goroutine of its own, so that it does not keep the loop from
// its other connections. A loop ends a TLS connection (idle, or after
// Connection: close) without a close_notify alert, as nginx does once a
// connection timed out; HTTP/1.1 messages carry their own lengths.
//
// The loops keep the lane's deadlines themselves: the idle and header
// timeouts are checked by a sweep over their connections (every 1/64 of
// the shorter timeout, between 5 ms and 1 s, by whichever loop finds it
// due), so a connection may outlive either by that much. A loop never
// waits to write.
//
// A TLS connection that negotiated h2 is the HTTP/2 lane's, which the
// loops host between its frames (package hosted, hostConn): the lane
// parks it on the loops when it waits for nothing but its next frames,
// and a loop that takes its event hands it to the lane (Guest.LoopReady),
// which reads and serves what arrived and leaves the loops (Host.Leave)
// the moment something would wait, as a request of this lane does. Its
// deadlines are the lane's: the sweep asks it (Guest.LoopDue) and moves
// it off for its reader to meet them.

// maxLoopFD bounds the descriptors the loops serve: they find their
// connections in a table indexed by descriptor. A connection on a higher
// one is served by a goroutine.
const maxLoopFD = 1 << 16

// loopBatch is the most events a loop takes from epoll at once: the
// connections it holds until it has served them.
const loopBatch = 32

// loopSet is what the loops share: the epoll set and its connections.
// mu guards stopped and adds; sweepMu guards owned, and is held by the
// loop that sweeps.
type loopSet struct {
	s     *Server
	epfd  int
	stop  int                    // readable once the loops stop
	conns []atomic.Pointer[conn] // by descriptor

	mu      sync.Mutex
	stopped bool
	adds    []owned       // added since the last sweep took them
	gens    atomic.Uint32 // numbers the connections' stays on the loops

	base    time.Time // the loops' clock reads time since it
	sweepMu sync.Mutex
	owned   []owned      // for the sweep; a conn that left is dropped from it there
	sweep   atomic.Int64 // when the next sweep is due (since base)
}

// since is the loops' clock: the time since base, monotonic.
func (set *loopSet) since() int64 { return int64(time.Since(set.base)) }

// loop is one event loop: one goroutine at a time, its leader, waits on
// the set and serves the connections it takes.
type loop struct {
	set    *loopSet
	events []syscall.EpollEvent
	rest   []syscall.EpollEvent // the current batch's events not served yet
}

// owned is one of the loops' connections during its stay gen: an entry
// whose connection left since is stale.
type owned struct {
	c   *conn
	gen uint32
}

// loopable reports whether a connection accepted as rwc may run on one of
// s's loops.
func (s *Server) loopable(rwc net.Conn) bool {
	if len(s.loops) == 0 {
		return false
	}
	_, ok := rwc.(syscall.Conn)
	return ok
}

// startLoops starts s.Loops loops once; Serve calls it with s.mu held.
// The loops' goroutines keep their processors, so GOMAXPROCS is raised
// to Loops+1 when it is lower.
func (s *Server) startLoops() error {
	if s.Loops <= 0 || s.loops != nil {
		return nil
	}
	if err := syscall.Pipe2(s.loopStop[:], syscall.O_CLOEXEC|syscall.O_NONBLOCK); err != nil {
		return fmt.Errorf("h1: loops: pipe2: %w", err)
	}
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err == nil {
		ev := syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(s.loopStop[0])}
		if err = syscall.EpollCtl(epfd, syscall.EPOLL_CTL_ADD, s.loopStop[0], &ev); err != nil {
			_ = syscall.Close(epfd)
		}
	}
	if err != nil {
		_ = syscall.Close(s.loopStop[0])
		_ = syscall.Close(s.loopStop[1])
		return fmt.Errorf("h1: loops: %w", err)
	}
	set := &loopSet{s: s, epfd: epfd, stop: s.loopStop[0], conns: make([]atomic.Pointer[conn], maxLoopFD), base: time.Now()}
	loops := make([]*loop, s.Loops)
	for i := range loops {
		loops[i] = &loop{set: set, events: make([]syscall.EpollEvent, loopBatch)}
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
		set := s.loops[0].set
		set.mu.Lock()
		set.stopped = true
		set.mu.Unlock()
		_ = syscall.Close(s.loopStop[1]) // the read end turns readable, at EOF
		s.loopStop[1] = -1
	}
	return s.loopsDone
}

// enterLoop moves c, which waits for its next request with nothing
// buffered, onto the loops. moved false means c stays with its goroutine
// as it was; otherwise out is what that goroutine must do.
func (c *conn) enterLoop() (out outcome, moved bool) {
	set := c.s.loops[0].set
	if set.isStopped() {
		return ended, false
	}
	c.lmu.Lock()
	defer c.lmu.Unlock()
	if ok, err := c.takeSocket(); !ok {
		return ended, err != nil
	}
	if c.batch == nil {
		c.rwc = nil
	} else {
		c.batch.Conn = (*fdConn)(c)
		// TLS may hold records it read with the last request, which no
		// event would announce: a loop takes c only once it has none.
		switch _, err := c.br.Peek(1); {
		case err == nil:
			return ended, c.backToPoller() != nil
		case !wouldBlock(err):
			_ = syscall.Close(c.fd)
			c.fd = -1
			c.setSocket(failedConn{err: err})
			return ended, true
		}
	}
	// lp only says "on the loops" until a loop takes c and names itself.
	if !set.add(c, c.s.loops[0]) {
		_ = syscall.Close(c.fd)
		c.fd = -1
		return ended, true
	}
	return onLoop, true
}

// isStopped reports whether the loops have stopped.
func (set *loopSet) isStopped() bool {
	set.mu.Lock()
	defer set.mu.Unlock()
	return set.stopped
}

// takeSocket moves c's socket (c.lmu held) out of Go's poller onto c.fd,
// for the loops. When it cannot, ok is false and c stays off the loops:
// with err nil its socket is back in Go's poller (a descriptor with no
// room in the loops' table, served as it came: c is no longer loopable);
// with err, its socket fails every read and write.
func (c *conn) takeSocket() (ok bool, err error) {
	sock := c.socket()
	c.laddr, c.raddr = sock.LocalAddr(), sock.RemoteAddr()
	fd, err := epoll.TakeFD(sock) // closes sock
	if err != nil {
		c.setSocket(failedConn{err: err})
		return false, err
	}
	c.fd = fd
	if fd >= maxLoopFD {
		c.loopable = false
		return false, c.backToPoller()
	}
	return true, nil
}

// backToPoller gives c's descriptor (c.lmu held, c out of the epoll set)
// back to Go's poller as its socket, for a goroutine to serve it, and
// closes the loops' duplicate. On an error the socket fails every read
// and write.
func (c *conn) backToPoller() error {
	sock, err := epoll.GiveFD(c.fd)
	_ = syscall.Close(c.fd)
	c.fd = -1
	if err != nil {
		sock = failedConn{err: err}
	}
	c.setSocket(sock)
	c.readDeadline, c.writeDeadline = time.Time{}, time.Time{}
	return err
}

// wouldBlock reports whether err, from a read or write on a loop's
// descriptor (through TLS or not), means the socket had nothing to give
// or no room to take.
func wouldBlock(err error) bool { return err == syscall.EAGAIN || err == syscall.EINTR }

// add puts c (its descriptor set, c.lmu held) in the set, armed, with l
// as its loop until one takes it; false when the loops have stopped or
// epoll refused it.
func (set *loopSet) add(c *conn, l *loop) bool {
	set.mu.Lock()
	defer set.mu.Unlock()
	if set.stopped {
		return false
	}
	gen := set.gens.Add(1)
	c.gen.Store(gen)
	c.lp.Store(l)
	c.idleAt.Store(set.since())
	set.conns[c.fd].Store(c)
	c.lk.Store(0)
	ev := armed(c.fd, gen)
	if err := syscall.EpollCtl(set.epfd, syscall.EPOLL_CTL_ADD, c.fd, &ev); err != nil {
		set.conns[c.fd].Store(nil)
		c.lp.Store(nil)
		return false
	}
	set.adds = append(set.adds, owned{c, gen})
	return true
}

// armed is the one-shot event of a connection on fd during its stay gen
// on the loops: an event carrying another gen is stale (the descriptor
// may be another connection's by then).
func armed(fd int, gen uint32) syscall.EpollEvent {
	return syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLONESHOT, Fd: int32(fd), Pad: int32(gen)}
}

// A connection's lk: a loop holds it (heldBit) from the event it took
// until it has armed it again; an event that came meanwhile went to a
// loop that could not take it and left missedBit.
const (
	heldBit   = 1
	missedBit = 2
)

// take claims c, whose event a loop took, for that loop alone. A loop
// that fails marks c missed: the holder serves c again before it lets go,
// so that the event is not lost.
func (c *conn) take() bool {
	for {
		switch v := c.lk.Load(); {
		case v == 0:
			if c.lk.CompareAndSwap(0, heldBit) {
				return true
			}
		case v&missedBit != 0:
			return false
		default:
			if c.lk.CompareAndSwap(v, v|missedBit) {
				return false
			}
		}
	}
}

// release arms c again and lets go of it, unless an event came since the
// holder took it (missed): then the holder still holds c, its event
// consumed, and must serve it again (again true).
func (set *loopSet) release(c *conn) (again bool) {
	ev := armed(c.fd, c.gen.Load())
	if err := syscall.EpollCtl(set.epfd, syscall.EPOLL_CTL_MOD, c.fd, &ev); err != nil {
		set.s.logf("h1: loop: arming a connection: %v", err)
	}
	if c.lk.CompareAndSwap(heldBit, 0) {
		return false
	}
	c.lk.Store(heldBit)
	return true
}

// loopConn is a connection's state between events on a loop, owned by
// the loop's leader.
type loopConn struct {
	laddr, raddr net.Addr     // its socket's addresses, for fdConn
	headStart    time.Time    // when the first byte of the head it reads arrived
	idleAt       atomic.Int64 // when it began to wait for a request (loopSet.since)
	headAt       atomic.Int64 // headStart, for the sweep (loopSet.since)
	wiov         [3]syscall.Iovec
	gen          atomic.Uint32 // its stay on the loops (loopSet.gens), in its events
	lk           atomic.Uint32 // heldBit, missedBit
}

// connReader is what a loopable connection's bufio.Reader reads: the
// bare descriptor, without blocking, while on a loop (syscall.EAGAIN
// when nothing is there), rwc otherwise. With TLS it is always rwc, which
// reads its socket through fdConn while on a loop.
type connReader struct{ c *conn }

func (r connReader) Read(p []byte) (int, error) {
	c := r.c
	if c.batch != nil || c.lp.Load() == nil {
		return c.rwc.Read(p)
	}
	return readFD(c.fd, p)
}

// readFD reads fd without waiting: syscall.EAGAIN when it has nothing,
// io.EOF at its end.
func readFD(fd int, p []byte) (int, error) {
	n, err := epoll.Read(fd, p)
	if err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, io.EOF
	}
	return n, nil
}

// fdConn is the socket under a TLS connection while it is on a loop: it
// reads and writes the bare descriptor without waiting. A read with
// nothing there fails with syscall.EAGAIN, an error crypto/tls counts as
// temporary: it keeps a record it read in part and returns the error
// as it is, so the loop sees it as it sees a plain socket's. A write the
// socket does not take whole during a response (the batch of its
// records, flushed) moves the connection off its loop, as writeOnLoop
// does, and writes the rest from Go's poller. Anything else TLS writes on
// a loop (its answer to a key update, read with a request) only goes
// out if the socket takes it whole, or fails the connection. Closing it
// does nothing: the loops close their descriptors.
type fdConn conn

func (f *fdConn) Read(p []byte) (int, error) { return readFD(f.fd, p) }

func (f *fdConn) Write(p []byte) (int, error) {
	c := (*conn)(f)
	n, err := epoll.Write(c.fd, p)
	if wouldBlock(err) {
		n, err = 0, nil
	}
	if err != nil || n == len(p) {
		return n, err
	}
	if c.state.Load() != stateActive { // not a response: no waiting on a loop
		return n, syscall.EAGAIN
	}
	c.leaveLoop()
	m, err := c.batch.Conn.Write(p[n:])
	return n + m, err
}

func (f *fdConn) Close() error                     { return nil }
func (f *fdConn) LocalAddr() net.Addr              { return f.laddr }
func (f *fdConn) RemoteAddr() net.Addr             { return f.raddr }
func (f *fdConn) SetDeadline(time.Time) error      { return nil }
func (f *fdConn) SetReadDeadline(time.Time) error  { return nil }
func (f *fdConn) SetWriteDeadline(time.Time) error { return nil }

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
	l.set.detach(c)
	sock, err := epoll.GiveFD(c.fd)
	if err != nil {
		c.s.logf("h1: moving a connection off its loop: %v", err)
		sock = failedConn{err: err}
	}
	c.setSocket(sock)
	c.readDeadline, c.writeDeadline = time.Time{}, time.Time{}
	start := c.headStart
	if c.guest != nil {
		// A guest has no request head of its own here, and keeps no use
		// for the loops' descriptor: its lane arms its own deadlines from
		// its next write on.
		start = time.Now()
		_ = syscall.Close(c.fd)
		c.fd = -1
	}
	if d := c.s.Fallback.WriteTimeout; d > 0 {
		c.setWriteDeadline(start.Add(d), 0)
	}
	c.lp.Store(nil)
	c.s.loopHandovers.Add(1)
	l.handOver()
}

// detach removes c from the epoll set and the table.
func (set *loopSet) detach(c *conn) {
	_ = syscall.EpollCtl(set.epfd, syscall.EPOLL_CTL_DEL, c.fd, nil)
	set.conns[c.fd].Store(nil)
}

// handOver starts a new leader for l, which serves the current batch's
// remaining events first. The caller, the old leader, is then inside a
// handler of the one connection it keeps.
func (l *loop) handOver() {
	rest := l.rest
	l.rest = nil
	go l.run(rest)
}

// run leads l: it serves the connections it takes until the loops stop
// or it hands l over. pending are events already taken from epoll.
func (l *loop) run(pending []syscall.EpollEvent) {
	set := l.set
	for {
		for len(pending) > 0 {
			ev := pending[0]
			pending = pending[1:]
			if int(ev.Fd) == set.stop {
				set.exit()
				return
			}
			c := set.conns[ev.Fd].Load()
			if c == nil || uint32(ev.Pad) != c.gen.Load() || !c.take() {
				continue // left, or dropped, since the event; or another loop has it
			}
			c.lp.Store(l)
			l.rest = pending
			if !l.ready(c, ev.Events) {
				return // another goroutine leads l now
			}
		}
		l.rest = nil
		now := set.since()
		next := set.sweep.Load()
		if now >= next && set.sweepMu.TryLock() {
			set.sweepConns(now)
			next = set.sweep.Load()
			set.sweepMu.Unlock()
		}
		n, err := epoll.Wait(set.epfd, l.events, int(max(next-now, 0)/int64(time.Millisecond))+1)
		if err != nil && err != syscall.EINTR {
			set.s.logf("h1: loop: epoll_wait: %v", err)
			_ = set.s.stopLoops()
			continue // the stop pipe ends it
		}
		pending = l.events[:n]
	}
}

// sweepConns forgets the connections that left and ends those past their
// idle or header timeout, at now (since base), and sets the next sweep.
// The caller holds sweepMu. It ends a connection as Shutdown ends an idle
// one: it claims it closed (a loop then serving it sees that) and shuts
// its socket down, for the loop that takes its event to drop it.
func (set *loopSet) sweepConns(now int64) {
	set.mu.Lock()
	set.owned = append(set.owned, set.adds...)
	clear(set.adds)
	set.adds = set.adds[:0]
	set.mu.Unlock()

	idle, header := int64(set.s.idleTimeout()), int64(set.s.headerTimeout())
	wall := set.base.Add(time.Duration(now))
	kept := set.owned[:0]
	for _, o := range set.owned {
		c := o.c
		if c.lp.Load() == nil || c.gen.Load() != o.gen {
			continue // left, and maybe back with a newer entry
		}
		if c.guest != nil {
			if c.guest.LoopDue(wall) {
				(*hostConn)(c).wake(o.gen)
			}
			kept = append(kept, o)
			continue
		}
		switch c.state.Load() {
		case stateIdle:
			if idle > 0 && now-c.idleAt.Load() >= idle {
				c.expire(o.gen, stateIdle)
			}
		case stateHead:
			if header > 0 && now-c.headAt.Load() >= header {
				c.expire(o.gen, stateHead)
			}
		}
		kept = append(kept, o)
	}
	clear(set.owned[len(kept):])
	set.owned = kept
	every := time.Second
	for _, d := range []time.Duration{time.Duration(idle), time.Duration(header)} {
		if d > 0 {
			every = min(every, d/64)
		}
	}
	set.sweep.Store(now + int64(max(every, 5*time.Millisecond)))
}

// expire ends c for the sweep if it is still on the loops in its stay
// gen and in state from: it claims c closed, so that a loop about
// to serve it drops it instead, and shuts its socket down, so that a loop
// takes its event and drops it.
func (c *conn) expire(gen uint32, from int32) {
	c.lmu.Lock()
	defer c.lmu.Unlock()
	if c.lp.Load() != nil && c.gen.Load() == gen && c.state.CompareAndSwap(from, stateClosed) {
		_ = syscall.Shutdown(c.fd, syscall.SHUT_RDWR)
	}
}

// drop ends c, which the caller holds.
func (set *loopSet) drop(c *conn) {
	c.lmu.Lock()
	set.detach(c)
	_ = syscall.Close(c.fd)
	c.fd = -1
	c.lp.Store(nil)
	c.lmu.Unlock()
	c.state.Store(stateClosed)
	c.s.untrack(c)
}

// exit ends a loop's leader once the loops stop; the last to exit closes
// the set: its connections, the epoll instance and the stop pipe.
func (set *loopSet) exit() {
	if set.s.loopsOpen.Add(-1) != 0 {
		return
	}
	for i := range set.conns {
		if c := set.conns[i].Load(); c != nil && c.lk.CompareAndSwap(0, heldBit) {
			if c.guest != nil {
				c.guest.LoopAbandon()
			}
			set.drop(c)
		}
	}
	_ = syscall.Close(set.epfd)
	_ = syscall.Close(set.stop)
	close(set.s.loopsDone)
}

// ready serves what epoll reported on c, which l took. It reports
// whether the calling goroutine still leads l. A connection still on the
// loops after it is armed again.
func (l *loop) ready(c *conn, events uint32) bool {
	for {
		stays, leads := l.serveReady(c, events)
		if !stays || !l.set.release(c) {
			return leads
		}
		events = syscall.EPOLLIN
	}
}

// serveReady is ready's work; stays reports whether c is still on the
// loops, held by the caller.
func (l *loop) serveReady(c *conn, events uint32) (stays, leads bool) {
	if events&(syscall.EPOLLIN|syscall.EPOLLERR|syscall.EPOLLHUP) == 0 {
		return true, true
	}
	if c.state.Load() == stateClosed { // by Shutdown, which made it readable
		l.set.drop(c)
		return false, true
	}
	if c.guest != nil {
		switch c.guest.LoopReady() {
		case hosted.Waits:
			return true, true
		case hosted.Ended:
			l.set.drop(c)
			return false, true
		}
		return false, false
	}
	for reads := 0; ; reads++ {
		if reads == maxLoopReads {
			// A client that keeps sending (over TLS, where the loop reads
			// on) is served by a goroutine of its own until it pauses,
			// not at the cost of the loop's other connections.
			l.set.toGoroutine(c)
			return false, true
		}
		if _, err := c.br.Peek(c.br.Buffered() + 1); err != nil {
			switch {
			case wouldBlock(err):
				return true, true // nothing (more) arrived
			case errors.Is(err, bufio.ErrBufferFull): // a whole buffer, no head: below
			default: // EOF, reset: a head in part is lost, as net/http loses it
				l.set.drop(c)
				return false, true
			}
		}
		stays, leads, more := l.serveBuffered(c)
		if !stays || !more {
			return stays, leads
		}
	}
}

// maxLoopReads bounds the reads a loop makes for one event of a TLS
// connection.
const maxLoopReads = 4

// serveBuffered serves the whole requests c's reader holds; stays and
// leads are serveReady's. more asks the caller to read on: with TLS,
// records it read but did not decrypt yet are no socket's event, so it
// reads until the socket has nothing; a plain connection's next bytes
// wait in its socket, which the armed event reports.
func (l *loop) serveBuffered(c *conn) (stays, leads, more bool) {
	for c.br.Buffered() > 0 {
		if c.state.CompareAndSwap(stateIdle, stateActive) {
			c.headStart = time.Now()
			c.headAt.Store(l.set.since())
		} else if !c.state.CompareAndSwap(stateHead, stateActive) {
			l.set.drop(c) // closed by Shutdown or the sweep
			return false, true, false
		}
		buf, _ := c.br.Peek(c.br.Buffered())
		h, n, v := parseHead(buf, c.fields)
		if v == needMore {
			if c.br.Buffered() < c.limit {
				c.state.Store(stateHead)
				return true, true, c.batch != nil // the rest comes later, or the sweep ends it
			}
			v = handOff // too large for the lane
		}
		if v == handOff {
			l.set.handOffConn(c)
			return false, true, false
		}
		_, _ = c.br.Discard(n)
		keep, leads := l.serve(c, &h)
		if !leads {
			return false, false, false
		}
		if !keep || c.s.inShutdown.Load() {
			l.set.drop(c)
			return false, true, false
		}
		c.idleAt.Store(l.set.since())
		c.state.Store(stateIdle)
	}
	return true, true, c.batch != nil
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
func (set *loopSet) handOffConn(c *conn) {
	c.lmu.Lock()
	set.detach(c)
	err := c.backToPoller()
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

// toGoroutine moves c, which the caller holds with nothing of a request
// served but unread bytes buffered, off the loops to a goroutine of its
// own, which serves it as one that never was on a loop until it waits
// with nothing buffered again.
func (set *loopSet) toGoroutine(c *conn) {
	c.lmu.Lock()
	set.detach(c)
	if err := c.backToPoller(); err != nil {
		set.s.logf("h1: moving a connection off its loop: %v", err)
	}
	c.lp.Store(nil)
	c.lmu.Unlock()
	c.state.CompareAndSwap(stateHead, stateIdle) // its goroutine reads the rest of a head
	go func() {
		out := ended
		defer func() { c.end(recover(), out) }()
		out = c.serveRequests()
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

// hostConn is a connection of the lane that negotiated h2 over TLS, as
// the hosted.Host of the HTTP/2 lane's connection: it parks on the loops
// between its frames through fdConn, as an HTTPS/1.1 one does between
// requests. Its h1 state stays stateActive throughout (Shutdown waits for
// it as for a request in progress; the HTTP/2 lane sends its GOAWAY).
type hostConn conn

// serveH2 gives tc, which negotiated h2, to the Server's H2, hosted on the
// loops when the lane has them and H2 can be.
func (c *conn) serveH2(tc *tls.Conn) {
	if hs, ok := c.s.H2.(hosted.ConnServer); ok && c.loopable && c.batch != nil {
		hs.ServeHosted(tc, (*hostConn)(c))
		return
	}
	c.s.H2.ServeConn(tc)
}

// Park, OnLoop, Leave and Wake are the hosted.Host of the connection.

func (h *hostConn) Park(g hosted.Guest, peek func() error) bool {
	c := (*conn)(h)
	if !c.loopable {
		return false // its descriptor has no room in the loops' table
	}
	set := c.s.loops[0].set
	if set.isStopped() {
		return false
	}
	c.lmu.Lock()
	defer c.lmu.Unlock()
	if ok, _ := c.takeSocket(); !ok {
		return false // back in Go's poller, or failed: the guest's next read ends it
	}
	if c.guest == nil {
		c.guest = g // once: the loops read it without c.lmu
	}
	c.batch.Conn = (*fdConn)(c)
	// TLS may hold records it read, which no event would announce: the
	// loops take the connection only once it has none.
	if err := peek(); err == nil || !wouldBlock(err) {
		_ = c.backToPoller()
		return false
	}
	if !set.add(c, c.s.loops[0]) {
		_ = c.backToPoller()
		return false
	}
	return true
}

func (h *hostConn) OnLoop() bool { return h.lp.Load() != nil }

func (h *hostConn) Leave() { (*conn)(h).leaveLoop() }

func (h *hostConn) Wake() bool { return h.wake(h.gen.Load()) }

// wake is Wake for the connection's stay gen on the loops.
func (h *hostConn) wake(gen uint32) bool {
	c := (*conn)(h)
	c.lmu.Lock()
	defer c.lmu.Unlock()
	l := c.lp.Load()
	if l == nil || c.gen.Load() != gen {
		return false
	}
	if !c.take() {
		return true // its holder serves it again before letting go
	}
	l.set.detach(c)
	if err := c.backToPoller(); err != nil {
		c.s.logf("h1: moving a connection off its loop: %v", err)
	}
	c.lp.Store(nil)
	go c.guest.LoopResume()
	return true
}
