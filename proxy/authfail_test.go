package proxy_test

import (
	"net/http"
	"testing"

	"trendgate/gateway/gatewaytest"
)

// TestAuthFailureBlockSparesValidKeys is issue 20's lockout: the per-IP
// block on failed authentication slows key guessing, but must never refuse
// a valid key (behind a load balancer every client shares one address),
// and only wrong keys count as failures.
func TestAuthFailureBlockSparesValidKeys(t *testing.T) {
	h := gatewaytest.NewProtectHarness(t, gatewaytest.RoomyFullPlan)
	burst := h.Config.Limits.AuthFailures.Burst

	// Requests without a key are plain 401s and never count.
	for range 3 * burst {
		for _, target := range []string{"/api4/public/topics/list/v1", "/api4/no/such/route"} {
			if r := h.Send(target, ""); r.Status != http.StatusUnauthorized || r.Code() != "missing_api_key" {
				t.Fatalf("%s without a key: %d %s; want 401 missing_api_key", target, r.Status, r.Text())
			}
		}
	}
	// Wrong keys count: the burst is answered 401, then the address is
	// blocked for wrong keys.
	for i := range burst {
		if r := h.Send("/api4/public/topics/list/v1", "tg_wrong"); r.Status != http.StatusUnauthorized || r.Code() != "invalid_api_key" {
			t.Fatalf("wrong key %d: %d %s; want 401 invalid_api_key", i, r.Status, r.Text())
		}
	}
	r := h.Send("/api4/public/topics/list/v1", "tg_wrong")
	if r.Status != http.StatusTooManyRequests || r.Code() != "too_many_auth_failures" || retryAfter(r) < 1 {
		t.Fatalf("wrong key past the burst: %d %s (Retry-After %d); want 429 too_many_auth_failures with Retry-After", r.Status, r.Text(), retryAfter(r))
	}
	// One metric counts the refusals of a blocked address.
	if got := h.Metric("trendgate_auth_failures_total", "reason", "blocked"); got != 1 {
		t.Errorf(`trendgate_auth_failures_total{reason="blocked"} = %v; want 1`, got)
	}
	// The blocked address still serves valid keys, and a missing key is
	// still told so.
	for _, key := range []string{h.Full, h.Limited} {
		if r := h.Send("/api4/public/topics/list/v1", key); r.Status != http.StatusOK {
			t.Errorf("valid key from the blocked address: %d %s; want 200", r.Status, r.Text())
		}
	}
	if r := h.Send("/api4/public/topics/list/v1", ""); r.Status != http.StatusUnauthorized || r.Code() != "missing_api_key" {
		t.Errorf("no key from the blocked address: %d %s; want 401 missing_api_key", r.Status, r.Text())
	}
}
