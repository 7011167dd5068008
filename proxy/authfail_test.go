package proxy_test

import (
	"net/http"
	"testing"
)

// TestAuthFailureBlockSparesValidKeys is issue 20's lockout: the per-IP
// block on failed authentication slows key guessing, but must never refuse
// a valid key (behind a load balancer every client shares one address),
// and only wrong keys count as failures.
func TestAuthFailureBlockSparesValidKeys(t *testing.T) {
	h := newProtectHarness(t, roomyFullPlan)
	burst := h.cfg.Limits.AuthFailures.Burst

	// Requests without a key are plain 401s and never count.
	for range 3 * burst {
		for _, target := range []string{"/api4/public/topics/list/v1", "/api4/no/such/route"} {
			if r := h.send(target, ""); r.status != http.StatusUnauthorized || r.code() != "missing_api_key" {
				t.Fatalf("%s without a key: %d %s; want 401 missing_api_key", target, r.status, r.text())
			}
		}
	}
	// Wrong keys count: the burst is answered 401, then the address is
	// blocked for wrong keys.
	for i := range burst {
		if r := h.send("/api4/public/topics/list/v1", "tg_wrong"); r.status != http.StatusUnauthorized || r.code() != "invalid_api_key" {
			t.Fatalf("wrong key %d: %d %s; want 401 invalid_api_key", i, r.status, r.text())
		}
	}
	r := h.send("/api4/public/topics/list/v1", "tg_wrong")
	if r.status != http.StatusTooManyRequests || r.code() != "too_many_auth_failures" || retryAfter(r) < 1 {
		t.Fatalf("wrong key past the burst: %d %s (Retry-After %d); want 429 too_many_auth_failures with Retry-After", r.status, r.text(), retryAfter(r))
	}
	// One metric counts the refusals of a blocked address.
	if got := h.metric("trendgate_auth_failures_total", "reason", "blocked"); got != 1 {
		t.Errorf(`trendgate_auth_failures_total{reason="blocked"} = %v; want 1`, got)
	}
	// The blocked address still serves valid keys, and a missing key is
	// still told so.
	for _, key := range []string{h.full, h.limited} {
		if r := h.send("/api4/public/topics/list/v1", key); r.status != http.StatusOK {
			t.Errorf("valid key from the blocked address: %d %s; want 200", r.status, r.text())
		}
	}
	if r := h.send("/api4/public/topics/list/v1", ""); r.status != http.StatusUnauthorized || r.code() != "missing_api_key" {
		t.Errorf("no key from the blocked address: %d %s; want 401 missing_api_key", r.status, r.text())
	}
}
