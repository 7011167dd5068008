package proxy

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"trendgate/api"
	"trendgate/config"
	"trendgate/internal/clock"
	"trendgate/limits"
)

// TestLimitRefundsWhatIsNotDelivered drives the limit middleware alone: a
// quota reservation is kept only for 2xx/304, and given back for errors, a
// client that went away, and a panic further down the chain.
func TestLimitRefundsWhatIsNotDelivered(t *testing.T) {
	cfg := config.Default()
	cfg.Upstream.BaseURL = "http://127.0.0.1:1" // never called here
	g := newTestChain(t, cfg, clock.NewFake(time.Date(2026, 11, 19, 10, 0, 0, 0, time.UTC)))
	policy := limits.Policy{PerSecond: 1000, Burst: 1000, Daily: 1}

	serve := func(next http.HandlerFunc) (status int, panicked bool) {
		in := &info{id: "test", set: g.settings.Load(), keyID: "k", policy: policy, req: api.Request{Endpoint: api.EndpointList}, routed: true}
		rec := httptest.NewRecorder()
		in.sw.ResponseWriter = rec
		r := httptest.NewRequest("GET", "/api4/public/topics/list/v1", nil)
		in.Context = r.Context()
		r = r.WithContext(in)
		func() {
			defer func() { panicked = recover() != nil }()
			g.limit(next).ServeHTTP(&in.sw, r)
		}()
		return rec.Code, panicked
	}
	fail := func(status int) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(status) }
	}
	tests := []struct {
		name string
		next http.HandlerFunc
	}{
		{"upstream error", fail(http.StatusBadGateway)},
		{"rate limited downstream", fail(http.StatusServiceUnavailable)},
		{"client gone", func(w http.ResponseWriter, r *http.Request) {
			g.fail(w, r, context.Canceled)
		}},
		{"panic", func(http.ResponseWriter, *http.Request) { panic("boom") }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			serve(tc.next)
			// The single unit of daily quota must still be there.
			if status, _ := serve(fail(http.StatusOK)); status != http.StatusOK {
				t.Fatalf("after %s: got %d; want 200 (the quota was charged)", tc.name, status)
			}
			// ...and now it is used up.
			if status, _ := serve(fail(http.StatusOK)); status != http.StatusTooManyRequests {
				t.Fatalf("second delivered request: got %d; want 429", status)
			}
			g.clk.(*clock.Fake).Advance(24 * time.Hour) // a fresh daily quota for the next case
		})
	}
}

// TestUnservableCostIsNotRetryable: a request whose cost is above the key's
// burst (or daily or monthly quota) used to get 429 rate_limited with a
// Retry-After, forever. config check refuses such plans; should one reach
// the limiter anyway, the answer is a 403 without Retry-After.
func TestUnservableCostIsNotRetryable(t *testing.T) {
	cfg := config.Default()
	cfg.Upstream.BaseURL = "http://127.0.0.1:1" // never called here
	g := newTestChain(t, cfg, clock.NewFake(time.Date(2026, 11, 19, 10, 0, 0, 0, time.UTC)))
	tests := []struct {
		name   string
		policy limits.Policy
		want   int
	}{
		{"burst below cost", limits.Policy{PerSecond: 1, Burst: 3}, http.StatusForbidden},
		{"daily below cost", limits.Policy{Daily: 4}, http.StatusForbidden},
		{"monthly below cost", limits.Policy{Monthly: 2}, http.StatusForbidden},
		{"fits", limits.Policy{PerSecond: 1, Burst: 5, Daily: 5, Monthly: 5}, http.StatusOK},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for i := 0; i < 2; i++ {
				in := &info{id: "test", set: g.settings.Load(), keyID: "k-" + tc.name, policy: tc.policy, req: api.Request{Endpoint: api.EndpointWhatsup}, routed: true}
				rec := httptest.NewRecorder()
				in.sw.ResponseWriter = rec
				r := httptest.NewRequest("GET", "/api4/public/topic/bitcoin/whatsup/v1", nil)
				in.Context = r.Context()
				r = r.WithContext(in)
				g.limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})).ServeHTTP(&in.sw, r)
				want := tc.want
				if i == 1 && tc.want == http.StatusOK {
					want = http.StatusTooManyRequests // the first call used the burst and quotas
				}
				if rec.Code != want {
					t.Fatalf("call %d: status %d; want %d (%s)", i, rec.Code, want, rec.Body)
				}
				if want == http.StatusForbidden {
					if got := rec.Header().Get("Retry-After"); got != "" {
						t.Errorf("Retry-After %q; want none for a request no wait can let through", got)
					}
					if !strings.Contains(rec.Body.String(), api.CodeCostExceedsLimit) {
						t.Errorf("body %s; want code %s", rec.Body, api.CodeCostExceedsLimit)
					}
				}
			}
		})
	}
}
