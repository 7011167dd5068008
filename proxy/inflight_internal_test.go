package proxy

import (
	"context"
	"net/http"
	"net/http/httptest"
	"runtime"
	"testing"

	"trendgate/auth"
	"trendgate/config"
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

// A limited plan's projection is derived only with its bytes granted by
// the in-flight bound. A request that leaves while it waits gets the
// client-gone answer and holds nothing afterwards; once bytes are free the
// same request is served, and a hit on the made variant takes none.
func TestDeriveWaitsForInflightBytes(t *testing.T) {
	clk, _, upURL := startDemo(t)
	full, err := auth.Generate()
	if err != nil {
		t.Fatal(err)
	}
	limited, err := auth.Generate()
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.Upstream.BaseURL = upURL
	cfg.Keys = []config.Key{
		{ID: "full", SHA256: auth.Digest(full), Plan: config.PlanFull},
		{ID: "limited", SHA256: auth.Digest(limited), Plan: config.PlanLimited},
	}
	g := newTestChain(t, cfg, clk)
	const series = "/api4/public/topic/bitcoin/time-series/v1"
	get := func(ctx context.Context, key string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodGet, series, nil).WithContext(ctx)
		r.Header.Set("Authorization", "Bearer "+key)
		w := httptest.NewRecorder()
		g.ServeHTTP(w, r)
		return w
	}
	if w := get(context.Background(), full); w.Code != http.StatusOK { // the entry, and the full variant
		t.Fatalf("warm: %d %s", w.Code, w.Body)
	}
	if h := g.inflight.Held(); h != 0 {
		t.Fatalf("Held() after the warm-up = %d; want 0", h)
	}

	all, err := g.inflight.Acquire(context.Background(), g.inflight.Capacity())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	gone := make(chan *httptest.ResponseRecorder, 1)
	go func() { gone <- get(ctx, limited) }() // ends when the request is answered
	until(t, "the projection waits for bytes", func() bool { return g.inflight.Waits() == 1 })
	cancel()
	if w := <-gone; w.Body.Len() != 0 || w.Header().Get("Content-Length") != "" {
		t.Errorf("a request that left while waiting was answered (%d bytes); want nothing written (logged as 499)", w.Body.Len())
	}
	if h := g.inflight.Held(); h != g.inflight.Capacity() {
		t.Errorf("Held() = %d; want %d (the test's grant only)", h, g.inflight.Capacity())
	}
	all.Release()

	w := get(context.Background(), limited)
	if w.Code != http.StatusOK || w.Header().Get("X-Data-Mode") != "limited" {
		t.Fatalf("limited after the bytes were freed: %d %q", w.Code, w.Header().Get("X-Data-Mode"))
	}
	if h := g.inflight.Held(); h != 0 {
		t.Errorf("Held() after the projection was stored = %d; want 0", h)
	}
	waits := g.inflight.Waits()
	all, err = g.inflight.Acquire(context.Background(), g.inflight.Capacity())
	if err != nil {
		t.Fatal(err)
	}
	defer all.Release()
	if w := get(context.Background(), limited); w.Code != http.StatusOK { // would wait forever if a hit took bytes
		t.Fatalf("hit on the made variant with the bound full: %d", w.Code)
	}
	if got := g.inflight.Waits(); got != waits {
		t.Errorf("a hit waited for in-flight bytes (%d waits, want %d)", got, waits)
	}
}
