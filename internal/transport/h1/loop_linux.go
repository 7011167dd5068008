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
// The loops keep the lane's deadlines themselves: the idle and header
// timeouts are checked by a sweep over their connections (every 1/64 of
// the shorter timeout, between 5 ms and 1 s, by whichever loop finds it
// due), so a connection may outlive either by that much. A loop never
// waits to write.

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
	set.mu.Lock()
	stopped := set.stopped
	set.mu.Unlock()
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
		// No room in the loops' table: serve it as it came, from Go's poller.
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
	// lp only says "on the loops" until a loop takes c and names itself.
	if !set.add(c, c.s.loops[0]) {
		_ = syscall.Close(fd)
		c.fd = -1
		return ended, true
	}
	return onLoop, true
}

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
	headStart time.Time    // when the first byte of the head it reads arrived
	idleAt    atomic.Int64 // when it began to wait for a request (loopSet.since)
	headAt    atomic.Int64 // headStart, for the sweep (loopSet.since)
	wiov      [3]syscall.Iovec
	gen       atomic.Uint32 // its stay on the loops (loopSet.gens), in its events
	lk        atomic.Uint32 // heldBit, missedBit
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
	l.set.detach(c)
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
	kept := set.owned[:0]
	for _, o := range set.owned {
		c := o.c
		if c.lp.Load() == nil || c.gen.Load() != o.gen {
			continue // left, and maybe back with a newer entry
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
	if _, err := c.br.Peek(c.br.Buffered() + 1); err != nil {
		switch {
		case err == syscall.EAGAIN || err == syscall.EINTR:
			return true, true // nothing arrived after all
		case errors.Is(err, bufio.ErrBufferFull): // a whole buffer, no head: below
		default: // EOF, reset: a head in part is lost, as net/http loses it
			l.set.drop(c)
			return false, true
		}
	}
	for c.br.Buffered() > 0 {
		if c.state.CompareAndSwap(stateIdle, stateActive) {
			c.headStart = time.Now()
			c.headAt.Store(l.set.since())
		} else if !c.state.CompareAndSwap(stateHead, stateActive) {
			l.set.drop(c) // closed by Shutdown or the sweep
			return false, true
		}
		buf, _ := c.br.Peek(c.br.Buffered())
		h, n, v := parseHead(buf, c.fields)
		if v == needMore {
			if c.br.Buffered() < c.limit {
				c.state.Store(stateHead)
				return true, true // the rest comes with a later event, or the sweep ends it
			}
			v = handOff // too large for the lane
		}
		if v == handOff {
			l.set.handOffConn(c)
			return false, true
		}
		_, _ = c.br.Discard(n)
		keep, leads := l.serve(c, &h)
		if !leads {
			return false, false
		}
		if !keep || c.s.inShutdown.Load() {
			l.set.drop(c)
			return false, true
		}
		c.idleAt.Store(l.set.since())
		c.state.Store(stateIdle)
	}
	return true, true
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
