//go:build !linux

package h1

import (
	"crypto/tls"
	"errors"
	"net"
)

// Event loops need epoll; elsewhere every connection has a goroutine, and
// Serve refuses a Server with Loops.

type loop struct{}

type loopConn struct{}

func (s *Server) loopable(net.Conn) bool { return false }

func (s *Server) startLoops() error {
	if s.Loops > 0 {
		return errors.New("h1: event loops (Loops) need Linux")
	}
	return nil
}

func (s *Server) stopLoops() <-chan struct{} { return nil }

func (c *conn) enterLoop() (outcome, bool) { return ended, false }

func (c *conn) leaveLoop() {}

func (c *conn) writeOnLoop([][]byte) (int, error) { return 0, errors.New("h1: no event loops") }

type connReader struct{ c *conn }

func (r connReader) Read(p []byte) (int, error) { return r.c.rwc.Read(p) }

func (c *conn) closeIdle() {
	if c.rwc != nil {
		_ = c.rwc.Close()
	}
}

func (c *conn) serveH2(tc *tls.Conn) { c.s.H2.ServeConn(tc) }
