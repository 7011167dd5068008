package api

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"trendgate/internal/httperr"
)

// testNow is 2025-10-16 22:48:38 UTC: the current hour bucket starts at
// 1760652000 and the current day bucket at 1760572800.
var testNow = time.Unix(1760654918, 0)

// rawRequest builds a request the way net/http's server does: the URL is
// url.ParseRequestURI of the raw request-target, and RequestURI is the
// target itself. Unlike httptest.NewRequest it also accepts targets the
// HTTP/1 reader would refuse (a raw space, as HTTP/2 could deliver it).
func rawRequest(t testing.TB, method, target string) *http.Request {
	t.Helper()
	u, err := url.ParseRequestURI(target)
	if err != nil {
		t.Fatalf("url.ParseRequestURI(%q): %v", target, err)
	}
	return &http.Request{
		Method:     method,
		URL:        u,
		RequestURI: target,
		Proto:      "HTTP/1.1",
		ProtoMajor: 1,
		ProtoMinor: 1,
		Header:     http.Header{},
		Host:       "gateway.example",
	}
}

// parseTarget parses a GET of target at testNow.
func parseTarget(t testing.TB, target string) (Request, error) {
	t.Helper()
	return ParseRequest(rawRequest(t, http.MethodGet, target), testNow)
}

// asHTTPErr checks that err is an *httperr.Error and returns it.
func asHTTPErr(t *testing.T, err error) *httperr.Error {
	t.Helper()
	var he *httperr.Error
	if !errors.As(err, &he) {
		t.Fatalf("error %v (%T) is not an *httperr.Error", err, err)
	}
	return he
}

func TestParseRequestRejects(t *testing.T) {
	const (
		series = "/api4/public/topic/bitcoin/time-series/v1"
		list   = "/api4/public/topics/list/v1"
	)
	long65 := strings.Repeat("a", 65)
	tests := []struct {
		name       string
		method     string // GET when empty
		target     string
		wantStatus int
		wantCode   string
	}{
		// Methods.
		{"POST", http.MethodPost, list, 405, "method_not_allowed"},
		{"PUT", http.MethodPut, series, 405, "method_not_allowed"},
		{"DELETE", http.MethodDelete, series, 405, "method_not_allowed"},
		{"OPTIONS", http.MethodOptions, series, 405, "method_not_allowed"},
		{"PATCH on unknown path", http.MethodPatch, "/nope", 405, "method_not_allowed"},
		{"lower-case get", "get", list, 405, "method_not_allowed"},

		// Route shapes.
		{"trailing slash on list", "", list + "/", 404, "not_found"},
		{"trailing slash on series", "", series + "/", 404, "not_found"},
		{"trailing slash on whatsup", "", "/api4/public/topic/bitcoin/whatsup/v1/", 404, "not_found"},
		{"empty topic segment", "", "/api4/public/topic//whatsup/v1", 404, "not_found"},
		{"double slash in prefix", "", "/api4//public/topics/list/v1", 404, "not_found"},
		{"leading double slash", "", "//api4/public/topics/list/v1", 404, "not_found"},
		{"dot-dot topic", "", "/api4/public/topic/../whatsup/v1", 404, "not_found"},
		{"dot topic", "", "/api4/public/topic/./time-series/v1", 404, "not_found"},
		{"dot-dot after topic", "", "/api4/public/topic/bitcoin/../bitcoin/whatsup/v1", 404, "not_found"},
		{"upper-case route", "", "/API4/public/topics/list/v1", 404, "not_found"},
		{"missing version", "", "/api4/public/topic/bitcoin", 404, "not_found"},
		{"other version", "", "/api4/public/topic/bitcoin/time-series/v2", 404, "not_found"},
		{"root", "", "/", 404, "not_found"},
		{"encoded slash in route", "", "/api4/public%2Ftopics/list/v1", 404, "not_found"},
		{"tsv without suffix", "", "/topic/bitcoin/time-series/interactions", 404, "not_found"},
		{"tsv upper-case suffix", "", "/topic/bitcoin/time-series/interactions.TSV", 404, "not_found"},
		{"tsv trailing slash", "", "/topic/bitcoin/time-series/interactions.tsv/", 404, "not_found"},
		{"tsv extra segment", "", "/topic/bitcoin/time-series/x/interactions.tsv", 404, "not_found"},
		{"tsv empty topic", "", "/topic//time-series/interactions.tsv", 404, "not_found"},

		// Raw request-target.
		{"raw # in target", "", "/api4/public/topic/#ai/whatsup/v1", 400, "invalid_path"},
		{"raw space in target", "", "/api4/public/topic/ai agents/whatsup/v1", 400, "invalid_path"},

		// Topics.
		{"encoded slash", "", "/api4/public/topic/a%2Fb/whatsup/v1", 400, "invalid_topic"},
		{"encoded slash lower-case", "", "/api4/public/topic/a%2fb/time-series/v1", 400, "invalid_topic"},
		{"encoded plus", "", "/api4/public/topic/c%2B%2B/whatsup/v1", 400, "invalid_topic"},
		{"encoded percent", "", "/api4/public/topic/100%25/whatsup/v1", 400, "invalid_topic"},
		{"double-encoded hash", "", "/api4/public/topic/%2523ai/whatsup/v1", 400, "invalid_topic"},
		{"encoded NUL", "", "/api4/public/topic/a%00b/whatsup/v1", 400, "invalid_topic"},
		{"encoded newline", "", "/api4/public/topic/a%0Ab/whatsup/v1", 400, "invalid_topic"},
		{"encoded dot-dot", "", "/api4/public/topic/%2e%2e/whatsup/v1", 400, "invalid_topic"},
		{"raw non-ASCII", "", "/api4/public/topic/caf\u00e9/whatsup/v1", 400, "invalid_topic"},
		{"encoded non-ASCII", "", "/api4/public/topic/caf%C3%A9/whatsup/v1", 400, "invalid_topic"},
		{"double space encoded", "", "/api4/public/topic/ai%20%20agents/whatsup/v1", 400, "invalid_topic"},
		{"double space plus", "", "/api4/public/topic/ai++agents/whatsup/v1", 400, "invalid_topic"},
		{"leading space", "", "/api4/public/topic/+ai/whatsup/v1", 400, "invalid_topic"},
		{"trailing space", "", "/api4/public/topic/ai%20/whatsup/v1", 400, "invalid_topic"},
		{"only a space", "", "/api4/public/topic/+/whatsup/v1", 400, "invalid_topic"},
		{"65-byte topic", "", "/api4/public/topic/" + long65 + "/whatsup/v1", 400, "invalid_topic"},
		{"hyphen", "", "/api4/public/topic/ai-agents/whatsup/v1", 400, "invalid_topic"},
		{"dot inside", "", "/api4/public/topic/a.b/whatsup/v1", 400, "invalid_topic"},
		{"quote", "", "/api4/public/topic/a%22b/whatsup/v1", 400, "invalid_topic"},
		{"pipe would break the key", "", "/api4/public/topic/a%7Cb/whatsup/v1", 400, "invalid_topic"},
		{"bad topic on tsv", "", "/topic/a%2Fb/time-series/interactions.tsv", 400, "invalid_topic"},

		// TSV metrics.
		{"unknown metric", "", "/topic/bitcoin/time-series/market_cap.tsv", 400, "invalid_metric"},
		{"empty metric", "", "/topic/bitcoin/time-series/.tsv", 400, "invalid_metric"},
		{"encoded metric", "", "/topic/bitcoin/time-series/%69nteractions.tsv", 400, "invalid_metric"},

		// Query shape.
		{"semicolon", "", series + "?bucket=hour;interval=1w", 400, "invalid_query"},
		{"bad query escape", "", series + "?bucket=%zz", 400, "invalid_query"},
		{"unknown on series", "", series + "?foo=1", 400, "unknown_parameter"},
		{"empty name on series", "", series + "?=1", 400, "unknown_parameter"},
		{"upper-case known name", "", series + "?Bucket=hour", 400, "unknown_parameter"},
		{"any param on list", "", list + "?bucket=hour", 400, "unknown_parameter"},
		{"any param on whatsup", "", "/api4/public/topic/bitcoin/whatsup/v1?lang=en", 400, "unknown_parameter"},
		{"any param on tsv", "", "/topic/bitcoin/time-series/interactions.tsv?bucket=day", 400, "unknown_parameter"},
		{"duplicate bucket", "", series + "?bucket=hour&bucket=hour", 400, "duplicate_parameter"},
		{"duplicate start", "", series + "?start=1759968000&start=1759968000", 400, "duplicate_parameter"},
		{"key", "", series + "?key=tg_secret", 400, "key_in_query"},
		{"api_key", "", list + "?api_key=tg_secret", 400, "key_in_query"},
		{"apikey", "", "/topic/bitcoin/time-series/sentiment.tsv?apikey=x", 400, "key_in_query"},
		{"token", "", "/api4/public/topic/bitcoin/whatsup/v1?token=x", 400, "key_in_query"},
		{"access_token", "", series + "?access_token=x", 400, "key_in_query"},
		{"KEY upper-case", "", series + "?KEY=x", 400, "key_in_query"},
		{"key wins over unknown", "", series + "?aaa=1&key=x&zzz=2", 400, "key_in_query"},

		// Series values.
		{"bucket week", "", series + "?bucket=week", 400, "invalid_bucket"},
		{"bucket upper-case", "", series + "?bucket=HOUR", 400, "invalid_bucket"},
		{"bucket empty", "", series + "?bucket=", 400, "invalid_bucket"},
		{"interval 2w", "", series + "?interval=2w", 400, "invalid_interval"},
		{"interval empty", "", series + "?interval", 400, "invalid_interval"},
		{"bad interval beside start", "", series + "?interval=2w&start=1759968000", 400, "invalid_interval"},
		{"start leading zero", "", series + "?start=01759968000", 400, "invalid_start"},
		{"start zero", "", series + "?start=0&end=1759968000", 400, "invalid_start"},
		{"start plus sign", "", series + "?start=%2B1759968000", 400, "invalid_start"},
		{"start raw plus is a space", "", series + "?start=+1759968000", 400, "invalid_start"},
		{"start minus sign", "", series + "?start=-1759968000", 400, "invalid_start"},
		{"start exponent", "", series + "?start=1e9", 400, "invalid_start"},
		{"start decimal", "", series + "?start=1.5", 400, "invalid_start"},
		{"start 11 digits", "", series + "?start=17599680000", 400, "invalid_start"},
		{"start empty", "", series + "?start=", 400, "invalid_start"},
		{"end letters", "", series + "?end=soon", 400, "invalid_end"},
		{"end leading zero", "", series + "?end=0001760652000", 400, "invalid_end"},
		{"end decimal", "", series + "?end=1760652000.0", 400, "invalid_end"},
		{"start equals end", "", series + "?start=1759968000&end=1759968000", 400, "invalid_window"},
		{"start after end", "", series + "?start=1760652000&end=1759968000", 400, "invalid_window"},
		{"only end too early", "", series + "?end=600000", 400, "invalid_end"},
	}
	if len(tests) < 30 {
		t.Fatalf("only %d bad inputs; want at least 30", len(tests))
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			method := tc.method
			if method == "" {
				method = http.MethodGet
			}
			q, err := ParseRequest(rawRequest(t, method, tc.target), testNow)
			if err == nil {
				t.Fatalf("ParseRequest(%s %q) = %+v, nil; want %d %s", method, tc.target, q, tc.wantStatus, tc.wantCode)
			}
			he := asHTTPErr(t, err)
			if he.Status != tc.wantStatus || he.Code != tc.wantCode {
				t.Errorf("got %d %s (%s); want %d %s", he.Status, he.Code, he.Message, tc.wantStatus, tc.wantCode)
			}
			if he.Message == "" {
				t.Errorf("got an empty message; want one that says what is accepted")
			}
			if q != (Request{}) {
				t.Errorf("got request %+v with the error; want the zero Request", q)
			}
			if got, want := errors.Is(err, ErrNotFound), tc.wantStatus == http.StatusNotFound; got != want {
				t.Errorf("errors.Is(err, ErrNotFound) = %v; want %v", got, want)
			}
		})
	}
}

func TestParseRequestRejectsBodies(t *testing.T) {
	const target = "/api4/public/topic/bitcoin/time-series/v1"
	tests := []struct {
		name  string
		build func() *http.Request
	}{
		{"GET with a body", func() *http.Request {
			return httptest.NewRequest(http.MethodGet, target, strings.NewReader("{}"))
		}},
		{"HEAD with a body", func() *http.Request {
			return httptest.NewRequest(http.MethodHead, target, strings.NewReader("x"))
		}},
		{"chunked GET", func() *http.Request {
			r := httptest.NewRequest(http.MethodGet, target, nil)
			r.TransferEncoding = []string{"chunked"}
			r.ContentLength = -1
			return r
		}},
		{"body of unknown length", func() *http.Request {
			r := httptest.NewRequest(http.MethodGet, target, nil)
			r.ContentLength = -1
			return r
		}},
		{"transfer-encoding with zero length", func() *http.Request {
			r := httptest.NewRequest(http.MethodGet, target, nil)
			r.TransferEncoding = []string{"chunked"}
			return r
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseRequest(tc.build(), testNow)
			if err == nil {
				t.Fatal("got nil error; want 400 body_not_allowed")
			}
			he := asHTTPErr(t, err)
			if he.Status != http.StatusBadRequest || he.Code != "body_not_allowed" {
				t.Errorf("got %d %s; want 400 body_not_allowed", he.Status, he.Code)
			}
		})
	}
}

// goodCases are accepted requests with everything derived from them. The
// round-trip and distinctness tests reuse them.
var goodCases = []struct {
	name      string
	method    string // GET when empty
	target    string
	want      Request
	wantKey   string
	wantPath  string
	wantQuery string
}{
	{
		name:     "list",
		target:   "/api4/public/topics/list/v1",
		want:     Request{Endpoint: EndpointList},
		wantKey:  "v2|list",
		wantPath: "/api4/public/topics/list/v1",
	},
	{
		name:     "list HEAD",
		method:   http.MethodHead,
		target:   "/api4/public/topics/list/v1",
		want:     Request{Endpoint: EndpointList},
		wantKey:  "v2|list",
		wantPath: "/api4/public/topics/list/v1",
	},
	{
		name:     "whatsup ai agents as %20",
		target:   "/api4/public/topic/ai%20agents/whatsup/v1",
		want:     Request{Endpoint: EndpointWhatsup, Topic: "ai agents"},
		wantKey:  "v2|whatsup|ai agents",
		wantPath: "/api4/public/topic/ai%20agents/whatsup/v1",
	},
	{
		name:     "whatsup ai agents as +",
		target:   "/api4/public/topic/ai+agents/whatsup/v1",
		want:     Request{Endpoint: EndpointWhatsup, Topic: "ai agents"},
		wantKey:  "v2|whatsup|ai agents",
		wantPath: "/api4/public/topic/ai%20agents/whatsup/v1",
	},
	{
		name:     "whatsup $capitalism raw",
		target:   "/api4/public/topic/$capitalism/whatsup/v1",
		want:     Request{Endpoint: EndpointWhatsup, Topic: "$capitalism"},
		wantKey:  "v2|whatsup|$capitalism",
		wantPath: "/api4/public/topic/%24capitalism/whatsup/v1",
	},
	{
		name:      "series defaults",
		target:    "/api4/public/topic/bitcoin/time-series/v1",
		want:      Request{Endpoint: EndpointSeries, Topic: "bitcoin", Bucket: "hour", Interval: "1w"},
		wantKey:   "v2|series|bitcoin|hour|1w||",
		wantPath:  "/api4/public/topic/bitcoin/time-series/v1",
		wantQuery: "bucket=hour&interval=1w",
	},
	{
		name:      "series BitCoin folds",
		target:    "/api4/public/topic/BitCoin/time-series/v1?interval=1m&bucket=days",
		want:      Request{Endpoint: EndpointSeries, Topic: "bitcoin", Bucket: "day", Interval: "1m"},
		wantKey:   "v2|series|bitcoin|day|1m||",
		wantPath:  "/api4/public/topic/bitcoin/time-series/v1",
		wantQuery: "bucket=day&interval=1m",
	},
	{
		name:      "series #ai as %23 with a window",
		target:    "/api4/public/topic/%23ai/time-series/v1?start=1759968000&end=1760652000",
		want:      Request{Endpoint: EndpointSeries, Topic: "#ai", Bucket: "hour", Start: 1759968000, End: 1760652000},
		wantKey:   "v2|series|#ai|hour||1759968000|1760652000",
		wantPath:  "/api4/public/topic/%23ai/time-series/v1",
		wantQuery: "bucket=hour&start=1759968000&end=1760652000",
	},
	{
		name:      "series daily end inside a day keeps its day",
		target:    "/api4/public/topic/$capitalism/time-series/v1?bucket=day&start=1759968000&end=1760652000",
		want:      Request{Endpoint: EndpointSeries, Topic: "$capitalism", Bucket: "day", Start: 1759968000, End: 1760659199},
		wantKey:   "v2|series|$capitalism|day||1759968000|1760659199",
		wantPath:  "/api4/public/topic/%24capitalism/time-series/v1",
		wantQuery: "bucket=day&start=1759968000&end=1760659199",
	},
	{
		name:      "series unaligned bounds keep their buckets",
		target:    "/api4/public/topic/bitcoin/time-series/v1?start=1759964460&end=1760654918",
		want:      Request{Endpoint: EndpointSeries, Topic: "bitcoin", Bucket: "hour", Start: 1759964401, End: 1760655599},
		wantKey:   "v2|series|bitcoin|hour||1759964401|1760655599",
		wantPath:  "/api4/public/topic/bitcoin/time-series/v1",
		wantQuery: "bucket=hour&start=1759964401&end=1760655599",
	},
	{
		name:      "series interval beside start is dropped",
		target:    "/api4/public/topic/bitcoin/time-series/v1?interval=3m&start=1759968000&end=1760652000",
		want:      Request{Endpoint: EndpointSeries, Topic: "bitcoin", Bucket: "hour", Start: 1759968000, End: 1760652000},
		wantKey:   "v2|series|bitcoin|hour||1759968000|1760652000",
		wantPath:  "/api4/public/topic/bitcoin/time-series/v1",
		wantQuery: "bucket=hour&start=1759968000&end=1760652000",
	},
	{
		name:      "series only start runs to the upstream's now",
		target:    "/api4/public/topic/bitcoin/time-series/v1?start=1760600000",
		want:      Request{Endpoint: EndpointSeries, Topic: "bitcoin", Bucket: "hour", Start: 1760598001, clientStart: 1760600000},
		wantKey:   "v2|series|bitcoin|hour||1760598001|",
		wantPath:  "/api4/public/topic/bitcoin/time-series/v1",
		wantQuery: "bucket=hour&start=1760598001",
	},
	{
		name:      "series only end starts a week earlier",
		target:    "/api4/public/topic/bitcoin/time-series/v1?end=1760641234",
		want:      Request{Endpoint: EndpointSeries, Topic: "bitcoin", Bucket: "hour", Start: 1760036401, End: 1760644799},
		wantKey:   "v2|series|bitcoin|hour||1760036401|1760644799",
		wantPath:  "/api4/public/topic/bitcoin/time-series/v1",
		wantQuery: "bucket=hour&start=1760036401&end=1760644799",
	},
	{
		name:      "series start and end inside the current hour",
		target:    "/api4/public/topic/bitcoin/time-series/v1?start=1760652100&end=1760654918",
		want:      Request{Endpoint: EndpointSeries, Topic: "bitcoin", Bucket: "hour", Start: 1760652001, End: 1760655599},
		wantKey:   "v2|series|bitcoin|hour||1760652001|1760655599",
		wantPath:  "/api4/public/topic/bitcoin/time-series/v1",
		wantQuery: "bucket=hour&start=1760652001&end=1760655599",
	},
	{
		name:      "series only start near now is kept to the second",
		target:    "/api4/public/topic/bitcoin/time-series/v1?start=1760654500",
		want:      Request{Endpoint: EndpointSeries, Topic: "bitcoin", Bucket: "hour", Start: 1760654500},
		wantKey:   "v2|series|bitcoin|hour||1760654500|",
		wantPath:  "/api4/public/topic/bitcoin/time-series/v1",
		wantQuery: "bucket=hour&start=1760654500",
	},
	{
		name:      "series end at the current hour's end (a client that rounds up)",
		target:    "/api4/public/topic/bitcoin/time-series/v1?start=1760050800&end=1760655600",
		want:      Request{Endpoint: EndpointSeries, Topic: "bitcoin", Bucket: "hour", Start: 1760050800, End: 1760655600},
		wantKey:   "v2|series|bitcoin|hour||1760050800|1760655600",
		wantPath:  "/api4/public/topic/bitcoin/time-series/v1",
		wantQuery: "bucket=hour&start=1760050800&end=1760655600",
	},
	{
		name:      "series end days ahead is forwarded",
		target:    "/api4/public/topic/bitcoin/time-series/v1?bucket=day&start=1760000000&end=1761000000",
		want:      Request{Endpoint: EndpointSeries, Topic: "bitcoin", Bucket: "day", Start: 1759968001, End: 1761004799},
		wantKey:   "v2|series|bitcoin|day||1759968001|1761004799",
		wantPath:  "/api4/public/topic/bitcoin/time-series/v1",
		wantQuery: "bucket=day&start=1759968001&end=1761004799",
	},
	{
		name:      "series escaped query values",
		target:    "/api4/public/topic/1inch/time-series/v1?bucket=%68our&interval=all",
		want:      Request{Endpoint: EndpointSeries, Topic: "1inch", Bucket: "hour", Interval: "all"},
		wantKey:   "v2|series|1inch|hour|all||",
		wantPath:  "/api4/public/topic/1inch/time-series/v1",
		wantQuery: "bucket=hour&interval=all",
	},
	{
		name:     "tsv ai agents",
		target:   "/topic/ai+agents/time-series/sentiment.tsv",
		want:     Request{Endpoint: EndpointTSV, Topic: "ai agents", Metric: "sentiment"},
		wantKey:  "v2|tsv|ai agents|sentiment",
		wantPath: "/topic/ai%20agents/time-series/sentiment.tsv",
	},
	{
		name:     "tsv bitcoin",
		target:   "/topic/bitcoin/time-series/interactions.tsv",
		want:     Request{Endpoint: EndpointTSV, Topic: "bitcoin", Metric: "interactions"},
		wantKey:  "v2|tsv|bitcoin|interactions",
		wantPath: "/topic/bitcoin/time-series/interactions.tsv",
	},
	{
		name:     "tsv #1 contributors",
		target:   "/topic/%231/time-series/contributors_active.tsv",
		want:     Request{Endpoint: EndpointTSV, Topic: "#1", Metric: "contributors_active"},
		wantKey:  "v2|tsv|#1|contributors_active",
		wantPath: "/topic/%231/time-series/contributors_active.tsv",
	},
	{
		name:     "64-byte topic",
		target:   "/api4/public/topic/" + strings.Repeat("a", 64) + "/whatsup/v1",
		want:     Request{Endpoint: EndpointWhatsup, Topic: strings.Repeat("a", 64)},
		wantKey:  "v2|whatsup|" + strings.Repeat("a", 64),
		wantPath: "/api4/public/topic/" + strings.Repeat("a", 64) + "/whatsup/v1",
	},
	{
		name:     "64-byte topic with escapes",
		target:   "/api4/public/topic/%23" + strings.Repeat("b", 62) + "%24/whatsup/v1",
		want:     Request{Endpoint: EndpointWhatsup, Topic: "#" + strings.Repeat("b", 62) + "$"},
		wantKey:  "v2|whatsup|#" + strings.Repeat("b", 62) + "$",
		wantPath: "/api4/public/topic/%23" + strings.Repeat("b", 62) + "%24/whatsup/v1",
	},
}

func TestParseRequestAccepts(t *testing.T) {
	for _, tc := range goodCases {
		t.Run(tc.name, func(t *testing.T) {
			method := tc.method
			if method == "" {
				method = http.MethodGet
			}
			q, err := ParseRequest(rawRequest(t, method, tc.target), testNow)
			if err != nil {
				t.Fatalf("ParseRequest(%q): %v; want success", tc.target, err)
			}
			if q != tc.want {
				t.Errorf("got %+v; want %+v", q, tc.want)
			}
			if got := q.Key(); got != tc.wantKey {
				t.Errorf("Key() = %q; want %q", got, tc.wantKey)
			}
			if got := q.UpstreamPath(); got != tc.wantPath {
				t.Errorf("UpstreamPath() = %q; want %q", got, tc.wantPath)
			}
			if got := q.UpstreamQuery(); got != tc.wantQuery {
				t.Errorf("UpstreamQuery() = %q; want %q", got, tc.wantQuery)
			}
		})
	}
}

// TestHTTPTestRequests checks that requests built by httptest.NewRequest,
// which keeps RawPath for %2F, parse like server requests.
func TestHTTPTestRequests(t *testing.T) {
	tests := []struct {
		target   string
		wantKey  string
		wantCode string
	}{
		{"/api4/public/topic/%23ai/whatsup/v1", "v2|whatsup|#ai", ""},
		{"/api4/public/topic/ai%20agents/time-series/v1?bucket=day", "v2|series|ai agents|day|1w||", ""},
		{"/api4/public/topic/a%2Fb/whatsup/v1", "", "invalid_topic"},
		{"/api4/public/topic/#ai/whatsup/v1", "", "invalid_path"},
	}
	for _, tc := range tests {
		t.Run(tc.target, func(t *testing.T) {
			q, err := ParseRequest(httptest.NewRequest(http.MethodGet, tc.target, nil), testNow)
			if tc.wantCode != "" {
				if err == nil {
					t.Fatalf("got %+v; want %s", q, tc.wantCode)
				}
				if he := asHTTPErr(t, err); he.Code != tc.wantCode {
					t.Errorf("got code %s; want %s", he.Code, tc.wantCode)
				}
				return
			}
			if err != nil {
				t.Fatalf("got %v; want key %q", err, tc.wantKey)
			}
			if got := q.Key(); got != tc.wantKey {
				t.Errorf("Key() = %q; want %q", got, tc.wantKey)
			}
		})
	}
}

func TestEquivalentRequestsShareAKey(t *testing.T) {
	groups := []struct {
		name    string
		targets []string
	}{
		{"series defaults", []string{
			"/api4/public/topic/bitcoin/time-series/v1",
			"/api4/public/topic/bitcoin/time-series/v1?bucket=hour",
			"/api4/public/topic/bitcoin/time-series/v1?interval=1w",
			"/api4/public/topic/bitcoin/time-series/v1?bucket=hours&interval=1w",
			"/api4/public/topic/bitcoin/time-series/v1?interval=1w&bucket=hour",
			"/api4/public/topic/BitCoin/time-series/v1",
			"/api4/public/topic/%62itcoin/time-series/v1?bucket=%68ours",
			"/api4/public/topic/BITCOIN/time-series/v1?interval=1w",
		}},
		{"space spellings", []string{
			"/api4/public/topic/ai%20agents/whatsup/v1",
			"/api4/public/topic/ai+agents/whatsup/v1",
			"/api4/public/topic/AI+Agents/whatsup/v1",
			"/api4/public/topic/ai%20Agents/whatsup/v1",
		}},
		{"dollar spellings", []string{
			"/api4/public/topic/$capitalism/time-series/v1?bucket=day",
			"/api4/public/topic/%24capitalism/time-series/v1?bucket=days",
			"/api4/public/topic/%24Capitalism/time-series/v1?bucket=day&interval=1w",
		}},
		{"hash spellings", []string{
			"/topic/%23ai/time-series/posts_active.tsv",
			"/topic/%23AI/time-series/posts_active.tsv",
		}},
		{"absolute windows", []string{
			"/api4/public/topic/%23ai/time-series/v1?start=1759968000&end=1760652000",
			"/api4/public/topic/%23ai/time-series/v1?end=1760652000&start=1759968000",
			"/api4/public/topic/%23ai/time-series/v1?start=1759968000&interval=1m&end=1760652000",
			"/api4/public/topic/%23ai/time-series/v1?bucket=hours&start=1759968000&end=1760652000&interval=all",
		}},
		{"bounds inside one bucket", []string{
			"/api4/public/topic/%23ai/time-series/v1?start=1759964401&end=1760652001",
			"/api4/public/topic/%23ai/time-series/v1?start=1759967999&end=1760654918",
			"/api4/public/topic/%23ai/time-series/v1?start=1759965000&end=1760655599",
		}},
		{"only end and its week", []string{
			"/api4/public/topic/bitcoin/time-series/v1?end=1760641234",
			"/api4/public/topic/bitcoin/time-series/v1?end=1760644799",
			"/api4/public/topic/bitcoin/time-series/v1?start=1760036434&end=1760641234",
			"/api4/public/topic/bitcoin/time-series/v1?start=1760039999&end=1760641201",
		}},
		{"daily windows", []string{
			"/api4/public/topic/bitcoin/time-series/v1?bucket=day&start=1759968000&end=1760572801",
			"/api4/public/topic/bitcoin/time-series/v1?bucket=days&start=1759968000&end=1760659199",
		}},
	}
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			first, err := parseTarget(t, g.targets[0])
			if err != nil {
				t.Fatalf("ParseRequest(%q): %v", g.targets[0], err)
			}
			for _, target := range g.targets[1:] {
				q, err := parseTarget(t, target)
				if err != nil {
					t.Errorf("ParseRequest(%q): %v; want success", target, err)
					continue
				}
				if q != first {
					t.Errorf("ParseRequest(%q) = %+v; want %+v (as for %q)", target, q, first, g.targets[0])
				}
				if q.Key() != first.Key() {
					t.Errorf("Key of %q = %q; want %q", target, q.Key(), first.Key())
				}
			}
		})
	}
}

func TestDistinctRequestsHaveDistinctKeys(t *testing.T) {
	targets := []string{
		"/api4/public/topics/list/v1",
		"/api4/public/topic/bitcoin/whatsup/v1",
		"/api4/public/topic/bitcoin/time-series/v1",
		"/api4/public/topic/bitcoin/time-series/v1?bucket=day",
		"/api4/public/topic/bitcoin/time-series/v1?interval=1m",
		"/api4/public/topic/bitcoin/time-series/v1?interval=all",
		"/api4/public/topic/bitcoin/time-series/v1?start=1759968000&end=1760652000",
		"/api4/public/topic/bitcoin/time-series/v1?start=1759971600&end=1760652000",
		"/api4/public/topic/bitcoin/time-series/v1?start=1759968000&end=1760648400",
		"/api4/public/topic/bitcoin/time-series/v1?start=1759968000&end=1760572800",
		"/api4/public/topic/bitcoin/time-series/v1?bucket=day&start=1759968000&end=1760572800",
		"/api4/public/topic/bitcoin/time-series/v1?start=1760652000",
		"/topic/bitcoin/time-series/interactions.tsv",
		"/topic/bitcoin/time-series/posts_active.tsv",
		"/topic/bitcoin/time-series/contributors_active.tsv",
		"/topic/bitcoin/time-series/sentiment.tsv",
		"/api4/public/topic/ai/whatsup/v1",
		"/api4/public/topic/%23ai/whatsup/v1",
		"/api4/public/topic/$ai/whatsup/v1",
		"/api4/public/topic/ai+agents/whatsup/v1",
		"/api4/public/topic/aiagents/whatsup/v1",
		"/api4/public/topic/ai/time-series/v1",
		"/topic/ai/time-series/sentiment.tsv",
		"/api4/public/topic/list/whatsup/v1",
		"/api4/public/topic/whatsup/whatsup/v1",
	}
	seenKey := map[string]string{}
	seenUpstream := map[string]string{}
	for _, target := range targets {
		q, err := parseTarget(t, target)
		if err != nil {
			t.Fatalf("ParseRequest(%q): %v", target, err)
		}
		if other, ok := seenKey[q.Key()]; ok {
			t.Errorf("%q and %q share the key %q; want distinct keys", target, other, q.Key())
		}
		seenKey[q.Key()] = target
		up := q.UpstreamPath() + "?" + q.UpstreamQuery()
		if other, ok := seenUpstream[up]; ok {
			t.Errorf("%q and %q share the upstream target %q; want distinct targets", target, other, up)
		}
		seenUpstream[up] = target
	}
}

// TestUpstreamTargetRoundTrips checks that the upstream target, parsed as a
// client request, gives back the same Request (less the client's own start
// of a start-only window, see ClientStart): the topic is re-encoded
// exactly once and the forwarded window selects the same buckets.
func TestUpstreamTargetRoundTrips(t *testing.T) {
	for _, tc := range goodCases {
		t.Run(tc.name, func(t *testing.T) {
			q, err := parseTarget(t, tc.target)
			if err != nil {
				t.Fatalf("ParseRequest(%q): %v", tc.target, err)
			}
			up := q.UpstreamPath()
			if uq := q.UpstreamQuery(); uq != "" {
				up += "?" + uq
			}
			again, err := parseTarget(t, up)
			if err != nil {
				t.Fatalf("ParseRequest(upstream %q): %v; want success", up, err)
			}
			q.clientStart = 0 // not sent upstream
			if again != q {
				t.Errorf("upstream %q parses to %+v; want %+v", up, again, q)
			}
		})
	}
}

func TestWindowEnd(t *testing.T) {
	tests := []struct {
		target string
		want   time.Time
	}{
		{"/api4/public/topics/list/v1", time.Time{}},
		{"/api4/public/topic/bitcoin/whatsup/v1", time.Time{}},
		{"/topic/bitcoin/time-series/interactions.tsv", time.Time{}},
		{"/api4/public/topic/bitcoin/time-series/v1?interval=1y", time.Time{}},
		{"/api4/public/topic/bitcoin/time-series/v1?start=1759968000&end=1760000000", time.Unix(1759996800+3600, 0)},
		{"/api4/public/topic/bitcoin/time-series/v1?start=1759968000&end=1759996800", time.Unix(1759996800+3600, 0)},
		{"/api4/public/topic/bitcoin/time-series/v1?bucket=day&start=1759968000&end=1760000000", time.Unix(1759968000+86400, 0)},
		{"/api4/public/topic/bitcoin/time-series/v1?start=1760000000", time.Time{}},
	}
	for _, tc := range tests {
		t.Run(tc.target, func(t *testing.T) {
			q, err := parseTarget(t, tc.target)
			if err != nil {
				t.Fatalf("ParseRequest: %v", err)
			}
			if got := q.WindowEnd(); !got.Equal(tc.want) {
				t.Errorf("WindowEnd() = %v; want %v", got, tc.want)
			}
		})
	}
}

// TestClientStart: a start-only window keeps the client's second beside
// its canonical start; every other window's ClientStart is its Start.
func TestClientStart(t *testing.T) {
	tests := []struct {
		target     string
		start, got int64
	}{
		{"/api4/public/topic/bitcoin/time-series/v1?start=1760600000", 1760598001, 1760600000}, // canonical
		{"/api4/public/topic/bitcoin/time-series/v1?start=1760601600", 1760601600, 1760601600}, // a boundary
		{"/api4/public/topic/bitcoin/time-series/v1?start=1760654500", 1760654500, 1760654500}, // near now
		{"/api4/public/topic/bitcoin/time-series/v1?start=1760600000&end=1760640000", 1760598001, 1760598001},
		{"/api4/public/topic/bitcoin/time-series/v1?interval=1d", 0, 0},
	}
	for _, tc := range tests {
		q, err := parseTarget(t, tc.target)
		if err != nil {
			t.Fatalf("%s: %v", tc.target, err)
		}
		if q.Start != tc.start || q.ClientStart() != tc.got {
			t.Errorf("%s: Start %d, ClientStart %d; want %d, %d", tc.target, q.Start, q.ClientStart(), tc.start, tc.got)
		}
		if k, err := ParseKey(q.Key(), testNow); err != nil || k.Key() != q.Key() {
			t.Errorf("%s: the key %q does not parse back to itself (%v)", tc.target, q.Key(), err)
		}
	}
}

func TestEncodeTopic(t *testing.T) {
	tests := []struct{ in, want string }{
		{"bitcoin", "bitcoin"},
		{"1inch", "1inch"},
		{"#ai", "%23ai"},
		{"ai agents", "ai%20agents"},
		{"$capitalism", "%24capitalism"},
		{"# $", "%23%20%24"},
		{"", ""},
		// Not canonical topics; still encoded safely and injectively.
		{"a/b", "a%2Fb"},
		{"A+%", "%41%2B%25"},
		{"caf\u00e9", "caf%C3%A9"},
	}
	for _, tc := range tests {
		if got := EncodeTopic(tc.in); got != tc.want {
			t.Errorf("EncodeTopic(%q) = %q; want %q", tc.in, got, tc.want)
		}
	}
}

func TestZeroRequest(t *testing.T) {
	var q Request
	if got := q.Key(); got != "" {
		t.Errorf("Key() = %q; want \"\"", got)
	}
	if got := q.UpstreamPath(); got != "" {
		t.Errorf("UpstreamPath() = %q; want \"\"", got)
	}
	if got := q.UpstreamQuery(); got != "" {
		t.Errorf("UpstreamQuery() = %q; want \"\"", got)
	}
	if got := q.WindowEnd(); !got.IsZero() {
		t.Errorf("WindowEnd() = %v; want the zero time", got)
	}
}

// TestErrorsNeverEchoKeys checks that nothing a client put in the query
// comes back in an error message: not a key value, and not a key used as a
// parameter name.
func TestErrorsNeverEchoKeys(t *testing.T) {
	const secret = "tg_7XkQ2mN9pR4sT6vW8yZ1aB3cD5eF7gH9jK2LmN4pQ6r"
	tests := []struct {
		target   string
		wantCode string
	}{
		{"/api4/public/topic/bitcoin/time-series/v1?key=" + secret, "key_in_query"},
		{"/api4/public/topics/list/v1?api_key=" + secret, "key_in_query"},
		{"/api4/public/topic/bitcoin/time-series/v1?" + secret, "unknown_parameter"},
		{"/api4/public/topic/bitcoin/time-series/v1?" + secret + "=1", "unknown_parameter"},
		{"/api4/public/topic/bitcoin/time-series/v1?x=" + secret, "unknown_parameter"},
		{"/api4/public/topic/bitcoin/time-series/v1?bucket=" + secret, "invalid_bucket"},
		{"/api4/public/topic/bitcoin/time-series/v1?start=" + secret, "invalid_start"},
		{"/api4/public/topic/bitcoin/time-series/v1?bucket=hour&bucket=" + secret, "duplicate_parameter"},
		{"/api4/public/topic/" + secret + "/whatsup/v1", "invalid_topic"},
		{"/api4/public/topic/bitcoin/whatsup/v1?" + secret, "unknown_parameter"},
	}
	for _, tc := range tests {
		t.Run(tc.wantCode, func(t *testing.T) {
			_, err := parseTarget(t, tc.target)
			if err == nil {
				t.Fatalf("ParseRequest(%q) succeeded; want %s", tc.target, tc.wantCode)
			}
			he := asHTTPErr(t, err)
			if he.Code != tc.wantCode {
				t.Errorf("got code %s; want %s", he.Code, tc.wantCode)
			}
			if strings.Contains(he.Message, secret[3:12]) || strings.Contains(he.Error(), secret[3:12]) {
				t.Errorf("message %q echoes the key; want it withheld", he.Message)
			}
		})
	}
}

func TestUnknownParameterMessage(t *testing.T) {
	_, err := parseTarget(t, "/api4/public/topic/bitcoin/time-series/v1?zzz=1&limit=5")
	he := asHTTPErr(t, err)
	for _, want := range []string{`"limit"`, "bucket", "interval", "start", "end"} {
		if !strings.Contains(he.Message, want) {
			t.Errorf("message %q does not mention %s; want the first unknown name and the accepted ones", he.Message, want)
		}
	}
}

// TestDecodeTopicEscapes covers escapes that EscapedPath never produces
// (it re-escapes an invalid RawPath) but that decodeTopic must still refuse.
func TestDecodeTopicEscapes(t *testing.T) {
	for _, seg := range []string{"%", "a%", "a%2", "%zz", "%g0", "a%2x"} {
		if got, err := decodeTopic(seg); err == nil || err.Code != "invalid_topic" {
			t.Errorf("decodeTopic(%q) = %q, %v; want invalid_topic", seg, got, err)
		}
	}
}

// BenchmarkParseRequest measures the hot path: one parse plus Key, as every
// request does before the cache lookup.
func BenchmarkParseRequest(b *testing.B) {
	benches := []struct{ name, target string }{
		{"series_window", "/api4/public/topic/%23ai/time-series/v1?bucket=day&start=1759968000&end=1760652000"},
		{"series_interval", "/api4/public/topic/bitcoin/time-series/v1?bucket=hour&interval=1m"},
		{"series_default", "/api4/public/topic/bitcoin/time-series/v1"},
		{"whatsup", "/api4/public/topic/ai+agents/whatsup/v1"},
	}
	for _, bc := range benches {
		b.Run(bc.name, func(b *testing.B) {
			r := rawRequest(b, http.MethodGet, bc.target)
			b.ReportAllocs()
			for b.Loop() {
				q, err := ParseRequest(r, testNow)
				if err != nil {
					b.Fatal(err)
				}
				if q.Key() == "" {
					b.Fatal("empty key")
				}
			}
		})
	}
}
