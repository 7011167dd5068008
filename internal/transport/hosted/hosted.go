// Package hosted is the contract between the HTTP/1.1 lane's event loops
// and a connection another lane serves (HTTP/2 over TLS): such a
// connection waits for its next bytes on the loops, as an HTTP/1.1 one
// does, instead of parking a goroutine in Go's poller, and the loops run
// its frames when they come. The loops' processors then serve it, not
// the one processor the loops leave to goroutines.
//
// The two sides do not import each other: package h1 is the Host, the
// HTTP/2 lane's connection the Guest.
package hosted

import (
	"errors"
	"net"
	"syscall"
	"time"
)

// Outcome is what a Guest did with an event of the loops.
type Outcome int

const (
	// Waits: it read everything there was and waits on the loops again.
	Waits Outcome = iota
	// Ended: it ended while on the loop; the loops close its descriptor.
	Ended
	// Left: it left the loops on the way (Host.Leave); the calling
	// goroutine served it on from Go's poller and no longer leads the
	// loop, whose next events a new goroutine serves.
	Left
)

// Guest is a connection served by another lane while it is on the loops.
// LoopReady and LoopAbandon are called by the loop goroutine that holds
// the connection, one at a time; LoopDue by the loops' sweep, whenever.
type Guest interface {
	// LoopReady serves what arrived: it reads, without waiting, until the
	// socket has nothing more. The socket reads and writes without
	// waiting while the connection is on the loops.
	LoopReady() Outcome
	// LoopDue reports whether the connection has a deadline that passed
	// at now; the loops then move it off (as Host.Wake does) so that its
	// reader meets it. Called by the loops' periodic sweep.
	LoopDue(now time.Time) bool
	// LoopResume serves the connection from Go's poller, on a goroutine
	// of its own, once the loops moved it off (Host.Wake, LoopDue).
	LoopResume()
	// LoopAbandon ends the connection without writing anything: the
	// loops are stopping under it.
	LoopAbandon()
}

// Host is the connection's side on the loops.
type Host interface {
	// Park moves the connection onto the loops once its reader has
	// nothing buffered and nothing to wait for but its next bytes. peek
	// then reads one byte ahead without waiting (the socket is off Go's
	// poller while it runs): an error that WouldBlock means nothing is
	// there and the connection goes on the loops (true); anything else
	// (data, or an error) leaves it with the calling goroutine (false).
	Park(g Guest, peek func() error) bool
	// OnLoop reports whether the connection is on the loops.
	OnLoop() bool
	// Leave takes the connection off the loop that serves it, to be
	// served on from Go's poller by the calling goroutine, the loop's
	// leader, which a new goroutine replaces as leader. No-op when the
	// connection is not on the loops.
	Leave()
	// Wake moves a connection on the loops off them: at once, to a new
	// goroutine running the Guest's LoopResume, when no loop holds it;
	// otherwise the loop that holds it serves it once more (LoopReady),
	// which then finds why. It reports false when the connection is not
	// on the loops.
	Wake() bool
}

// ConnServer is a lane that can serve a connection hosted on the loops.
type ConnServer interface {
	// ServeHosted serves c, whose TLS handshake is done, as ServeConn
	// does, parking it on h's loops whenever it waits for its next bytes.
	ServeHosted(c net.Conn, h Host)
}

// WouldBlock reports whether err, from a read or write of a connection
// on the loops (through TLS or not), means the socket had nothing to give
// or no room to take.
func WouldBlock(err error) bool {
	return errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EINTR)
}
