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
// it.
type batchConn struct {
	net.Conn

	mu   sync.Mutex // guards held and buf
	held bool
	buf  []byte
}

// maxKeptBatch is the largest batch buffer kept between responses; a
// larger one (a response bigger than that) is released after its flush.
const maxKeptBatch = 256 << 10

// hold starts collecting writes.
func (b *batchConn) hold() {
	b.mu.Lock()
	b.held = true
	b.mu.Unlock()
}

// flush sends what was collected since hold in one write (looping on a
// short write) and passes writes through again.
func (b *batchConn) flush() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.held = false
	var err error
	for p := b.buf; len(p) > 0 && err == nil; {
		var n int
		n, err = b.Conn.Write(p)
		p = p[n:]
	}
	if cap(b.buf) > maxKeptBatch {
		b.buf = nil
	} else {
		b.buf = b.buf[:0]
	}
	return err
}

func (b *batchConn) Write(p []byte) (int, error) {
	b.mu.Lock()
	if b.held {
		b.buf = append(b.buf, p...)
		b.mu.Unlock()
		return len(p), nil
	}
	b.mu.Unlock()
	return b.Conn.Write(p)
}

var _ net.Conn = (*batchConn)(nil)
