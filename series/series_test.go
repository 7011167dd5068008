package series_test

import (
	"errors"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
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

// fetch asks the demo upstream for q at the clock's time, as the gateway
// would send it, and returns the body.
func fetch(t *testing.T, up *demo.Server, q api.Request) []byte {
	t.Helper()
	target := q.UpstreamPath()
	if qs := q.UpstreamQuery(); qs != "" {
		target += "?" + qs
	}
	r := httptest.NewRequest(http.MethodGet, target, nil)
	r.Header.Set("Authorization", "Bearer "+upstreamKey)
	w := httptest.NewRecorder()
	up.ServeHTTP(w, r)
	if w.Code != http.StatusOK {
		t.Fatalf("demo %s: %d %s", target, w.Code, w.Body.String())
	}
	return w.Body.Bytes()
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

// TestCutMatchesTheUpstream fetches random absolute windows from the demo
// upstream both ways, directly and cut from a wider interval answer fetched
// at the same moment, and requires the same bytes: hour and day buckets,
// windows at the edges of the wide one, one-bucket windows, windows ending
// in the current (partial) bucket, windows inside a gap, an asset and a
// non-asset topic, and a topic the upstream does not know.
func TestCutMatchesTheUpstream(t *testing.T) {
	// Mid-hour, mid-day: the current buckets are partial.
	now := time.Date(2026, 11, 19, 10, 30, 15, 0, time.UTC)
	clk := clock.NewFake(now)
	up, err := demo.New(demo.Options{Clock: clk, APIKey: upstreamKey})
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	topics := up.Topics()
	rnd := rand.New(rand.NewPCG(13, 21))

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
			seg := url.PathEscape(topic)
			base := "/api4/public/topic/" + seg + "/time-series/v1?bucket=" + c.bucket
			wideQ := parse(t, base+"&interval="+c.interval, now)
			wide := fetch(t, up, wideQ)
			cur := now.Unix() / c.size * c.size
			var windows [][2]int64
			windows = append(windows,
				[2]int64{cur - (c.span-1)*c.size, cur}, // from the wide start's next day-aligned bucket to now
				[2]int64{cur, cur},                     // the partial bucket alone
				[2]int64{cur - c.size, cur - c.size},   // the last closed bucket alone
				[2]int64{cur - 5*c.size, cur - c.size}, // closed, ends before the partial bucket
			)
			for range 25 {
				a := cur - rnd.Int64N(c.span-1)*c.size
				b := cur - rnd.Int64N(c.span-1)*c.size
				windows = append(windows, [2]int64{min(a, b), max(a, b)})
			}
			for _, w := range windows {
				// Unaligned bounds inside the first and last bucket select
				// the same buckets.
				start := w[0] - rnd.Int64N(c.size) + 1
				if start <= w[0]-c.size {
					start = w[0]
				}
				end := w[1] + rnd.Int64N(c.size)
				if end > now.Unix() {
					end = now.Unix()
				}
				target := base + "&start=" + strconv.FormatInt(start, 10) + "&end=" + strconv.FormatInt(end, 10)
				narrow := parse(t, target, now)
				if narrow.Start != w[0] && narrow.Start != w[0]+c.size {
					t.Fatalf("%s: start %d; the test meant %d", target, narrow.Start, w[0])
				}
				got, _, err := series.Cut(wide, narrow)
				if topic == "not a known topic" {
					// Its answers have no rows: nothing to cut from.
					if !errors.Is(err, series.ErrNotCovered) {
						t.Errorf("%s: got %v; want ErrNotCovered", target, err)
					}
					continue
				}
				if errors.Is(err, series.ErrNotCovered) {
					t.Errorf("%s (%s, %s): not covered by %s", target, topic, c.bucket, c.interval)
					continue
				}
				if err != nil {
					t.Fatalf("%s: %v", target, err)
				}
				want := fetch(t, up, narrow)
				if string(got) != string(want) {
					t.Errorf("%s:\ncut    %.300s\ndirect %.300s", target, got, want)
				}
			}
		}
	}
}

// TestCutRefusesWhatItDoesNotHold: a window that starts before the wide
// answer or ends after its last row is not covered, and bodies that are not
// the upstream's series shape are errors, never a guess.
func TestCutRefusesWhatItDoesNotHold(t *testing.T) {
	now := time.Date(2026, 11, 19, 10, 30, 15, 0, time.UTC)
	clk := clock.NewFake(now)
	up, err := demo.New(demo.Options{Clock: clk, APIKey: upstreamKey})
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	seg := url.PathEscape(up.Topics()[0])
	base := "/api4/public/topic/" + seg + "/time-series/v1?bucket=hour"
	wide := fetch(t, up, parse(t, base+"&interval=1w", now))
	cur := now.Unix() / 3600 * 3600

	before := parse(t, base+"&start="+strconv.FormatInt(cur-9*86400, 10)+"&end="+strconv.FormatInt(cur-86400, 10), now)
	if _, _, err := series.Cut(wide, before); !errors.Is(err, series.ErrNotCovered) {
		t.Errorf("window starting before the wide one: got %v; want ErrNotCovered", err)
	}
	// An hour later the wide answer (fetched an hour ago) lacks the new
	// current bucket.
	later := now.Add(time.Hour)
	after := parse(t, base+"&start="+strconv.FormatInt(cur, 10)+"&end="+strconv.FormatInt(later.Unix(), 10), later)
	if _, _, err := series.Cut(wide, after); !errors.Is(err, series.ErrNotCovered) {
		t.Errorf("window ending after the wide one's last row: got %v; want ErrNotCovered", err)
	}
	inside := parse(t, base+"&start="+strconv.FormatInt(cur-3600, 10)+"&end="+strconv.FormatInt(cur, 10), now)
	dayWide := fetch(t, up, parse(t, "/api4/public/topic/"+seg+"/time-series/v1?bucket=day&interval=1m", now))
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
		if _, _, err := series.Cut([]byte(body), inside); err == nil || errors.Is(err, series.ErrNotCovered) && name != "no data" {
			t.Errorf("%s: got %v; want an error", name, err)
		}
	}
	if _, _, err := series.Cut(wide, parse(t, base+"&interval=1w", now)); err == nil {
		t.Error("an interval request: got no error; want one (only absolute windows are cut)")
	}
}

// TestSourcesReach: only intervals that can reach back to a window's
// start are offered as its sources, narrowest first; "all" always is.
func TestSourcesReach(t *testing.T) {
	now := time.Date(2026, 11, 19, 10, 30, 15, 0, time.UTC)
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
		start := now.Add(-time.Duration(tc.daysBack) * 24 * time.Hour).Unix()
		var got []string
		for _, s := range series.Sources(parse(t, base+"&start="+strconv.FormatInt(start, 10), now), now) {
			got = append(got, s.Interval)
		}
		if strings.Join(got, " ") != strings.Join(tc.want, " ") {
			t.Errorf("%d days back: got %v; want %v", tc.daysBack, got, tc.want)
		}
	}
	if got := series.Sources(parse(t, base+"&interval=1m", now), now); got != nil {
		t.Errorf("an interval request: got sources %v; want none", got)
	}
}
