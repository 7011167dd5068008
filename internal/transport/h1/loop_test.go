//go:build linux

package h1_test

import (
	"bytes"
	"net/http"
	"strconv"
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
	select {
	case <-entered:
	case <-time.After(guard):
		t.Fatal("the handler never ran")
	}
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
