package proxy_test

import (
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"trendgate/demo"
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

// startAfter returns the harness's clock moved to minute 20 of its next
// hour (so that a start a minute later shares the hour's canonical start,
// the hour's second second) and a series path of topic i.
func startAfter(t *testing.T, h *gatewaytest.ProtectHarness, i int) (base string, at int64) {
	t.Helper()
	next := h.Clock.Now().Unix()/3600*3600 + 3600 + 20*60
	h.Clock.Advance(time.Duration(next-h.Clock.Now().Unix()) * time.Second)
	return "/api4/public/topic/" + url.PathEscape(h.Up.Topics()[i]) + "/time-series/v1", next
}

// TestStaleCutAfterTheClientsStart is a regression test (the oracle, long
// run, gaps and lag seed 3): with the upstream failing, a start-only
// window was cut from a stale week generated before the client's start.
// Asked more than 10 minutes after it, the start's canonical form is its
// hour's second second, before the week's generated time, so the cut
// looked covered; the upstream would have refused the window then. Such a
// window is not cut; one that starts before the week was generated is.
func TestStaleCutAfterTheClientsStart(t *testing.T) {
	h := gatewaytest.NewProtectHarness(t, statedReading)
	base, at := startAfter(t, h, 4)
	teachReading(t, h)
	if r := h.Send(base, h.Full); r.Status != http.StatusOK {
		t.Fatalf("the week: %d", r.Status)
	}
	h.Clock.Advance(70 * time.Minute) // the week is stale
	h.Up.SetFault(demo.FaultServerError)
	after := fmt.Sprintf("%s?start=%d", base, at+60)
	if r := h.Send(after, h.Full); r.Status == http.StatusOK {
		t.Errorf("start after the week's now: %d %q; want no answer (the upstream refused this window then)", r.Status, r.Header.Get("Cache-Status"))
	}
	before := fmt.Sprintf("%s?start=%d", base, at-60)
	if r := h.Send(before, h.Full); r.Status != http.StatusOK || r.Header.Get("Cache-Status") != "trendgate; hit; stale; detail=range" {
		t.Errorf("start before the week's now: %d %q; want 200 stale range", r.Status, r.Header.Get("Cache-Status"))
	}
}

// TestHitAfterTheClientsStart: every start in a bucket, once more than 10
// minutes old, shares its canonical start and so its entry. An entry
// fetched for an earlier start in the bucket, generated before a later
// client's start, does not answer that client (the upstream refused its
// window then), fresh or stale: it is fetched for it, and the entry
// replaced.
func TestHitAfterTheClientsStart(t *testing.T) {
	h := gatewaytest.NewProtectHarness(t, gatewaytest.RoomyFullPlan)
	for _, bucket := range []string{"day", "hour"} { // fresh for 1h; stale after 10 min
		t.Run(bucket, func(t *testing.T) {
			base, at := startAfter(t, h, 2)
			base += "?bucket=" + bucket
			first := fmt.Sprintf("%s&start=%d", base, at-15*60)
			if r := h.Send(first, h.Full); r.Status != http.StatusOK || r.Header.Get("Cache-Status") != csMiss {
				t.Fatalf("%s: %d %q", first, r.Status, r.Header.Get("Cache-Status"))
			}
			h.Clock.Advance(15 * time.Minute)
			h.Up.Reset()
			later := fmt.Sprintf("%s&start=%d", base, at+60)
			r := h.Send(later, h.Full)
			if r.Status != http.StatusOK || r.Header.Get("Cache-Status") != csMiss || len(h.Up.Requests()) == 0 {
				t.Fatalf("%s: %d %q, %d upstream calls; want an answer fetched for it", later, r.Status, r.Header.Get("Cache-Status"), len(h.Up.Requests()))
			}
			h.Quiesce()
			h.Up.Reset()
			if r := h.Send(first, h.Full); r.Status != http.StatusOK || r.Header.Get("Cache-Status") != "trendgate; hit" || len(h.Up.Requests()) != 0 {
				t.Errorf("%s again: %d %q, %d upstream calls; want a hit of the new entry", first, r.Status, r.Header.Get("Cache-Status"), len(h.Up.Requests()))
			}
		})
	}
}
