package h2_test

import (
	"context"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"trendgate/internal/transport/h2"
)

// wrapped is the context a test's RequestContext makes.
type wrapped struct {
	context.Context
	n int32 // which request: 1, 2, ...
}

// TestRequestContext: each stream's request carries the context
// RequestContext returns, which still ends when the client resets the
// stream.
func TestRequestContext(t *testing.T) {
	var made atomic.Int32
	waiting := make(chan struct{})
	canceled := make(chan error, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		wc, ok := r.Context().(*wrapped)
		if !ok {
			t.Errorf("%s: context %T; want the wrapper", r.URL.Path, r.Context())
			return
		}
		if r.URL.Path == "/wait" {
			close(waiting)
			select {
			case <-r.Context().Done():
				canceled <- r.Context().Err()
			case <-time.After(guard):
				canceled <- nil
			}
			return
		}
		if r.Context().Value(http.ServerContextKey) == nil {
			t.Errorf("the wrapper lost the lane's values")
		}
		w.Header().Set("X-N", strconv.Itoa(int(wc.n)))
	})
	c := handshake(t, startLane(t, h, func(s *h2.Server) {
		s.RequestContext = func(ctx context.Context) context.Context {
			return &wrapped{Context: ctx, n: made.Add(1)}
		}
	}))
	for i, id := range []uint32{1, 3} {
		c.request(id, "GET", "/", true)
		if got, want := c.response(id).header["x-n"], strconv.Itoa(i+1); got != want {
			t.Errorf("stream %d: X-N %q; want %q", id, got, want)
		}
	}
	c.request(5, "GET", "/wait", true)
	<-waiting
	if err := c.fr.WriteRSTStream(5, http2.ErrCodeCancel); err != nil {
		t.Fatal(err)
	}
	if err := <-canceled; err != context.Canceled {
		t.Errorf("after the reset: context error %v; want context.Canceled", err)
	}
}
