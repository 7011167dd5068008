// Package h2 serves HTTP/2 over TLS for an API whose requests are GET or
// HEAD without a body, with the same http.Handler the HTTP/1.1 lane calls.
//
// Go's net/http HTTP/2 server runs every stream in its own goroutine,
// hands every frame to a separate serving goroutine and writes through a
// frame scheduler; for a cache hit of a few microseconds that machinery
// costs more than the work. This lane reads a connection's frames on one
// goroutine and runs a stream's handler right there, so a cache hit costs
// no goroutine hop. The frames every handler of a batch produced leave in
// one write: under TLS, one tls.Conn.Write whose records one system call
// sends (package internal/transport/batchconn).
//
// Frames are read and written with golang.org/x/net/http2's Framer and
// header blocks coded with its hpack package; the lane implements the
// protocol's rules on top (stream states, flow control both ways, header
// validation, limits) as RFC 9113 states them.
//
// # Invariants
//
// A handler runs on the connection's reading goroutine until it asks its
// request context for Done, or until one of its writes has to wait for
// the client's flow-control credit. At that moment the connection's
// reading moves to a new goroutine and the handler keeps the one it runs
// on, so only handlers that wait pay for a goroutine. The other side of
// that bargain: a handler that blocks without first asking for Done
// (Err and Value do not count) holds up every other stream of its
// connection, and its control frames, until it returns. The gateway's
// long waits (a coalesced cache fill, an upstream request, the in-flight
// byte bound) all wait on ctx.Done.
//
// Request bodies are never read: a request whose HEADERS do not end the
// stream reaches the handler with ContentLength -1 (or its
// content-length) and a Body that fails, as the API refuses bodies
// anyway; its DATA is counted, checked against its content-length and
// discarded, and its flow-control credit given back.
//
// What the lane serves, it must answer as Go's HTTP/2 server would: the
// request with Proto "HTTP/2.0", Host from :authority, r.TLS, and a
// context canceled when the stream is reset, the connection ends or the
// handler returns; the response with net/http's rules for status codes,
// content-length (computed for a body held whole), a sniffed
// Content-Type, Date and HEAD (the head and its length, no DATA), and
// http.Flusher; one addition, as on the HTTP/1.1 lane: the writer's
// WriteHeaderFields takes part of the head serialized by the handler. One
// difference for the handler, as on the HTTP/1.1 lane:
// the request's Header map (and the values in it) belongs to its pooled
// stream and is cleared and refilled for a later request, so a handler
// must not use r.Header after it returns (the request itself, its URL
// and its context stay its own). The gateway's
// TestTLSHTTP2LaneMatchesNetHTTP sends the same requests through this
// lane and through Go's server and requires the same statuses, fields
// and bytes.
package h2

import (
	"context"
	"log"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"trendgate/internal/transport/hosted"
)

// Server serves HTTP/2 connections handed to ServeConn. Handler and Base
// are required; the zero value of the other fields means their default.
type Server struct {
	// Handler answers every request.
	Handler http.Handler
	// Base is the net/http server this lane stands in for: its
	// ReadHeaderTimeout, ReadTimeout, WriteTimeout, IdleTimeout,
	// MaxHeaderBytes and ErrorLog apply here as described on ServeConn,
	// and request contexts carry it as http.ServerContextKey.
	Base *http.Server
	// MaxConcurrentStreams is advertised in SETTINGS and enforced; 0
	// means DefaultMaxConcurrentStreams.
	MaxConcurrentStreams uint32
	// RequestContext, when not nil, wraps the context of each request:
	// the request arrives at Handler with the context it returns, which
	// must keep ctx's values, deadline and cancellation (see the h1
	// lane's field of the same name).
	RequestContext func(ctx context.Context) context.Context
	// ConnContext, when not nil, wraps the context every request on one
	// connection starts from, once, when ServeConn begins (as net/http's
	// Server.ConnContext): it must keep ctx's values. The connection's
	// streams run at once, so what it adds is shared by concurrent
	// handlers.
	ConnContext func(ctx context.Context, c net.Conn) context.Context

	inShutdown atomic.Bool
	date       atomic.Pointer[dateValue]

	mu    sync.Mutex // guards conns
	conns map[*conn]struct{}
}

// DefaultMaxConcurrentStreams is the stream limit when
// Server.MaxConcurrentStreams is 0 (nginx's default).
const DefaultMaxConcurrentStreams = 128

// ServeConn serves one connection whose TLS handshake negotiated "h2"
// (it may also be any net.Conn speaking HTTP/2 with prior knowledge, as
// tests do) and returns when the connection has ended and every handler
// it started has returned. It closes nc.
//
// Timeouts, from Base: the client preface and a header block must
// arrive within ReadHeaderTimeout (ReadTimeout when zero); a connection
// with no request in progress is closed after IdleTimeout (ReadTimeout
// when zero); each write to the connection must finish within
// WriteTimeout, and a response held up by flow control for longer than
// WriteTimeout (IdleTimeout when zero) is reset. A client must
// acknowledge the server's SETTINGS within settingsAckTimeout.
// MaxHeaderBytes bounds the decoded header list of a request
// (SETTINGS_MAX_HEADER_LIST_SIZE; http.DefaultMaxHeaderBytes when zero).
func (s *Server) ServeConn(nc net.Conn) {
	s.serveConn(nc, nil)
}

// ServeHosted is ServeConn for a connection that waits for its next
// frames on host's event loops (hosted.ConnServer): a loop reads and
// serves its frames, and its handlers run there until one waits.
func (s *Server) ServeHosted(nc net.Conn, host hosted.Host) { s.serveConn(nc, host) }

func (s *Server) serveConn(nc net.Conn, host hosted.Host) {
	if s.Handler == nil || s.Base == nil {
		_ = nc.Close()
		s.logf("h2: Server needs a Handler and a Base")
		return
	}
	c := newConn(s, nc)
	c.host = host
	if !s.track(c) {
		_ = nc.Close()
		return
	}
	defer s.untrack(c)
	c.serve()
}

// Shutdown stops the lane gracefully: every connection gets a GOAWAY
// naming the last stream it will serve, its streams in progress finish,
// and it closes; connections handed to ServeConn afterwards are closed at
// once. Shutdown returns when every connection has ended, or with ctx's
// error when ctx ends first.
func (s *Server) Shutdown(ctx context.Context) error {
	s.inShutdown.Store(true)
	s.mu.Lock()
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.goAwayGraceful()
	}
	for _, c := range conns {
		select {
		case <-c.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// track registers c; it reports false once Shutdown has begun.
func (s *Server) track(c *conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inShutdown.Load() {
		return false
	}
	if s.conns == nil {
		s.conns = make(map[*conn]struct{})
	}
	s.conns[c] = struct{}{}
	return true
}

func (s *Server) untrack(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

func (s *Server) logf(format string, args ...any) {
	if s.Base != nil && s.Base.ErrorLog != nil {
		s.Base.ErrorLog.Printf(format, args...)
		return
	}
	log.Printf(format, args...)
}

func (s *Server) maxStreams() uint32 {
	if s.MaxConcurrentStreams > 0 {
		return s.MaxConcurrentStreams
	}
	return DefaultMaxConcurrentStreams
}

// maxHeaderListSize is SETTINGS_MAX_HEADER_LIST_SIZE: Base's
// MaxHeaderBytes, as net/http's HTTP/2 derives it.
func (s *Server) maxHeaderListSize() uint32 {
	n := s.Base.MaxHeaderBytes
	if n <= 0 {
		n = http.DefaultMaxHeaderBytes
	}
	return uint32(n)
}

func (s *Server) headerTimeout() time.Duration {
	if d := s.Base.ReadHeaderTimeout; d > 0 {
		return d
	}
	return s.Base.ReadTimeout
}

func (s *Server) idleTimeout() time.Duration {
	if d := s.Base.IdleTimeout; d != 0 {
		return d
	}
	return s.Base.ReadTimeout
}

// stallTimeout bounds how long a response may wait for flow-control
// credit; 0 means no bound.
func (s *Server) stallTimeout() time.Duration {
	if d := s.Base.WriteTimeout; d > 0 {
		return d
	}
	return s.idleTimeout()
}

// settingsAckTimeout is how long a client has to acknowledge our SETTINGS.
func (s *Server) settingsAckTimeout() time.Duration {
	if d := s.headerTimeout(); d > 0 {
		return d
	}
	return 10 * time.Second
}

// dateValue is a formatted Date value and its second.
type dateValue struct {
	unix  int64
	value string
}

// dateFor returns the Date header value for now, formatting it at most
// once per second per server.
func (s *Server) dateFor(now time.Time) string {
	sec := now.Unix()
	d := s.date.Load()
	if d == nil || d.unix != sec {
		d = &dateValue{unix: sec, value: now.UTC().Format(http.TimeFormat)}
		s.date.Store(d)
	}
	return d.value
}
