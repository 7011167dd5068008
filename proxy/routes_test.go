package proxy_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"trendgate/config"
	"trendgate/gateway/gatewaytest"
	"trendgate/internal/testing/promtest"
)

// upstreamCalls counts the upstream requests for path.
func upstreamCalls(h *gatewaytest.Harness, path string) int {
	n := 0
	for _, r := range h.Up.Requests() {
		if r.EscapedPath == path {
			n++
		}
	}
	return n
}

func TestRouteServedAndCached(t *testing.T) {
	h := gatewaytest.New(t, gatewaytest.WithRoutes)
	const path = "/api4/public/coins/list/v1"

	resp, body := h.Get(path+"?sort=galaxy_score&limit=3&desc=true", h.Full)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("first GET: status %d, body %s", resp.StatusCode, body)
	}
	if got := resp.Header.Get("Cache-Status"); got != "trendgate; fwd=miss; stored" {
		t.Errorf("first Cache-Status %q; want a stored miss", got)
	}
	var answer struct {
		Data []map[string]any `json:"data"`
	}
	if err := json.Unmarshal(body, &answer); err != nil || len(answer.Data) != 3 {
		t.Fatalf("body %s: %v; want 3 coins", body, err)
	}
	// The same parameters in another order are the same canonical request.
	resp, _ = h.Get(path+"?desc=true&limit=3&sort=galaxy_score", h.Full, "Accept-Encoding", "gzip")
	if got := resp.Header.Get("Cache-Status"); resp.StatusCode != http.StatusOK || got != "trendgate; hit" {
		t.Errorf("second GET: status %d, Cache-Status %q; want 200 hit", resp.StatusCode, got)
	}
	if n := upstreamCalls(h, path); n != 1 {
		t.Fatalf("upstream calls = %d; want exactly 1", n)
	}
	got := h.Up.Requests()[0]
	if got.Method != http.MethodGet || got.RawQuery != "desc=true&limit=3&sort=galaxy_score" {
		t.Errorf("upstream got %s %s?%s; want GET with the canonical (sorted) query", got.Method, got.EscapedPath, got.RawQuery)
	}

	etag := resp.Header.Get("Etag")
	resp, _ = h.Get(path+"?sort=galaxy_score&limit=3&desc=true", h.Full, "If-None-Match", etag)
	if resp.StatusCode != http.StatusNotModified {
		t.Errorf("If-None-Match: status %d; want 304", resp.StatusCode)
	}

	// Fresh for the route's own 10m, then stale within its 1h.
	h.Clock.Advance(11 * time.Minute)
	resp, _ = h.Get(path+"?sort=galaxy_score&limit=3&desc=true", h.Full)
	if got := resp.Header.Get("Cache-Status"); !strings.Contains(got, "stale") {
		t.Errorf("after 11m: Cache-Status %q; want stale (route fresh 10m)", got)
	}

	// A large answer is compressed for a client that accepts gzip.
	resp, body = h.Get("/api4/public/creators/list/v1", h.Full, "Accept-Encoding", "gzip")
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Encoding") != "gzip" || len(body) < 20 || body[0] != 0x1f {
		t.Errorf("creators list with gzip: status %d, Content-Encoding %q; want a gzip body", resp.StatusCode, resp.Header.Get("Content-Encoding"))
	}

	if n, _ := promtest.Sum(t, h.Gateway.Registry(), "trendgate_requests_total", "route", "coins_list"); n != 4 {
		t.Errorf("trendgate_requests_total{route=coins_list} = %v; want 4", n)
	}
	if !strings.Contains(h.Logs.String(), `"route":"coins_list"`) {
		t.Errorf("no access log line with route coins_list")
	}
}

func TestRouteTopicParameter(t *testing.T) {
	h := gatewaytest.New(t, gatewaytest.WithRoutes)
	for _, target := range []string{"/api4/public/topic/%23AI/posts/v1", "/api4/public/topic/%23ai/posts/v1"} {
		resp, body := h.Get(target, h.Full)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: status %d, body %s", target, resp.StatusCode, body)
		}
	}
	if n := upstreamCalls(h, "/api4/public/topic/%23ai/posts/v1"); n != 1 || h.Up.Count() != 1 {
		t.Errorf("upstream calls for #ai posts = %d of %d; want 1 of 1 (one canonical topic)", n, h.Up.Count())
	}
	for _, tc := range []struct{ target, code string }{
		{"/api4/public/topic/bit%2Fcoin/posts/v1", "invalid_topic"},
		{"/api4/public/topic/bitcoin/posts/v1?limit=5", "unknown_parameter"},
		{"/api4/public/topic/bitcoin/posts/v1?start=01", "invalid_parameter"},
		{"/api4/public/topic/bitcoin/posts/v1?start=1&start=2", "duplicate_parameter"},
		{"/api4/public/coins/list/v1?sort=nonsense", "invalid_parameter"},
		{"/api4/public/coins/list/v1?limit=0", "invalid_parameter"},
		{"/api4/public/coins/list/v1?desc=yes", "invalid_parameter"},
		{"/api4/public/coins/list/v1?key=abc", "key_in_query"},
	} {
		resp, body := h.Get(tc.target, h.Full)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), `"`+tc.code+`"`) {
			t.Errorf("GET %s: status %d, body %s; want 400 %s", tc.target, resp.StatusCode, body, tc.code)
		}
	}
	if h.Up.Count() != 1 {
		t.Errorf("upstream calls = %d; want no more for refused requests", h.Up.Count())
	}
}

func TestRouteMetered(t *testing.T) {
	h := gatewaytest.New(t, func(cfg *config.Config) {
		gatewaytest.WithRoutes(cfg)
		p := cfg.Plans[config.PlanFull]
		p.Daily = 5 // topic_posts costs 2: two requests, then the quota is spent
		cfg.Plans[config.PlanFull] = p
	})
	for i, want := range []int{http.StatusOK, http.StatusOK, http.StatusTooManyRequests} {
		resp, body := h.Get("/api4/public/topic/bitcoin/posts/v1", h.Full)
		if resp.StatusCode != want {
			t.Fatalf("request %d: status %d, body %s; want %d", i, resp.StatusCode, body, want)
		}
		if want == http.StatusTooManyRequests && !strings.Contains(string(body), "daily") {
			t.Errorf("request %d: body %s; want the daily quota", i, body)
		}
	}
	if !strings.Contains(h.Logs.String(), `"cost":2`) {
		t.Errorf("access log has no cost 2")
	}
	if n := upstreamCalls(h, "/api4/public/topic/bitcoin/posts/v1"); n != 1 {
		t.Errorf("upstream calls = %d; want 1 (the second request was a hit)", n)
	}
}

func TestRouteLimitedKey(t *testing.T) {
	h := gatewaytest.New(t, func(cfg *config.Config) {
		gatewaytest.WithRoutes(cfg)
		p := cfg.Plans[config.PlanLimited]
		p.Endpoints = append(p.Endpoints, "topic_posts") // a route without limited_fields
		cfg.Plans[config.PlanLimited] = p
	})
	resp, body := h.Get("/api4/public/coins/list/v1", h.Limited)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Data-Mode") != "limited" {
		t.Fatalf("limited GET: status %d, X-Data-Mode %q, body %s", resp.StatusCode, resp.Header.Get("X-Data-Mode"), body)
	}
	var answer map[string]json.RawMessage
	if err := json.Unmarshal(body, &answer); err != nil {
		t.Fatal(err)
	}
	if len(answer) != 1 || answer["data"] == nil {
		t.Errorf("limited body has members %v; want data only", keys(answer))
	}
	var items []map[string]any
	if err := json.Unmarshal(answer["data"], &items); err != nil || len(items) == 0 {
		t.Fatalf("data %s: %v", answer["data"], err)
	}
	allowed := map[string]bool{"id": true, "symbol": true, "name": true, "price": true, "market_cap_rank": true}
	for _, it := range items {
		for k := range it {
			if !allowed[k] {
				t.Errorf("limited item carries %q, not in limited_fields", k)
			}
		}
		if it["symbol"] == nil {
			t.Errorf("limited item %v lacks an allowed field", it)
		}
	}
	// The full key shares the cached entry and gets every field.
	resp, body = h.Get("/api4/public/coins/list/v1", h.Full)
	if got := resp.Header.Get("Cache-Status"); got != "trendgate; hit" || !strings.Contains(string(body), "volume_24h") {
		t.Errorf("full GET: Cache-Status %q, body has volume_24h: %v; want a hit with every field", got, strings.Contains(string(body), "volume_24h"))
	}

	// No allowlist: fail closed, before any upstream call or charge.
	before := h.Up.Count()
	resp, body = h.Get("/api4/public/topic/bitcoin/posts/v1", h.Limited)
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), "limited_data_unavailable") {
		t.Errorf("limited GET of a route without limited_fields: status %d, body %s; want 403 limited_data_unavailable", resp.StatusCode, body)
	}
	if h.Up.Count() != before {
		t.Errorf("the refused request reached the upstream")
	}
}

func TestRouteRefusals(t *testing.T) {
	h := gatewaytest.New(t, func(cfg *config.Config) {
		gatewaytest.WithRoutes(cfg)
		p := cfg.Plans[config.PlanFull]
		p.Endpoints = []string{"list", "coins_list"} // not topic_posts
		cfg.Plans[config.PlanFull] = p
	})
	for _, tc := range []struct {
		method, target, key string
		status              int
		code                string
	}{
		{http.MethodPost, "/api4/public/coins/list/v1", h.Full, http.StatusMethodNotAllowed, "method_not_allowed"},
		{http.MethodDelete, "/api4/public/coins/list/v1", h.Full, http.StatusMethodNotAllowed, "method_not_allowed"},
		{http.MethodGet, "/api4/public/topic/bitcoin/posts/v1", h.Full, http.StatusForbidden, "endpoint_not_in_plan"},
		{http.MethodGet, "/api4/public/coins/BTC/v1", h.Full, http.StatusNotFound, "not_found"},
		{http.MethodGet, "/api4/public/coins/list/v2", h.Full, http.StatusNotFound, "not_found"},
		{http.MethodGet, "/api4/public/coins/list/v1/", h.Full, http.StatusNotFound, "not_found"},
		{http.MethodGet, "/api4/public/coins/BTC/v1", "", http.StatusUnauthorized, "missing_api_key"},
		{http.MethodGet, "/api4/public/coins/list/v1", "", http.StatusUnauthorized, "missing_api_key"},
	} {
		resp, body := h.Do(tc.method, tc.target, tc.key)
		if resp.StatusCode != tc.status || !strings.Contains(string(body), `"`+tc.code+`"`) {
			t.Errorf("%s %s: status %d, body %s; want %d %s", tc.method, tc.target, resp.StatusCode, body, tc.status, tc.code)
		}
		if tc.status == http.StatusMethodNotAllowed && resp.Header.Get("Allow") != "GET, HEAD" {
			t.Errorf("%s %s: Allow %q; want GET, HEAD", tc.method, tc.target, resp.Header.Get("Allow"))
		}
	}
	if n := h.Up.Count(); n != 0 {
		t.Errorf("upstream calls = %d; want 0: refused and unconfigured paths never reach it", n)
	}
}

func keys(m map[string]json.RawMessage) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestRoutesOpenAPI fetches the OpenAPI document the admin listener
// serves, which describes the configured routes, and validates real route
// answers against it.
func TestRoutesOpenAPI(t *testing.T) {
	h := gatewaytest.New(t, gatewaytest.WithRoutes)
	resp, err := h.Client.Get(h.Admin + "/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /openapi.yaml: %d, %v", resp.StatusCode, err)
	}
	c := newContractFrom(t, h.Base, data)
	for _, p := range []string{"/api4/public/coins/list/v1", "/api4/public/topic/{topic}/posts/v1", "/api4/public/creators/list/v1"} {
		if c.doc.Paths.Find(p) == nil {
			t.Errorf("the served document has no path %s", p)
		}
	}
	for _, ex := range []exchange{
		{name: "coins list", target: "/api4/public/coins/list/v1?sort=alt_rank&limit=2", key: h.Full, status: http.StatusOK},
		{name: "coins list, limited", target: "/api4/public/coins/list/v1?sort=alt_rank&limit=2", key: h.Limited, status: http.StatusOK},
		{name: "posts", target: "/api4/public/topic/%23ai/posts/v1", key: h.Full, status: http.StatusOK},
		{name: "creators", target: "/api4/public/creators/list/v1", key: h.Limited, status: http.StatusOK},
		{name: "bad limit", target: "/api4/public/coins/list/v1?limit=0", key: h.Full, status: http.StatusBadRequest, code: "invalid_parameter", docRejects: true},
		{name: "posts, limited", target: "/api4/public/topic/bitcoin/posts/v1", key: h.Limited, status: http.StatusForbidden, code: "endpoint_not_in_plan"},
	} {
		c.run(h, ex)
	}

	// A purge by url= knows the routes' paths.
	req, _ := http.NewRequest(http.MethodPost, h.Admin+"/purge?url="+url.QueryEscape("/api4/public/topic/%23ai/posts/v1"), nil)
	resp, err = h.Client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"purged":1`) {
		t.Errorf("purge by url: %d %s; want the route's entry purged", resp.StatusCode, body)
	}
}
