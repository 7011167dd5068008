package demo

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"trendgate/internal/clock"
)

const seriesPath = "/api4/public/topic/bitcoin/time-series/v1"

// wantTimes is the row times a window from first to last (bucket starts)
// must hold for topic at now: every bucket, less the hours with no data
// (only closed hours can be missing).
func wantTimes(s *Server, topic string, first, last, bucket int64, now time.Time) []int64 {
	t := s.cat.byName[topic]
	cur := alignDown(now.Unix(), hour)
	var out []int64
	for b := first; b <= last; b += bucket {
		if bucket == hour && b < cur && t.missing(b) {
			continue
		}
		out = append(out, b)
	}
	return out
}

func rowTimes(r seriesResp) []int64 {
	out := make([]int64, len(r.Data))
	for i, row := range r.Data {
		out[i] = row.Time
	}
	return out
}

func equalTimes(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestReadings: each StartReading and EndReading selects the buckets its
// doc promises, for aligned and unaligned bounds, hourly and daily, and
// never a bucket past the current one.
func TestReadings(t *testing.T) {
	now := testNow.Unix()                                      // 2025-10-16 20:48:38
	cur := alignDown(now, hour)                                // 20:00
	today := alignDown(now, day)                               // 2025-10-16 00:00
	h := time.Date(2025, 10, 15, 10, 0, 0, 0, time.UTC).Unix() // an hour a day back
	d := time.Date(2025, 10, 10, 0, 0, 0, 0, time.UTC).Unix()  // a day a week back
	const m20, h6 = 20 * 60, 6 * hour
	tests := []struct {
		name                     string
		startReading, endReading string
		bucket                   string
		start, end               int64
		first, last              int64 // the buckets selected
	}{
		// Hourly, aligned start and end.
		{"hour aligned default", "", "", "hour", h, h + 5*hour, h, h + 5*hour},
		{"hour aligned floor inclusive", "floor", "inclusive", "hour", h, h + 5*hour, h, h + 5*hour},
		{"hour aligned ceil inclusive", "ceil", "inclusive", "hour", h, h + 5*hour, h, h + 5*hour},
		{"hour aligned floor exclusive", "floor", "exclusive", "hour", h, h + 5*hour, h, h + 4*hour},
		{"hour aligned floor floor_exclusive", "floor", "floor_exclusive", "hour", h, h + 5*hour, h, h + 4*hour},
		// Hourly, start and end 20 minutes into their hours.
		{"hour unaligned default", "", "", "hour", h + m20, h + 5*hour + m20, h, h + 5*hour},
		{"hour unaligned floor inclusive", "floor", "inclusive", "hour", h + m20, h + 5*hour + m20, h, h + 5*hour},
		{"hour unaligned ceil inclusive", "ceil", "inclusive", "hour", h + m20, h + 5*hour + m20, h + hour, h + 5*hour},
		{"hour unaligned ceil exclusive", "ceil", "exclusive", "hour", h + m20, h + 5*hour + m20, h + hour, h + 5*hour},
		{"hour unaligned floor floor_exclusive", "floor", "floor_exclusive", "hour", h + m20, h + 5*hour + m20, h, h + 4*hour},
		{"hour unaligned ceil floor_exclusive", "ceil", "floor_exclusive", "hour", h + m20, h + 5*hour + m20, h + hour, h + 4*hour},
		// Hourly, one second either side of an hour.
		{"hour end one second past", "floor", "exclusive", "hour", h, h + 5*hour + 1, h, h + 5*hour},
		{"hour end one second short", "floor", "inclusive", "hour", h, h + 5*hour - 1, h, h + 4*hour},
		{"hour start one second past ceil", "ceil", "inclusive", "hour", h + 1, h + 5*hour, h + hour, h + 5*hour},
		{"hour start one second short floor", "floor", "inclusive", "hour", h - 1, h + 5*hour, h - hour, h + 5*hour},
		// Daily, aligned start and end.
		{"day aligned default", "", "", "day", d, d + 3*day, d, d + 3*day},
		{"day aligned ceil inclusive", "ceil", "inclusive", "day", d, d + 3*day, d, d + 3*day},
		{"day aligned floor exclusive", "floor", "exclusive", "day", d, d + 3*day, d, d + 2*day},
		{"day aligned floor floor_exclusive", "floor", "floor_exclusive", "day", d, d + 3*day, d, d + 2*day},
		// Daily, start and end six hours into their days.
		{"day unaligned default", "", "", "day", d + h6, d + 3*day + h6, d, d + 3*day},
		{"day unaligned ceil inclusive", "ceil", "inclusive", "day", d + h6, d + 3*day + h6, d + day, d + 3*day},
		{"day unaligned floor exclusive", "floor", "exclusive", "day", d + h6, d + 3*day + h6, d, d + 3*day},
		{"day unaligned ceil floor_exclusive", "ceil", "floor_exclusive", "day", d + h6, d + 3*day + h6, d + day, d + 2*day},
		// End at or past now: never past the current bucket.
		{"hour end in future inclusive", "floor", "inclusive", "hour", h + m20, now + 5*hour, h, cur},
		{"hour end in future exclusive", "floor", "exclusive", "hour", h + m20, now + 5*hour, h, cur},
		{"hour end in future floor_exclusive", "ceil", "floor_exclusive", "hour", h + m20, now + 5*hour, h + hour, cur},
		{"hour end now floor_exclusive", "floor", "floor_exclusive", "hour", h, now, h, cur - hour},
		{"hour end at current hour exclusive", "floor", "exclusive", "hour", h, cur, h, cur - hour},
		{"hour end at current hour inclusive", "floor", "inclusive", "hour", h, cur, h, cur},
		{"day end in future floor_exclusive", "floor", "floor_exclusive", "day", d + h6, now + 3*day, d, today},
		{"day end now floor_exclusive", "floor", "floor_exclusive", "day", d + h6, now, d, today - day},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newServer(t, Options{StartReading: tc.startReading, EndReading: tc.endReading})
			size := hour
			if tc.bucket == "day" {
				size = day
			}
			target := seriesPath + "?bucket=" + tc.bucket + "&start=" + strconv.FormatInt(tc.start, 10) +
				"&end=" + strconv.FormatInt(tc.end, 10)
			r := getSeries(t, s, target)
			if r.Config.Start != tc.start || r.Config.End != tc.end || r.Config.Interval != nil {
				t.Errorf("got config start %d end %d interval %v; want %d, %d and none (echoed as sent)",
					r.Config.Start, r.Config.End, r.Config.Interval, tc.start, tc.end)
			}
			got, want := rowTimes(r), wantTimes(s, "bitcoin", tc.first, tc.last, size, testNow)
			if !equalTimes(got, want) {
				t.Errorf("got rows %v; want %v (buckets %d..%d)", got, want, tc.first, tc.last)
			}
		})
	}
}

// TestClockOffset: an upstream whose clock is ahead or behind answers
// exactly as an upstream without offset whose clock reads the shifted
// time, on every endpoint and in the rate-limit headers, while it records
// arrivals on the gateway's clock.
func TestClockOffset(t *testing.T) {
	targets := []string{
		seriesPath,
		seriesPath + "?bucket=day&interval=1m",
		seriesPath + "?start=1760500000&end=1760700000",
		seriesPath + "?bucket=day&start=1760500000",
		"/api4/public/topics/list/v1",
		"/api4/public/topic/bitcoin/whatsup/v1",
		"/topic/bitcoin/time-series/interactions.tsv",
		"/nope",
	}
	offsets := []struct {
		name string
		d    time.Duration
	}{
		{"ahead 5 minutes", 5 * time.Minute},
		{"ahead 15 minutes, next hour", 15 * time.Minute},
		{"behind 5 minutes", -5 * time.Minute},
		{"behind 50 minutes, previous hour", -50 * time.Minute},
		{"ahead 2 days", 2 * 24 * time.Hour},
		{"behind 3 days", -3 * 24 * time.Hour},
		{"behind 21 hours, previous day", -21 * time.Hour},
	}
	for _, off := range offsets {
		t.Run(off.name, func(t *testing.T) {
			s, _ := newServer(t, Options{ClockOffset: off.d, PerMinute: 100})
			ref, _ := newServer(t, Options{Clock: clock.NewFake(testNow.Add(off.d)), PerMinute: 100})
			for _, target := range targets {
				got, want := do(s, http.MethodGet, target), do(ref, http.MethodGet, target)
				if got.Code != want.Code || got.Body.String() != want.Body.String() {
					t.Errorf("%s: got %d %.200s; want %d %.200s (the shifted clock's answer)",
						target, got.Code, got.Body, want.Code, want.Body)
				}
				for _, hdr := range []string{"X-Lunar-Generated", "X-Lunar-Age", "X-Rate-Limit-Minute-Reset", "X-Rate-Limit-Day-Reset"} {
					if g, w := got.Header().Get(hdr), want.Header().Get(hdr); g != w {
						t.Errorf("%s: got %s %s; want %s", target, hdr, g, w)
					}
				}
			}
			upNow := testNow.Add(off.d).Unix()
			r := getSeries(t, s, seriesPath)
			if got, want := r.Data[len(r.Data)-1].Time, alignDown(upNow, hour); got != want {
				t.Errorf("last row %d; want the upstream's current hour %d", got, want)
			}
			if got, want := r.Config.Start, alignDown(upNow, day)-7*day; got != want {
				t.Errorf("interval start %d; want the upstream's midnight 7 days back %d", got, want)
			}
			tsv := strings.Split(strings.TrimSpace(do(s, http.MethodGet, "/topic/bitcoin/time-series/sentiment.tsv").Body.String()), "\n")
			if got, want := tsv[len(tsv)-1][:16], time.Unix(alignDown(upNow, hour), 0).UTC().Format("2006-01-02 15:04"); got != want {
				t.Errorf("TSV last row %q; want the upstream's current hour %q", got, want)
			}
			for _, rec := range s.Requests() {
				if !rec.At.Equal(testNow) {
					t.Fatalf("recorded At %v; want the gateway clock's %v", rec.At, testNow)
				}
			}
		})
	}
}

// TestClockOffsetRateLimitWindows: the minute window rolls on the
// upstream's clock, not the gateway's.
func TestClockOffsetRateLimitWindows(t *testing.T) {
	// Gateway 03:37:50; upstream 20 s ahead, already in 03:38.
	clk := clock.NewFake(time.Date(2025, 11, 30, 3, 37, 50, 0, time.UTC))
	s, _ := newServer(t, Options{Clock: clk, ClockOffset: 20 * time.Second, PerMinute: 1})
	w := do(s, http.MethodGet, "/api4/public/topics/list/v1")
	if want := strconv.FormatInt(time.Date(2025, 11, 30, 3, 39, 0, 0, time.UTC).Unix(), 10); w.Code != 200 || w.Header().Get("X-Rate-Limit-Minute-Reset") != want {
		t.Fatalf("got %d, reset %s; want 200, reset %s (the upstream's next minute)", w.Code, w.Header().Get("X-Rate-Limit-Minute-Reset"), want)
	}
	clk.Advance(15 * time.Second) // gateway 03:38:05 (a new minute), upstream 03:38:25 (same)
	if w := do(s, http.MethodGet, "/api4/public/topics/list/v1"); w.Code != 429 {
		t.Errorf("same upstream minute: got %d; want 429", w.Code)
	}
	clk.Advance(40 * time.Second) // upstream 03:39:05
	if w := do(s, http.MethodGet, "/api4/public/topics/list/v1"); w.Code != 200 {
		t.Errorf("next upstream minute: got %d; want 200", w.Code)
	}
}

// TestLag: the current bucket's row appears only once Lag has passed since
// the hour began, in hourly and daily series and in the TSV downloads.
func TestLag(t *testing.T) {
	hour20 := time.Date(2025, 10, 16, 20, 0, 0, 0, time.UTC)
	cur, prev := hour20.Unix(), hour20.Unix()-hour
	today := alignDown(cur, day)
	tests := []struct {
		name            string
		lag             time.Duration
		at              time.Time
		lastHour, lastD int64 // newest hourly and daily rows
	}{
		{"no lag at the hour", 0, hour20, cur, today},
		{"hidden just after the hour", 10 * time.Minute, hour20.Add(time.Second), prev, today - day},
		{"hidden a second short", 10 * time.Minute, hour20.Add(10*time.Minute - time.Second), prev, today - day},
		{"shown once lag has passed", 10 * time.Minute, hour20.Add(10 * time.Minute), cur, today},
		{"shown later in the hour", 10 * time.Minute, hour20.Add(48 * time.Minute), cur, today},
		{"hour lag never shows", time.Hour, hour20.Add(time.Hour - time.Second), prev, today - day},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newServer(t, Options{Clock: clock.NewFake(tc.at), Lag: tc.lag})
			for _, q := range []string{"", "?interval=1d", "?start=1760500000&end=1999999999", "?start=1760500000"} {
				r := getSeries(t, s, seriesPath+q)
				if got := r.Data[len(r.Data)-1].Time; got != tc.lastHour {
					t.Errorf("hourly %q: newest row %d; want %d", q, got, tc.lastHour)
				}
			}
			r := getSeries(t, s, seriesPath+"?bucket=day")
			if got := r.Data[len(r.Data)-1].Time; got != tc.lastD {
				t.Errorf("daily: newest row %d; want %d", got, tc.lastD)
			}
			tsv := strings.Split(strings.TrimSpace(do(s, http.MethodGet, "/topic/bitcoin/time-series/interactions.tsv").Body.String()), "\n")
			if got, want := tsv[len(tsv)-1][:16], time.Unix(tc.lastHour, 0).UTC().Format("2006-01-02 15:04"); got != want {
				t.Errorf("TSV newest row %q; want %q", got, want)
			}
		})
	}
}

// hourValue is bucket b's interactions as s answers at now (-1: no row).
func hourValue(t *testing.T, s *Server, clk *clock.Fake, b int64, now time.Time) int64 {
	t.Helper()
	clk.Set(now)
	bs := strconv.FormatInt(b, 10)
	r := getSeries(t, s, seriesPath+"?start="+bs+"&end="+strconv.FormatInt(b+60, 10))
	if len(r.Data) != 1 || r.Data[0].Time != b {
		return -1
	}
	return *r.Data[0].Interactions
}

// TestRevise: a closed hour's counts change once a minute for two hours
// after it closes, rising to the unrevised value, and are final after.
func TestRevise(t *testing.T) {
	b := time.Date(2025, 10, 16, 17, 0, 0, 0, time.UTC)
	closed := b.Add(time.Hour)
	s, clk := newServer(t, Options{Revise: true})
	plain, plainClk := newServer(t, Options{})
	final := hourValue(t, plain, plainClk, b.Unix(), closed.Add(5*time.Hour))
	if final <= 0 {
		t.Fatalf("hour %v has no row; pick another", b)
	}
	// Still current: the revised upstream carries the whole deficit.
	if got, unrevised := hourValue(t, s, clk, b.Unix(), b.Add(59*time.Minute)), hourValue(t, plain, plainClk, b.Unix(), b.Add(59*time.Minute)); got >= unrevised || got < unrevised*85/100 {
		t.Errorf("current hour: got %d; want a little below the unrevised %d", got, unrevised)
	}
	prev := int64(-1)
	changes := 0
	for k := 0; k < 120; k++ {
		at := closed.Add(time.Duration(k) * time.Minute)
		v := hourValue(t, s, clk, b.Unix(), at)
		if again := hourValue(t, s, clk, b.Unix(), at.Add(59*time.Second)); again != v {
			t.Fatalf("minute %d: %d then %d within the minute; want one step per minute", k, v, again)
		}
		if v < prev || v >= final {
			t.Fatalf("minute %d after close: got %d after %d; want rising, below the final %d", k, v, prev, final)
		}
		if v != prev {
			changes++
		}
		prev = v
	}
	if changes < 100 {
		t.Errorf("got %d distinct values in 120 minutes; want one (nearly) every minute", changes)
	}
	for _, after := range []time.Duration{2 * time.Hour, 2*time.Hour + 30*time.Second, 3 * time.Hour, 48 * time.Hour} {
		if got := hourValue(t, s, clk, b.Unix(), closed.Add(after)); got != final {
			t.Errorf("%v after close: got %d; want the final %d", after, got, final)
		}
	}
	// Determinism: a second server with the same seed agrees at every step.
	twin, twinClk := newServer(t, Options{Revise: true})
	for _, k := range []time.Duration{0, 7 * time.Minute, 61 * time.Minute, 119 * time.Minute} {
		at := closed.Add(k)
		if a, b2 := hourValue(t, s, clk, b.Unix(), at), hourValue(t, twin, twinClk, b.Unix(), at); a != b2 {
			t.Errorf("%v after close: servers with one seed answer %d and %d", k, a, b2)
		}
	}
	// Daily rows sum revised hours, so today's row changes with them.
	clk.Set(closed.Add(10 * time.Minute))
	d1 := do(s, http.MethodGet, seriesPath+"?bucket=day&interval=1d").Body.String()
	clk.Set(closed.Add(11 * time.Minute))
	d2 := do(s, http.MethodGet, seriesPath+"?bucket=day&interval=1d").Body.String()
	if d1 == d2 {
		t.Errorf("daily series identical a minute apart; want the revised hours to show")
	}
	// Without Revise a closed hour never changes.
	if a, b2 := hourValue(t, plain, plainClk, b.Unix(), closed), hourValue(t, plain, plainClk, b.Unix(), closed.Add(90*time.Minute)); a != b2 {
		t.Errorf("Revise false: closed hour went from %d to %d", a, b2)
	}
}

// TestReviseTSV: the TSV downloads show the same revised values as the
// hourly series.
func TestReviseTSV(t *testing.T) {
	s, _ := newServer(t, Options{Revise: true})
	r := getSeries(t, s, seriesPath+"?interval=1d")
	want := map[string]int64{}
	for _, row := range r.Data {
		want[time.Unix(row.Time, 0).UTC().Format("2006-01-02 15:04")] = *row.Interactions
	}
	for _, l := range strings.Split(strings.TrimSpace(do(s, http.MethodGet, "/topic/bitcoin/time-series/interactions.tsv").Body.String()), "\n")[1:] {
		ts, v, _ := strings.Cut(l, "\t")
		if strconv.FormatInt(want[ts], 10) != v {
			t.Errorf("TSV %s = %s; series says %d", ts, v, want[ts])
		}
	}
}

// TestAnswerAt: AnswerAt gives the body ServeHTTP gave at that instant,
// without counting, recording, spending quota or minding faults.
func TestAnswerAt(t *testing.T) {
	s, clk := newServer(t, Options{APIKey: "k", PerMinute: 2, ClockOffset: -7 * time.Minute, Lag: 5 * time.Minute, Revise: true, EndReading: "exclusive"})
	auth := []string{"Authorization", "Bearer k"}
	targets := []string{
		seriesPath,
		seriesPath + "?bucket=day&start=1760500000&end=1760700000",
		"/topic/bitcoin/time-series/posts_active.tsv",
		"/api4/public/topic/bitcoin/whatsup/v1",
	}
	served := map[string]*httptest.ResponseRecorder{}
	for i, target := range targets[:2] {
		clk.Advance(time.Duration(i) * 3 * time.Minute)
		served[target] = do(s, http.MethodGet, target, auth...)
	}
	recs := s.Requests()
	for i, target := range targets[:2] {
		req := httptest.NewRequest(http.MethodGet, target, nil)
		req.Header.Set("Authorization", "Bearer k")
		clk.Advance(time.Hour) // the answer depends on the instant given, not the clock
		status, body := s.AnswerAt(req, recs[i].At)
		if status != served[target].Code || string(body) != served[target].Body.String() {
			t.Errorf("%s: AnswerAt gave %d %.200s; ServeHTTP gave %d %.200s", target, status, body, served[target].Code, served[target].Body)
		}
	}
	s.SetFault(FaultServerError)
	for _, target := range targets {
		req := httptest.NewRequest(http.MethodGet, target, nil)
		req.Header.Set("Authorization", "Bearer k")
		if status, body := s.AnswerAt(req, testNow); status != 200 || len(body) == 0 {
			t.Errorf("%s under a fault: got %d, %d bytes; want 200 with a body", target, status, len(body))
		}
	}
	s.SetFault(FaultNone)
	if s.Count() != 2 || len(s.Requests()) != 2 {
		t.Errorf("after AnswerAt: Count %d, %d recorded; want 2, 2 (AnswerAt records nothing)", s.Count(), len(s.Requests()))
	}
	// The minute allows two requests: AnswerAt between them spends none.
	clk.Set(testNow.Add(10 * time.Hour))
	if w := do(s, http.MethodGet, targets[0], auth...); w.Code != 200 {
		t.Fatalf("first request of the minute: got %d; want 200", w.Code)
	}
	for i := 0; i < 5; i++ {
		s.AnswerAt(httptest.NewRequest(http.MethodGet, targets[0], nil), testNow.Add(10*time.Hour))
	}
	if w := do(s, http.MethodGet, targets[0], auth...); w.Code != 200 {
		t.Errorf("second request after AnswerAt calls: got %d; want 200 (AnswerAt spends no quota)", w.Code)
	}
	if w := do(s, http.MethodGet, targets[0], auth...); w.Code != 429 {
		t.Errorf("third request of the minute: got %d; want 429", w.Code)
	}
	checks := []struct {
		name   string
		target string
		hdr    []string
		status int
	}{
		{"unauthorized", targets[0], nil, 401},
		{"bad query", seriesPath + "?bucket=week", auth, 400},
		{"unknown route", "/nope", auth, 404},
		{"control path", "/_demo/count", auth, 404},
	}
	for _, tc := range checks {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodGet, tc.target, nil)
			for i := 0; i+1 < len(tc.hdr); i += 2 {
				req.Header.Set(tc.hdr[i], tc.hdr[i+1])
			}
			status, body := s.AnswerAt(req, testNow)
			if status != tc.status || !strings.Contains(string(body), `"error":`) {
				t.Errorf("got %d %s; want %d with an error body", status, body, tc.status)
			}
		})
	}
	head := httptest.NewRequest(http.MethodHead, targets[0], nil)
	head.Header.Set("Authorization", "Bearer k")
	if status, body := s.AnswerAt(head, testNow); status != 200 || len(body) != 0 {
		t.Errorf("HEAD: got %d, %d bytes; want 200, none", status, len(body))
	}
}
