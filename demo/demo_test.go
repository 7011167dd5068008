package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"trendgate/internal/clock"
)

// testNow is the "generated" moment of the facts document's example:
// 2025-10-16 20:48:38 UTC.
var testNow = time.Date(2025, 10, 16, 20, 48, 38, 0, time.UTC)

func newServer(t *testing.T, opts Options) (*Server, *clock.Fake) {
	t.Helper()
	clk := clock.NewFake(testNow)
	if opts.Clock == nil {
		opts.Clock = clk
	}
	s, err := New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(s.Close)
	return s, clk
}

// do sends one request through ServeHTTP.
func do(s *Server, method, target string, hdr ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, target, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Add(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	s.ServeHTTP(w, r)
	return w
}

// decodeStrict decodes body into v rejecting unknown fields.
func decodeStrict(t *testing.T, body []byte, v any) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("decode %T: %v; body %.300s", v, err, body)
	}
}

type listItem struct {
	Topic           string `json:"topic"`
	Title           string `json:"title"`
	TopicRank       int64  `json:"topic_rank"`
	TopicRank1h     int64  `json:"topic_rank_1h_previous"`
	TopicRank24h    int64  `json:"topic_rank_24h_previous"`
	NumContributors int64  `json:"num_contributors"`
	NumPosts        int64  `json:"num_posts"`
	Interactions24h int64  `json:"interactions_24h"`
}

type listResp struct {
	Data []listItem `json:"data"`
}

type seriesConfig struct {
	Topic     string   `json:"topic"`
	ID        string   `json:"id"`
	Name      *string  `json:"name"`
	Symbol    *string  `json:"symbol"`
	Interval  *string  `json:"interval"`
	Start     int64    `json:"start"`
	End       int64    `json:"end"`
	Bucket    string   `json:"bucket"`
	Metrics   []string `json:"metrics"`
	Generated int64    `json:"generated"`
}

type seriesRow struct {
	Time                int64    `json:"time"`
	ContributorsActive  *int64   `json:"contributors_active"`
	ContributorsCreated *int64   `json:"contributors_created"`
	Interactions        *int64   `json:"interactions"`
	PostsActive         *int64   `json:"posts_active"`
	PostsCreated        *int64   `json:"posts_created"`
	Sentiment           *int64   `json:"sentiment"`
	Spam                *int64   `json:"spam"`
	AltRank             *int64   `json:"alt_rank"`
	CirculatingSupply   *float64 `json:"circulating_supply"`
	Close               *float64 `json:"close"`
	GalaxyScore         *int64   `json:"galaxy_score"`
	High                *float64 `json:"high"`
	Low                 *float64 `json:"low"`
	MarketCap           *float64 `json:"market_cap"`
	MarketDominance     *float64 `json:"market_dominance"`
	Open                *float64 `json:"open"`
	SocialDominance     *float64 `json:"social_dominance"`
	Volume24h           *float64 `json:"volume_24h"`
}

type seriesResp struct {
	Config seriesConfig `json:"config"`
	Data   []seriesRow  `json:"data"`
}

type whatsupConfig struct {
	Topic     string  `json:"topic"`
	ID        *string `json:"id"`
	Name      *string `json:"name"`
	Symbol    *string `json:"symbol"`
	Generated int64   `json:"generated"`
}

type themeJSON struct {
	Title       string  `json:"title"`
	Description string  `json:"description"`
	Percent     float64 `json:"percent"`
}

type whatsupResp struct {
	Config     whatsupConfig `json:"config"`
	Summary    string        `json:"summary"`
	Supportive []themeJSON   `json:"supportive"`
	Critical   []themeJSON   `json:"critical"`
}

func getSeries(t *testing.T, s *Server, target string) seriesResp {
	t.Helper()
	w := do(s, http.MethodGet, target)
	if w.Code != http.StatusOK {
		t.Fatalf("GET %s: got status %d; want 200; body %s", target, w.Code, w.Body)
	}
	var r seriesResp
	decodeStrict(t, w.Body.Bytes(), &r)
	return r
}

var topicPattern = regexp.MustCompile(`^[a-z0-9#$]([a-z0-9 #$]*[a-z0-9#$])?$`)

func TestNewValidates(t *testing.T) {
	tests := []struct {
		name string
		opts Options
	}{
		{"negative topics", Options{Topics: -1}},
		{"too many topics", Options{Topics: maxTopics + 1}},
		{"negative per minute", Options{PerMinute: -1}},
		{"negative per day", Options{PerDay: -5}},
		{"negative latency", Options{Latency: -time.Second}},
		{"unknown start reading", Options{StartReading: "round"}},
		{"start reading case", Options{StartReading: "Floor"}},
		{"unknown end reading", Options{EndReading: "closed"}},
		{"end reading of start", Options{EndReading: "floor"}},
		{"negative lag", Options{Lag: -time.Minute}},
		{"lag above an hour", Options{Lag: time.Hour + time.Second}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.opts)
			if !errors.Is(err, ErrInvalidOptions) {
				t.Fatalf("got %v; want ErrInvalidOptions", err)
			}
		})
	}
	s, err := New(Options{})
	if err != nil {
		t.Fatalf("New(zero Options): %v", err)
	}
	if got := len(s.Topics()); got != 300 {
		t.Errorf("zero Options: got %d topics; want 300", got)
	}
}

func TestTopicsList(t *testing.T) {
	for _, n := range []int{1, 3, 12, 300, 1000, maxTopics} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			s, _ := newServer(t, Options{Topics: n})
			w := do(s, http.MethodGet, "/api4/public/topics/list/v1")
			if w.Code != http.StatusOK {
				t.Fatalf("got status %d; want 200", w.Code)
			}
			var r listResp
			decodeStrict(t, w.Body.Bytes(), &r)
			if len(r.Data) != n {
				t.Fatalf("got %d items; want %d", len(r.Data), n)
			}
			names := s.Topics()
			seen := map[string]bool{}
			for i, it := range r.Data {
				if it.TopicRank != int64(i+1) {
					t.Errorf("item %d: got rank %d; want %d", i, it.TopicRank, i+1)
				}
				if it.Topic != names[i] {
					t.Errorf("item %d: got topic %q; Topics() says %q", i, it.Topic, names[i])
				}
				if !topicPattern.MatchString(it.Topic) || len(it.Topic) > 64 {
					t.Errorf("item %d: topic %q is not a valid topic", i, it.Topic)
				}
				if seen[it.Topic] {
					t.Errorf("item %d: duplicate topic %q", i, it.Topic)
				}
				seen[it.Topic] = true
				if it.Title == "" || it.NumContributors <= 0 || it.NumPosts <= 0 || it.Interactions24h <= 0 {
					t.Errorf("item %d: empty title or non-positive counts: %+v", i, it)
				}
				if it.TopicRank1h < 1 || it.TopicRank24h < 1 {
					t.Errorf("item %d: previous ranks %d/%d; want >= 1", i, it.TopicRank1h, it.TopicRank24h)
				}
			}
			if r.Data[0].Topic != "youtube" {
				t.Errorf("rank 1: got %q; want youtube", r.Data[0].Topic)
			}
		})
	}
}

func TestTopicsListMagnitudes(t *testing.T) {
	s, _ := newServer(t, Options{})
	var r listResp
	decodeStrict(t, do(s, http.MethodGet, "/api4/public/topics/list/v1").Body.Bytes(), &r)
	want := map[string]struct{ rank, lo, hi int64 }{
		"youtube": {1, 1e9, 1e10},
		"bitcoin": {27, 4e7, 5e8},
	}
	for _, it := range r.Data {
		w, ok := want[it.Topic]
		if !ok {
			continue
		}
		delete(want, it.Topic)
		if it.TopicRank != w.rank {
			t.Errorf("%s: got rank %d; want %d", it.Topic, it.TopicRank, w.rank)
		}
		if it.Interactions24h < w.lo || it.Interactions24h > w.hi {
			t.Errorf("%s: got interactions_24h %d; want %d..%d", it.Topic, it.Interactions24h, w.lo, w.hi)
		}
	}
	for name := range want {
		t.Errorf("topic %q missing from the list", name)
	}
	for _, fixed := range []string{"ethereum", "solana", "dogecoin", "xrp", "#ai", "ai agents", "$capitalism"} {
		if !contains(s.Topics(), fixed) {
			t.Errorf("topic %q missing from Topics()", fixed)
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestDeterminism(t *testing.T) {
	targets := []string{
		"/api4/public/topics/list/v1",
		"/api4/public/topic/bitcoin/whatsup/v1",
		"/api4/public/topic/bitcoin/time-series/v1",
		"/api4/public/topic/%23ai/time-series/v1?bucket=day&interval=3m",
		"/topic/solana/time-series/sentiment.tsv",
	}
	a, _ := newServer(t, Options{Seed: 7})
	b, _ := newServer(t, Options{Seed: 7})
	other, _ := newServer(t, Options{Seed: 8})
	for _, target := range targets {
		t.Run(target, func(t *testing.T) {
			first := do(a, http.MethodGet, target).Body.String()
			if again := do(a, http.MethodGet, target).Body.String(); again != first {
				t.Errorf("same server, same clock: bodies differ")
			}
			if twin := do(b, http.MethodGet, target).Body.String(); twin != first {
				t.Errorf("same seed, other server: bodies differ")
			}
			if diff := do(other, http.MethodGet, target).Body.String(); diff == first {
				t.Errorf("different seed: got identical bodies; want different data")
			}
		})
	}
}

func TestTopicDecodedOnce(t *testing.T) {
	tests := []struct {
		escaped, topic string
		known          bool
	}{
		{"bitcoin", "bitcoin", true},
		{"%23ai", "#ai", true},
		{"ai%20agents", "ai agents", true},
		{"%24capitalism", "$capitalism", true},
		{"%2523ai", "%23ai", false},
		{"nosuchtopic", "nosuchtopic", false},
		{"BITCOIN", "BITCOIN", false},
		{"a%2Fb", "a/b", false},
		{"ai+agents", "ai+agents", false},
		{"%2523ai%20x", "%23ai x", false},
	}
	for _, tc := range tests {
		t.Run(tc.escaped, func(t *testing.T) {
			s, _ := newServer(t, Options{})
			r := getSeries(t, s, "/api4/public/topic/"+tc.escaped+"/time-series/v1")
			if r.Config.Topic != tc.topic {
				t.Errorf("series: got topic %q; want %q", r.Config.Topic, tc.topic)
			}
			if got := len(r.Data) > 0; got != tc.known {
				t.Errorf("series: got data present=%v; want %v", got, tc.known)
			}
			var wr whatsupResp
			decodeStrict(t, do(s, http.MethodGet, "/api4/public/topic/"+tc.escaped+"/whatsup/v1").Body.Bytes(), &wr)
			if wr.Config.Topic != tc.topic {
				t.Errorf("whatsup: got topic %q; want %q", wr.Config.Topic, tc.topic)
			}
			if got := wr.Summary != ""; got != tc.known {
				t.Errorf("whatsup: got summary present=%v; want %v", got, tc.known)
			}
			reqs := s.Requests()
			if len(reqs) != 2 || !strings.Contains(reqs[0].EscapedPath, "/"+tc.escaped+"/") {
				t.Errorf("recorded %+v; want 2 requests with escaped segment %q", reqs, tc.escaped)
			}
		})
	}
}

func TestAssetAndNonAssetFields(t *testing.T) {
	s, _ := newServer(t, Options{})
	tests := []struct {
		topic   string
		asset   bool
		rowKeys int
	}{
		{"bitcoin", true, 19},
		{"ethereum", true, 19},
		{"dogecoin", true, 19},
		{"%23ai", false, 8},
		{"ai%20agents", false, 8},
		{"youtube", false, 8},
	}
	for _, tc := range tests {
		t.Run(tc.topic, func(t *testing.T) {
			for _, bucket := range []string{"hour", "day"} {
				target := "/api4/public/topic/" + tc.topic + "/time-series/v1?bucket=" + bucket
				body := do(s, http.MethodGet, target).Body.Bytes()
				var raw struct {
					Config map[string]any   `json:"config"`
					Data   []map[string]any `json:"data"`
				}
				if err := json.Unmarshal(body, &raw); err != nil {
					t.Fatalf("%s: %v", target, err)
				}
				if len(raw.Data) == 0 {
					t.Fatalf("%s: no rows", target)
				}
				for i, row := range raw.Data {
					if len(row) != tc.rowKeys {
						t.Fatalf("%s row %d: got %d keys; want %d: %v", target, i, len(row), tc.rowKeys, row)
					}
				}
				_, hasName := raw.Config["name"]
				_, hasSymbol := raw.Config["symbol"]
				if hasName != tc.asset || hasSymbol != tc.asset {
					t.Errorf("%s: config name/symbol present=%v/%v; want %v", target, hasName, hasSymbol, tc.asset)
				}
				if raw.Config["id"] == nil {
					t.Errorf("%s: config has no id", target)
				}
			}
			var wr whatsupResp
			decodeStrict(t, do(s, http.MethodGet, "/api4/public/topic/"+tc.topic+"/whatsup/v1").Body.Bytes(), &wr)
			if got := wr.Config.Symbol != nil && wr.Config.Name != nil && wr.Config.ID != nil; got != tc.asset {
				t.Errorf("whatsup config id/name/symbol present=%v; want %v", got, tc.asset)
			}
			if !tc.asset && (wr.Config.ID != nil || wr.Config.Name != nil) {
				t.Errorf("whatsup config of a non-asset carries id or name: %+v", wr.Config)
			}
		})
	}
}

func TestSeriesWindows(t *testing.T) {
	now := testNow.Unix()
	cur := now - now%3600
	midnight := now - now%86400
	tests := []struct {
		name      string
		query     string
		interval  string // "" means absent
		bucket    string
		start     int64 // -1: don't check
		end       int64 // -1: don't check
		firstTime int64 // -1: don't check
		lastTime  int64
		maxRows   int
	}{
		{"default", "", "1w", "hour", midnight - 7*86400, -1, midnight - 7*86400, cur, 7*24 + 21},
		{"hour alias", "?bucket=hours&interval=1d", "1d", "hour", midnight - 86400, -1, midnight - 86400, cur, 24 + 21},
		{"day 1w", "?bucket=day", "1w", "day", midnight - 7*86400, -1, midnight - 7*86400, midnight, 8},
		{"days alias 1m", "?bucket=days&interval=1m", "1m", "day", midnight - 30*86400, -1, midnight - 30*86400, midnight, 31},
		{"1y day", "?bucket=day&interval=1y", "1y", "day", midnight - 365*86400, -1, midnight - 365*86400, midnight, 366},
		{"all day capped", "?bucket=day&interval=all", "all", "day", -1, -1, -1, midnight, 2 * 366},
		{"all hour capped", "?interval=all", "all", "hour", -1, -1, -1, cur, 366 * 24},
		// Unaligned starts include the bucket that holds them (StartReading "floor").
		{"start only", "?start=1760000000&interval=1m", "", "hour", 1760000000, now, 1760000000 - 3200, cur, 181},
		{"end only", "?end=1760000000", "", "hour", 1760000000 - 7*86400, 1760000000, 1760000000 - 7*86400 - 3200, 1759996800, 7*24 + 1},
		{"start and end", "?start=1759968000&end=1760054400&interval=1y&bucket=day", "", "day", 1759968000, 1760054400, 1759968000, 1760054400, 2},
		{"end in future capped", "?start=1760600000&end=1999999999", "", "hour", 1760600000, 1999999999, 1760600000 - 2000, cur, 15},
	}
	s, _ := newServer(t, Options{})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := getSeries(t, s, "/api4/public/topic/bitcoin/time-series/v1"+tc.query)
			c := r.Config
			switch {
			case tc.interval == "" && c.Interval != nil:
				t.Errorf("got interval %q; want none", *c.Interval)
			case tc.interval != "" && (c.Interval == nil || *c.Interval != tc.interval):
				t.Errorf("got interval %v; want %q", c.Interval, tc.interval)
			}
			if c.Bucket != tc.bucket {
				t.Errorf("got bucket %q; want %q", c.Bucket, tc.bucket)
			}
			if tc.start >= 0 && c.Start != tc.start {
				t.Errorf("got start %d; want %d", c.Start, tc.start)
			}
			if tc.end >= 0 && c.End != tc.end {
				t.Errorf("got end %d; want %d", c.End, tc.end)
			}
			if c.Metrics == nil || len(c.Metrics) != 0 {
				t.Errorf("got metrics %v; want []", c.Metrics)
			}
			if age := now - c.Generated; age < 1 || age > 60 {
				t.Errorf("generated is %d s before now; want 1..60", age)
			}
			if tc.interval != "" && c.End != c.Generated+7200 {
				t.Errorf("interval window: got end %d; want generated+7200 = %d", c.End, c.Generated+7200)
			}
			if len(r.Data) == 0 || len(r.Data) > tc.maxRows {
				t.Fatalf("got %d rows; want 1..%d", len(r.Data), tc.maxRows)
			}
			size := int64(3600)
			if tc.bucket == "day" {
				size = 86400
			}
			for i, row := range r.Data {
				if row.Time%size != 0 {
					t.Fatalf("row %d: time %d not aligned to %d", i, row.Time, size)
				}
				if i > 0 && row.Time <= r.Data[i-1].Time {
					t.Fatalf("row %d: time %d not after %d", i, row.Time, r.Data[i-1].Time)
				}
			}
			if tc.firstTime >= 0 && r.Data[0].Time != tc.firstTime {
				t.Errorf("got first time %d; want %d", r.Data[0].Time, tc.firstTime)
			}
			if got := r.Data[len(r.Data)-1].Time; got != tc.lastTime {
				t.Errorf("got last time %d; want %d", got, tc.lastTime)
			}
			if tc.interval == "all" && c.Start != r.Data[0].Time {
				t.Errorf("interval=all: got start %d; want the first row time %d", c.Start, r.Data[0].Time)
			}
		})
	}
}

func TestSeriesBadParameters(t *testing.T) {
	s, _ := newServer(t, Options{})
	for _, q := range []string{
		"bucket=week", "bucket=HOUR", "interval=2w", "interval=", "start=-5", "start=abc", "start=12.5",
		"start=1e9", "end=", "start=1760000000&end=1760000000", "start=1760054400&end=1760000000",
		"start=1999999999", "a=%zz",
	} {
		t.Run(q, func(t *testing.T) {
			w := do(s, http.MethodGet, "/api4/public/topic/bitcoin/time-series/v1?"+q)
			if w.Code != http.StatusBadRequest {
				t.Fatalf("got status %d; want 400", w.Code)
			}
			var e struct {
				Error string `json:"error"`
			}
			decodeStrict(t, w.Body.Bytes(), &e)
			if e.Error == "" {
				t.Errorf("got empty error message")
			}
		})
	}
}

func TestHourlyRealism(t *testing.T) {
	// At 20:00:30 the current bucket is 1% elapsed.
	s, _ := newServer(t, Options{Clock: clock.NewFake(time.Date(2025, 10, 16, 20, 0, 30, 0, time.UTC))})
	r := getSeries(t, s, "/api4/public/topic/bitcoin/time-series/v1?interval=1y")
	n := len(r.Data)
	last, prev := r.Data[n-1], r.Data[n-2]
	if *last.Interactions >= *prev.Interactions/5 {
		t.Errorf("partial last bucket: got %d interactions; want well below the previous hour's %d", *last.Interactions, *prev.Interactions)
	}
	var spam, created float64
	var peak, trough, peakN, troughN float64
	vals := make([]float64, 0, n)
	for _, row := range r.Data[:n-1] {
		spam += float64(*row.Spam)
		created += float64(*row.PostsCreated)
		v := float64(*row.Interactions)
		vals = append(vals, v)
		switch h := row.Time % 86400 / 3600; {
		case h >= 11 && h <= 17:
			peak += v
			peakN++
		case h >= 23 || h <= 5:
			trough += v
			troughN++
		}
		if *row.Sentiment < 0 || *row.Sentiment > 100 {
			t.Fatalf("sentiment %d outside 0..100", *row.Sentiment)
		}
		if *row.High < *row.Low || *row.Open > *row.High || *row.Close < *row.Low {
			t.Fatalf("row %d: inconsistent OHLC %v/%v/%v/%v", row.Time, *row.Open, *row.High, *row.Low, *row.Close)
		}
	}
	if ratio := spam / created; ratio < 0.2 || ratio > 0.45 {
		t.Errorf("spam share: got %.2f; want about 0.3", ratio)
	}
	if ratio := (peak / peakN) / (trough / troughN); ratio < 1.5 || ratio > 3 {
		t.Errorf("diurnal peak/trough: got %.2f; want about 2", ratio)
	}
	sort.Float64s(vals)
	if median, top := vals[len(vals)/2], vals[len(vals)-1]; top < 8*median {
		t.Errorf("news spikes: got max %.0f, median %.0f; want a spike of at least 8x", top, median)
	}
	// A smaller topic has visibly missing hours over a year.
	small := getSeries(t, s, "/api4/public/topic/%24capitalism/time-series/v1?interval=1y")
	span := (small.Data[len(small.Data)-1].Time-small.Data[0].Time)/3600 + 1
	if missing := span - int64(len(small.Data)); missing < 20 {
		t.Errorf("missing hours: got %d in %d; want some", missing, span)
	}
}

func TestDayBucketsAggregate(t *testing.T) {
	s, _ := newServer(t, Options{})
	hours := getSeries(t, s, "/api4/public/topic/%23ai/time-series/v1?interval=1w")
	days := getSeries(t, s, "/api4/public/topic/%23ai/time-series/v1?interval=1w&bucket=day")
	sums := map[int64]int64{}
	for _, row := range hours.Data {
		sums[row.Time-row.Time%86400] += *row.Interactions
	}
	for _, row := range days.Data {
		if got, want := *row.Interactions, sums[row.Time]; got != want {
			t.Errorf("day %d: got %d interactions; want the sum of its hours %d", row.Time, got, want)
		}
	}
	if len(days.Data) != 8 {
		t.Errorf("got %d day rows; want 8", len(days.Data))
	}
}

func TestWhatsup(t *testing.T) {
	s, _ := newServer(t, Options{Topics: 1000})
	now := testNow.Unix()
	for _, topic := range []string{"bitcoin", "%23ai", "ai%20agents", "youtube"} {
		t.Run(topic, func(t *testing.T) {
			var r whatsupResp
			decodeStrict(t, do(s, http.MethodGet, "/api4/public/topic/"+topic+"/whatsup/v1").Body.Bytes(), &r)
			if age := now - r.Config.Generated; age < 60 || age >= 3660 {
				t.Errorf("generated %d s ago; want 60..3659", age)
			}
			if len(r.Supportive) < 1 || len(r.Supportive) > 3 || len(r.Critical) < 1 || len(r.Critical) > 3 {
				t.Errorf("got %d supportive, %d critical; want 1..3 each", len(r.Supportive), len(r.Critical))
			}
			for _, group := range [][]themeJSON{r.Supportive, r.Critical} {
				titles := map[string]bool{}
				for _, th := range group {
					if th.Percent < 1 || th.Percent > 60 || th.Title == "" || th.Description == "" || titles[th.Title] {
						t.Errorf("bad theme %+v", th)
					}
					titles[th.Title] = true
				}
			}
		})
	}
	// Every topic's summary is 400-600 characters.
	for _, t0 := range s.cat.list {
		for h := int64(0); h < 5; h++ {
			summary, sup, cri := whatsupText(t0, 1760000000+h*3600)
			if len(summary) < 400 || len(summary) > 600 {
				t.Fatalf("%s: summary of %d chars; want 400..600: %q", t0.topic, len(summary), summary)
			}
			if !strings.Contains(summary, t0.title) {
				t.Fatalf("%s: summary does not mention %q", t0.topic, t0.title)
			}
			if len(sup) == 0 || len(cri) == 0 {
				t.Fatalf("%s: no themes", t0.topic)
			}
		}
	}
}

var tsvRow = regexp.MustCompile(`^\d{4}-\d\d-\d\d \d\d:00\t\d+$`)

func TestTSV(t *testing.T) {
	s, _ := newServer(t, Options{})
	for _, metric := range []string{"interactions", "posts_active", "contributors_active", "sentiment"} {
		t.Run(metric, func(t *testing.T) {
			w := do(s, http.MethodGet, "/topic/bitcoin/time-series/"+metric+".tsv")
			if w.Code != http.StatusOK {
				t.Fatalf("got status %d; want 200", w.Code)
			}
			if ct := w.Header().Get("Content-Type"); ct != "text/tab-separated-values" {
				t.Errorf("got Content-Type %q; want text/tab-separated-values", ct)
			}
			lines := strings.Split(strings.TrimSuffix(w.Body.String(), "\n"), "\n")
			if lines[0] != "time\t"+metric {
				t.Errorf("got header %q; want %q", lines[0], "time\t"+metric)
			}
			if n := len(lines) - 1; n < 20 || n > 24 {
				t.Errorf("got %d rows; want about 24", n)
			}
			for _, l := range lines[1:] {
				if !tsvRow.MatchString(l) {
					t.Fatalf("bad row %q", l)
				}
			}
			if got, want := lines[len(lines)-1][:16], "2025-10-16 20:00"; got != want {
				t.Errorf("got last row %q; want the current hour %q", got, want)
			}
		})
	}
	w := do(s, http.MethodGet, "/topic/nosuchtopic/time-series/interactions.tsv")
	if w.Code != http.StatusOK || w.Body.String() != "time\tinteractions\n" {
		t.Errorf("unknown topic: got %d %q; want 200 with the header only", w.Code, w.Body)
	}
	// The TSV agrees with the hourly series for the same hours.
	r := getSeries(t, s, "/api4/public/topic/bitcoin/time-series/v1?interval=1d")
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

func TestUnknownTopic(t *testing.T) {
	targets := []string{
		"/api4/public/topic/nosuchtopic/time-series/v1",
		"/api4/public/topic/nosuchtopic/whatsup/v1",
		"/topic/nosuchtopic/time-series/posts_active.tsv",
	}
	for _, use404 := range []bool{false, true} {
		s, _ := newServer(t, Options{UnknownTopic404: use404})
		for _, target := range targets {
			t.Run(strconv.FormatBool(use404)+target, func(t *testing.T) {
				w := do(s, http.MethodGet, target)
				want := http.StatusOK
				if use404 {
					want = http.StatusNotFound
				}
				if w.Code != want {
					t.Fatalf("got status %d; want %d", w.Code, want)
				}
				if use404 && strings.TrimSpace(w.Body.String()) != `{"error":"Topic not found"}` {
					t.Errorf("got body %q; want Topic not found", w.Body)
				}
			})
		}
		known := do(s, http.MethodGet, "/api4/public/topic/bitcoin/whatsup/v1")
		if known.Code != http.StatusOK {
			t.Errorf("known topic with UnknownTopic404=%v: got %d; want 200", use404, known.Code)
		}
	}
	s, _ := newServer(t, Options{})
	r := getSeries(t, s, "/api4/public/topic/nosuchtopic/time-series/v1")
	if r.Config.Topic != "nosuchtopic" || len(r.Data) != 0 || r.Data == nil {
		t.Errorf("unknown topic series: got config %+v and %d rows; want config and data: []", r.Config, len(r.Data))
	}
	var wr whatsupResp
	decodeStrict(t, do(s, http.MethodGet, "/api4/public/topic/nosuchtopic/whatsup/v1").Body.Bytes(), &wr)
	if wr.Summary != "" || wr.Supportive != nil || wr.Critical != nil {
		t.Errorf("unknown topic whatsup: got %+v; want empty summary and no themes", wr)
	}
}

func TestRoutesAndMethods(t *testing.T) {
	s, _ := newServer(t, Options{})
	tests := []struct {
		method, target string
		status         int
		body           string
	}{
		{"GET", "/", 404, `{"error":"Invalid endpoint (2)"}`},
		{"GET", "/api4/public/topic/bitcoin", 404, `{"error":"Invalid endpoint (2)"}`},
		{"GET", "/api4/public/topic//whatsup/v1", 404, `{"error":"Invalid endpoint (2)"}`},
		{"GET", "/api4/public/topic/bitcoin/whatsup/v2", 404, `{"error":"Invalid endpoint (2)"}`},
		{"GET", "/api4/public/topics/list/v1/", 404, `{"error":"Invalid endpoint (2)"}`},
		{"GET", "/topic/bitcoin/time-series/market_cap.tsv", 404, `{"error":"Invalid endpoint (2)"}`},
		{"GET", "/topic/bitcoin/time-series/interactions", 404, `{"error":"Invalid endpoint (2)"}`},
		{"GET", "/_demo/count", 404, `{"error":"Invalid endpoint (2)"}`}, // Control off
		{"POST", "/api4/public/topics/list/v1", 405, `{"error":"Method not allowed"}`},
		{"DELETE", "/api4/public/topic/bitcoin/whatsup/v1", 405, `{"error":"Method not allowed"}`},
	}
	for _, tc := range tests {
		t.Run(tc.method+" "+tc.target, func(t *testing.T) {
			w := do(s, tc.method, tc.target)
			if w.Code != tc.status || strings.TrimSpace(w.Body.String()) != tc.body {
				t.Fatalf("got %d %q; want %d %q", w.Code, w.Body, tc.status, tc.body)
			}
			if tc.status == 405 && w.Header().Get("Allow") != "GET, HEAD" {
				t.Errorf("got Allow %q; want GET, HEAD", w.Header().Get("Allow"))
			}
		})
	}
	get := do(s, http.MethodGet, "/api4/public/topic/bitcoin/time-series/v1")
	head := do(s, http.MethodHead, "/api4/public/topic/bitcoin/time-series/v1")
	if head.Code != 200 || head.Body.Len() != 0 || head.Header().Get("Content-Length") != strconv.Itoa(get.Body.Len()) {
		t.Errorf("HEAD: got %d, %d body bytes, Content-Length %q; want 200, none, %d",
			head.Code, head.Body.Len(), head.Header().Get("Content-Length"), get.Body.Len())
	}
}

func TestHeadersOnEveryResponse(t *testing.T) {
	s, _ := newServer(t, Options{APIKey: "k", PerMinute: 3})
	auth := []string{"Authorization", "Bearer k"}
	cases := []struct {
		name   string
		target string
		hdr    []string
		status int
	}{
		{"ok", "/api4/public/topics/list/v1", auth, 200},
		{"bad request", "/api4/public/topic/bitcoin/time-series/v1?bucket=x", auth, 400},
		{"not found", "/nope", auth, 404},
		{"unauthorized", "/api4/public/topics/list/v1", nil, 401},
		{"rate limited", "/api4/public/topics/list/v1", auth, 429},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := do(s, http.MethodGet, tc.target, tc.hdr...)
			if w.Code != tc.status {
				t.Fatalf("got status %d; want %d", w.Code, tc.status)
			}
			for _, h := range []string{
				"x-rate-limit-minute", "x-rate-limit-minute-remaining", "x-rate-limit-minute-reset",
				"x-rate-limit-day", "x-rate-limit-day-remaining", "x-rate-limit-day-reset",
				"x-lunar-generated", "x-lunar-age",
			} {
				if _, err := strconv.ParseInt(w.Header().Get(h), 10, 64); err != nil {
					t.Errorf("header %s = %q; want an integer", h, w.Header().Get(h))
				}
			}
			if cc := w.Header().Get("Cache-Control"); !strings.HasPrefix(cc, "s-max-age=") {
				t.Errorf("got Cache-Control %q; want s-max-age=...", cc)
			}
		})
	}
	s2, _ := newServer(t, Options{})
	w := do(s2, http.MethodGet, "/api4/public/topic/%23ai/whatsup/v1")
	gen, _ := strconv.ParseInt(w.Header().Get("X-Lunar-Generated"), 10, 64)
	age, _ := strconv.ParseInt(w.Header().Get("X-Lunar-Age"), 10, 64)
	var r whatsupResp
	decodeStrict(t, w.Body.Bytes(), &r)
	if gen != r.Config.Generated || gen+age != testNow.Unix() {
		t.Errorf("x-lunar-generated %d, age %d; want config.generated %d and generated+age = now", gen, age, r.Config.Generated)
	}
}

func TestAuthentication(t *testing.T) {
	s, _ := newServer(t, Options{APIKey: "secret"})
	tests := []struct {
		name   string
		hdr    []string
		status int
	}{
		{"missing", nil, 401},
		{"wrong key", []string{"Authorization", "Bearer nope"}, 401},
		{"wrong scheme", []string{"Authorization", "Basic secret"}, 401},
		{"key in other header", []string{"X-Api-Key", "secret"}, 401},
		{"two headers", []string{"Authorization", "Bearer secret", "Authorization", "Bearer secret"}, 401},
		{"ok", []string{"Authorization", "Bearer secret"}, 200},
		{"scheme case", []string{"Authorization", "bearer secret"}, 200},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := do(s, http.MethodGet, "/api4/public/topics/list/v1", tc.hdr...)
			if w.Code != tc.status {
				t.Fatalf("got status %d; want %d", w.Code, tc.status)
			}
			if tc.status == 401 && !strings.Contains(w.Body.String(), `"error":"DEMO DATA MODE: `) {
				t.Errorf("got body %q; want the DEMO DATA MODE error", w.Body)
			}
		})
	}
}

func TestRateLimitMinute(t *testing.T) {
	start := time.Date(2025, 11, 30, 3, 37, 10, 0, time.UTC)
	clk := clock.NewFake(start)
	s, _ := newServer(t, Options{Clock: clk, PerMinute: 10, PerDay: 2000})
	nextMinute := strconv.FormatInt(time.Date(2025, 11, 30, 3, 38, 0, 0, time.UTC).Unix(), 10)
	for i := 1; i <= 11; i++ {
		clk.Advance(time.Second)
		w := do(s, http.MethodGet, "/api4/public/topics/list/v1")
		h := w.Header()
		if i <= 10 {
			if w.Code != 200 {
				t.Fatalf("request %d: got %d; want 200", i, w.Code)
			}
			if got, want := h.Get("X-Rate-Limit-Minute-Remaining"), strconv.Itoa(10-i); got != want {
				t.Errorf("request %d: minute remaining %s; want %s", i, got, want)
			}
			if got, want := h.Get("X-Rate-Limit-Day-Remaining"), strconv.Itoa(2000-i); got != want {
				t.Errorf("request %d: day remaining %s; want %s", i, got, want)
			}
			continue
		}
		if w.Code != 429 || strings.TrimSpace(w.Body.String()) != `{"error":"Rate limit exceeded (minute)"}` {
			t.Fatalf("request 11: got %d %q; want 429 minute", w.Code, w.Body)
		}
		if h.Get("X-Rate-Limit-Minute-Remaining") != "0" || h.Get("X-Rate-Limit-Minute-Reset") != nextMinute ||
			h.Get("X-Rate-Limit-Minute") != "10" || h.Get("X-Rate-Limit-Day") != "2000" {
			t.Errorf("request 11 headers: %v; want remaining 0, reset %s", h, nextMinute)
		}
	}
	clk.Set(time.Date(2025, 11, 30, 3, 38, 0, 0, time.UTC))
	if w := do(s, http.MethodGet, "/api4/public/topics/list/v1"); w.Code != 200 || w.Header().Get("X-Rate-Limit-Day-Remaining") != "1989" {
		t.Errorf("next minute: got %d, day remaining %s; want 200, 1989", w.Code, w.Header().Get("X-Rate-Limit-Day-Remaining"))
	}
}

func TestRateLimitDaily(t *testing.T) {
	clk := clock.NewFake(time.Date(2025, 11, 30, 23, 58, 0, 0, time.UTC))
	s, _ := newServer(t, Options{Clock: clk, PerDay: 3})
	for i := 0; i < 3; i++ {
		if w := do(s, http.MethodGet, "/api4/public/topics/list/v1"); w.Code != 200 {
			t.Fatalf("request %d: got %d; want 200", i, w.Code)
		}
	}
	clk.Advance(time.Minute)
	w := do(s, http.MethodGet, "/api4/public/topics/list/v1")
	if w.Code != 429 || !strings.Contains(w.Body.String(), "Rate limit exceeded (daily)") {
		t.Fatalf("4th request: got %d %q; want 429 daily", w.Code, w.Body)
	}
	midnight := strconv.FormatInt(time.Date(2025, 12, 1, 0, 0, 0, 0, time.UTC).Unix(), 10)
	if w.Header().Get("X-Rate-Limit-Day-Remaining") != "0" || w.Header().Get("X-Rate-Limit-Day-Reset") != midnight {
		t.Errorf("got day remaining %q reset %q; want 0 and %s", w.Header().Get("X-Rate-Limit-Day-Remaining"), w.Header().Get("X-Rate-Limit-Day-Reset"), midnight)
	}
	clk.Advance(time.Minute)
	if w := do(s, http.MethodGet, "/api4/public/topics/list/v1"); w.Code != 200 {
		t.Errorf("next day: got %d; want 200", w.Code)
	}
	s.Reset()
	if got := s.Count(); got != 0 {
		t.Errorf("after Reset: Count %d; want 0", got)
	}
}

func TestRecording(t *testing.T) {
	s, clk := newServer(t, Options{Control: true})
	do(s, http.MethodGet, "/api4/public/topic/ai%20agents/time-series/v1?bucket=day&interval=1m", "Authorization", "Bearer x")
	clk.Advance(time.Minute)
	do(s, http.MethodHead, "/api4/public/topics/list/v1")
	do(s, http.MethodGet, "/_demo/count") // control routes are not recorded
	got := s.Requests()
	if len(got) != 2 || s.Count() != 2 {
		t.Fatalf("got %d recorded, Count %d; want 2, 2", len(got), s.Count())
	}
	first := got[0]
	if first.Method != "GET" || first.EscapedPath != "/api4/public/topic/ai%20agents/time-series/v1" ||
		first.RawQuery != "bucket=day&interval=1m" || first.Header.Get("Authorization") != "Bearer x" || !first.At.Equal(testNow) {
		t.Errorf("got %+v; want the first request as sent", first)
	}
	if got[1].Method != "HEAD" || !got[1].At.Equal(testNow.Add(time.Minute)) {
		t.Errorf("got %+v; want the HEAD request a minute later", got[1])
	}
	got[0].Method = "mutated"
	if s.Requests()[0].Method != "GET" {
		t.Errorf("Requests returned shared storage; want a copy")
	}
	s.Reset()
	if len(s.Requests()) != 0 || s.Count() != 0 {
		t.Errorf("after Reset: %d recorded, Count %d; want 0, 0", len(s.Requests()), s.Count())
	}
}

func TestControlRoutes(t *testing.T) {
	s, _ := newServer(t, Options{Control: true})
	rb, err := json.Marshal(controlRoutes)
	if err != nil {
		t.Fatal(err)
	}
	routesJSON := string(rb)
	for _, route := range []string{"/_demo/fault", "/_demo/latency", "/_demo/requests", "/_demo/count", "/_demo/reset"} {
		if !strings.Contains(routesJSON, route) {
			t.Errorf("GET /_demo/ does not list %s", route)
		}
	}
	do(s, http.MethodGet, "/api4/public/topics/list/v1")
	tests := []struct {
		target string
		status int
		body   string
	}{
		{"/_demo/count", 200, `{"count":1}`},
		{"/_demo/fault?mode=flap", 200, `{"fault":"flap"}`},
		{"/_demo/fault", 200, `{"fault":"flap"}`},
		{"/_demo/fault?mode=bogus", 400, `{"error":"demo: unknown fault \"bogus\" (known: none, server-error, rate-limit, garbage, wrong-shape, oversize, hang, flap, reset)"}`},
		{"/_demo/fault?mode=none", 200, `{"fault":"none"}`},
		{"/_demo/latency?d=200ms", 200, `{"latency":"200ms"}`},
		{"/_demo/latency?d=-1s", 400, `{"error":"d must be a non-negative duration such as 200ms"}`},
		{"/_demo/latency?d=0", 200, `{"latency":"0s"}`},
		{"/_demo/nope", 404, `{"error":"unknown control route","routes":` + routesJSON + `}`},
		{"/_demo/", 200, `{"faults":["none","server-error","rate-limit","garbage","wrong-shape","oversize","hang","flap","reset"],"routes":` + routesJSON + `}`},
		{"/_demo/reset", 200, `{"reset":true}`},
		{"/_demo/count", 200, `{"count":0}`},
	}
	for _, tc := range tests {
		t.Run(tc.target, func(t *testing.T) {
			w := do(s, http.MethodGet, tc.target)
			if w.Code != tc.status || strings.TrimSpace(w.Body.String()) != tc.body {
				t.Fatalf("got %d %s; want %d %s", w.Code, w.Body, tc.status, tc.body)
			}
		})
	}
	do(s, http.MethodGet, "/api4/public/topic/bitcoin/whatsup/v1")
	var reqs []Recorded
	decodeStrict(t, do(s, http.MethodGet, "/_demo/requests").Body.Bytes(), &reqs)
	if len(reqs) != 1 || reqs[0].EscapedPath != "/api4/public/topic/bitcoin/whatsup/v1" {
		t.Errorf("got %+v; want the one whatsup request", reqs)
	}
}

func TestLatency(t *testing.T) {
	s, _ := newServer(t, Options{Latency: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := httptest.NewRequest(http.MethodGet, "/api4/public/topics/list/v1", nil).WithContext(ctx)
	w := httptest.NewRecorder()
	s.ServeHTTP(w, r) // returns at once: the context is already done
	if w.Body.Len() != 0 || s.Count() != 1 {
		t.Errorf("cancelled during latency: got %d body bytes, Count %d; want nothing written, counted once", w.Body.Len(), s.Count())
	}
	s.Close() // releases the wait
	if w := do(s, http.MethodGet, "/api4/public/topics/list/v1"); w.Code != 200 {
		t.Errorf("after Close: got %d; want 200", w.Code)
	}
	s.SetLatency(-time.Second)
	if got := time.Duration(s.latency.Load()); got != 0 {
		t.Errorf("SetLatency(-1s): got %v; want 0", got)
	}
}

func TestGeneratedMonotone(t *testing.T) {
	s, clk := newServer(t, Options{})
	var lastGen, lastSeriesGen int64
	var lastSummary string
	changes := 0
	for step := 0; step < 60; step++ {
		clk.Advance(7*time.Minute + 13*time.Second)
		var w whatsupResp
		decodeStrict(t, do(s, http.MethodGet, "/api4/public/topic/bitcoin/whatsup/v1").Body.Bytes(), &w)
		if w.Config.Generated < lastGen {
			t.Fatalf("step %d: whatsup generated went back from %d to %d", step, lastGen, w.Config.Generated)
		}
		if w.Config.Generated == lastGen && w.Summary != lastSummary {
			t.Fatalf("step %d: summary changed without regeneration", step)
		}
		if w.Config.Generated != lastGen {
			changes++
		}
		lastGen, lastSummary = w.Config.Generated, w.Summary
		r := getSeries(t, s, "/api4/public/topic/bitcoin/time-series/v1")
		if r.Config.Generated < lastSeriesGen {
			t.Fatalf("step %d: series generated went back from %d to %d", step, lastSeriesGen, r.Config.Generated)
		}
		lastSeriesGen = r.Config.Generated
	}
	// 60 steps of ~7 minutes span 7 hours: about one regeneration an hour.
	if changes < 6 || changes > 9 {
		t.Errorf("whatsup regenerated %d times in 7 hours; want about hourly", changes)
	}
}

func TestConcurrentRequests(t *testing.T) {
	s, _ := newServer(t, Options{PerMinute: 100})
	const workers, each = 8, 50
	var ok, limited atomic.Int64
	var wg sync.WaitGroup
	targets := []string{
		"/api4/public/topics/list/v1",
		"/api4/public/topic/bitcoin/time-series/v1",
		"/api4/public/topic/%23ai/whatsup/v1",
		"/topic/solana/time-series/interactions.tsv",
	}
	for g := 0; g < workers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				switch do(s, http.MethodGet, targets[(g+i)%len(targets)]).Code {
				case 200:
					ok.Add(1)
				case 429:
					limited.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if ok.Load() != 100 || limited.Load() != workers*each-100 {
		t.Errorf("got %d OK, %d limited; want exactly 100 OK and %d limited", ok.Load(), limited.Load(), workers*each-100)
	}
	if s.Count() != workers*each || len(s.Requests()) != workers*each {
		t.Errorf("got Count %d, %d recorded; want %d", s.Count(), len(s.Requests()), workers*each)
	}
}

// TestServeLoopback: the demo upstream answers on the loopback URL it
// returns until stopped.
func TestServeLoopback(t *testing.T) {
	up, err := New(Options{APIKey: "loopback-test-key"})
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	base, stop, err := up.ServeLoopback()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(base, "http://127.0.0.1:") {
		t.Fatalf("base URL %q; want http://127.0.0.1:PORT", base)
	}
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	req, _ := http.NewRequest(http.MethodGet, base+"/api4/public/topics/list/v1", nil)
	req.Header.Set("Authorization", "Bearer loopback-test-key")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("list: %d; want 200", resp.StatusCode)
	}
	stop()
	if resp, err := c.Do(req); err == nil {
		resp.Body.Close()
		t.Fatal("an answer after stop; want the connection refused")
	}
}
