// Package epoll holds the raw Linux system calls an event loop makes: an
// epoll_pwait, reads and writes that bypass the Go scheduler, and the moves
// of a socket out of the runtime's poller and back into it.
//
// The calls are raw (syscall.RawSyscall): the goroutine keeps its
// processor (P) while its thread sleeps in the kernel, so the runtime never
// hands that processor to another thread and never wakes one to take it
// back. A loop built on them owns a processor for good; the process needs
// one more than it runs loops. Such a goroutine is still preempted as any
// other: the runtime's preemption signal ends a Wait with EINTR.
package epoll

import (
	"errors"
	"net"
	"os"
	"runtime"
	"syscall"
	"unsafe"
)

// Wait is epoll_pwait on epfd with no signal mask: it fills events and
// returns how many it filled, waiting up to msec milliseconds (-1: no
// limit). A signal ends it with syscall.EINTR.
func Wait(epfd int, events []syscall.EpollEvent, msec int) (int, error) {
	n, _, errno := syscall.RawSyscall6(syscall.SYS_EPOLL_PWAIT, uintptr(epfd),
		uintptr(unsafe.Pointer(&events[0])), uintptr(len(events)), uintptr(msec), 0, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

// Read is read(2) on fd into b, which must not be empty.
func Read(fd int, b []byte) (int, error) { return rawIO(syscall.SYS_READ, fd, b) }

// Write is write(2) of b, which must not be empty, on fd.
func Write(fd int, b []byte) (int, error) { return rawIO(syscall.SYS_WRITE, fd, b) }

func rawIO(trap uintptr, fd int, b []byte) (int, error) {
	n, _, errno := syscall.RawSyscall(trap, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

// Writev is writev(2) of the non-empty buffers of bufs on fd, using iov
// for the vector (it needs one element per non-empty buffer). It returns
// how many bytes the socket took: possibly fewer than all.
func Writev(fd int, bufs [][]byte, iov []syscall.Iovec) (int, error) {
	k := 0
	for _, b := range bufs {
		if len(b) > 0 {
			iov[k] = syscall.Iovec{Base: &b[0]}
			iov[k].SetLen(len(b))
			k++
		}
	}
	if k == 0 {
		return 0, nil
	}
	n, _, errno := syscall.RawSyscall(syscall.SYS_WRITEV, uintptr(fd), uintptr(unsafe.Pointer(&iov[0])), uintptr(k))
	runtime.KeepAlive(bufs)
	clear(iov[:k]) // keep no reference to the buffers
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

// TakeFD takes c's socket out of Go's poller: it returns a duplicate of
// its descriptor, close-on-exec and non-blocking, and closes c, which
// removes the original from the runtime's epoll set while the socket
// lives on in the duplicate. c is closed on failure too. It fails for a
// connection that is no socket (syscall.Conn).
func TakeFD(c net.Conn) (int, error) {
	defer c.Close()
	sc, ok := c.(syscall.Conn)
	if !ok {
		return -1, errors.New("epoll: not a socket")
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd := -1
	var dupErr error
	if err := raw.Control(func(orig uintptr) {
		fd, dupErr = dupCloexec(int(orig))
	}); err != nil {
		return -1, err
	}
	if dupErr != nil {
		return -1, dupErr
	}
	if err := syscall.SetNonblock(fd, true); err != nil {
		_ = syscall.Close(fd)
		return -1, err
	}
	return fd, nil
}

// GiveFD is TakeFD's way back: a net.Conn on a duplicate of fd, in Go's
// poller, so that its reads and writes park the goroutine and honour
// deadlines. fd stays open and the caller's.
func GiveFD(fd int) (net.Conn, error) {
	dup, err := dupCloexec(fd)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(dup), "")
	defer f.Close() // FileConn makes its own duplicate
	return net.FileConn(f)
}

func dupCloexec(fd int) (int, error) {
	nfd, _, errno := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_DUPFD_CLOEXEC, 0)
	if errno != 0 {
		return -1, errno
	}
	return int(nfd), nil
}
