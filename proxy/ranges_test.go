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
	"trendgate/config"
	"trendgate/demo"
	"trendgate/gateway/gatewaytest"
	"trendgate/upstream"
)

const (
	csRange   = "trendgate; hit; detail=range"
	csWidened = "trendgate; fwd=miss; stored; detail=widened"
)

// statedReading is gatewaytest.RoomyFullPlan with the demo upstream's reading of
// window bounds stated in the config (used once an answer agrees).
func statedReading(c *config.Config) {
	gatewaytest.RoomyFullPlan(c)
	c.Upstream.WindowReading = upstream.WindowReading{Start: "floor", End: "inclusive"}
}

// teachReading sends two windows of the last topic whose edge buckets hold
// rows, so that the gateway sees how the upstream reads a start inside a
// bucket and an end on and inside one, then forgets the upstream requests
// they made.
func teachReading(t *testing.T, h *gatewaytest.ProtectHarness) {
	t.Helper()
	topics := h.Up.Topics()
	base := "/api4/public/topic/" + url.PathEscape(topics[len(topics)-1]) + "/time-series/v1"
	cur := h.Clock.Now().Unix() / 3600 * 3600
	for _, w := range []string{
		fmt.Sprintf("start=%d&end=%d", cur-10*3600+600, cur-3*3600),
		fmt.Sprintf("start=%d&end=%d", cur-10*3600+600, cur-2*3600+600),
	} {
		if r := h.Send(base+"?"+w, h.Full); r.Status != http.StatusOK {
			t.Fatalf("teaching the reading: %d %s", r.Status, r.Text())
		}
	}
	for _, fact := range []string{"start_inside", "end_on", "end_inside"} {
		if got := h.Metric("trendgate_upstream_window_reading", "fact", fact); got != 1 {
			t.Fatalf("after teaching: %s = %v; want 1", fact, got)
		}
	}
	h.Up.Reset()
}

// TestRangeServedFromTheWeek: once a topic's one-week hourly answer is
// cached, absolute windows inside it are answered without an upstream call
// (Cache-Status detail=range), with the bytes the upstream itself would
// send for them at that moment, for both plans, with ETag/304 and gzip as
// for any other answer. A window outside the week still goes upstream.
func TestRangeServedFromTheWeek(t *testing.T) {
	h := gatewaytest.NewProtectHarness(t, statedReading)
	teachReading(t, h)
	// A second demo upstream on the same clock and seed answers "directly".
	direct, err := demo.New(demo.Options{Clock: h.Clock, APIKey: gatewaytest.UpstreamKey})
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	topic := h.Up.Topics()[0]
	base := "/api4/public/topic/" + url.PathEscape(topic) + "/time-series/v1"
	if r := h.Send(base, h.Full); r.Status != http.StatusOK || r.Header.Get("Cache-Status") != csMiss {
		t.Fatalf("the week: %d %q", r.Status, r.Header.Get("Cache-Status"))
	}
	calls := len(h.Up.Requests())

	now := h.Clock.Now().Unix()
	cur := now / 3600 * 3600
	for _, w := range []struct{ start, end int64 }{
		{cur - 3*24*3600, cur - 3600}, // closed
		{cur - 6*3600 + 17, now},      // unaligned, reaching the partial hour
		{cur, now},                    // the partial hour alone
		{cur - 24*3600, cur - 24*3600 + 1},
	} {
		target := fmt.Sprintf("%s?start=%d&end=%d", base, w.start, w.end)
		r := h.Send(target, h.Full)
		if r.Status != http.StatusOK || r.Header.Get("Cache-Status") != csRange {
			t.Fatalf("%s: %d %q; want 200 %q", target, r.Status, r.Header.Get("Cache-Status"), csRange)
		}
		upPath, upQuery := directQuery(t, h, target)
		want := directBody(t, direct, upPath, upQuery)
		if !bytes.Equal(r.Body, want) {
			t.Errorf("%s: the cut answer differs from the upstream's:\n%.300s\n%.300s", target, r.Body, want)
		}
		// Later requests are ordinary hits of the cut entry.
		again := h.Send(target, h.Full)
		if again.Header.Get("Cache-Status") != csRange || !bytes.Equal(again.Body, r.Body) {
			t.Errorf("%s again: %q", target, again.Header.Get("Cache-Status"))
		}
		etag := r.Header.Get("ETag")
		if nm := h.SendHeader(target, h.Full, "If-None-Match", etag); nm.Status != http.StatusNotModified {
			t.Errorf("%s with its ETag: %d; want 304", target, nm.Status)
		}
		lim := h.Send(target, h.Limited)
		if lim.Status != http.StatusOK || lim.Header.Get("X-Data-Mode") != "limited" || rowCount(t, lim.Body) != rowCount(t, r.Body) {
			t.Errorf("%s limited: %d %q, %d rows; want 200, limited, %d rows", target, lim.Status,
				lim.Header.Get("X-Data-Mode"), rowCount(t, lim.Body), rowCount(t, r.Body))
		}
		gz := h.SendHeader(target, h.Full, "Accept-Encoding", "gzip")
		if gz.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(bytes.NewReader(gz.Body))
			if err != nil {
				t.Fatal(err)
			}
			plain, _ := io.ReadAll(zr)
			if !bytes.Equal(plain, r.Body) {
				t.Errorf("%s gzip: decompressed body differs", target)
			}
		}
	}
	if n := len(h.Up.Requests()); n != calls {
		t.Errorf("the upstream got %d more requests for windows inside the week; want 0", n-calls)
	}
	if !strings.Contains(h.Logs.String(), `"cache":"range"`) {
		t.Error(`no access line says "cache":"range"`)
	}

	// Nine days back is before the week's start: the upstream is asked.
	old := fmt.Sprintf("%s?start=%d&end=%d", base, cur-9*24*3600, cur-8*24*3600)
	if r := h.Send(old, h.Full); r.Status != http.StatusOK || r.Header.Get("Cache-Status") != csMiss {
		t.Errorf("a window before the week: %d %q; want 200 %q", r.Status, r.Header.Get("Cache-Status"), csMiss)
	}
	if n := len(h.Up.Requests()); n != calls+1 {
		t.Errorf("the upstream got %d requests for a window outside the week; want 1", n-calls)
	}
}

// TestRangeWidensColdSlidingWindow: a cold "last seven days" request
// fetches the week instead (one upstream call, labelled as forwarded), and
// the week and every other window inside it are then answered without
// another.
func TestRangeWidensColdSlidingWindow(t *testing.T) {
	h := gatewaytest.NewProtectHarness(t, statedReading)
	teachReading(t, h)
	topic := h.Up.Topics()[3]
	base := "/api4/public/topic/" + url.PathEscape(topic) + "/time-series/v1"
	now := h.Clock.Now().Unix()
	sliding := fmt.Sprintf("%s?start=%d&end=%d", base, now-7*24*3600, now)
	r := h.Send(sliding, h.Full)
	if r.Status != http.StatusOK || r.Header.Get("Cache-Status") != csWidened {
		t.Fatalf("cold sliding window: %d %q; want 200 %q", r.Status, r.Header.Get("Cache-Status"), csWidened)
	}
	upPath, upQuery := directQuery(t, h, sliding)
	if _, want := h.Up.AnswerAt(upstreamRequest(upPath, upQuery), h.Clock.Now()); !bytes.Equal(r.Body, want) {
		t.Errorf("the widened cut differs from the upstream's answer to the window")
	}
	req, err := http.NewRequest(http.MethodGet, h.Base+sliding, nil)
	if err != nil {
		t.Fatal(err)
	}
	if line := h.Harness.AccessLine(t, &http.Response{Header: http.Header{"X-Request-Id": {r.Header.Get("X-Request-Id")}}, Request: req}); line["upstream_reason"] != "widen" {
		t.Errorf("access line: upstream_reason %v; want widen", line["upstream_reason"])
	}
	reqs := h.Up.Requests()
	if len(reqs) != 1 || reqs[0].RawQuery != "bucket=hour&interval=1w" {
		t.Fatalf("the upstream got %+v; want one bucket=hour&interval=1w", reqs)
	}
	for _, target := range []string{base, base + "?interval=1w", fmt.Sprintf("%s?start=%d", base, now-2*24*3600)} {
		if r := h.Send(target, h.Full); r.Status != http.StatusOK {
			t.Errorf("%s: %d", target, r.Status)
		}
	}
	if n := len(h.Up.Requests()); n != 1 {
		t.Errorf("the upstream got %d requests; want 1 (the week)", n)
	}
	if got := h.Metric("trendgate_series_widened_fetches_total"); got != 1 {
		t.Errorf("widened fetches: %v; want 1", got)
	}

	// A topic the upstream has no data for: its empty week shows nothing
	// of the current hour, so the window itself is fetched too, and
	// answered as the upstream answers it (no rows).
	unknown := fmt.Sprintf("/api4/public/topic/nosuchtopicanywhere/time-series/v1?start=%d&end=%d", now-7*24*3600, now)
	if r := h.Send(unknown, h.Full); r.Status != http.StatusOK || rowCount(t, r.Body) != 0 {
		t.Errorf("unknown topic: %d %s; want 200 without rows", r.Status, r.Text())
	}
	if n := len(h.Up.Requests()); n != 3 {
		t.Errorf("the upstream got %d requests; want 3", n)
	}

	// An hour later the week is stale: the next window reaching the new
	// hour is not cut from it (its rows lack that hour).
	h.Clock.Advance(time.Hour)
	later := fmt.Sprintf("%s?start=%d", base, h.Clock.Now().Unix()-3600)
	if r := h.Send(later, h.Full); r.Status != http.StatusOK || r.Header.Get("Cache-Status") == csHit {
		t.Errorf("an hour later: %d %q; want a fresh answer", r.Status, r.Header.Get("Cache-Status"))
	}
	if n := len(h.Up.Requests()); n != 4 {
		t.Errorf("an hour later the upstream got %d requests in all; want 4", n)
	}
}

// directQuery returns the upstream path and query the gateway would send
// for target if it asked the upstream itself.
func directQuery(t *testing.T, h *gatewaytest.ProtectHarness, target string) (string, string) {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, target, nil)
	q, err := api.ParseRequest(r, h.Clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	return q.UpstreamPath(), q.UpstreamQuery()
}

// directBody asks up for path?query with the upstream credential.
func directBody(t *testing.T, up *demo.Server, path, query string) []byte {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, path+"?"+query, nil)
	r.Header.Set("Authorization", "Bearer "+gatewaytest.UpstreamKey)
	w := httptest.NewRecorder()
	up.ServeHTTP(w, r)
	if w.Code != http.StatusOK {
		t.Fatalf("direct %s?%s: %d", path, query, w.Code)
	}
	return w.Body.Bytes()
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
	h := gatewaytest.NewProtectHarness(t, statedReading)
	teachReading(t, h)
	topic := h.Up.Topics()[5]
	base := "/api4/public/topic/" + url.PathEscape(topic) + "/time-series/v1"
	if r := h.Send(base, h.Full); r.Status != http.StatusOK {
		t.Fatalf("the week: %d", r.Status)
	}
	fetched := h.Clock.Now().Unix()
	cur := fetched / 3600 * 3600
	h.Clock.Advance(20 * time.Minute) // past series_hour_max: the week is stale
	calls := len(h.Up.Requests())

	closed := fmt.Sprintf("%s?start=%d&end=%d", base, cur-48*3600, cur-24*3600)
	if r := h.Send(closed, h.Full); r.Status != http.StatusOK || r.Header.Get("Cache-Status") != csRange {
		t.Errorf("closed window from a stale week: %d %q; want 200 %q", r.Status, r.Header.Get("Cache-Status"), csRange)
	}
	if n := len(h.Up.Requests()); n != calls {
		t.Errorf("the upstream got %d requests for a closed window; want 0", n-calls)
	}

	h.Up.SetFault(demo.FaultRateLimit)
	recent := fmt.Sprintf("%s?start=%d&end=%d", base, cur-3*3600, cur)
	r := h.Send(recent, h.Full)
	if r.Status != http.StatusOK || r.Header.Get("Cache-Status") != "trendgate; hit; stale; detail=range" {
		t.Fatalf("recent window, upstream refusing: %d %q %s; want 200 stale range", r.Status, r.Header.Get("Cache-Status"), r.Text())
	}
	if got := rowCount(t, r.Body); got != 4 {
		t.Errorf("recent window: %d rows; want 4 (the hours up to the week's last)", got)
	}
}

// TestRangeAgainstOtherClocks holds the three windows of issue 26 to the
// upstream's own answer, in front of upstreams whose clock is not the
// gateway's (behind and ahead, by minutes and days) and whose current hour
// appears late, once the week of the topic is cached: the last 7 days up to
// the gateway's current hour, the last 3 hours, and a window ending at the
// end of the current hour (a client that rounds up). Whatever path each
// takes (cut or forwarded), its rows are the upstream's rows for it, and a
// forwarded window is never labelled a hit.
func TestRangeAgainstOtherClocks(t *testing.T) {
	for _, tc := range []struct {
		name   string
		offset time.Duration
		lag    time.Duration
		delay  time.Duration // of interval answers (an edge cache)
		end    string
	}{
		{"same clock", 0, 0, 0, ""},
		{"upstream 3 days behind", -72 * time.Hour, 0, 0, ""},
		{"upstream 20 minutes behind", -20 * time.Minute, 0, 0, ""},
		{"upstream 2 days ahead", 48 * time.Hour, 0, 0, ""},
		{"upstream 20 minutes ahead, end exclusive", 20 * time.Minute, 0, 0, "exclusive"},
		{"current hour 40 minutes late", 0, 40 * time.Minute, 0, ""},
		{"end floored and exclusive", 0, 0, 0, "floor_exclusive"},
		{"interval answers 3 days old", 0, 0, 72 * time.Hour, ""},
		{"interval answers 2 hours old", 0, 0, 2 * time.Hour, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := gatewaytest.NewProtectHarness(t, gatewaytest.RoomyFullPlan, func(o *demo.Options) {
				o.ClockOffset, o.Lag, o.IntervalDelay, o.EndReading = tc.offset, tc.lag, tc.delay, tc.end
			})
			topic := h.Up.Topics()[1]
			base := "/api4/public/topic/" + url.PathEscape(topic) + "/time-series/v1"
			if r := h.Send(base+"?interval=1w", h.Full); r.Status != http.StatusOK {
				t.Fatalf("the week: %d", r.Status)
			}
			now := h.Clock.Now()
			cur := now.Unix() / 3600 * 3600
			windows := []string{
				fmt.Sprintf("start=%d&end=%d", cur-7*86400, cur),
				fmt.Sprintf("start=%d&end=%d", cur-3*3600, cur),
				fmt.Sprintf("start=%d&end=%d", cur-7*86400+3600, cur+3600),
				fmt.Sprintf("start=%d&end=%d", now.Unix()-7*86400, now.Unix()),
			}
			// Twice: the first pass may teach the reading, the second
			// may cut with it.
			for pass := range 2 {
				for _, w := range windows {
					target := base + "?" + w
					before := len(h.Up.Requests())
					r := h.Send(target, h.Full)
					if r.Status != http.StatusOK {
						t.Fatalf("pass %d %s: %d %s", pass, w, r.Status, r.Text())
					}
					forwarded := len(h.Up.Requests()) > before
					cs := r.Header.Get("Cache-Status")
					if forwarded && strings.Contains(cs, "hit") {
						t.Errorf("pass %d %s: the upstream was called, yet %q", pass, w, cs)
					}
					upPath, upQuery := directQuery(t, h, target)
					_, want := h.Up.AnswerAt(upstreamRequest(upPath, upQuery), h.Clock.Now().Add(-time.Duration(ageOf(t, r))*time.Second))
					if got, wantRows := rowTimes(t, r.Body), rowTimes(t, want); fmt.Sprint(got) != fmt.Sprint(wantRows) {
						t.Errorf("pass %d %s (%s): %d rows %v..; the upstream sent %d rows %v..", pass, w, cs,
							len(got), head(got), len(wantRows), head(wantRows))
					}
				}
			}
		})
	}
}

// upstreamRequest is the upstream's request for path?query, with the
// gateway's credential.
func upstreamRequest(path, query string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, path+"?"+query, nil)
	r.Header.Set("Authorization", "Bearer "+gatewaytest.UpstreamKey)
	return r
}

// ageOf is a response's Age in seconds.
func ageOf(t *testing.T, r gatewaytest.ClientReply) int64 {
	t.Helper()
	var age int64
	if _, err := fmt.Sscan(r.Header.Get("Age"), &age); err != nil {
		t.Fatalf("Age %q: %v", r.Header.Get("Age"), err)
	}
	return age
}

// rowTimes are the times of a series body's rows.
func rowTimes(t *testing.T, body []byte) []int64 {
	t.Helper()
	var v struct {
		Data []struct {
			Time int64 `json:"time"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("series body: %v: %.200s", err, body)
	}
	out := make([]int64, len(v.Data))
	for i, r := range v.Data {
		out[i] = r.Time
	}
	return out
}

func head(ts []int64) []int64 { return ts[:min(len(ts), 3)] }

// TestRangeLearnsTheReading: without upstream.window_reading, windows whose
// rows depend on how the upstream reads their bounds are forwarded, never
// cut, until a forwarded answer has shown the reading; then they are cut.
// The reading taught on one topic serves every topic.
func TestRangeLearnsTheReading(t *testing.T) {
	h := gatewaytest.NewProtectHarness(t, gatewaytest.RoomyFullPlan, func(o *demo.Options) { o.EndReading = "exclusive" })
	topics := h.Up.Topics()
	now := h.Clock.Now().Unix()
	cur := now / 3600 * 3600
	for _, topic := range topics[:2] {
		if r := h.Send("/api4/public/topic/"+url.PathEscape(topic)+"/time-series/v1", h.Full); r.Status != http.StatusOK {
			t.Fatalf("the week: %d", r.Status)
		}
	}
	h.Clock.Advance(2 * time.Minute) // the weeks' data is older than what follows (series.Learn)
	a := "/api4/public/topic/" + url.PathEscape(topics[0]) + "/time-series/v1"
	b := "/api4/public/topic/" + url.PathEscape(topics[1]) + "/time-series/v1"
	// An end on an hour boundary with a row there: inclusive and exclusive
	// readings disagree, so it is forwarded, and teaches "exclusive".
	first := fmt.Sprintf("%s?start=%d&end=%d", a, cur-10*3600, cur-2*3600)
	if r := h.Send(first, h.Full); r.Header.Get("Cache-Status") != csMiss {
		t.Fatalf("end on a boundary, reading unknown: %q; want %q", r.Header.Get("Cache-Status"), csMiss)
	}
	second := fmt.Sprintf("%s?start=%d&end=%d", b, cur-30*3600, cur-5*3600)
	r := h.Send(second, h.Full)
	if r.Header.Get("Cache-Status") != csRange {
		t.Fatalf("another topic, the reading learned: %q; want %q", r.Header.Get("Cache-Status"), csRange)
	}
	upPath, upQuery := directQuery(t, h, second)
	_, direct := h.Up.AnswerAt(upstreamRequest(upPath, upQuery), h.Clock.Now())
	if got, want := rowTimes(t, r.Body), rowTimes(t, direct); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("cut with the learned reading: %d rows; the upstream sends %d", len(got), len(want))
	}
	if got := h.Metric("trendgate_upstream_window_reading", "fact", "end_on"); got != -1 {
		t.Errorf(`trendgate_upstream_window_reading{fact="end_on"} = %v; want -1 (excluded)`, got)
	}
	if last := rowTimes(t, r.Body); len(last) == 0 || last[len(last)-1] != cur-6*3600 {
		t.Errorf("exclusive end: last row %v; want the hour before end", last[len(last)-1:])
	}
	// A start inside an hour is still unknown: forwarded.
	third := fmt.Sprintf("%s?start=%d&end=%d", b, cur-20*3600+99, cur-5*3600)
	if r := h.Send(third, h.Full); r.Header.Get("Cache-Status") != csMiss {
		t.Errorf("start inside an hour, not learned yet: %q; want %q", r.Header.Get("Cache-Status"), csMiss)
	}
}

// TestRangeStaleCutOnUpstreamError: a window never asked before whose wider
// answer is held but stale is answered from it, marked stale, on every
// failure a stale entry answers, a 5xx included.
func TestRangeStaleCutOnUpstreamError(t *testing.T) {
	for _, f := range []demo.Fault{demo.FaultServerError, demo.FaultGarbage, demo.FaultRateLimit} {
		t.Run(fmt.Sprint(f), func(t *testing.T) {
			h := gatewaytest.NewProtectHarness(t, statedReading)
			teachReading(t, h)
			base := "/api4/public/topic/" + url.PathEscape(h.Up.Topics()[4]) + "/time-series/v1"
			if r := h.Send(base, h.Full); r.Status != http.StatusOK {
				t.Fatalf("the week: %d", r.Status)
			}
			cur := h.Clock.Now().Unix() / 3600 * 3600
			h.Clock.Advance(70 * time.Minute) // the week is stale; its last hour is no longer current
			h.Up.SetFault(f)
			target := fmt.Sprintf("%s?start=%d&end=%d", base, cur-3*3600, cur)
			r := h.Send(target, h.Full)
			if r.Status != http.StatusOK || r.Header.Get("Cache-Status") != "trendgate; hit; stale; detail=range" {
				t.Errorf("%d %q %s; want 200 stale range", r.Status, r.Header.Get("Cache-Status"), r.Text())
			}
		})
	}
}

// TestRangeWrongStatementIsNotUsed: upstream.window_reading says end is
// inclusive, the upstream reads it as exclusive. Nothing is cut on the
// statement's word: the first window that depends on it is forwarded, its
// answer contradicts the statement, and the fact is dropped (gauge 0),
// so windows that depend on it keep being forwarded, never cut wrong.
func TestRangeWrongStatementIsNotUsed(t *testing.T) {
	h := gatewaytest.NewProtectHarness(t, statedReading, func(o *demo.Options) { o.EndReading = "exclusive" })
	topics := h.Up.Topics()
	cur := h.Clock.Now().Unix() / 3600 * 3600
	for _, topic := range topics[:2] {
		if r := h.Send("/api4/public/topic/"+url.PathEscape(topic)+"/time-series/v1", h.Full); r.Status != http.StatusOK {
			t.Fatalf("the week: %d", r.Status)
		}
	}
	// The weeks' data must be older than the windows' answers to prove
	// anything (series.Learn).
	h.Clock.Advance(2 * time.Minute)
	for i, topic := range topics[:2] {
		target := fmt.Sprintf("/api4/public/topic/%s/time-series/v1?start=%d&end=%d", url.PathEscape(topic), cur-12*3600, cur-(3+int64(i))*3600)
		r := h.Send(target, h.Full)
		if cs := r.Header.Get("Cache-Status"); cs != csMiss {
			t.Errorf("%s: %q; want %q (the statement is not confirmed)", target, cs, csMiss)
		}
		upPath, upQuery := directQuery(t, h, target)
		_, want := h.Up.AnswerAt(upstreamRequest(upPath, upQuery), h.Clock.Now())
		if got, want := rowTimes(t, r.Body), rowTimes(t, want); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: %d rows; the upstream sent %d", target, len(got), len(want))
		}
	}
	if got := h.Metric("trendgate_upstream_window_reading", "fact", "end_on"); got != 0 {
		t.Errorf("end_on after the contradiction: %v; want 0 (unknown)", got)
	}
	if !strings.Contains(h.Logs.String(), "contradicts upstream.window_reading") {
		t.Error("no warning that the answer contradicts upstream.window_reading")
	}
}

// TestStartNearTheUpstreamsNow is a regression test (the oracle, long run):
// in front of an upstream two days behind, a start-only window whose start
// is the upstream's own now was forwarded in canonical form (the second of
// its bucket), which the upstream answered, where it refuses the client's
// own start. The gateway follows the upstream's clock (by its answers'
// generated time) and keeps such a start to the second.
func TestStartNearTheUpstreamsNow(t *testing.T) {
	behind := -48 * time.Hour
	h := gatewaytest.NewProtectHarness(t, gatewaytest.RoomyFullPlan, func(o *demo.Options) { o.ClockOffset = behind })
	base := "/api4/public/topic/" + url.PathEscape(h.Up.Topics()[2]) + "/time-series/v1"
	if r := h.Send(base, h.Full); r.Status != http.StatusOK { // an answer shows the upstream's clock
		t.Fatalf("the week: %d", r.Status)
	}
	start := h.Clock.Now().Add(behind).Unix() - 30
	h.Up.Reset()
	h.Send(fmt.Sprintf("%s?start=%d&bucket=day", base, start), h.Full)
	reqs := h.Up.Requests()
	if len(reqs) != 1 || reqs[0].RawQuery != fmt.Sprintf("bucket=day&start=%d", start) {
		t.Errorf("the upstream got %+v; want bucket=day&start=%d (the start as sent)", reqs, start)
	}
}
