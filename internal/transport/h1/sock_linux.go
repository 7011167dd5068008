//go:build linux

package h1

import (
	"io"
	"net"
	"syscall"
	"unsafe"
)

// sock reads and writes a plain TCP connection with raw system calls, so
// that the lane's reads and writes do not pass through the runtime's
// entersyscall and exitsyscall.
//
// Why: at the rates clients send, the process goes idle between requests,
// and then the runtime's monitor thread (sysmon) sleeps until a goroutine
// next enters a system call. With net.Conn's Read and Write, the read of
// every request that finds the process idle wakes it (a futex wake-up and a
// switch to another thread), and it then polls every 20 µs until the
// process is idle again: 10–12 % of the lane's CPU at 3,000 requests/s
// (docs/performance.md). The socket is non-blocking (the runtime's poller
// waits for it), so these calls never block and need none of what
// entersyscall is for: handing the P to another thread while this one
// waits in the kernel. The waiting itself still goes through the poller
// (syscall.RawConn), with the connection's deadlines.
//
// What the runtime gives up: while sysmon sleeps, it preempts no
// long-running goroutine. It sleeps only when every P was idle, and wakes
// at the next system call any goroutine enters the normal way (an upstream
// request, a log write) or the next timer, so a hit's few microseconds of
// work are all that run unpreemptible.
type sock struct {
	rc syscall.RawConn

	// The operation in progress, for the method values below, which are
	// made once so that no read or write allocates a closure. Owned by
	// whichever goroutine holds the connection's read (rbuf, rn, rerr) or
	// write (iov, wn, werr) lock: the poller's locks serialize them.
	rbuf     []byte
	rn       int
	rerr     syscall.Errno
	readFn   func(fd uintptr) bool
	pending  [3][]byte // what writevFn has still to send
	iov      [3]syscall.Iovec
	wn       int64
	werr     syscall.Errno
	writevFn func(fd uintptr) bool
}

// newSock returns a sock for rwc, or nil when rwc is not a TCP connection
// (then the lane uses rwc itself).
func newSock(rwc net.Conn) *sock {
	tc, ok := rwc.(*net.TCPConn)
	if !ok {
		return nil
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return nil
	}
	s := &sock{rc: rc}
	s.readFn = s.read
	s.writevFn = s.writev
	return s
}

// Read reads as net.Conn's Read does: io.EOF when the peer closed, the
// connection's read deadline and errors as *net.OpError (from the
// poller).
func (s *sock) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	s.rbuf, s.rn, s.rerr = p, 0, 0
	err := s.rc.Read(s.readFn)
	n, errno := s.rn, s.rerr
	s.rbuf = nil
	switch {
	case err != nil:
		return 0, err
	case errno != 0:
		return 0, &net.OpError{Op: "read", Net: "tcp", Err: errno}
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// read is the poller's callback: it reports false to wait for the socket
// to become readable.
func (s *sock) read(fd uintptr) bool {
	for {
		r, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&s.rbuf[0])), uintptr(len(s.rbuf)))
		switch e {
		case 0:
			s.rn = int(r)
			return true
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		s.rerr = e
		return true
	}
}

// writeBuffers writes every non-empty one of bufs, in order, as
// net.Buffers' WriteTo does (one writev, more when the socket takes only
// part); it waits for the socket, within the write deadline, when it is
// full.
func (s *sock) writeBuffers(bufs [3][]byte) (int64, error) {
	s.pending, s.wn, s.werr = bufs, 0, 0
	err := s.rc.Write(s.writevFn)
	n, errno := s.wn, s.werr
	s.pending = [3][]byte{}
	s.iov = [3]syscall.Iovec{}
	switch {
	case err != nil:
		return n, err
	case errno != 0:
		return n, &net.OpError{Op: "write", Net: "tcp", Err: errno}
	}
	return n, nil
}

// writev is the poller's callback: it reports false to wait for the
// socket to become writable.
func (s *sock) writev(fd uintptr) bool {
	for {
		n := 0
		for _, b := range s.pending {
			if len(b) > 0 {
				s.iov[n] = syscall.Iovec{Base: &b[0]}
				s.iov[n].SetLen(len(b))
				n++
			}
		}
		if n == 0 {
			return true
		}
		r, _, e := syscall.RawSyscall(syscall.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&s.iov[0])), uintptr(n))
		switch e {
		case 0:
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		default:
			s.werr = e
			return true
		}
		if r == 0 { // cannot happen with bytes to send; do not spin
			s.werr = syscall.EIO
			return true
		}
		s.wn += int64(r)
		for i := range s.pending { // consume r bytes
			b := s.pending[i]
			k := min(len(b), int(r))
			s.pending[i] = b[k:]
			r -= uintptr(k)
		}
	}
}
