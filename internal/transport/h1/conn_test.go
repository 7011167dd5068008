package h1_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"
)

// TestRequestContextEndsWithHandler: the request context is canceled once
// the handler returned, whether or not it asked for Done, and carries
// net/http's server and local-address values.
func TestRequestContextEndsWithHandler(t *testing.T) {
	for _, tc := range []struct {
		name     string
		callDone bool
	}{
		{"Done never called", false},
		{"Done called while running", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctxs := make(chan context.Context, 1)
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				ctx := r.Context()
				if tc.callDone {
					select {
					case <-ctx.Done():
						t.Errorf("context done while the handler runs: %v", ctx.Err())
					default:
					}
				}
				if err := ctx.Err(); err != nil {
					t.Errorf("while the handler runs: Err() = %v; want nil", err)
				}
				ctxs <- ctx
			})
			ls := startLane(t, h, nil)
			c := dial(t, ls.addr)
			c.send("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
			c.read("GET")
			ctx := <-ctxs
			if err := ctx.Err(); !errors.Is(err, context.Canceled) {
				t.Errorf("after the handler: got Err() %v; want context.Canceled", err)
			}
			select {
			case <-ctx.Done():
			default:
				t.Error("after the handler: Done not closed")
			}
			if d, ok := ctx.Deadline(); ok {
				t.Errorf("got deadline %v; want none", d)
			}
			if got := ctx.Value(http.ServerContextKey); got != ls.fallback {
				t.Errorf("ServerContextKey: got %v; want Fallback", got)
			}
			if got, _ := ctx.Value(http.LocalAddrContextKey).(net.Addr); got == nil || got.String() != ls.addr {
				t.Errorf("LocalAddrContextKey: got %v; want %s", got, ls.addr)
			}
			if n := ls.handedOff.Load(); n != 0 {
				t.Errorf("handed-off connections: got %d; want 0", n)
			}
		})
	}
}

// TestRequestContextClientGone: a handler waiting on its request context
// learns that the client went away, as with net/http.
func TestRequestContextClientGone(t *testing.T) {
	for _, tc := range []struct {
		name string
		wait func(ctx context.Context) // returns when ctx (or one made from it) ends
		hang func(c net.Conn)          // how the client goes away
	}{
		{name: "Done, client closes",
			wait: func(ctx context.Context) { <-ctx.Done() },
			hang: func(c net.Conn) { _ = c.Close() }},
		{name: "derived context, client closes",
			wait: func(ctx context.Context) {
				ctx, cancel := context.WithTimeout(ctx, time.Hour)
				defer cancel()
				<-ctx.Done()
			},
			hang: func(c net.Conn) { _ = c.Close() }},
		{name: "AfterFunc, client closes",
			wait: func(ctx context.Context) {
				fired := make(chan struct{})
				stop := context.AfterFunc(ctx, func() { close(fired) })
				defer stop()
				<-fired
			},
			hang: func(c net.Conn) { _ = c.Close() }},
		{name: "Done, client half-closes",
			wait: func(ctx context.Context) { <-ctx.Done() },
			hang: func(c net.Conn) { _ = c.(*net.TCPConn).CloseWrite() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			entered := make(chan struct{})
			ended := make(chan error, 1)
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/wait" {
					_, _ = io.WriteString(w, "ok")
					return
				}
				_ = r.Context().Done() // the watch starts before the client goes
				close(entered)
				tc.wait(r.Context())
				ended <- r.Context().Err()
			})
			ls := startLane(t, h, nil)
			c := dial(t, ls.addr)
			c.send("GET /wait HTTP/1.1\r\nHost: x\r\n\r\n")
			waitEntered(t, entered)
			tc.hang(c.c)
			select {
			case err := <-ended:
				if !errors.Is(err, context.Canceled) {
					t.Errorf("got Err() %v; want context.Canceled", err)
				}
			case <-time.After(guard):
				t.Fatal("the request context did not end when the client went away")
			}
			c2 := dial(t, ls.addr)
			c2.send("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
			if _, body := c2.read("GET"); body != "ok" {
				t.Errorf("next connection: got %q; want ok", body)
			}
		})
	}
}

// TestRequestContextWatchStops: a handler that asked for Done and returned
// normally leaves the connection fully usable: the watching read stops
// and whatever it saw of the next request is kept.
func TestRequestContextWatchStops(t *testing.T) {
	const watch, next = "GET /watch HTTP/1.1\r\nHost: x\r\n\r\n", "GET /next HTTP/1.1\r\nHost: x\r\n\r\n"
	for _, tc := range []struct {
		name string
		// block: the handler waits for the test after asking for Done.
		block bool
		// when the next request is sent: "after" the response, in the
		// "same" write as the watched one, or "during" the handler.
		when string
	}{
		{"returns at once, next request after", false, "after"},
		{"returns at once, next request in the same write", false, "same"},
		{"waits, next request after", true, "after"},
		{"waits, next request in the same write", true, "same"},
		{"waits, next request while it waits", true, "during"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			entered, release := make(chan struct{}, 1), make(chan struct{})
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				done := r.Context().Done()
				if r.URL.Path == "/watch" && tc.block {
					entered <- struct{}{}
					select {
					case <-done:
						t.Errorf("context ended while the client is there: %v", r.Context().Err())
					case <-release:
					}
				}
				if err := r.Context().Err(); err != nil {
					t.Errorf("%s: context ended while the client is there: %v", r.URL.Path, err)
				}
				_, _ = io.WriteString(w, r.URL.Path)
			})
			ls := startLane(t, h, nil)
			c := dial(t, ls.addr)
			if tc.when == "same" {
				c.send(watch + next)
			} else {
				c.send(watch)
			}
			if tc.block {
				waitEntered(t, entered)
				if tc.when == "during" {
					c.send(next)
				}
				close(release)
			}
			if _, body := c.read("GET"); body != "/watch" {
				t.Errorf("first response: got %q; want /watch", body)
			}
			if tc.when == "after" {
				c.send(next)
			}
			if _, body := c.read("GET"); body != "/next" {
				t.Errorf("second response: got %q; want /next", body)
			}
			c.send(next) // and the connection goes on
			if _, body := c.read("GET"); body != "/next" {
				t.Errorf("third response: got %q; want /next", body)
			}
			if n := ls.handedOff.Load(); n != 0 {
				t.Errorf("handed-off connections: got %d; want 0", n)
			}
		})
	}
}

// TestIdleReadDeadline checks the read deadline armed while a keep-alive
// connection waits for its next request: net/http's idle timeout
// (IdleTimeout, else ReadTimeout), or none when neither is set, whatever
// deadline the previous request's head or the handler's watch armed.
func TestIdleReadDeadline(t *testing.T) {
	const long = time.Hour
	for _, tc := range []struct {
		name     string
		tune     func(*http.Server)
		split    bool          // the head arrives in two reads
		watch    bool          // the handler asks for Done
		wantIdle time.Duration // 0: no deadline
	}{
		{name: "ReadHeaderTimeout only, head in one read",
			tune: func(s *http.Server) { s.ReadHeaderTimeout = long / 2 }},
		// The head's deadline must not outlive the head: with no idle
		// timeout net/http waits for the next request for ever.
		{name: "ReadHeaderTimeout only, head in two reads",
			tune: func(s *http.Server) { s.ReadHeaderTimeout = long / 2 }, split: true},
		{name: "ReadHeaderTimeout only, handler watched",
			tune: func(s *http.Server) { s.ReadHeaderTimeout = long / 2 }, split: true, watch: true},
		{name: "no timeouts, handler watched", watch: true},
		{name: "IdleTimeout, head in two reads",
			tune: func(s *http.Server) { s.IdleTimeout, s.ReadHeaderTimeout = long, long/2 }, split: true, wantIdle: long},
		{name: "ReadTimeout, head in two reads",
			tune: func(s *http.Server) { s.ReadTimeout = long }, split: true, wantIdle: long},
		{name: "IdleTimeout, handler watched",
			tune: func(s *http.Server) { s.IdleTimeout = long }, watch: true, wantIdle: long},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tc.watch {
					_ = r.Context().Done()
				}
				_, _ = io.WriteString(w, "ok")
			})
			rl := &recordingListener{Listener: listen(t), events: make(chan connEvent, 1024)}
			ls := startLaneOn(t, rl, h, tc.tune)
			c := dial(t, ls.addr)
			part1, part2 := "GET / HTTP/1.1\r\nHost: x\r\n\r\n", ""
			if tc.split {
				part1, part2 = "GET / HTTP/1.1\r\nHo", "st: x\r\n\r\n"
			}
			c.send(part1)
			if part2 != "" {
				rl.waitRead(t, len(part1)) // the lane has seen half a head
				c.send(part2)
			}
			if _, body := c.read("GET"); body != "ok" {
				t.Fatalf("got %q; want ok", body)
			}
			idle := rl.nextIdleRead(t)
			switch {
			case tc.wantIdle == 0 && !idle.IsZero():
				t.Errorf("waiting for the next request with deadline %v (in %v); want none",
					idle, time.Until(idle).Round(time.Second))
			// Armed up to 1/64 of the idle timeout late (setReadDeadline).
			case tc.wantIdle != 0 && (idle.Before(time.Now().Add(tc.wantIdle-time.Minute)) || idle.After(time.Now().Add(tc.wantIdle+tc.wantIdle/64))):
				t.Errorf("waiting for the next request with deadline %v (in %v); want in about %v",
					idle, time.Until(idle).Round(time.Second), tc.wantIdle)
			}
			c.send("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
			if _, body := c.read("GET"); body != "ok" {
				t.Errorf("next request: got %q; want ok", body)
			}
		})
	}
}

// connEvent is a read beginning or ending, or a write, on a server-side
// connection.
type connEvent struct {
	kind     string    // "read", "read done" or "write"
	deadline time.Time // for "read": the read deadline armed
	n        int       // for "read done": bytes read
}

// recordingListener reports what its connections' users do with them.
type recordingListener struct {
	net.Listener
	events chan connEvent // never blocks the server; the buffer is large
}

func (l *recordingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &recordingConn{Conn: c, l: l}, nil
}

// waitRead waits until the server has read n bytes in all.
func (l *recordingListener) waitRead(t *testing.T, n int) {
	t.Helper()
	for got := 0; got < n; {
		select {
		case e := <-l.events:
			got += e.n
		case <-time.After(guard):
			t.Fatalf("the server read %d bytes; want %d", got, n)
		}
	}
}

// nextIdleRead returns the deadline of the first read begun after the
// server wrote: the wait for the next request.
func (l *recordingListener) nextIdleRead(t *testing.T) time.Time {
	t.Helper()
	wrote := false
	for {
		select {
		case e := <-l.events:
			switch {
			case e.kind == "write":
				wrote = true
			case e.kind == "read" && wrote:
				return e.deadline
			}
		case <-time.After(guard):
			t.Fatal("the server did not wait for a next request")
		}
	}
}

type recordingConn struct {
	net.Conn
	l *recordingListener

	mu sync.Mutex // guards rd
	rd time.Time
}

func (c *recordingConn) record(e connEvent) {
	select {
	case c.l.events <- e:
	default:
	}
}

func (c *recordingConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	rd := c.rd
	c.mu.Unlock()
	c.record(connEvent{kind: "read", deadline: rd})
	n, err := c.Conn.Read(p)
	c.record(connEvent{kind: "read done", n: n})
	return n, err
}

func (c *recordingConn) Write(p []byte) (int, error) {
	c.record(connEvent{kind: "write"})
	return c.Conn.Write(p)
}

func (c *recordingConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	c.rd = t
	c.mu.Unlock()
	return c.Conn.SetReadDeadline(t)
}

func (c *recordingConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	c.rd = t
	c.mu.Unlock()
	return c.Conn.SetDeadline(t)
}
