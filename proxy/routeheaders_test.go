package proxy_test

import (
	"strings"
	"testing"

	"trendgate/gateway/gatewaytest"
)

// TestRoutingErrorsCarryPolicy: a request refused by routing (400, 404,
// 405) that carries a valid key gets the key's RateLimit-Policy, as every
// response to a valid key does; the limiter is not consulted, so there is
// no RateLimit field and nothing is spent. Without a key, or with one that
// is not valid, the response carries no rate-limit header.
func TestRoutingErrorsCarryPolicy(t *testing.T) {
	h := gatewaytest.New(t, nil)
	tests := []struct {
		name, method, target string
		status               int
	}{
		{"400 bad parameter", "GET", "/api4/public/topic/bitcoin/time-series/v1?bucket=week", 400},
		{"400 unknown parameter", "GET", "/api4/public/topics/list/v1?x=1", 400},
		{"404 unknown API route", "GET", "/api4/public/nothing/v1", 404},
		{"404 outside the API", "GET", "/nothing", 404},
		{"405 method", "POST", "/api4/public/topics/list/v1", 405},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := h.Do(tc.method, tc.target, h.Full)
			if resp.StatusCode != tc.status {
				t.Fatalf("valid key: got %d %s; want %d", resp.StatusCode, body, tc.status)
			}
			if resp.Header.Get("RateLimit-Policy") == "" {
				t.Errorf("valid key: no RateLimit-Policy on the %d", tc.status)
			}
			if got := resp.Header.Get("RateLimit"); got != "" {
				t.Errorf("valid key: RateLimit %q; want none (the limiter was not consulted)", got)
			}
			for _, key := range []string{"", gatewaytest.NewKey(t)} {
				resp, _ := h.Do(tc.method, tc.target, key)
				if got := resp.Header.Get("RateLimit-Policy"); got != "" {
					t.Errorf("key %q: RateLimit-Policy %q; want none", key, got)
				}
			}
		})
	}
	// Nothing was spent: the key's whole burst is still there.
	resp, _ := h.Get("/api4/public/topics/list/v1", h.Full)
	if resp.StatusCode != 200 || resp.Header.Get("RateLimit") == "" {
		t.Fatalf("GET: %d, RateLimit %q", resp.StatusCode, resp.Header.Get("RateLimit"))
	}
	if got := resp.Header.Get("RateLimit"); !strings.Contains(got, `"burst";r=39;`) {
		t.Errorf("RateLimit after the refused requests and one GET: %s; want 39 of the full plan's burst of 40 left", got)
	}
}
