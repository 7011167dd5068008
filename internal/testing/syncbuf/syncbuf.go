// Package syncbuf is a byte buffer that concurrent writers and a reader
// may share: the log sink a test reads while the servers it started write
// to it. It must not be used where the output can grow without bound.
package syncbuf

import (
	"bytes"
	"sync"
)

// Buffer is an io.Writer (and a zapcore.WriteSyncer) whose contents may
// be read at any time. The zero value is an empty buffer.
type Buffer struct {
	mu  sync.Mutex // guards buf
	buf bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// Sync does nothing: everything written is already in the buffer.
func (b *Buffer) Sync() error { return nil }

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
