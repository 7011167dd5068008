package h1

import (
	"net"
	"sync"
)

// batchConn is the connection under a lane's TLS connection. crypto/tls
// writes each record with its own write call, so a response of n records
// would cost n system calls; while held, batchConn collects what TLS
// writes and sends it with one call at flush. It passes writes straight
// through otherwise: the handshake (which TLS already batches per flight),
// alerts, and everything net/http writes once a connection is handed to
// it. Its buffer comes from a pool for the time of one response, so idle
// connections hold none.
type batchConn struct {
	net.Conn

	mu  sync.Mutex // guards buf
	buf *[]byte    // the batch while held; nil otherwise
}

// batchPool holds batch buffers between responses.
var batchPool = sync.Pool{New: func() any { b := make([]byte, 0, 64<<10); return &b }}

// maxPooledBatch is the largest batch buffer put back in the pool; a
// larger one (a response bigger than that) is left to the collector.
const maxPooledBatch = 256 << 10

// hold starts collecting writes.
func (b *batchConn) hold() {
	buf := batchPool.Get().(*[]byte)
	*buf = (*buf)[:0]
	b.mu.Lock()
	b.buf = buf
	b.mu.Unlock()
}

// flush sends what was collected since hold in one write (looping on a
// short write) and passes writes through again.
func (b *batchConn) flush() error {
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
	if cap(*buf) <= maxPooledBatch {
		batchPool.Put(buf)
	}
	return err
}

func (b *batchConn) Write(p []byte) (int, error) {
	b.mu.Lock()
	if b.buf != nil {
		*b.buf = append(*b.buf, p...)
		b.mu.Unlock()
		return len(p), nil
	}
	b.mu.Unlock()
	return b.Conn.Write(p)
}

var _ net.Conn = (*batchConn)(nil)
