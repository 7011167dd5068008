package h1_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"

	"trendgate/internal/testing/ctxwrap"
	"trendgate/internal/transport/h1"
)

// TestRequestContext: the lane builds each request with the context
// RequestContext returns, which still ends when the client goes away; a
// request handed to Fallback does not pass through it.
func TestRequestContext(t *testing.T) {
	rc := ctxwrap.New()
	viaFallback := func(r *http.Request) bool { return r.ProtoMinor == 0 } // HTTP/1.0
	ls := startLaneWith(t, listen(t), rc.Handler(t, guard, viaFallback), nil, func(s *h1.Server) {
		s.RequestContext = rc.RequestContext
	})

	c := dial(t, ls.addr)
	for i := 1; i <= 2; i++ {
		c.send("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		if resp, _ := c.read("GET"); resp.Header.Get("X-N") != strconv.Itoa(i) {
			t.Errorf("request %d: X-N %q", i, resp.Header.Get("X-N"))
		}
	}

	old := dial(t, ls.addr)
	old.send("GET / HTTP/1.0\r\nHost: x\r\n\r\n")
	old.read("GET")

	w := dial(t, ls.addr)
	w.send("GET /wait HTTP/1.1\r\nHost: x\r\n\r\n")
	<-rc.Waiting
	_ = w.c.Close()
	if err := <-rc.Canceled; err != context.Canceled {
		t.Errorf("after the client left: context error %v; want context.Canceled", err)
	}
}

// TestConnContext: every request on one lane connection starts from the
// context ConnContext made for that connection, once; another connection
// has its own; a request served by Fallback after a hand-off does not see
// it.
func TestConnContext(t *testing.T) {
	type connKey struct{}
	type counter struct{ id, requests int }
	var made atomic.Int32
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, ok := r.Context().Value(connKey{}).(*counter)
		if !ok {
			_, _ = fmt.Fprint(w, "none")
			return
		}
		n.requests++
		_, _ = fmt.Fprintf(w, "%d/%d", n.id, n.requests)
	})
	ls := startLaneWith(t, listen(t), h, nil, func(s *h1.Server) {
		s.ConnContext = func(ctx context.Context, _ net.Conn) context.Context {
			return context.WithValue(ctx, connKey{}, &counter{id: int(made.Add(1))})
		}
	})
	a, b := dial(t, ls.addr), dial(t, ls.addr)
	var got []string
	for _, c := range []*client{a, a, b, a, b} {
		c.send("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		_, body := c.read("GET")
		got = append(got, body)
	}
	// The connections are accepted in the order dialed, so a is 1 and b 2.
	if want := []string{"1/1", "1/2", "2/1", "1/3", "2/2"}; !slices.Equal(got, want) {
		t.Errorf("got %q; want %q", got, want)
	}
	old := dial(t, ls.addr)
	old.send("GET / HTTP/1.0\r\nHost: x\r\n\r\n")
	if _, body := old.read("GET"); body != "none" {
		t.Errorf("HTTP/1.0, served by Fallback: handler saw %q; want no connection value", body)
	}
}

// TestHeaderPerRequest: the connection's reused header map holds only
// the current request's fields, repeated ones included.
func TestHeaderPerRequest(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = fmt.Fprintf(w, "%q", r.Header)
	})
	ls := startLane(t, h, nil)
	c := dial(t, ls.addr)
	for _, tc := range []struct{ fields, want string }{
		{"X-A: 1\r\nX-B: 2\r\nX-A: 3\r\n", `map["X-A":["1" "3"] "X-B":["2"]]`},
		{"X-C: 4\r\n", `map["X-C":["4"]]`},
		{"", `map[]`},
		{"X-A: 5\r\nX-A: 6\r\nX-A: 7\r\nX-D: 8\r\n", `map["X-A":["5" "6" "7"] "X-D":["8"]]`},
		{"X-B: 9\r\n", `map["X-B":["9"]]`},
	} {
		c.send("GET / HTTP/1.1\r\nHost: x\r\n" + tc.fields + "\r\n")
		if _, body := c.read("GET"); body != tc.want {
			t.Errorf("fields %q: handler saw %s; want %s", tc.fields, body, tc.want)
		}
	}
}
