package h1_test

import (
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// deadlineCounter is a listener whose connections count the read
// deadlines armed on them.
type deadlineCounter struct {
	net.Listener
	reads atomic.Int64
}

func (l *deadlineCounter) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &deadlineConn{Conn: c, reads: &l.reads}, nil
}

type deadlineConn struct {
	net.Conn
	reads *atomic.Int64
}

func (c *deadlineConn) SetReadDeadline(t time.Time) error {
	c.reads.Add(1)
	return c.Conn.SetReadDeadline(t)
}

// TestIdleDeadlineNotReArmedPerRequest: a keep-alive connection's requests
// leave the idle deadline armed a little beyond what each asks (by up to
// 1/64 of the idle timeout) instead of moving the runtime's timer on every
// request: 50 requests, within 1/64 of a 10-minute idle timeout, arm it
// once.
func TestIdleDeadlineNotReArmedPerRequest(t *testing.T) {
	l := &deadlineCounter{Listener: listen(t)}
	ls := startLaneOn(t, l, echo, func(s *http.Server) { s.IdleTimeout = 10 * time.Minute })
	c := dial(t, ls.addr)
	for i := range 50 {
		c.send(fmt.Sprintf("GET /seq%d HTTP/1.1\r\nHost: x\r\n\r\n", i))
		if resp, _ := c.read("GET"); resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: status %d", i, resp.StatusCode)
		}
	}
	n := l.reads.Load()
	if n > 2 {
		t.Errorf("read deadlines armed for 50 requests: %d; want at most 2", n)
	}
	t.Logf("read deadlines armed for 50 requests: %d", n)
}
