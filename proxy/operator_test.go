package proxy_test

import (
	"testing"

	"trendgate/config"
	"trendgate/limits"
)

// TestPlanCheckBeforeLimiter is a regression test: the plan check ran after
// the rate limiter, so a request for an endpoint outside the plan spent
// tokens and soon came back 429 rate_limited instead of 403. Now it is
// refused first and costs nothing.
func TestPlanCheckBeforeLimiter(t *testing.T) {
	h := newHarness(t, func(c *config.Config) {
		c.Plans["narrow"] = config.Plan{
			Policy:    limits.Policy{PerSecond: 0.001, Burst: 5},
			Endpoints: []string{"list"},
			DataMode:  config.DataModeFull,
		}
		c.Keys[0].Plan = "narrow"
	})
	for i := 0; i < 3; i++ {
		resp, body := h.get("/api4/public/topic/bitcoin/whatsup/v1", h.full)
		if resp.StatusCode != 403 || decodeError(t, body).Code != "endpoint_not_in_plan" {
			t.Fatalf("whatsup %d: %d %s; want 403 endpoint_not_in_plan", i, resp.StatusCode, body)
		}
		if got := resp.Header.Get("Retry-After"); got != "" {
			t.Errorf("whatsup %d: Retry-After %q on a 403; want none", i, got)
		}
		if resp.Header.Get("RateLimit-Policy") == "" {
			t.Errorf("whatsup %d: no RateLimit-Policy for a valid key", i)
		}
	}
	// The whole burst is still there: five list calls pass.
	for i := 0; i < 5; i++ {
		if resp, body := h.get("/api4/public/topics/list/v1", h.full); resp.StatusCode != 200 {
			t.Fatalf("list %d after refused whatsups: %d %s; want 200 (refusals spent tokens)", i, resp.StatusCode, body)
		}
	}
}
