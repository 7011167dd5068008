// Package ctxwrap is the RequestContext the transport lanes' tests
// install, and a handler that reports what each request arrived with.
package ctxwrap

import (
	"context"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// Wrapped is the context Recorder.RequestContext makes.
type Wrapped struct {
	context.Context
	N int32 // which request: 1, 2, ...
}

// Recorder numbers the contexts it wraps. Its handler answers a request
// it wrapped with X-N set to that number and, for the path /wait, closes
// Waiting and sends on Canceled how the request's context ended (nil if it
// did not within the guard).
type Recorder struct {
	made     atomic.Int32
	Waiting  chan struct{}
	Canceled chan error
}

// New returns a Recorder that has wrapped no context yet.
func New() *Recorder {
	return &Recorder{Waiting: make(chan struct{}), Canceled: make(chan error, 1)}
}

// RequestContext is the lanes' RequestContext hook.
func (rc *Recorder) RequestContext(ctx context.Context) context.Context {
	return &Wrapped{Context: ctx, N: rc.made.Add(1)}
}

// Handler fails t for a request without the wrapper or without the
// lane's values, except for one unwrapped(r) expects to come unwrapped
// (and then fails t if it came wrapped); unwrapped may be nil.
func (rc *Recorder) Handler(t testing.TB, guard time.Duration, unwrapped func(*http.Request) bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		wc, ok := r.Context().(*Wrapped)
		if unwrapped != nil && unwrapped(r) {
			if ok {
				t.Errorf("%s: the request went through RequestContext", r.URL.Path)
			}
			return
		}
		if !ok {
			t.Errorf("%s: context %T; want the wrapper", r.URL.Path, r.Context())
			return
		}
		if r.URL.Path == "/wait" {
			close(rc.Waiting)
			select {
			case <-r.Context().Done():
				rc.Canceled <- r.Context().Err()
			case <-time.After(guard):
				rc.Canceled <- nil
			}
			return
		}
		if r.Context().Value(http.ServerContextKey) == nil {
			t.Errorf("the wrapper lost the lane's values")
		}
		w.Header().Set("X-N", strconv.Itoa(int(wc.N)))
	})
}
