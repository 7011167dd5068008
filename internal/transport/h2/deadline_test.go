package h2_test

import (
	"context"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"trendgate/internal/transport/h2"
)

// deadlineConn counts the read deadlines armed on a connection.
type deadlineConn struct {
	net.Conn
	reads *atomic.Int64
}

func (c *deadlineConn) SetReadDeadline(t time.Time) error {
	c.reads.Add(1)
	return c.Conn.SetReadDeadline(t)
}

// TestIdleDeadlineNotReArmedPerRequest: requests answered one after the
// other on a connection leave its idle deadline armed a little beyond what
// each asks (by up to 1/64 of the idle timeout) instead of moving the
// runtime's timer on every frame read: 50 requests within 1/64 of a
// 10-minute idle timeout arm it at most a few times (the SETTINGS exchange
// arms its own).
func TestIdleDeadlineNotReArmedPerRequest(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var reads atomic.Int64
	ln := &lane{
		srv: &h2.Server{
			Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok")) }),
			Base:    &http.Server{IdleTimeout: 10 * time.Minute},
		},
		addr: l.Addr().String(),
	}
	var served sync.WaitGroup
	served.Go(func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		ln.srv.ServeConn(&deadlineConn{Conn: c, reads: &reads})
	})
	t.Cleanup(func() {
		_ = l.Close()
		ctx, cancel := context.WithTimeout(context.Background(), guard)
		defer cancel()
		_ = ln.srv.Shutdown(ctx)
		served.Wait()
	})
	c := handshake(t, ln)
	before := reads.Load()
	for i := range 50 {
		id := uint32(2*i + 1)
		c.request(id, "GET", "/", true)
		if r := c.response(id); r.status != http.StatusOK {
			t.Fatalf("request %d: status %d", i, r.status)
		}
	}
	n := reads.Load() - before
	if n > 3 {
		t.Errorf("read deadlines armed for 50 requests: %d; want at most 3", n)
	}
	t.Logf("read deadlines armed for 50 requests: %d", n)
}
