package proxy_test

import (
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"trendgate/gateway/gatewaytest"
)

// Issue 40: a window given only a start in the future was forwarded, the
// upstream's 400 became a 502, and each repeat cost an upstream call.
// Before the upstream's clock is known, such a start is forwarded and the
// upstream's own 400 is answered as 400 upstream_rejected and kept for a
// minute; once an answer has shown the upstream's clock, it is refused
// 400 invalid_start without a call.
func TestFutureStartRefusedEarly(t *testing.T) {
	h := gatewaytest.NewProtectHarness(t, gatewaytest.RoomyFullPlan)
	base := "/api4/public/topic/" + url.PathEscape(h.Up.Topics()[3]) + "/time-series/v1"
	future := fmt.Sprintf("%s?start=%d", base, h.Clock.Now().Add(time.Hour).Unix())

	// The upstream's clock is not known yet: forwarded, its 400 kept.
	for i, wantCalls := range []int{1, 1} {
		r := h.Send(future, h.Full)
		if r.Status != http.StatusBadRequest || r.Code() != "upstream_rejected" {
			t.Fatalf("request %d: %d %s; want 400 upstream_rejected", i, r.Status, r.Text())
		}
		if got := len(h.Up.Requests()); got != wantCalls {
			t.Fatalf("upstream calls after request %d: %d; want %d (the 400 is kept)", i, got, wantCalls)
		}
	}
	// After a minute the upstream is asked again (within
	// stale_while_revalidate the kept 400 answers meanwhile, the refresh
	// running in the background).
	h.Clock.Advance(61 * time.Second)
	if r := h.Send(future, h.Full); r.Status != http.StatusBadRequest {
		t.Fatalf("after a minute: %d %s; want 400", r.Status, r.Text())
	}
	if !gatewaytest.PollUntil(func() bool { return len(h.Up.Requests()) == 2 }) {
		t.Fatalf("after a minute: %d upstream calls; want the request forwarded again", len(h.Up.Requests()))
	}
	h.Quiesce()

	// An answer shows the upstream's clock: from now on refused here.
	if r := h.Send(base, h.Full); r.Status != http.StatusOK {
		t.Fatalf("the week: %d %s", r.Status, r.Text())
	}
	h.Up.Reset()
	other := fmt.Sprintf("%s?start=%d&bucket=day", base, h.Clock.Now().Add(3*time.Hour).Unix())
	r := h.Send(other, h.Full)
	if r.Status != http.StatusBadRequest || r.Code() != "invalid_start" {
		t.Fatalf("future start with the upstream's clock known: %d %s; want 400 invalid_start", r.Status, r.Text())
	}
	if got := len(h.Up.Requests()); got != 0 {
		t.Errorf("upstream calls for it: %d; want 0", got)
	}
	// A start in the past is still forwarded and answered.
	past := fmt.Sprintf("%s?start=%d", base, h.Clock.Now().Add(-3*time.Hour).Unix())
	if r := h.Send(past, h.Full); r.Status != http.StatusOK {
		t.Errorf("start 3 h ago: %d %s; want 200", r.Status, r.Text())
	}
}
