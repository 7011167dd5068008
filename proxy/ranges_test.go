package proxy_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"trendgate/api"
	"trendgate/demo"
)

const csRange = "trendgate; hit; detail=range"

// TestRangeServedFromTheWeek: once a topic's one-week hourly answer is
// cached, absolute windows inside it are answered without an upstream call
// (Cache-Status detail=range), with the bytes the upstream itself would
// send for them at that moment, for both plans, with ETag/304 and gzip as
// for any other answer. A window outside the week still goes upstream.
func TestRangeServedFromTheWeek(t *testing.T) {
	h := newProtectHarness(t, roomyFullPlan)
	// A second demo upstream on the same clock and seed answers "directly".
	direct, err := demo.New(demo.Options{Clock: h.clk, APIKey: upstreamKey})
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	topic := h.up.Topics()[0]
	base := "/api4/public/topic/" + url.PathEscape(topic) + "/time-series/v1"
	if r := h.send(base, h.full); r.status != http.StatusOK || r.header.Get("Cache-Status") != csMiss {
		t.Fatalf("the week: %d %q", r.status, r.header.Get("Cache-Status"))
	}
	calls := len(h.up.Requests())

	now := h.clk.Now().Unix()
	cur := now / 3600 * 3600
	for _, w := range []struct{ start, end int64 }{
		{cur - 3*24*3600, cur - 3600}, // closed
		{cur - 6*3600 + 17, now},      // unaligned, reaching the partial hour
		{cur, now},                    // the partial hour alone
		{cur - 24*3600, cur - 24*3600 + 1},
	} {
		target := fmt.Sprintf("%s?start=%d&end=%d", base, w.start, w.end)
		r := h.send(target, h.full)
		if r.status != http.StatusOK || r.header.Get("Cache-Status") != csRange {
			t.Fatalf("%s: %d %q; want 200 %q", target, r.status, r.header.Get("Cache-Status"), csRange)
		}
		upPath, upQuery := directQuery(t, h, target)
		want := directBody(t, direct, upPath, upQuery)
		if !bytes.Equal(r.body, want) {
			t.Errorf("%s: the cut answer differs from the upstream's:\n%.300s\n%.300s", target, r.body, want)
		}
		// Later requests are ordinary hits of the cut entry.
		again := h.send(target, h.full)
		if again.header.Get("Cache-Status") != csRange || !bytes.Equal(again.body, r.body) {
			t.Errorf("%s again: %q", target, again.header.Get("Cache-Status"))
		}
		etag := r.header.Get("ETag")
		if nm := h.sendHeader(target, h.full, "If-None-Match", etag); nm.status != http.StatusNotModified {
			t.Errorf("%s with its ETag: %d; want 304", target, nm.status)
		}
		lim := h.send(target, h.limited)
		if lim.status != http.StatusOK || lim.header.Get("X-Data-Mode") != "limited" || rowCount(t, lim.body) != rowCount(t, r.body) {
			t.Errorf("%s limited: %d %q, %d rows; want 200, limited, %d rows", target, lim.status,
				lim.header.Get("X-Data-Mode"), rowCount(t, lim.body), rowCount(t, r.body))
		}
		gz := h.sendHeader(target, h.full, "Accept-Encoding", "gzip")
		if gz.header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(bytes.NewReader(gz.body))
			if err != nil {
				t.Fatal(err)
			}
			plain, _ := io.ReadAll(zr)
			if !bytes.Equal(plain, r.body) {
				t.Errorf("%s gzip: decompressed body differs", target)
			}
		}
	}
	if n := len(h.up.Requests()); n != calls {
		t.Errorf("the upstream got %d more requests for windows inside the week; want 0", n-calls)
	}
	if !strings.Contains(h.logs.String(), `"cache":"range"`) {
		t.Error(`no access line says "cache":"range"`)
	}

	// Nine days back is before the week's start: the upstream is asked.
	old := fmt.Sprintf("%s?start=%d&end=%d", base, cur-9*24*3600, cur-8*24*3600)
	if r := h.send(old, h.full); r.status != http.StatusOK || r.header.Get("Cache-Status") != csMiss {
		t.Errorf("a window before the week: %d %q; want 200 %q", r.status, r.header.Get("Cache-Status"), csMiss)
	}
	if n := len(h.up.Requests()); n != calls+1 {
		t.Errorf("the upstream got %d requests for a window outside the week; want 1", n-calls)
	}
}

// TestRangeWidensColdSlidingWindow: a cold "last seven days" request
// fetches the week instead (one upstream call), and the week and every
// other window inside it are then answered without another.
func TestRangeWidensColdSlidingWindow(t *testing.T) {
	h := newProtectHarness(t, roomyFullPlan)
	topic := h.up.Topics()[3]
	base := "/api4/public/topic/" + url.PathEscape(topic) + "/time-series/v1"
	now := h.clk.Now().Unix()
	sliding := fmt.Sprintf("%s?start=%d&end=%d", base, now-7*24*3600, now)
	r := h.send(sliding, h.full)
	if r.status != http.StatusOK || r.header.Get("Cache-Status") != csRange {
		t.Fatalf("cold sliding window: %d %q; want 200 %q", r.status, r.header.Get("Cache-Status"), csRange)
	}
	reqs := h.up.Requests()
	if len(reqs) != 1 || reqs[0].RawQuery != "bucket=hour&interval=1w" {
		t.Fatalf("the upstream got %+v; want one bucket=hour&interval=1w", reqs)
	}
	for _, target := range []string{base, base + "?interval=1w", fmt.Sprintf("%s?start=%d", base, now-2*24*3600)} {
		if r := h.send(target, h.full); r.status != http.StatusOK {
			t.Errorf("%s: %d", target, r.status)
		}
	}
	if n := len(h.up.Requests()); n != 1 {
		t.Errorf("the upstream got %d requests; want 1 (the week)", n)
	}
	if got := h.metric("trendgate_series_widened_fetches_total"); got != 1 {
		t.Errorf("widened fetches: %v; want 1", got)
	}

	// A topic the upstream has no data for has none in any window: one
	// call, answered as the upstream answers it (no rows).
	unknown := fmt.Sprintf("/api4/public/topic/nosuchtopicanywhere/time-series/v1?start=%d&end=%d", now-7*24*3600, now)
	if r := h.send(unknown, h.full); r.status != http.StatusOK || rowCount(t, r.body) != 0 {
		t.Errorf("unknown topic: %d %s; want 200 without rows", r.status, r.text())
	}
	if n := len(h.up.Requests()); n != 2 {
		t.Errorf("the upstream got %d requests; want 2", n)
	}

	// An hour later the week is stale: the next window reaching the new
	// hour is not cut from it (its rows lack that hour).
	h.clk.Advance(time.Hour)
	later := fmt.Sprintf("%s?start=%d", base, h.clk.Now().Unix()-3600)
	if r := h.send(later, h.full); r.status != http.StatusOK || r.header.Get("Cache-Status") == csHit {
		t.Errorf("an hour later: %d %q; want a fresh answer", r.status, r.header.Get("Cache-Status"))
	}
	if n := len(h.up.Requests()); n != 3 {
		t.Errorf("an hour later the upstream got %d requests in all; want 3", n)
	}
}

// directQuery returns the upstream path and query the gateway would send
// for target if it asked the upstream itself.
func directQuery(t *testing.T, h *protectHarness, target string) (string, string) {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, target, nil)
	q, err := api.ParseRequest(r, h.clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	return q.UpstreamPath(), q.UpstreamQuery()
}

// directBody asks up for path?query with the upstream credential.
func directBody(t *testing.T, up *demo.Server, path, query string) []byte {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, path+"?"+query, nil)
	r.Header.Set("Authorization", "Bearer "+upstreamKey)
	w := httptest.NewRecorder()
	up.ServeHTTP(w, r)
	if w.Code != http.StatusOK {
		t.Fatalf("direct %s?%s: %d", path, query, w.Code)
	}
	return w.Body.Bytes()
}

// sendHeader is send with one extra request header.
func (h *protectHarness) sendHeader(target, key, name, value string) clientReply {
	req, err := http.NewRequest(http.MethodGet, h.base+target, nil)
	if err != nil {
		h.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set(name, value)
	resp, err := h.client.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return clientReply{target: target, status: resp.StatusCode, header: resp.Header, body: b}
}

// rowCount is the number of rows of a series body.
func rowCount(t *testing.T, body []byte) int {
	t.Helper()
	var v struct {
		Data []json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("series body: %v", err)
	}
	return len(v.Data)
}

// TestRangeFreshnessFollowsTheRows: when the cached week has gone stale
// (its newest hour moved on), a window of hours that had closed when the
// week was fetched is still cut from it as fresh (those rows never
// change), while a window reaching the week's last hour needs the
// upstream; if the upstream cannot be asked, that window is cut from the
// stale week and marked stale rather than refused.
func TestRangeFreshnessFollowsTheRows(t *testing.T) {
	h := newProtectHarness(t, roomyFullPlan)
	topic := h.up.Topics()[5]
	base := "/api4/public/topic/" + url.PathEscape(topic) + "/time-series/v1"
	if r := h.send(base, h.full); r.status != http.StatusOK {
		t.Fatalf("the week: %d", r.status)
	}
	fetched := h.clk.Now().Unix()
	cur := fetched / 3600 * 3600
	h.clk.Advance(20 * time.Minute) // past series_hour_max: the week is stale
	calls := len(h.up.Requests())

	closed := fmt.Sprintf("%s?start=%d&end=%d", base, cur-48*3600, cur-24*3600)
	if r := h.send(closed, h.full); r.status != http.StatusOK || r.header.Get("Cache-Status") != csRange {
		t.Errorf("closed window from a stale week: %d %q; want 200 %q", r.status, r.header.Get("Cache-Status"), csRange)
	}
	if n := len(h.up.Requests()); n != calls {
		t.Errorf("the upstream got %d requests for a closed window; want 0", n-calls)
	}

	h.up.SetFault(demo.FaultRateLimit)
	recent := fmt.Sprintf("%s?start=%d&end=%d", base, cur-3*3600, cur)
	r := h.send(recent, h.full)
	if r.status != http.StatusOK || r.header.Get("Cache-Status") != "trendgate; hit; stale; detail=range" {
		t.Fatalf("recent window, upstream refusing: %d %q %s; want 200 stale range", r.status, r.header.Get("Cache-Status"), r.text())
	}
	if got := rowCount(t, r.body); got != 4 {
		t.Errorf("recent window: %d rows; want 4 (the hours up to the week's last)", got)
	}
}
