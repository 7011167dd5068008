// Package batchconn joins what crypto/tls writes for one response into one
// system call.
//
// crypto/tls writes each record with its own write call, so a response of
// n records would cost n system calls. A Conn sits under a *tls.Conn:
// while held, it collects what TLS writes and sends it with one call at
// Flush. The HTTP/1.1 lane (internal/transport/h1) holds it around each response,
// the HTTP/2 lane (internal/transport/h2) around each batch of frames. A Conn also
// keeps its first write error (see Conn), which is why the connections
// net/http serves over TLS sit on one too (Listener), never held.
package batchconn

import (
	"net"
	"sync"
)

// Conn passes writes straight through to the embedded net.Conn unless
// held: the handshake (which TLS already batches per flight), alerts, and
// everything written while nobody holds it. Its buffer comes from a pool
// for the time of one hold, so idle connections keep none. The zero value
// with a Conn set is ready to use.
//
// Once a write fails, every later write fails at once with the same
// error. A TLS stream is broken after a failed write (part of a record
// may have gone out), and tls.Conn.Close would otherwise spend up to 5 s
// trying to send its close_notify alert into the full socket of a client
// that stopped reading, holding a server's drain that long.
type Conn struct {
	net.Conn

	mu  sync.Mutex // guards buf and err
	buf *[]byte    // the batch while held; nil otherwise
	err error      // the first write error; nil until one
}

// pool holds batch buffers between holds.
var pool = sync.Pool{New: func() any { b := make([]byte, 0, 64<<10); return &b }}

// maxPooled is the largest batch buffer put back in the pool; a larger
// one (a batch bigger than that) is left to the collector.
const maxPooled = 256 << 10

// Hold starts collecting writes.
func (b *Conn) Hold() {
	buf := pool.Get().(*[]byte)
	*buf = (*buf)[:0]
	b.mu.Lock()
	b.buf = buf
	b.mu.Unlock()
}

// Flush sends what was collected since Hold in one write (looping on a
// short write) and passes writes through again.
func (b *Conn) Flush() error {
	b.mu.Lock()
	buf, err := b.buf, b.err
	b.buf = nil
	b.mu.Unlock()
	if buf == nil {
		return nil
	}
	for p := *buf; len(p) > 0 && err == nil; {
		var n int
		n, err = b.write(p)
		p = p[n:]
	}
	if cap(*buf) <= maxPooled {
		pool.Put(buf)
	}
	return err
}

// Write collects p while held and writes it through otherwise.
func (b *Conn) Write(p []byte) (int, error) {
	b.mu.Lock()
	if b.err != nil {
		err := b.err
		b.mu.Unlock()
		return 0, err
	}
	if b.buf != nil {
		*b.buf = append(*b.buf, p...)
		b.mu.Unlock()
		return len(p), nil
	}
	b.mu.Unlock()
	return b.write(p)
}

// write writes p to the embedded Conn and keeps the first error.
func (b *Conn) write(p []byte) (int, error) {
	n, err := b.Conn.Write(p)
	if err != nil {
		b.mu.Lock()
		if b.err == nil {
			b.err = err
		}
		b.mu.Unlock()
	}
	return n, err
}

var _ net.Conn = (*Conn)(nil)

// Listener wraps each connection it accepts in a Conn, for a TLS server
// that never holds them: writes go straight through, and the first write
// error sticks, as in every Conn.
type Listener struct {
	net.Listener
}

// Accept returns the next connection, wrapped.
func (l Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &Conn{Conn: c}, nil
}
