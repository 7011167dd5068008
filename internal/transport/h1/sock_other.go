//go:build !linux

package h1

import "net"

// sock is the raw-system-call I/O of sock_linux.go; elsewhere the lane
// uses net.Conn's own Read and Write (newSock returns nil).
type sock struct{}

func newSock(net.Conn) *sock { return nil }

func (*sock) Read([]byte) (int, error) { panic("h1: no sock on this system") }

func (*sock) writeBuffers([3][]byte) (int64, error) { panic("h1: no sock on this system") }
