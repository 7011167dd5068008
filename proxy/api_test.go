package proxy_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"trendgate/config"
	"trendgate/demo"
	"trendgate/gateway/gatewaytest"
)

// TestEndpointsReachUpstreamReencoded walks every endpoint and checks both
// what the client got and what the upstream received.
func TestEndpointsReachUpstreamReencoded(t *testing.T) {
	h := gatewaytest.New(t, nil)
	tests := []struct {
		name      string
		target    string
		wantPath  string
		wantQuery string
		check     func(t *testing.T, body []byte)
	}{
		{"list", "/api4/public/topics/list/v1", "/api4/public/topics/list/v1", "", gatewaytest.CheckList},
		{"whatsup", "/api4/public/topic/bitcoin/whatsup/v1", "/api4/public/topic/bitcoin/whatsup/v1", "", checkWhatsup},
		{"series default", "/api4/public/topic/bitcoin/time-series/v1", "/api4/public/topic/bitcoin/time-series/v1", "bucket=hour&interval=1w", checkSeries},
		{"hashtag", "/api4/public/topic/%23ai/time-series/v1?interval=1m&bucket=day", "/api4/public/topic/%23ai/time-series/v1", "bucket=day&interval=1m", checkSeries},
		{"space as %20", "/api4/public/topic/ai%20agents/time-series/v1", "/api4/public/topic/ai%20agents/time-series/v1", "bucket=hour&interval=1w", checkSeries},
		{"space as +", "/api4/public/topic/ai+agents/whatsup/v1", "/api4/public/topic/ai%20agents/whatsup/v1", "", checkWhatsup},
		{"cashtag", "/api4/public/topic/$capitalism/time-series/v1?bucket=hours", "/api4/public/topic/%24capitalism/time-series/v1", "bucket=hour&interval=1w", checkSeries},
		{"cashtag encoded", "/api4/public/topic/%24capitalism/whatsup/v1", "/api4/public/topic/%24capitalism/whatsup/v1", "", checkWhatsup},
		{"upper case folds", "/api4/public/topic/BitCoin/time-series/v1?bucket=day", "/api4/public/topic/bitcoin/time-series/v1", "bucket=day&interval=1w", checkSeries},
		{"tsv", "/topic/%23ai/time-series/sentiment.tsv", "/topic/%23ai/time-series/sentiment.tsv", "", checkTSV("sentiment")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h.Up.Reset()
			resp, body := h.Get(tc.target, h.Full, "X-Forwarded-For", "203.0.113.9", "Cookie", "session=secret")
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d body %s", resp.StatusCode, body)
			}
			tc.check(t, body)
			if n := h.Up.Count(); n > 1 {
				t.Fatalf("upstream requests: got %d; want at most 1", n)
			}
			if h.Up.Count() == 0 {
				return // served from the cache by an equivalent earlier request
			}
			path, query, hdr := h.LastUpstream()
			if path != tc.wantPath || query != tc.wantQuery {
				t.Errorf("upstream got %s?%s; want %s?%s", path, query, tc.wantPath, tc.wantQuery)
			}
			if got := hdr.Get("Authorization"); got != "Bearer "+gatewaytest.UpstreamKey {
				t.Errorf("upstream Authorization: got %q; want the gateway's own credential", got)
			}
			for _, name := range []string{"Cookie", "X-Forwarded-For"} {
				if v := hdr.Get(name); v != "" {
					t.Errorf("client header %s reached the upstream: %q", name, v)
				}
			}
		})
	}
}

func checkWhatsup(t *testing.T, body []byte) {
	t.Helper()
	var v struct {
		Config  map[string]any `json:"config"`
		Summary string         `json:"summary"`
	}
	if err := json.Unmarshal(body, &v); err != nil || v.Summary == "" || v.Config["generated"] == nil {
		t.Fatalf("whatsup: %v: %.200s", err, body)
	}
}

func checkSeries(t *testing.T, body []byte) {
	t.Helper()
	var v struct {
		Config map[string]any   `json:"config"`
		Data   []map[string]any `json:"data"`
	}
	if err := json.Unmarshal(body, &v); err != nil || len(v.Data) == 0 {
		t.Fatalf("series: %v: %.200s", err, body)
	}
	for _, f := range []string{"topic", "bucket", "generated"} {
		if v.Config[f] == nil {
			t.Errorf("series config lacks %s", f)
		}
	}
	if _, ok := v.Data[0]["time"]; !ok {
		t.Error("series row lacks time")
	}
}

func checkTSV(metric string) func(*testing.T, []byte) {
	return func(t *testing.T, body []byte) {
		t.Helper()
		if !strings.HasPrefix(string(body), "time\t"+metric+"\n") {
			t.Fatalf("tsv: %.80q", body)
		}
	}
}

// TestWindowRules checks bucket/interval/start/end normalisation as the
// upstream sees it.
func TestWindowRules(t *testing.T) {
	h := gatewaytest.New(t, nil)
	now := gatewaytest.Now.Unix()
	hour := int64(3600)
	ceil := func(s, b int64) int64 { return (s + b - 1) / b * b }
	floor := func(s, b int64) int64 { return s / b * b }
	start := now - 50*hour - 1234
	end := now - 3*hour - 99
	tests := []struct {
		name, query, wantQuery string
	}{
		// The upstream gets bounds inside the same buckets as the client's
		// (the second of a start's bucket, the last second of an end's),
		// which it reads as it would read the client's own.
		{"interval dropped with start and end", fmt.Sprintf("interval=1m&start=%d&end=%d", start, end),
			fmt.Sprintf("bucket=hour&start=%d&end=%d", floor(start, hour)+1, floor(end, hour)+hour-1)},
		// That answer taught the gateway how the upstream reads a start
		// inside a bucket, so a cold hourly window inside the week that
		// reaches now is widened to the week (one call either way), then
		// cut from it.
		{"only start ends now, widened to the week", fmt.Sprintf("start=%d", start), "bucket=hour&interval=1w"},
		{"only end starts a week before", fmt.Sprintf("end=%d&bucket=day", end),
			fmt.Sprintf("bucket=day&start=%d&end=%d", floor(end, 86400)-7*86400+1, floor(end, 86400)+86400-1)},
		{"end at the next hour's start is forwarded as sent", fmt.Sprintf("start=%d&end=%d", floor(start, hour), ceil(now, hour)),
			fmt.Sprintf("bucket=hour&start=%d&end=%d", floor(start, hour), ceil(now, hour))},
		{"interval kept without window", "interval=3m&bucket=days", "bucket=day&interval=3m"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h.Up.Reset()
			resp, body := h.Get("/api4/public/topic/ethereum/time-series/v1?"+tc.query, h.Full)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			if _, q, _ := h.LastUpstream(); q != tc.wantQuery {
				t.Errorf("upstream query: got %q; want %q", q, tc.wantQuery)
			}
		})
	}
}

// TestBadInputs: every bad request gets its status and a JSON error, and the
// upstream sees nothing.
func TestBadInputs(t *testing.T) {
	h := gatewaytest.New(t, nil)
	s := "/api4/public/topic/bitcoin/time-series/v1"
	tests := []struct {
		name   string
		method string
		target string
		hdr    []string
		status int
		code   string
	}{
		{"topic with slash", "GET", "/api4/public/topic/a%2Fb/whatsup/v1", nil, 400, "invalid_topic"},
		{"topic with encoded plus", "GET", "/api4/public/topic/a%2Bb/whatsup/v1", nil, 400, "invalid_topic"},
		{"topic with encoded percent", "GET", "/api4/public/topic/%2523ai/whatsup/v1", nil, 400, "invalid_topic"},
		{"topic with control byte", "GET", "/api4/public/topic/bit%00coin/whatsup/v1", nil, 400, "invalid_topic"},
		{"topic non-ascii", "GET", "/api4/public/topic/bitc%C3%B6in/whatsup/v1", nil, 400, "invalid_topic"},
		{"topic double space", "GET", "/api4/public/topic/ai%20%20agents/whatsup/v1", nil, 400, "invalid_topic"},
		{"topic leading space", "GET", "/api4/public/topic/%20ai/whatsup/v1", nil, 400, "invalid_topic"},
		{"topic too long", "GET", "/api4/public/topic/" + strings.Repeat("a", 65) + "/whatsup/v1", nil, 400, "invalid_topic"},
		{"topic punctuation", "GET", "/api4/public/topic/bit-coin/whatsup/v1", nil, 400, "invalid_topic"},
		{"unknown parameter", "GET", s + "?limit=5", nil, 400, "unknown_parameter"},
		{"parameter on list", "GET", "/api4/public/topics/list/v1?bucket=hour", nil, 400, "unknown_parameter"},
		{"duplicate parameter", "GET", s + "?bucket=hour&bucket=day", nil, 400, "duplicate_parameter"},
		{"semicolon", "GET", s + "?bucket=hour;interval=1w", nil, 400, "invalid_query"},
		{"key in query", "GET", s + "?key=tg_secret", nil, 400, "key_in_query"},
		{"bad bucket", "GET", s + "?bucket=week", nil, 400, "invalid_bucket"},
		{"bad interval", "GET", s + "?interval=2w", nil, 400, "invalid_interval"},
		{"empty interval", "GET", s + "?interval=", nil, 400, ""},
		{"start leading zero", "GET", s + "?start=01763000000", nil, 400, "invalid_start"},
		{"start signed", "GET", s + "?start=%2B1763000000", nil, 400, "invalid_start"},
		{"start negative", "GET", s + "?start=-5", nil, 400, "invalid_start"},
		{"start exponent", "GET", s + "?start=1.7e9", nil, 400, "invalid_start"},
		{"end decimal", "GET", s + "?end=1763000000.5", nil, 400, "invalid_end"},
		{"end eleven digits", "GET", s + "?end=17630000000", nil, 400, "invalid_end"},
		{"start after end", "GET", s + "?start=1763000000&end=1762000000", nil, 400, ""},
		{"start equals end", "GET", s + "?start=1763000000&end=1763000000", nil, 400, ""},
		{"bad tsv metric", "GET", "/topic/bitcoin/time-series/price.tsv", nil, 400, "invalid_metric"},
		{"query on tsv", "GET", "/topic/bitcoin/time-series/sentiment.tsv?x=1", nil, 400, "unknown_parameter"},
		{"post", "POST", s, nil, 405, "method_not_allowed"},
		{"delete", "DELETE", s, nil, 405, "method_not_allowed"},
		{"trailing slash", "GET", s + "/", nil, 404, "not_found"},
		{"double slash", "GET", "/api4/public//topics/list/v1", nil, 404, "not_found"},
		{"dot dot", "GET", "/api4/public/topic/bitcoin/../bitcoin/whatsup/v1", nil, 404, "not_found"},
		{"no version", "GET", "/api4/public/topic/bitcoin", nil, 404, "not_found"},
		{"two auth headers", "GET", s, []string{"Authorization", "Bearer x"}, 400, "duplicate_authorization"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h.Up.Reset()
			resp, body := h.Do(tc.method, tc.target, h.Full, tc.hdr...)
			if resp.StatusCode != tc.status {
				t.Fatalf("status: got %d; want %d (%s)", resp.StatusCode, tc.status, body)
			}
			e := gatewaytest.DecodeError(t, body)
			if tc.code != "" && e.Code != tc.code {
				t.Errorf("code: got %q; want %q (%s)", e.Code, tc.code, e.Error)
			}
			if e.RequestID != resp.Header.Get("X-Request-Id") {
				t.Errorf("request_id %q differs from X-Request-Id %q", e.RequestID, resp.Header.Get("X-Request-Id"))
			}
			if tc.status == 405 && resp.Header.Get("Allow") != "GET, HEAD" {
				t.Errorf("Allow: got %q", resp.Header.Get("Allow"))
			}
			if strings.Contains(string(body), "tg_secret") {
				t.Error("the error echoes the key from the query")
			}
			if n := h.Up.Count(); n != 0 {
				t.Errorf("upstream requests: got %d; want 0", n)
			}
		})
	}
}

// TestBodyOnGetAndOversizedHeaders covers inputs the client helper cannot
// express through h.do, and ones Go's server refuses before any handler runs
// (those keep Go's plain-text answer).
func TestBodyOnGetAndOversizedHeaders(t *testing.T) {
	h := gatewaytest.New(t, nil)
	req, _ := http.NewRequest("GET", h.Base+"/api4/public/topics/list/v1", strings.NewReader("{}"))
	req.Header.Set("Authorization", "Bearer "+h.Full)
	resp, err := h.Client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("GET with body: got %d; want 400", resp.StatusCode)
	}
	resp2, _ := h.Get("/api4/public/topics/list/v1", h.Full, "X-Big", strings.Repeat("a", 64<<10))
	if resp2.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("64 KiB header: got %d; want 431", resp2.StatusCode)
	}
	if resp3, _ := h.Get("/api4/public/topic/bit%zzcoin/whatsup/v1", h.Full); resp3.StatusCode != http.StatusBadRequest {
		t.Errorf("invalid escape: got %d; want 400", resp3.StatusCode)
	}
	if n := h.Up.Count(); n != 0 {
		t.Errorf("upstream requests: got %d; want 0", n)
	}
}

// TestAuthUniform401 checks that every refused key gets the same body.
func TestAuthUniform401(t *testing.T) {
	h := gatewaytest.New(t, nil)
	target := "/api4/public/topics/list/v1"
	resp, body := h.Do("GET", target, "")
	if resp.StatusCode != 401 || gatewaytest.DecodeError(t, body).Code != "missing_api_key" {
		t.Fatalf("no key: %d %s", resp.StatusCode, body)
	}
	if resp.Header.Get("WWW-Authenticate") == "" {
		t.Error("401 without WWW-Authenticate")
	}
	last := "x"
	if strings.HasSuffix(h.Full, last) {
		last = "y"
	}
	bad := []string{
		"tg_" + strings.Repeat("A", 40), // malformed
		strings.ToUpper(h.Full),         // case variant
		h.Full[:len(h.Full)-1] + last,   // one character changed: bad checksum
		gatewaytest.NewKey(t),           // well formed, unknown
		"Bearer " + h.Full,              // doubled scheme
	}
	var want string
	for i, k := range bad {
		resp, body := h.Do("GET", target, k)
		e := gatewaytest.DecodeError(t, body)
		if resp.StatusCode != 401 || e.Code != "invalid_api_key" {
			t.Fatalf("key %d: %d %s", i, resp.StatusCode, body)
		}
		got := strings.Replace(string(body), e.RequestID, "", 1)
		if want == "" {
			want = got
		} else if got != want {
			t.Errorf("key %d: body %q differs from %q", i, got, want)
		}
	}
	for _, scheme := range []string{"Basic " + h.Full, "bearer  " + h.Full, h.Full, "Bearer"} {
		resp, _ := h.Do("GET", target, "", "Authorization", scheme)
		if resp.StatusCode != 401 {
			t.Errorf("Authorization %.12q...: got %d; want 401", scheme, resp.StatusCode)
		}
	}
	if resp, _ := h.Do("GET", target, "", "Authorization", "bEaReR "+h.Full); resp.StatusCode != 200 {
		t.Errorf("scheme is case-insensitive: got %d", resp.StatusCode)
	}
	if n := h.Up.Count(); n != 1 {
		t.Errorf("upstream requests: got %d; want 1 (only the valid request)", n)
	}
	if logs := h.Logs.String(); strings.Contains(logs, h.Full) || strings.Contains(logs, h.Full[3:20]) {
		t.Error("the API key appears in the logs")
	}
}

// TestUnknownRoutesNeedAKey: routes cannot be enumerated anonymously.
func TestUnknownRoutesNeedAKey(t *testing.T) {
	h := gatewaytest.New(t, nil)
	if resp, _ := h.Get("/api4/public/secret/v1", ""); resp.StatusCode != 401 {
		t.Errorf("unknown API route without key: got %d; want 401", resp.StatusCode)
	}
	if resp, _ := h.Get("/api4/public/secret/v1", h.Full); resp.StatusCode != 404 {
		t.Errorf("unknown API route with key: got %d; want 404", resp.StatusCode)
	}
}

// TestCacheHeadersETagGzipHead covers the hit path's headers.
func TestCacheHeadersETagGzipHead(t *testing.T) {
	h := gatewaytest.New(t, nil)
	target := "/api4/public/topic/bitcoin/time-series/v1"
	resp, body := h.Get(target, h.Full)
	if got := resp.Header.Get("Cache-Status"); got != "trendgate; fwd=miss; stored" {
		t.Errorf("first Cache-Status: %q", got)
	}
	h.Clock.Advance(90 * time.Second)
	resp2, body2 := h.Get(target, h.Full)
	if got := resp2.Header.Get("Cache-Status"); got != "trendgate; hit" {
		t.Errorf("second Cache-Status: %q", got)
	}
	if resp2.Header.Get("Age") != "90" {
		t.Errorf("Age: got %q; want 90", resp2.Header.Get("Age"))
	}
	if !strings.HasPrefix(resp2.Header.Get("Cache-Control"), "private, max-age=") {
		t.Errorf("Cache-Control: %q", resp2.Header.Get("Cache-Control"))
	}
	if string(body) != string(body2) || h.Up.Count() != 1 {
		t.Fatalf("hit differs or reached upstream (%d calls)", h.Up.Count())
	}
	// A client's no-cache does not force an upstream call (it would burn
	// the upstream budget).
	if r, _ := h.Get(target, h.Full, "Cache-Control", "no-cache", "Pragma", "no-cache"); r.Header.Get("Cache-Status") != "trendgate; hit" || h.Up.Count() != 1 {
		t.Errorf("no-cache: Cache-Status %q, %d upstream calls", r.Header.Get("Cache-Status"), h.Up.Count())
	}
	etag := resp2.Header.Get("ETag")
	if r, b := h.Get(target, h.Full, "If-None-Match", etag); r.StatusCode != 304 || len(b) != 0 {
		t.Errorf("If-None-Match: got %d with %d bytes; want 304 empty", r.StatusCode, len(b))
	}
	// The limited plan's variant has its own ETag.
	rl, _ := h.Get(target, h.Limited)
	if rl.Header.Get("ETag") == etag || rl.Header.Get("X-Data-Mode") != "limited" {
		t.Errorf("limited variant: ETag %q (full %q), X-Data-Mode %q", rl.Header.Get("ETag"), etag, rl.Header.Get("X-Data-Mode"))
	}
	// gzip when accepted (Transport would decompress transparently; ask explicitly).
	rg, gz := h.Get(target, h.Full, "Accept-Encoding", "gzip")
	if rg.Header.Get("Content-Encoding") != "gzip" || len(gz) >= len(body) {
		t.Errorf("gzip: encoding %q, %d bytes vs %d", rg.Header.Get("Content-Encoding"), len(gz), len(body))
	}
	rh, hb := h.Do("HEAD", target, h.Full)
	if rh.StatusCode != 200 || len(hb) != 0 || rh.Header.Get("Content-Length") != fmt.Sprint(len(body)) {
		t.Errorf("HEAD: %d, %d body bytes, Content-Length %q", rh.StatusCode, len(hb), rh.Header.Get("Content-Length"))
	}
	for _, r := range []*http.Response{resp, resp2, rl, rg, rh} {
		if r.Header.Get("RateLimit-Policy") == "" || r.Header.Get("X-RateLimit-Remaining") == "" {
			t.Errorf("missing rate-limit headers: %v", r.Header)
		}
	}
}

// TestColdHerd: many concurrent clients on a cold key make one upstream call.
func TestColdHerd(t *testing.T) {
	h := gatewaytest.New(t, func(c *config.Config) {
		p := c.Plans["full"]
		p.PerSecond, p.Burst = 10000, 10000
		c.Plans["full"] = p
	}, func(o *demo.Options) { o.Latency = 50 * time.Millisecond })
	const n = 200
	var wg sync.WaitGroup
	statuses := make(chan int, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest("GET", h.Base+"/api4/public/topic/solana/time-series/v1?bucket=day", nil)
			req.Header.Set("Authorization", "Bearer "+h.Full)
			resp, err := h.Client.Do(req)
			if err != nil {
				statuses <- -1
				return
			}
			resp.Body.Close()
			statuses <- resp.StatusCode
		}()
	}
	wg.Wait()
	close(statuses)
	for s := range statuses {
		if s != 200 {
			t.Fatalf("a client got %d", s)
		}
	}
	if got := h.Up.Count(); got != 1 {
		t.Errorf("upstream requests: got %d; want 1", got)
	}
}
