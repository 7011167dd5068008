package batchconn

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"trendgate/internal/testing/testcert"
)

// countingConn counts the writes that reach it and fails each while fail
// is set.
type countingConn struct {
	net.Conn
	writes atomic.Int32
	fail   atomic.Bool
}

var errBroken = errors.New("broken pipe")

func (c *countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	if c.fail.Load() {
		return 0, errBroken
	}
	return c.Conn.Write(p)
}

func newCounting(t *testing.T) (*countingConn, net.Conn) {
	t.Helper()
	a, b := net.Pipe()
	t.Cleanup(func() { a.Close(); b.Close() })
	return &countingConn{Conn: a}, b
}

func TestWriteErrorSticks(t *testing.T) {
	for _, held := range []bool{false, true} {
		inner, peer := newCounting(t)
		go func() { _, _ = io.Copy(io.Discard, peer) }() // a reader: a write that gets through does not block
		inner.fail.Store(true)
		c := &Conn{Conn: inner}
		var err error
		if held {
			c.Hold()
			if _, err := c.Write([]byte("first")); err != nil {
				t.Fatalf("held write: %v; want it collected", err)
			}
			err = c.Flush()
		} else {
			_, err = c.Write([]byte("first"))
		}
		if !errors.Is(err, errBroken) {
			t.Fatalf("held %v: first write: %v; want %v", held, err, errBroken)
		}
		inner.fail.Store(false) // the socket would take bytes again
		if n, err := c.Write([]byte("second")); n != 0 || !errors.Is(err, errBroken) {
			t.Errorf("held %v: write after a failed one: %d, %v; want 0, %v", held, n, err, errBroken)
		}
		c.Hold()
		_, _ = c.Write([]byte("third"))
		if err := c.Flush(); !errors.Is(err, errBroken) {
			t.Errorf("held %v: flush after a failed write: %v; want %v", held, err, errBroken)
		}
		if got := inner.writes.Load(); got != 1 {
			t.Errorf("held %v: %d writes reached the connection; want 1 (none after the failure)", held, got)
		}
	}
}

// TestTLSCloseAfterFailedWrite: once a write to a client that stopped
// reading has timed out, tls.Conn.Close must not write its close_notify
// alert into the connection (it would wait up to 5 s for a reader that
// never comes).
func TestTLSCloseAfterFailedWrite(t *testing.T) {
	cert := testcert.New(t, testcert.Options{})
	inner, clientEnd := newCounting(t)
	server := tls.Server(&Conn{Conn: inner}, &tls.Config{Certificates: []tls.Certificate{cert.TLS}})
	client := tls.Client(clientEnd, &tls.Config{RootCAs: cert.Pool(), ServerName: "tg.test"})
	handshook := make(chan error, 1)
	go func() { handshook <- client.Handshake() }()
	if err := server.Handshake(); err != nil {
		t.Fatal(err)
	}
	if err := <-handshook; err != nil {
		t.Fatal(err)
	}

	// The client reads nothing more: a write with its deadline passed
	// fails at once, as one would once the socket had filled.
	if err := server.SetWriteDeadline(time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := server.Write([]byte("a response nobody reads")); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("write past the deadline: %v; want %v", err, os.ErrDeadlineExceeded)
	}
	before := inner.writes.Load()
	closed := make(chan error, 1)
	go func() { closed <- server.Close() }()
	select {
	case err := <-closed:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("Close: %v; want the write's error back", err)
		}
	case <-time.After(10 * time.Second): // only ends a broken test
		t.Fatal("tls.Conn.Close still waiting to send close_notify to a client that reads nothing")
	}
	if got := inner.writes.Load(); got != before {
		t.Errorf("Close wrote %d more times to a connection whose write had failed; want none", got-before)
	}
}

func TestListenerWraps(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := Listener{ln}
	defer l.Close()
	go func() {
		if c, err := net.Dial("tcp", ln.Addr().String()); err == nil {
			c.Close()
		}
	}()
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, ok := c.(*Conn); !ok {
		t.Errorf("Accept returned %T; want *Conn", c)
	}
	ln.Close()
	if _, err := l.Accept(); err == nil {
		t.Error("Accept on a closed listener: no error")
	}
}
