package h1_test

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"trendgate/internal/transport/h1"
)

// wrapped is the context a test's RequestContext makes.
type wrapped struct {
	context.Context
	n int32 // which request: 1, 2, ...
}

// TestRequestContext: the lane builds each request with the context
// RequestContext returns, which still ends when the client goes away; a
// request handed to Fallback does not pass through it.
func TestRequestContext(t *testing.T) {
	var made atomic.Int32
	waiting := make(chan struct{})
	canceled := make(chan error, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		wc, ok := r.Context().(*wrapped)
		switch {
		case r.URL.Path == "/wait":
			if !ok {
				t.Errorf("/wait: context %T; want the wrapper", r.Context())
			}
			close(waiting)
			select {
			case <-r.Context().Done():
				canceled <- r.Context().Err()
			case <-time.After(guard):
				canceled <- nil
			}
		case r.ProtoMinor == 0: // HTTP/1.0: served by Fallback
			if ok {
				t.Errorf("Fallback's request went through RequestContext")
			}
		case !ok:
			t.Errorf("context %T; want the wrapper", r.Context())
		default:
			if r.Context().Value(http.ServerContextKey) == nil {
				t.Errorf("the wrapper lost the lane's values")
			}
			w.Header().Set("X-N", string(rune('0'+wc.n)))
		}
	})
	ls := startLaneWith(t, listen(t), h, nil, func(s *h1.Server) {
		s.RequestContext = func(ctx context.Context) context.Context {
			return &wrapped{Context: ctx, n: made.Add(1)}
		}
	})

	c := dial(t, ls.addr)
	for want := range []string{"1", "2"} {
		c.send("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		if resp, _ := c.read("GET"); resp.Header.Get("X-N") != string(rune('1'+want)) {
			t.Errorf("request %d: X-N %q", want+1, resp.Header.Get("X-N"))
		}
	}

	old := dial(t, ls.addr)
	old.send("GET / HTTP/1.0\r\nHost: x\r\n\r\n")
	old.read("GET")

	w := dial(t, ls.addr)
	w.send("GET /wait HTTP/1.1\r\nHost: x\r\n\r\n")
	<-waiting
	_ = w.c.Close()
	if err := <-canceled; err != context.Canceled {
		t.Errorf("after the client left: context error %v; want context.Canceled", err)
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
