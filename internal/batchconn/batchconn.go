// Package batchconn joins what crypto/tls writes for one response into one
// system call.
//
// crypto/tls writes each record with its own write call, so a response of
// n records would cost n system calls. A Conn sits under a *tls.Conn:
// while held, it collects what TLS writes and sends it with one call at
// Flush. The HTTP/1.1 lane (internal/h1) holds it around each response,
// the HTTP/2 lane (internal/h2) around each batch of frames.
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
type Conn struct {
	net.Conn

	mu  sync.Mutex // guards buf
	buf *[]byte    // the batch while held; nil otherwise
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
	buf := b.buf
	b.buf = nil
	b.mu.Unlock()
	if buf == nil {
		return nil
	}
	var err error
	for p := *buf; len(p) > 0 && err == nil; {
		var n int
		n, err = b.Conn.Write(p)
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
	if b.buf != nil {
		*b.buf = append(*b.buf, p...)
		b.mu.Unlock()
		return len(p), nil
	}
	b.mu.Unlock()
	return b.Conn.Write(p)
}

var _ net.Conn = (*Conn)(nil)
