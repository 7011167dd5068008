package proxy_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"trendgate/config"
	"trendgate/gateway/gatewaytest"
)

// TestFairShareFloodSparesOtherKeys is issue 20's reproduction: with a
// budget of 20 upstream calls a minute, key A sends 25 cold series requests
// (distinct topics: distinct windows of one topic are now cut from one
// cached week, see package rangecut), and key B then asks for three cold
// resources. A must not take the minute from B, whether B had asked for
// upstream data just before A's flood or arrives only after it.
func TestFairShareFloodSparesOtherKeys(t *testing.T) {
	for _, c := range []struct {
		name      string
		bFirst    bool // B is served once just before A's flood
		wantAOK   int  // A's floods answered 200
		wantShare int  // A's requests refused for its share
	}{
		// Alone, A may use the pool (20 less the newcomer reserve of 4).
		{"B arrives after the flood", false, 16, 9},
		// With B active, A stops at its half of the pool.
		{"B asked just before the flood", true, 8, 17},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := gatewaytest.NewProtectHarness(t, func(cfg *config.Config) {
				gatewaytest.RoomyFullPlan(cfg)
				cfg.Upstream.Budget.PerMinute = 20
			})
			topics := h.Up.Topics()
			seg := func(i int) string { return strings.ReplaceAll(strings.ReplaceAll(topics[i], " ", "%20"), "#", "%23") }
			bTargets := []string{
				"/api4/public/topic/" + seg(1) + "/whatsup/v1",
				"/api4/public/topics/list/v1",
				"/api4/public/topic/" + seg(2) + "/time-series/v1",
			}
			if c.bFirst {
				if r := h.Send("/topic/"+seg(3)+"/time-series/sentiment.tsv", h.Limited); r.Status != http.StatusOK {
					t.Fatalf("B's first request: %d %s", r.Status, r.Text())
				}
			}

			var okA, shareA int
			for i := range 25 {
				target := fmt.Sprintf("/api4/public/topic/%s/time-series/v1", seg(10+i))
				r := h.Send(target, h.Full)
				switch {
				case r.Status == http.StatusOK:
					okA++
				case r.Status == http.StatusTooManyRequests && r.Code() == "upstream_share_exhausted":
					shareA++
					if ra := retryAfter(r); ra < 1 || ra > 60 {
						t.Errorf("share refusal Retry-After %d; want the rest of the minute (1-60)", ra)
					}
				default:
					t.Errorf("A's flood %s: %d %s", target, r.Status, r.Text())
				}
			}
			if okA != c.wantAOK || shareA != c.wantShare {
				t.Errorf("A's flood: %d answered, %d refused for its share; want %d and %d", okA, shareA, c.wantAOK, c.wantShare)
			}
			for _, target := range bTargets {
				if r := h.Send(target, h.Limited); r.Status != http.StatusOK || r.Header.Get("Cache-Status") != csMiss {
					t.Errorf("B's cold %s after A's flood: %d %q %s; want 200 %q", target, r.Status, r.Header.Get("Cache-Status"), r.Text(), csMiss)
				}
			}
			if got := h.Metric("trendgate_upstream_calls_by_account_total", "account", "team-full", "result", "sent"); int(got) != c.wantAOK {
				t.Errorf("upstream calls caused by A: %v; want %d", got, c.wantAOK)
			}
			if got := h.Metric("trendgate_upstream_calls_by_account_total", "account", "team-full", "result", "share_refused"); int(got) != c.wantShare {
				t.Errorf("share refusals of A: %v; want %d", got, c.wantShare)
			}
			wantB := 3
			if c.bFirst {
				wantB = 4
			}
			if got := h.Metric("trendgate_upstream_calls_by_account_total", "account", "team-limited", "result", "sent"); int(got) != wantB {
				t.Errorf("upstream calls caused by B: %v; want %d", got, wantB)
			}
			if got, want := h.Up.Count(), c.wantAOK+wantB; got != want {
				t.Errorf("upstream requests: %d; want %d (one per answered cold miss)", got, want)
			}
		})
	}
}
