package upstream

import (
	"context"
	"errors"
	"net/http"
	"runtime"
	"strconv"
	"testing"

	"trendgate/internal/breaker"
	"trendgate/internal/inflight"
)

// until spins (yielding) until cond holds; it fails the test after a
// bounded number of tries instead of waiting on a clock.
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for i := 0; !cond(); i++ {
		if i == 50_000_000 {
			t.Fatalf("gave up waiting until %s", what)
		}
		runtime.Gosched()
	}
}

// A 200 body with a Content-Length is read only once its bytes (the body
// and the check's copies) are granted, and they are given back after.
func TestBodyReadWaitsForInflightBytes(t *testing.T) {
	stub := newStub(t, respond(200, seriesBody, "Content-Length", strconv.Itoa(len(seriesBody))))
	b := inflight.New(1 << 20)
	c, _ := newTestClient(t, testConfig(stub.srv.URL), nil, WithInflight(b))
	all, err := b.Acquire(context.Background(), b.Capacity())
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		resp *Response
		err  error
	}
	done := make(chan result, 1)
	go func() { // ends when Do returns
		resp, err := c.Do(context.Background(), seriesReq)
		done <- result{resp, err}
	}()
	until(t, "the read waits for bytes", func() bool { return b.Waits() == 1 })
	select {
	case r := <-done:
		t.Fatalf("Do returned (%v) while the bound was full", r.err)
	default:
	}
	all.Release()
	r := <-done
	if r.err != nil || string(r.resp.Body) != seriesBody {
		t.Fatalf("Do = %v; want the body", r.err)
	}
	if h := b.Held(); h != 0 {
		t.Errorf("Held() after Do = %d; want 0", h)
	}
}

// A caller that gives up while the read waits for bytes gets its context's
// error; nothing stays held and the breaker is not charged with a failure.
func TestBodyReadWaitCancelled(t *testing.T) {
	stub := newStub(t, respond(200, seriesBody, "Content-Length", strconv.Itoa(len(seriesBody))))
	b := inflight.New(1 << 20)
	c, _ := newTestClient(t, testConfig(stub.srv.URL), nil, WithInflight(b))
	all, err := b.Acquire(context.Background(), b.Capacity())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { // ends when Do returns
		_, err := c.Do(ctx, seriesReq)
		done <- err
	}()
	until(t, "the read waits for bytes", func() bool { return b.Waits() == 1 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Do after the caller left: %v; want context.Canceled", err)
	}
	all.Release()
	if h := b.Held(); h != 0 {
		t.Errorf("Held() = %d; want 0", h)
	}
	if s := c.State(); s != breaker.Closed {
		t.Errorf("breaker %v after a local wait ended; want closed", s)
	}
}

// A gzip body's size is known only once decompressed: it is granted then,
// before the check's copies are made.
func TestGzipBodyTakesInflightBytes(t *testing.T) {
	gz := gzipped(t, seriesBody)
	stub := newStub(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Encoding", "gzip")
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(gz)
	})
	b := inflight.New(1 << 20)
	c, _ := newTestClient(t, testConfig(stub.srv.URL), nil, WithInflight(b))
	all, err := b.Acquire(context.Background(), b.Capacity())
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { // ends when Do returns
		_, err := c.Do(context.Background(), seriesReq)
		done <- err
	}()
	until(t, "the read waits for bytes", func() bool { return b.Waits() == 1 })
	all.Release()
	if err := <-done; err != nil {
		t.Fatalf("Do: %v", err)
	}
	if h := b.Held(); h != 0 {
		t.Errorf("Held() after Do = %d; want 0", h)
	}
}
