package h2_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"golang.org/x/net/http2"

	"trendgate/internal/testing/ctxwrap"
	"trendgate/internal/transport/h2"
)

// TestRequestContext: each stream's request carries the context
// RequestContext returns, which still ends when the client resets the
// stream.
func TestRequestContext(t *testing.T) {
	rc := ctxwrap.New()
	c := handshake(t, startLane(t, rc.Handler(t, guard, nil), func(s *h2.Server) {
		s.RequestContext = rc.RequestContext
	}))
	for i, id := range []uint32{1, 3} {
		c.request(id, "GET", "/", true)
		if got, want := c.response(id).header["x-n"], strconv.Itoa(i+1); got != want {
			t.Errorf("stream %d: X-N %q; want %q", id, got, want)
		}
	}
	c.request(5, "GET", "/wait", true)
	<-rc.Waiting
	if err := c.fr.WriteRSTStream(5, http2.ErrCodeCancel); err != nil {
		t.Fatal(err)
	}
	if err := <-rc.Canceled; err != context.Canceled {
		t.Errorf("after the reset: context error %v; want context.Canceled", err)
	}
}

// TestConnContext: ConnContext runs once per connection, and every stream
// of that connection sees what it returned; another connection gets its
// own.
func TestConnContext(t *testing.T) {
	type connKey struct{}
	type counter struct {
		id       int32
		requests atomic.Int32
	}
	var made atomic.Int32
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, ok := r.Context().Value(connKey{}).(*counter)
		if !ok {
			w.Header().Set("X-N", "none")
			return
		}
		w.Header().Set("X-N", fmt.Sprintf("%d/%d", n.id, n.requests.Add(1)))
	})
	ln := startLane(t, h, func(s *h2.Server) {
		s.ConnContext = func(ctx context.Context, _ net.Conn) context.Context {
			return context.WithValue(ctx, connKey{}, &counter{id: made.Add(1)})
		}
	})
	a := handshake(t, ln)
	next := map[*client]uint32{a: 1}
	var got []string
	send := func(c *client) {
		id := next[c]
		next[c] = id + 2
		c.request(id, "GET", "/", true)
		got = append(got, c.response(id).header["x-n"])
	}
	send(a)
	send(a)
	b := handshake(t, ln) // after a's first requests: a is 1 and b 2
	next[b] = 1
	for _, c := range []*client{b, a, b} {
		send(c)
	}
	if want := []string{"1/1", "1/2", "2/1", "1/3", "2/2"}; !slices.Equal(got, want) {
		t.Errorf("got %q; want %q", got, want)
	}
}

// TestHeaderPerRequest: each stream's handler sees its own request's
// fields, whatever the stream its pooled state served before had.
func TestHeaderPerRequest(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = fmt.Fprintf(w, "%q", r.Header)
	})
	c := handshake(t, startLane(t, h, nil))
	many := make([]string, 0, 2*70)
	for i := range 70 {
		many = append(many, "x-f"+strconv.Itoa(i), "v")
	}
	for i, tc := range []struct {
		fields []string
		want   string
	}{
		{[]string{"x-a", "1", "x-b", "2", "x-a", "3"}, `map["X-A":["1" "3"] "X-B":["2"]]`},
		{[]string{"x-c", "4"}, `map["X-C":["4"]]`},
		{nil, `map[]`},
		{[]string{"cookie", "a=1", "x-d", "5", "cookie", "b=2"}, `map["Cookie":["a=1; b=2"] "X-D":["5"]]`},
		{many, ""},
		{[]string{"x-a", "6", "x-a", "7", "x-a", "8"}, `map["X-A":["6" "7" "8"]]`},
		{[]string{"x-b", "9"}, `map["X-B":["9"]]`},
	} {
		id := uint32(2*i + 1)
		c.request(id, "GET", "/", true, tc.fields...)
		body := string(c.response(id).body)
		if tc.want == "" {
			if n := strings.Count(body, `:["v"]`); n != 70 {
				t.Errorf("stream %d: handler saw %d of the 70 fields", id, n)
			}
			continue
		}
		if body != tc.want {
			t.Errorf("stream %d, fields %q: handler saw %s; want %s", id, tc.fields, body, tc.want)
		}
	}
}
