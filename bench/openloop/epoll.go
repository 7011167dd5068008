package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"

	"trendgate/internal/transport/epoll"
)

// As minimal-epoll, the minimal server answers plain HTTP/1.1 the way
// nginx's workers do, not with a goroutine per connection: a few event
// loops, each a goroutine that waits in epoll_wait on the connections it
// owns, reads what arrived, answers every whole request in it with one
// write, and waits again. Nothing is handed from one thread to another
// and the Go scheduler has nothing to run between requests: a loop's
// thread sleeps in the kernel until one of its sockets is readable, as an
// nginx worker does. The answers, the key check and the parse are the
// goroutine server's (minimal.go), so the two differ only in how requests
// reach the code that answers them.

// The loops make their system calls raw (package epoll, which
// trendgate's own loops use too), as nginx's workers do, without
// telling the Go scheduler: each loop keeps its processor (P) while its
// thread sleeps in epoll_wait, so the runtime never hands that processor
// to another thread, never wakes one to take it back, and its monitor
// thread (sysmon) does not poll every 20µs for processors stuck in system
// calls. (Made the runtime's way, in one step at 5,000/s, the calls cost
// 2.7 context switches a request against the goroutine server's 1.4.) The process runs one
// processor more than it has loops, for accepting, the collector and the
// admin listener. A loop is still preempted as any goroutine is: the
// signal ends its epoll_wait with EINTR.

// maxEpollFD bounds the descriptors a loop serves: it keeps its
// connections in a table indexed by descriptor.
const maxEpollFD = 1 << 16

// epollLoop is one event loop and the connections it owns.
type epollLoop struct {
	s     *minimal
	epfd  int
	stop  int                         // readable (at EOF) once the server stops
	conns []atomic.Pointer[epollConn] // by descriptor
}

// epollConn is one connection of a loop: the bytes read and not yet
// answered, and an answer's bytes the socket has not taken yet.
type epollConn struct {
	fd  int
	in  [4096]byte
	n   int
	out []byte
	// pollOut says epoll reports room to write instead of readability:
	// only while an answer waits for room.
	pollOut bool
	head    bytes.Reader  // one whole request head of in, for readRequest
	br      *bufio.Reader // reads head
}

// serveEpoll accepts connections on ln and spreads them over loops event
// loops, with a processor for each and one more (it raises GOMAXPROCS to
// loops+1 when it is lower). When accepting fails (ln closed) it stops
// the loops, closes their connections and returns the failure.
func (s *minimal) serveEpoll(ln net.Listener, loops int) error {
	if runtime.GOMAXPROCS(0) < loops+1 {
		runtime.GOMAXPROCS(loops + 1)
	}
	var stop [2]int // closing stop[1] makes stop[0] readable in every loop
	if err := syscall.Pipe2(stop[:], syscall.O_CLOEXEC|syscall.O_NONBLOCK); err != nil {
		return fmt.Errorf("pipe2: %w", err)
	}
	var running sync.WaitGroup
	defer func() {
		_ = syscall.Close(stop[1])
		running.Wait()
		_ = syscall.Close(stop[0])
	}()
	ls := make([]*epollLoop, loops)
	for i := range ls {
		epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
		if err != nil {
			return fmt.Errorf("epoll_create1: %w", err)
		}
		ev := syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(stop[0])}
		if err := syscall.EpollCtl(epfd, syscall.EPOLL_CTL_ADD, stop[0], &ev); err != nil {
			_ = syscall.Close(epfd)
			return fmt.Errorf("epoll_ctl: %w", err)
		}
		ls[i] = &epollLoop{s: s, epfd: epfd, stop: stop[0], conns: make([]atomic.Pointer[epollConn], maxEpollFD)}
		running.Go(ls[i].run)
	}
	for i := 0; ; i++ {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		fd, err := epoll.TakeFD(c)
		if err != nil {
			continue
		}
		if err := ls[i%loops].add(fd); err != nil {
			_ = syscall.Close(fd)
		}
	}
}

// add makes fd one of l's connections.
func (l *epollLoop) add(fd int) error {
	if fd >= maxEpollFD {
		return errors.New("descriptor out of range")
	}
	c := &epollConn{fd: fd}
	c.br = bufio.NewReaderSize(&c.head, len(c.in))
	l.conns[fd].Store(c)
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(fd)}
	if err := syscall.EpollCtl(l.epfd, syscall.EPOLL_CTL_ADD, fd, &ev); err != nil {
		l.conns[fd].Store(nil)
		return err
	}
	return nil
}

// run waits for the loop's sockets and serves each that is ready, until
// the server stops.
func (l *epollLoop) run() {
	defer l.close()
	events := make([]syscall.EpollEvent, 128)
	for {
		n, err := epoll.Wait(l.epfd, events, -1)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return
		}
		for _, ev := range events[:n] {
			if int(ev.Fd) == l.stop {
				return
			}
			if c := l.conns[ev.Fd].Load(); c != nil {
				l.ready(c, ev.Events)
			}
		}
	}
}

// close closes the loop's connections and its epoll instance.
func (l *epollLoop) close() {
	for i := range l.conns {
		if c := l.conns[i].Load(); c != nil {
			l.drop(c)
		}
	}
	_ = syscall.Close(l.epfd)
}

// ready serves c after epoll reported events on it: the rest of a pending
// answer first, then whatever requests arrived.
func (l *epollLoop) ready(c *epollConn, events uint32) {
	if events&(syscall.EPOLLERR|syscall.EPOLLHUP) != 0 {
		l.drop(c)
		return
	}
	if len(c.out) > 0 {
		if !l.flush(c) || len(c.out) > 0 {
			return // dropped, or still waiting for room: EPOLLOUT comes again
		}
		// Heads that arrived with the one just answered are read already:
		// no event will tell of them.
		if !l.answer(c) || len(c.out) > 0 {
			return
		}
	}
	if events&syscall.EPOLLIN == 0 {
		return
	}
	m, err := epoll.Read(c.fd, c.in[c.n:])
	switch {
	case err == syscall.EAGAIN:
		return
	case err != nil || m == 0:
		l.drop(c)
		return
	}
	c.n += m
	l.answer(c)
}

// answer answers every whole request head in c.in, in order, keeping a
// partial one for the next read. It reports false when it dropped the
// connection.
func (l *epollLoop) answer(c *epollConn) bool {
	for {
		end := bytes.Index(c.in[:c.n], []byte("\r\n\r\n"))
		if end < 0 {
			if c.n == len(c.in) {
				l.drop(c) // a head larger than the buffer
				return false
			}
			return true
		}
		end += 4
		c.head.Reset(c.in[:end])
		c.br.Reset(&c.head)
		target, bearer, err := readRequest(c.br)
		if err != nil {
			l.drop(c)
			return false
		}
		c.n = copy(c.in[:], c.in[end:c.n])
		c.out = l.s.answer(target, bearer)
		if !l.flush(c) {
			return false
		}
		if len(c.out) > 0 {
			return true // the rest waits for room; further requests with it
		}
	}
}

// flush writes what is left of c's answer. It reports false when it
// dropped the connection. When the socket takes only part, it asks epoll
// for room; when the answer is out, it stops asking.
func (l *epollLoop) flush(c *epollConn) bool {
	waiting := false
	for len(c.out) > 0 {
		m, err := epoll.Write(c.fd, c.out)
		if err == syscall.EAGAIN {
			waiting = true
			break
		}
		if err != nil {
			l.drop(c)
			return false
		}
		c.out = c.out[m:]
	}
	if waiting != c.pollOut {
		// Level-triggered: while an answer waits for room, the socket's
		// readability is not asked for, or the loop would spin on it.
		events := uint32(syscall.EPOLLIN)
		if waiting {
			events = syscall.EPOLLOUT
		}
		ev := syscall.EpollEvent{Events: events, Fd: int32(c.fd)}
		if err := syscall.EpollCtl(l.epfd, syscall.EPOLL_CTL_MOD, c.fd, &ev); err != nil {
			l.drop(c)
			return false
		}
		c.pollOut = waiting
	}
	return true
}

// drop closes c and forgets it.
func (l *epollLoop) drop(c *epollConn) {
	_ = syscall.EpollCtl(l.epfd, syscall.EPOLL_CTL_DEL, c.fd, nil)
	l.conns[c.fd].Store(nil)
	_ = syscall.Close(c.fd)
}
