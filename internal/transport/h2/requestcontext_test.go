package h2_test

import (
	"context"
	"strconv"
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
