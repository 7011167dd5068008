package h1_test

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"testing"
	"time"
)

// bigBody is larger than any socket buffer on loopback can hold, so that
// writing it to a client that reads slowly takes the lane's socket many
// writes and waits for room.
var bigBody = func() []byte {
	b := make([]byte, 24<<20)
	for i := range b {
		b[i] = byte(i*7 + i>>13)
	}
	return b
}()

// dialFixed dials addr with a fixed receive buffer (256 KiB, no
// autotuning), so that bigBody fills the connection whatever the host's
// limits.
func dialFixed(t *testing.T, addr string) *client {
	t.Helper()
	c := dial(t, addr)
	if err := c.c.(*net.TCPConn).SetReadBuffer(256 << 10); err != nil {
		t.Fatal(err)
	}
	return c
}

// Regression test for the lane's own socket writes (sock_linux.go): a body
// that does not fit in the socket's buffers goes out whole and in order,
// across partial writes that end inside the head, the held bytes or the
// body, and the connection serves its next request after it.
func TestLargeBodyPartialWrites(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(bigBody)))
		// The first 3,000 bytes are held; the rest goes with them and the
		// head in one writev of three parts.
		_, _ = w.Write(bigBody[:3000])
		_, _ = w.Write(bigBody[3000:])
	})
	ls := startLane(t, h, nil)
	c := dialFixed(t, ls.addr)
	for i := range 2 {
		c.send("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, body := c.read("GET")
		if resp.StatusCode != http.StatusOK || !bytes.Equal([]byte(body), bigBody) {
			t.Fatalf("response %d: got status %d and a %d-byte body (equal: %v); want 200 and the %d bytes written",
				i, resp.StatusCode, len(body), bytes.Equal([]byte(body), bigBody), len(bigBody))
		}
	}
	if n := ls.handedOff.Load(); n != 0 {
		t.Errorf("handed-off connections: got %d; want 0", n)
	}
}

// A client that stops reading gets its connection ended by the write
// timeout: the handler's Write fails with the deadline's error.
func TestWriteTimeoutClientNotReading(t *testing.T) {
	written := make(chan error, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(bigBody)))
		_, err := w.Write(bigBody)
		written <- err
	})
	ls := startLane(t, h, func(s *http.Server) { s.WriteTimeout = 100 * time.Millisecond })
	c := dialFixed(t, ls.addr)
	c.send("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	select {
	case err := <-written:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("Write: got %v; want the write deadline's error", err)
		}
	case <-time.After(guard):
		t.Fatal("the handler's Write did not return")
	}
	// The lane closes the connection: reading ends at what it had sent.
	if n, err := io.Copy(io.Discard, c.br); err != nil && !isReset(err) || n >= int64(len(bigBody)) {
		t.Errorf("after the timeout: read %d bytes, then %v; want fewer than %d, then the end", n, err, len(bigBody))
	}
}

// The same over TLS, where each of the lane's socket writes carries a
// batch of records (batchconn): whole and in order, twice on one
// connection.
func TestTLSLargeBody(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(bigBody)))
		_, _ = w.Write(bigBody)
	})
	ls, pool := startTLSLane(t, h)
	c := tlsClient(pool, "http/1.1")
	defer c.CloseIdleConnections()
	for i := range 2 {
		resp, err := c.Get("https://" + ls.addr + "/")
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || !bytes.Equal(body, bigBody) {
			t.Fatalf("response %d: got a %d-byte body (equal: %v), %v; want the %d bytes written",
				i, len(body), bytes.Equal(body, bigBody), err, len(bigBody))
		}
	}
	if n := ls.handedOff.Load(); n != 0 {
		t.Errorf("handed-off connections: got %d; want 0", n)
	}
}
