package series_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"trendgate/api"
	"trendgate/demo"
	"trendgate/internal/clock"
	"trendgate/series"
)

const upstreamKey = "series-test-upstream-credential"

// testNow is mid-hour, mid-day: the current buckets are partial.
var testNow = time.Date(2026, 11, 19, 10, 30, 15, 0, time.UTC)

// readings are the upstream's possible readings of a window's bounds, as
// the demo upstream implements them and as series.Named names them.
var readings = []struct{ start, end string }{
	{"floor", "inclusive"}, {"floor", "exclusive"}, {"floor", "floor_exclusive"},
	{"ceil", "inclusive"}, {"ceil", "exclusive"}, {"ceil", "floor_exclusive"},
}

func newUpstream(t *testing.T, clk clock.Clock, o demo.Options) *demo.Server {
	t.Helper()
	o.Clock, o.APIKey = clk, upstreamKey
	up, err := demo.New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(up.Close)
	return up
}

// get asks the demo upstream for target at the clock's time and returns
// the body.
func get(t *testing.T, up *demo.Server, target string) []byte {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, target, nil)
	r.Header.Set("Authorization", "Bearer "+upstreamKey)
	w := httptest.NewRecorder()
	up.ServeHTTP(w, r)
	if w.Code != http.StatusOK {
		t.Fatalf("demo %s: %d %s", target, w.Code, w.Body.String())
	}
	return w.Body.Bytes()
}

// fetch asks the demo upstream for q as the gateway sends it.
func fetch(t *testing.T, up *demo.Server, q api.Request) []byte {
	t.Helper()
	target := q.UpstreamPath()
	if qs := q.UpstreamQuery(); qs != "" {
		target += "?" + qs
	}
	return get(t, up, target)
}

// parse canonicalizes a client request-target at now.
func parse(t *testing.T, target string, now time.Time) api.Request {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, target, nil)
	q, err := api.ParseRequest(r, now)
	if err != nil {
		t.Fatalf("%s: %v", target, err)
	}
	return q
}

// rowTimes returns the times of a series body's rows.
func rowTimes(t *testing.T, body []byte) []int64 {
	t.Helper()
	var v struct {
		Data []struct {
			Time int64 `json:"time"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("not a series body: %v: %.200s", err, body)
	}
	out := make([]int64, len(v.Data))
	for i, r := range v.Data {
		out[i] = r.Time
	}
	return out
}

// dataOf returns a series body's data array as written.
func dataOf(t *testing.T, body []byte) string {
	t.Helper()
	var v struct {
		Data json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("not a series body: %v", err)
	}
	return string(v.Data)
}

// TestCanonicalBoundsKeepTheAnswer: for every reading of bounds the demo
// upstream implements, a window sent as the client wrote it and as the
// gateway forwards it (canonical bounds) selects the same rows. This is
// what lets the gateway key and forward windows in canonical form without
// knowing the upstream's reading.
func TestCanonicalBoundsKeepTheAnswer(t *testing.T) {
	clk := clock.NewFake(testNow)
	rnd := rand.New(rand.NewPCG(5, 8))
	for _, rd := range readings {
		up := newUpstream(t, clk, demo.Options{StartReading: rd.start, EndReading: rd.end})
		topic := url.PathEscape(up.Topics()[2])
		for _, c := range []struct {
			bucket string
			size   int64
		}{{"hour", 3600}, {"day", 86400}} {
			base := "/api4/public/topic/" + topic + "/time-series/v1?bucket=" + c.bucket
			cur := testNow.Unix() / c.size * c.size
			for range 40 {
				start := cur - rnd.Int64N(20*c.size)
				end := start + 1 + rnd.Int64N(6*c.size)
				switch rnd.IntN(4) { // bounds on boundaries, often
				case 0:
					start = start / c.size * c.size
				case 1:
					end = end / c.size * c.size
				}
				if end <= start {
					continue
				}
				if rnd.IntN(5) == 0 {
					end = cur + c.size + rnd.Int64N(c.size) // a clock that runs ahead
				}
				target := base + "&start=" + strconv.FormatInt(start, 10) + "&end=" + strconv.FormatInt(end, 10)
				q := parse(t, target, testNow)
				raw, canon := get(t, up, target), fetch(t, up, q)
				if dataOf(t, raw) != dataOf(t, canon) {
					t.Errorf("%s/%s %s: rows %v as sent, %v as forwarded (%s)", rd.start, rd.end, target,
						rowTimes(t, raw), rowTimes(t, canon), q.UpstreamQuery())
				}
			}
		}
	}
}

// TestCutMatchesTheUpstream fetches absolute windows from the demo upstream
// both ways, directly and cut from a wider interval answer fetched at the
// same moment, under each reading of bounds: with the reading known, the
// bytes are the same; with it unknown, the cut is the same or refused
// (ErrAmbiguous), never different. Hour and day buckets, windows at the
// edges of the wide one, one-bucket windows, windows ending in the current
// (partial) bucket or in the future, windows inside a gap, an asset and a
// non-asset topic, and a topic the upstream does not know.
func TestCutMatchesTheUpstream(t *testing.T) {
	clk := clock.NewFake(testNow)
	rnd := rand.New(rand.NewPCG(13, 21))
	for _, rd := range readings {
		up := newUpstream(t, clk, demo.Options{StartReading: rd.start, EndReading: rd.end})
		known, err := series.Named(rd.start, rd.end)
		if err != nil {
			t.Fatal(err)
		}
		topics := up.Topics()
		var cut, ambiguous int
		for _, c := range []struct {
			bucket   string
			size     int64
			interval string // the wide window
			span     int64  // how far back the wide window reaches, in buckets
		}{
			{"hour", 3600, "1w", 7 * 24},
			{"day", 86400, "3m", 89},
			{"day", 86400, "1y", 364},
		} {
			for _, topic := range []string{topics[0], topics[1], topics[len(topics)-1], "not a known topic"} {
				base := "/api4/public/topic/" + url.PathEscape(topic) + "/time-series/v1?bucket=" + c.bucket
				wide := fetch(t, up, parse(t, base+"&interval="+c.interval, testNow))
				cur := testNow.Unix() / c.size * c.size
				windows := [][2]int64{
					{cur - (c.span-1)*c.size, cur},
					{cur, cur + c.size},                // the partial bucket alone, end on the next boundary
					{cur - c.size, cur},                // the last closed bucket, end on a boundary
					{cur - 5*c.size, cur - c.size + 1}, // closed, end inside a bucket
					{cur - 2*c.size + 7, cur + 3*c.size},
				}
				for range 25 {
					a := cur - rnd.Int64N(c.span-1)*c.size + rnd.Int64N(2)*rnd.Int64N(c.size)
					b := cur - rnd.Int64N(c.span-1)*c.size + rnd.Int64N(2)*rnd.Int64N(c.size)
					if a != b {
						windows = append(windows, [2]int64{min(a, b), max(a, b)})
					}
				}
				for _, w := range windows {
					target := base + "&start=" + strconv.FormatInt(w[0], 10) + "&end=" + strconv.FormatInt(w[1], 10)
					narrow := parse(t, target, testNow)
					want := fetch(t, up, narrow)
					got, _, err := series.Cut(wide, narrow, known)
					if errors.Is(err, series.ErrNotCovered) && (topic == "not a known topic" || narrow.End/c.size*c.size > cur) {
						// No row, and a window that may reach a bucket
						// beyond the upstream's now: nothing shows coverage.
						continue
					}
					if err != nil {
						t.Errorf("%s/%s %s (%s, %s): %v", rd.start, rd.end, target, topic, c.interval, err)
						continue
					}
					if string(got) != string(want) {
						t.Errorf("%s/%s %s:\ncut    %.300s\ndirect %.300s", rd.start, rd.end, target, got, want)
					}
					cut++
					got, _, err = series.Cut(wide, narrow, series.Reading{})
					switch {
					case errors.Is(err, series.ErrAmbiguous):
						ambiguous++
					case errors.Is(err, series.ErrNotCovered):
						// Without the reading, the window may reach a bucket
						// the wide answer does not show.
					case err != nil:
						t.Errorf("%s, reading unknown: %v", target, err)
					case string(got) != string(want):
						t.Errorf("%s, reading unknown: cut %v; the upstream sent %v", target, rowTimes(t, got), rowTimes(t, want))
					}
				}
			}
		}
		if ambiguous == 0 || ambiguous == cut {
			t.Errorf("%s/%s: %d of %d cuts ambiguous without the reading; want some, not all", rd.start, rd.end, ambiguous, cut)
		}
	}
}

// TestCoverageIsDecidedByRows: against an upstream whose clock is not the
// gateway's, a window is cut only where the wide answer's own rows and
// generated time show it holds the window; the gateway's clock decides
// nothing. The windows are those of issue 26: the last 7 days up to the
// gateway's current hour, the last 3 hours, and a window whose end is the
// end of the current hour.
func TestCoverageIsDecidedByRows(t *testing.T) {
	known, _ := series.Named("floor", "inclusive")
	cur := testNow.Unix() / 3600 * 3600
	targets := []string{
		fmt.Sprintf("start=%d&end=%d", cur-7*86400, cur),
		fmt.Sprintf("start=%d&end=%d", cur-3*3600, cur),
		fmt.Sprintf("start=%d&end=%d", cur-7*86400+3600, cur+3600),
	}
	for _, tc := range []struct {
		name   string
		offset time.Duration
		lag    time.Duration
	}{
		{"upstream 3 days behind", -72 * time.Hour, 0},
		{"upstream 20 minutes behind", -20 * time.Minute, 0},
		{"current hour 45 minutes late", 0, 45 * time.Minute},
		{"upstream 20 minutes ahead", 20 * time.Minute, 0},
		{"upstream 2 days ahead", 48 * time.Hour, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clock.NewFake(testNow)
			up := newUpstream(t, clk, demo.Options{ClockOffset: tc.offset, Lag: tc.lag})
			base := "/api4/public/topic/" + url.PathEscape(up.Topics()[0]) + "/time-series/v1?bucket=hour"
			wide := fetch(t, up, parse(t, base+"&interval=1w", testNow))
			for _, qs := range targets {
				narrow := parse(t, base+"&"+qs, testNow)
				want := fetch(t, up, narrow)
				got, _, err := series.Cut(wide, narrow, known)
				switch {
				case errors.Is(err, series.ErrNotCovered):
					// Refused: the gateway then forwards the window.
				case err != nil:
					t.Errorf("%s: %v", qs, err)
				case dataOf(t, got) != dataOf(t, want):
					t.Errorf("%s: cut rows %d, the upstream sent %d", qs, len(rowTimes(t, got)), len(rowTimes(t, want)))
				}
			}
		})
	}
}

// TestLearnTheReading: the upstream's answers to forwarded windows, beside
// an interval answer held, teach each fact of its reading, and never the
// opposite of it.
func TestLearnTheReading(t *testing.T) {
	clk := clock.NewFake(testNow)
	cur := testNow.Unix() / 3600 * 3600
	windows := []string{
		fmt.Sprintf("start=%d&end=%d", cur-20*3600+600, cur-2*3600),      // start inside, end on
		fmt.Sprintf("start=%d&end=%d", cur-20*3600, cur-3*3600+1200),     // end inside
		fmt.Sprintf("start=%d&end=%d", cur-30*3600+1, cur-10*3600+3599),  // both inside
		fmt.Sprintf("start=%d&end=%d", cur-50*3600+1800, cur+3600),       // end on the next hour
		fmt.Sprintf("start=%d&end=%d", cur-40*3600+1800, testNow.Unix()), // end at now
		// Inside one hour: with a ceil start the hour is left out by the
		// start, whatever the end's reading (a regression: the end was
		// learned as excluding its bucket).
		fmt.Sprintf("start=%d&end=%d", cur-8*3600+1, cur-8*3600+3599),
		fmt.Sprintf("start=%d&end=%d", cur-9*3600+600, cur-9*3600+1200),
	}
	for _, rd := range readings {
		t.Run(rd.start+"/"+rd.end, func(t *testing.T) {
			up := newUpstream(t, clk, demo.Options{StartReading: rd.start, EndReading: rd.end})
			want, _ := series.Named(rd.start, rd.end)
			base := "/api4/public/topic/" + url.PathEscape(up.Topics()[0]) + "/time-series/v1?bucket=hour"
			// The reference is fetched a few minutes before the narrow
			// answers, as it is in the cache: its data is older.
			clk.Set(testNow.Add(-5 * time.Minute))
			ref := fetch(t, up, parse(t, base+"&interval=1w", clk.Now()))
			clk.Set(testNow)
			var learned series.Reading
			merge := func(dst *series.Fact, f series.Fact, name string) {
				if f == series.Unknown {
					return
				}
				if *dst != series.Unknown && *dst != f || f != pick(want, name) {
					t.Errorf("%s: learned %v; the upstream's is %v", name, f, pick(want, name))
				}
				*dst = f
			}
			for _, qs := range windows {
				narrow := parse(t, base+"&"+qs, testNow)
				seen, _ := series.Learn(narrow, fetch(t, up, narrow), ref)
				merge(&learned.StartInside, seen.StartInside, "start_inside")
				merge(&learned.EndOn, seen.EndOn, "end_on")
				merge(&learned.EndInside, seen.EndInside, "end_inside")
			}
			if learned != want {
				t.Errorf("learned %+v; want %+v", learned, want)
			}
			// Without a reference only inclusion can be seen.
			narrow := parse(t, base+"&"+windows[0], testNow)
			seen, absent := series.Learn(narrow, fetch(t, up, narrow), nil)
			if seen.StartInside == series.Exclude || seen.EndOn == series.Exclude {
				t.Errorf("without a reference: learned an exclusion %+v", seen)
			}
			// An excluded closed edge bucket is at least marked absent.
			if want.StartInside == series.Exclude && absent.StartInside != series.Exclude {
				t.Errorf("ceil start without a reference: absent %+v; want start_inside marked", absent)
			}
		})
	}
}

// TestLearnNothingFromANewerReference: a reference generated after the
// answer (stored by another request meanwhile) may hold a bucket the
// upstream did not yet show when it answered: the bucket that began in
// between. Its absence from the answer proves nothing about the reading.
func TestLearnNothingFromANewerReference(t *testing.T) {
	for _, rd := range readings {
		t.Run(rd.start+"/"+rd.end, func(t *testing.T) {
			clk := clock.NewFake(testNow)
			up := newUpstream(t, clk, demo.Options{StartReading: rd.start, EndReading: rd.end})
			base := "/api4/public/topic/" + url.PathEscape(up.Topics()[0]) + "/time-series/v1?bucket=hour"
			next := testNow.Unix()/3600*3600 + 3600
			// A minute before the next hour begins, a window ending inside it.
			clk.Set(time.Unix(next-60, 0))
			narrow := parse(t, base+fmt.Sprintf("&start=%d&end=%d", next-20*3600, next+1200), clk.Now())
			answer := fetch(t, up, narrow)
			// Two minutes later, the week (with the new hour's first row).
			clk.Set(time.Unix(next+120, 0))
			ref := fetch(t, up, parse(t, base+"&interval=1w", clk.Now()))
			if !slices.Contains(rowTimes(t, ref), next) {
				t.Fatalf("the reference lacks the new hour %d: the test does not test", next)
			}
			seen, _ := series.Learn(narrow, answer, ref)
			if seen.EndInside == series.Exclude || seen.EndOn == series.Exclude {
				t.Errorf("learned an exclusion from a newer reference: %+v", seen)
			}
		})
	}
}

func pick(r series.Reading, name string) series.Fact {
	switch name {
	case "start_inside":
		return r.StartInside
	case "end_on":
		return r.EndOn
	}
	return r.EndInside
}

// TestCutRefusesWhatItDoesNotHold: a window that starts before the wide
// answer or ends after its last row and its generated time is not covered,
// and bodies that are not the upstream's series shape are errors, never a
// guess.
func TestCutRefusesWhatItDoesNotHold(t *testing.T) {
	clk := clock.NewFake(testNow)
	up := newUpstream(t, clk, demo.Options{})
	known, _ := series.Named("floor", "inclusive")
	seg := url.PathEscape(up.Topics()[0])
	base := "/api4/public/topic/" + seg + "/time-series/v1?bucket=hour"
	wide := fetch(t, up, parse(t, base+"&interval=1w", testNow))
	cur := testNow.Unix() / 3600 * 3600

	before := parse(t, base+"&start="+strconv.FormatInt(cur-9*86400, 10)+"&end="+strconv.FormatInt(cur-86400, 10), testNow)
	if _, _, err := series.Cut(wide, before, known); !errors.Is(err, series.ErrNotCovered) {
		t.Errorf("window starting before the wide one: got %v; want ErrNotCovered", err)
	}
	// An hour later the wide answer (fetched an hour ago) lacks the new
	// current bucket.
	later := testNow.Add(time.Hour)
	after := parse(t, base+"&start="+strconv.FormatInt(cur, 10)+"&end="+strconv.FormatInt(later.Unix(), 10), later)
	if _, _, err := series.Cut(wide, after, known); !errors.Is(err, series.ErrNotCovered) {
		t.Errorf("window ending after the wide one's last row: got %v; want ErrNotCovered", err)
	}
	inside := parse(t, base+"&start="+strconv.FormatInt(cur-3600, 10)+"&end="+strconv.FormatInt(cur, 10), testNow)
	dayWide := fetch(t, up, parse(t, "/api4/public/topic/"+seg+"/time-series/v1?bucket=day&interval=1m", testNow))
	for name, body := range map[string]string{
		"other bucket":     string(dayWide),
		"not json":         "<html>",
		"no data":          `{"config":{"start":1,"bucket":"hour"}}`,
		"data first":       `{"data":[],"config":{"start":1,"bucket":"hour"}}`,
		"extra member":     `{"config":{"start":1,"bucket":"hour"},"data":[],"x":1}`,
		"row without time": `{"config":{"start":1,"bucket":"hour"},"data":[{"t":1}]}`,
		"rows out of order": `{"config":{"start":1,"bucket":"hour"},"data":[{"time":` + strconv.FormatInt(cur, 10) +
			`},{"time":` + strconv.FormatInt(cur-3600, 10) + `}]}`,
		"trailing garbage": string(wide) + "{}",
	} {
		if _, _, err := series.Cut([]byte(body), inside, known); err == nil || errors.Is(err, series.ErrNotCovered) && name != "no data" {
			t.Errorf("%s: got %v; want an error", name, err)
		}
	}
	if _, _, err := series.Cut(wide, parse(t, base+"&interval=1w", testNow), known); err == nil {
		t.Error("an interval request: got no error; want one (only absolute windows are cut)")
	}
}

// TestSourcesReach: only intervals that can reach back to a window's
// start are offered as its sources, narrowest first; "all" always is.
func TestSourcesReach(t *testing.T) {
	base := "/api4/public/topic/bitcoin/time-series/v1?bucket=day"
	for _, tc := range []struct {
		daysBack int
		want     []string
	}{
		{3, []string{"1w", "1m", "3m", "6m", "1y", "all"}},
		{20, []string{"1m", "3m", "6m", "1y", "all"}},
		{200, []string{"1y", "all"}},
		{900, []string{"all"}},
	} {
		start := testNow.Add(-time.Duration(tc.daysBack) * 24 * time.Hour).Unix()
		var got []string
		for _, s := range series.Sources(parse(t, base+"&start="+strconv.FormatInt(start, 10), testNow), testNow) {
			got = append(got, s.Interval)
		}
		if strings.Join(got, " ") != strings.Join(tc.want, " ") {
			t.Errorf("%d days back: got %v; want %v", tc.daysBack, got, tc.want)
		}
	}
	if got := series.Sources(parse(t, base+"&interval=1m", testNow), testNow); got != nil {
		t.Errorf("an interval request: got sources %v; want none", got)
	}
}

func TestNamed(t *testing.T) {
	for _, tc := range []struct {
		start, end string
		want       series.Reading
		ok         bool
	}{
		{"", "", series.Reading{}, true},
		{"floor", "", series.Reading{StartInside: series.Include}, true},
		{"ceil", "exclusive", series.Reading{StartInside: series.Exclude, EndOn: series.Exclude, EndInside: series.Include}, true},
		{"", "floor_exclusive", series.Reading{EndOn: series.Exclude, EndInside: series.Exclude}, true},
		{"round", "", series.Reading{}, false},
		{"", "inclusive-ish", series.Reading{}, false},
	} {
		got, err := series.Named(tc.start, tc.end)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("Named(%q, %q) = %+v, %v; want %+v (ok %v)", tc.start, tc.end, got, err, tc.want, tc.ok)
		}
	}
}

// TestCutIsSizedToItsRows is a regression test (issue 31): a one-hour cut
// from a year's answer held the whole year's capacity, which the cache
// charged for every such cut.
func TestCutIsSizedToItsRows(t *testing.T) {
	clk := clock.NewFake(testNow)
	up := newUpstream(t, clk, demo.Options{})
	known, _ := series.Named("floor", "inclusive")
	base := "/api4/public/topic/" + url.PathEscape(up.Topics()[0]) + "/time-series/v1?bucket=hour"
	year := fetch(t, up, parse(t, base+"&interval=1y", testNow))
	cur := testNow.Unix() / 3600 * 3600
	narrow := parse(t, base+fmt.Sprintf("&start=%d&end=%d", cur-30*86400, cur-30*86400+1), testNow)
	got, rows, err := series.Cut(year, narrow, known)
	if err != nil || rows != 1 {
		t.Fatalf("one hour from the year: %d rows, %v", rows, err)
	}
	if c := cap(got); c > len(got)+len(got)/8+64 {
		t.Errorf("a %d-byte cut from a %d-byte answer holds %d bytes", len(got), len(year), c)
	}
}

// TestCutOnlyStart: a window with only a start ends at the upstream's now,
// read as an end inside its current bucket (issue 26's oracle: under a
// floor_exclusive upstream the current hour is not in such an answer, and a
// cut kept it); a start past the wide answer's now is not covered (the
// upstream refuses such a window).
func TestCutOnlyStart(t *testing.T) {
	clk := clock.NewFake(testNow)
	cur := testNow.Unix() / 3600 * 3600
	for _, rd := range readings {
		up := newUpstream(t, clk, demo.Options{StartReading: rd.start, EndReading: rd.end})
		known, _ := series.Named(rd.start, rd.end)
		base := "/api4/public/topic/" + url.PathEscape(up.Topics()[0]) + "/time-series/v1?bucket=hour"
		wide := fetch(t, up, parse(t, base+"&interval=1w", testNow))
		for _, start := range []int64{cur - 30*3600, cur - 5*3600 + 900, cur, cur + 60} {
			narrow := parse(t, base+fmt.Sprintf("&start=%d", start), testNow)
			got, _, err := series.Cut(wide, narrow, known)
			if start > testNow.Unix()-120 {
				if !errors.Is(err, series.ErrNotCovered) {
					t.Errorf("%s/%s start %d past the upstream's now: %v; want ErrNotCovered", rd.start, rd.end, start, err)
				}
				continue
			}
			if err != nil {
				t.Errorf("%s/%s start %d: %v", rd.start, rd.end, start, err)
				continue
			}
			if want := fetch(t, up, narrow); dataOf(t, got) != dataOf(t, want) {
				t.Errorf("%s/%s start %d: cut %v; the upstream sent %v", rd.start, rd.end, start, rowTimes(t, got), rowTimes(t, want))
			}
			if _, _, err := series.Cut(wide, narrow, series.Reading{StartInside: known.StartInside}); !errors.Is(err, series.ErrAmbiguous) {
				t.Errorf("%s/%s start %d, end reading unknown: %v; want ErrAmbiguous", rd.start, rd.end, start, err)
			}
		}
	}
}

// TestCutOnlyStartAtTheHour is a regression test (the oracle, long run):
// a start-only window asked when the upstream's now was exactly on an hour
// boundary ends on that boundary, which an exclusive upstream reads as
// leaving out the hour that begins there; the cut, reading the end as
// inside the hour, kept its row. When the wide answer's generated time
// does not show its now was past the newest row's first second, such a
// window is not cut unless an end on and inside a bucket read alike.
func TestCutOnlyStartAtTheHour(t *testing.T) {
	atHour := time.Date(2026, 11, 19, 11, 0, 0, 0, time.UTC)
	clk := clock.NewFake(atHour)
	for _, rd := range readings {
		up := newUpstream(t, clk, demo.Options{StartReading: rd.start, EndReading: rd.end})
		known, _ := series.Named(rd.start, rd.end)
		base := "/api4/public/topic/" + url.PathEscape(up.Topics()[0]) + "/time-series/v1?bucket=hour"
		wide := fetch(t, up, parse(t, base+"&interval=1w", atHour))
		narrow := parse(t, base+fmt.Sprintf("&start=%d", atHour.Unix()-5*3600-600), atHour)
		got, _, err := series.Cut(wide, narrow, known)
		if errors.Is(err, series.ErrNotCovered) {
			if known.EndOn == known.EndInside {
				t.Errorf("%s/%s: not covered; an end on and inside a bucket read alike here", rd.start, rd.end)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s/%s: %v", rd.start, rd.end, err)
		}
		if want := fetch(t, up, narrow); dataOf(t, got) != dataOf(t, want) {
			t.Errorf("%s/%s: cut %v; the upstream sent %v", rd.start, rd.end, rowTimes(t, got), rowTimes(t, want))
		}
	}
}

// TestCutOnlyStartAfterTheWideAnswer is a regression test (the oracle,
// long run, a stale cut after an upstream error): a start-only window
// asked more than 10 minutes after its start has a canonical start early
// in its hour, before the wide answer's generated time, while the client's
// own start came after it. The upstream would have refused that window
// then; it is not cut. A start before the generated time still is.
func TestCutOnlyStartAfterTheWideAnswer(t *testing.T) {
	clk := clock.NewFake(testNow)
	up := newUpstream(t, clk, demo.Options{})
	known, _ := series.Named("floor", "inclusive")
	base := "/api4/public/topic/" + url.PathEscape(up.Topics()[0]) + "/time-series/v1?bucket=hour"
	wide := fetch(t, up, parse(t, base+"&interval=1w", testNow))
	later := testNow.Add(20 * time.Minute)
	after := parse(t, base+fmt.Sprintf("&start=%d", testNow.Unix()+60), later)
	if after.Start >= testNow.Unix() {
		t.Fatalf("canonical start %d; want it before the wide answer's now %d", after.Start, testNow.Unix())
	}
	if _, _, err := series.Cut(wide, after, known); !errors.Is(err, series.ErrNotCovered) {
		t.Errorf("client start after the wide answer's now: %v; want ErrNotCovered", err)
	}
	before := parse(t, base+fmt.Sprintf("&start=%d", testNow.Unix()-60), later)
	if before.Start != after.Start {
		t.Fatalf("canonical starts %d and %d differ", before.Start, after.Start)
	}
	if _, _, err := series.Cut(wide, before, known); err != nil {
		t.Errorf("client start before the wide answer's now: %v; want a cut", err)
	}
}
