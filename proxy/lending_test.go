package proxy_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"trendgate/config"
	"trendgate/gateway/gatewaytest"
)

// TestIdleGuaranteeIsLent is issue 40's idle guarantee through the whole
// gateway (injected clock): with a budget of 20 calls a minute, account A
// (team-limited) asks one cold window at the start of the minute and
// account B (team-full) asks a cold window every 500 ms all minute. B used
// to get its 8 while 11 calls went unused; A's guarantee is now lent once
// A has stopped asking, and B gets the minute but the newcomers' 3; with
// upstream.budget.newcomer_lend (15 s, the default) the newcomers' part is
// lent as the minute runs out too, and B's last ask, half a second before
// the minute's end, leaves ceil(4×0.5/15) = 1 held.
func TestIdleGuaranteeIsLent(t *testing.T) {
	for _, tc := range []struct {
		name string
		lend time.Duration
		want int
	}{{"newcomers' part held all minute", 0, 16}, {"newcomers' part lent late", 15 * time.Second, 18}} {
		t.Run(tc.name, func(t *testing.T) { idleGuaranteeIsLent(t, tc.lend, tc.want) })
	}
}

func idleGuaranteeIsLent(t *testing.T, lend time.Duration, want int) {
	h := gatewaytest.NewProtectHarness(t, func(cfg *config.Config) {
		gatewaytest.RoomyFullPlan(cfg)
		cfg.Upstream.Budget.PerMinute = 20
		cfg.Upstream.Budget.NewcomerLend = lend
	})
	topics := h.Up.Topics()
	seg := func(i int) string { return strings.ReplaceAll(strings.ReplaceAll(topics[i], " ", "%20"), "#", "%23") }
	start := h.Clock.Now().Truncate(time.Minute).Add(time.Minute)
	h.Clock.Set(start)
	if r := h.Send("/api4/public/topic/"+seg(0)+"/whatsup/v1", h.Limited); r.Status != http.StatusOK || r.Header.Get("Cache-Status") != csMiss {
		t.Fatalf("A's one cold miss: %d %q %s", r.Status, r.Header.Get("Cache-Status"), r.Text())
	}
	served, refused := 0, 0
	for i := range 119 { // 0.5 s to 59.5 s
		h.Clock.Set(start.Add(time.Duration(i+1) * 500 * time.Millisecond))
		r := h.Send("/api4/public/topic/"+seg(10+i)+"/time-series/v1", h.Full)
		switch {
		case r.Status == http.StatusOK && r.Header.Get("Cache-Status") == csMiss:
			served++
		case r.Status == http.StatusTooManyRequests && r.Code() == "upstream_share_exhausted":
			refused++
		default:
			t.Fatalf("B's cold miss %d: %d %q %s", i, r.Status, r.Header.Get("Cache-Status"), r.Text())
		}
	}
	if served != want {
		t.Errorf("B's upstream-served answers in the minute: %d (%d refused); want %d", served, refused, want)
	}
}
