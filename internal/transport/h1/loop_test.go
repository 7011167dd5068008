//go:build linux

package h1_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"trendgate/internal/transport/h1"
)

// On one event loop, a request whose handler waits (it asks for its
// context's Done) leaves the loop, even with a request pipelined behind
// it: the loop serves other connections meanwhile, the waiting request is
// answered when its handler returns, and its connection serves requests
// again after. Answers that never wait leave nothing.
func TestLoopWaitingRequestLeaves(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/wait" {
			close(entered)
			select {
			case <-release:
			case <-r.Context().Done():
				t.Error("the waiting request's context ended")
			}
			_, _ = w.Write([]byte("waited"))
			return
		}
		_, _ = w.Write([]byte("hit " + r.URL.Path))
	})
	ls := startLaneWith(t, listen(t), h, nil, func(s *h1.Server) { s.Loops = 1 })

	a, b := dial(t, ls.addr), dial(t, ls.addr)
	a.send("GET /wait HTTP/1.1\r\nHost: x\r\n\r\nGET /again HTTP/1.1\r\nHost: x\r\n\r\n")
	waitEntered(t, entered)
	for i := range 50 {
		b.send("GET /" + strconv.Itoa(i) + " HTTP/1.1\r\nHost: x\r\n\r\n")
		if _, body := b.read("GET"); body != "hit /"+strconv.Itoa(i) {
			t.Fatalf("while a request waits: got %q", body)
		}
	}
	close(release)
	if _, body := a.read("GET"); body != "waited" {
		t.Fatalf("the waiting request: got %q", body)
	}
	if _, body := a.read("GET"); body != "hit /again" {
		t.Fatalf("the request pipelined behind it: got %q", body)
	}
	for i := range 50 {
		a.send("GET /again HTTP/1.1\r\nHost: x\r\n\r\n")
		if _, body := a.read("GET"); body != "hit /again" {
			t.Fatalf("after waiting, request %d: got %q", i, body)
		}
	}
	if n := ls.srv.LoopHandovers(); n != 1 {
		t.Errorf("requests that left the loop: got %d; want 1 (the one that waited)", n)
	}
}

// An answer the socket does not take at once leaves the loop to be
// written from Go's poller, whole and in order; a request pipelined
// behind it is answered after it.
func TestLoopAnswerLargerThanTheSocket(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/small" {
			_, _ = w.Write([]byte("small"))
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(bigBody)))
		_, _ = w.Write(bigBody)
	})
	ls := startLaneWith(t, listen(t), h, nil, func(s *h1.Server) { s.Loops = 1 })
	c := dialFixed(t, ls.addr)
	c.send("GET /big HTTP/1.1\r\nHost: x\r\n\r\nGET /small HTTP/1.1\r\nHost: x\r\n\r\n")
	if _, body := c.read("GET"); !bytes.Equal([]byte(body), bigBody) {
		t.Fatalf("the large answer: got %d bytes, not the body written", len(body))
	}
	if _, body := c.read("GET"); body != "small" {
		t.Fatalf("the request behind it: got %q", body)
	}
	if n := ls.srv.LoopHandovers(); n != 1 {
		t.Errorf("requests that left the loop: got %d; want 1", n)
	}
	c.send("GET /small HTTP/1.1\r\nHost: x\r\n\r\n")
	if _, body := c.read("GET"); body != "small" {
		t.Fatalf("the next request: got %q", body)
	}
}

// FuzzLoopMatchesGoroutines sends the same bytes, cut in two writes at the
// same place, to the lane on a goroutine per connection and on an event
// loop, both serving echo, and requires the same bytes back (Date lines
// aside) before each closes: a stream of requests means the same on both,
// whatever it holds and however it arrives.
func FuzzLoopMatchesGoroutines(f *testing.F) {
	for _, seed := range []string{
		"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /1 HTTP/1.1\r\nHost: x\r\n\r\nHEAD /2 HTTP/1.1\r\nHost: x\r\n\r\nGET /3?q=1 HTTP/1.1\r\nHost: x\r\nA: b\r\n\r\n",
		"GET /a HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\nGET /never HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /a HTTP/1.1\r\nHost: x\r\n\r\nPOST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabcGET /c HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET / HTTP/1.0\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: x\r\nA: b\r\n c\r\n\r\n",
		"GET / HTTP/1.1\r\nHo",
		"GET / HTTP/1.1\r\nHost: x\r\n\r\nGET /half HTTP/1.1\r\n",
		"GET / HTTP/1.1\r\nHost: x\r\nBig: " + strings.Repeat("v", 9000) + "\r\n\r\nGET /after HTTP/1.1\r\nHost: x\r\n\r\n",
		"garbage\r\n\r\n",
	} {
		f.Add([]byte(seed), uint16(len(seed)/2))
	}
	goroutines := startLaneWith(f, listen(f), echo, nil, func(s *h1.Server) { s.Loops = 0 })
	loops := startLaneWith(f, listen(f), echo, nil, func(s *h1.Server) { s.Loops = 1 })
	f.Fuzz(func(t *testing.T, in []byte, cut uint16) {
		if len(in) == 0 || len(in) > 32<<10 {
			return
		}
		at := int(cut) % len(in)
		want, reset := exchange(t, goroutines.addr, in, at)
		got, reset2 := exchange(t, loops.addr, in, at)
		if reset || reset2 {
			// A server that closed with bytes unread sends a reset, and
			// what the client read before it depends on timing.
			return
		}
		if got != want {
			t.Errorf("sent %q in two writes at %d:\n on a loop: %q\n goroutines: %q", in, at, got, want)
		}
	})
}

// exchange sends in to addr in two writes, the second from at, closes its
// side and returns all that came back, with Date lines removed, and
// whether the connection ended with a reset.
func exchange(t *testing.T, addr string, in []byte, at int) (string, bool) {
	t.Helper()
	c := dialConn(t, addr)
	// The server may close before it read everything (a Connection:
	// close, a refused head); what it answered is what counts.
	if _, err := c.Write(in[:at]); err == nil {
		_, _ = c.Write(in[at:])
	}
	_ = c.(*net.TCPConn).CloseWrite()
	out, err := readToClose(t, addr, c)
	return out, errors.Is(err, syscall.ECONNRESET)
}

// readToClose reads r, a connection to addr, until the server ends it,
// and returns what came, Date lines removed, and how it ended; a guard
// timeout fails the test.
func readToClose(t *testing.T, addr string, r io.Reader) (string, error) {
	t.Helper()
	out, err := io.ReadAll(r)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("%s did not close the connection", addr)
	}
	return dateLine.ReplaceAllString(string(out), ""), err
}

var dateLine = regexp.MustCompile(`(?m)^Date: [^\r]*\r\n`)

// A Shutdown whose context ends while a request waits returns at once,
// and the loops go on until that request is answered: the connection
// then ends, and the loops with it. A Shutdown that returns nil has
// stopped them.
func TestLoopsStopAfterShutdownGivesUp(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/wait" {
			close(entered)
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		_, _ = w.Write([]byte("done " + r.URL.Path))
	})
	ls := startLaneWith(t, listen(t), h, nil, func(s *h1.Server) { s.Loops = 1 })
	a, b := dial(t, ls.addr), dial(t, ls.addr)
	b.send("GET /idle HTTP/1.1\r\nHost: x\r\n\r\n")
	if _, body := b.read("GET"); body != "done /idle" {
		t.Fatalf("got %q", body)
	}
	a.send("GET /wait HTTP/1.1\r\nHost: x\r\n\r\n")
	waitEntered(t, entered)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := ls.srv.Shutdown(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Shutdown with a request in progress and its context over: got %v; want context.Canceled", err)
	}
	done := h1.LoopsDone(ls.srv)
	select {
	case <-done:
		t.Fatal("the loops stopped with a request in progress")
	default:
	}
	close(release)
	if _, body := a.read("GET"); body != "done /wait" {
		t.Fatalf("the request in progress: got %q", body)
	}
	select {
	case <-done:
	case <-time.After(guard):
		t.Fatal("the loops still run after the last connection ended")
	}
}

// The loops share their connections: while one loop is held up (here by a
// handler that waits without asking for Done, as a loop whose thread the
// kernel put aside would be), the other serves every other connection,
// whichever loop served it before.
func TestLoopHeldUpHoldsOnlyItsConnection(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			close(entered)
			<-release // no Done: the loop stays with this request
		}
		_, _ = w.Write([]byte("done " + r.URL.Path))
	})
	ls := startLaneWith(t, listen(t), h, nil, func(s *h1.Server) { s.Loops = 2 })
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free) // before Shutdown, should the test fail
	others := make([]*client, 6)
	for i := range others {
		others[i] = dial(t, ls.addr)
		others[i].send("GET /warm HTTP/1.1\r\nHost: x\r\n\r\n")
		if _, body := others[i].read("GET"); body != "done /warm" {
			t.Fatalf("got %q", body)
		}
	}
	held := dial(t, ls.addr)
	held.send("GET /hold HTTP/1.1\r\nHost: x\r\n\r\n")
	waitEntered(t, entered)
	for round := range 3 {
		for i, c := range others {
			path := "/" + strconv.Itoa(round) + "/" + strconv.Itoa(i)
			c.send("GET " + path + " HTTP/1.1\r\nHost: x\r\n\r\n")
			if _, body := c.read("GET"); body != "done "+path {
				t.Fatalf("connection %d while a loop is held up: got %q", i, body)
			}
		}
	}
	free()
	if _, body := held.read("GET"); body != "done /hold" {
		t.Fatalf("the held request: got %q", body)
	}
	if n := ls.srv.LoopHandovers(); n != 0 {
		t.Errorf("requests that left a loop: got %d; want 0", n)
	}
}
