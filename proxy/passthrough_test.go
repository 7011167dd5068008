package proxy_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"trendgate/config"
	"trendgate/gateway/gatewaytest"
	"trendgate/internal/testing/promtest"
)

// withPassThrough configures the example routes with creators_list made
// pass-through (cache: false, no lifetimes) at 2 units a call, and a
// daily quota of 5 units on the full plan.
func withPassThrough(cfg *config.Config) {
	gatewaytest.WithRoutes(cfg)
	no := false
	for i := range cfg.Routes {
		if cfg.Routes[i].Name == "creators_list" {
			cfg.Routes[i].Cache, cfg.Routes[i].Fresh, cfg.Routes[i].Stale = &no, 0, 0
			cfg.Routes[i].Cost = 2
		}
	}
	p := cfg.Plans[config.PlanFull]
	p.Daily = 5
	cfg.Plans[config.PlanFull] = p
}

// TestPassThroughRoute: a route with cache: false sends every call
// upstream (issue 41: a configured GET that changes state upstream was
// cached, two calls made one upstream request and both were hits). Each
// call is answered, charged to the key's quota like any route, never a
// hit, and the cache is not even asked.
func TestPassThroughRoute(t *testing.T) {
	h := gatewaytest.New(t, withPassThrough)
	const path = "/api4/public/creators/list/v1"
	for i := range 2 {
		resp, body := h.Get(path, h.Full, "Accept-Encoding", "gzip")
		if resp.StatusCode != http.StatusOK || len(body) == 0 {
			t.Fatalf("call %d: status %d, %d bytes; want 200 with a body", i, resp.StatusCode, len(body))
		}
		if got := resp.Header.Get("Cache-Status"); got != "trendgate; fwd=bypass" {
			t.Errorf("call %d: Cache-Status %q; want trendgate; fwd=bypass", i, got)
		}
		if got := resp.Header.Get("Cache-Control"); got != "no-store" {
			t.Errorf("call %d: Cache-Control %q; want no-store", i, got)
		}
		if got := h.AccessLine(t, resp)["cache"]; got != "bypass" {
			t.Errorf("call %d: access log cache %v; want bypass", i, got)
		}
		if n := upstreamCalls(h, path); n != i+1 {
			t.Errorf("after call %d: upstream calls = %d; want %d", i, n, i+1)
		}
	}
	if n, _ := promtest.Sum(t, h.Gateway.Registry(), "trendgate_cache_requests_total"); n != 0 {
		t.Errorf("cache lookups = %v; want none for a pass-through route", n)
	}
	// Metered like any route: 4 of the day's 5 units are spent, so the
	// third call is refused and not sent.
	resp, body := h.Get(path, h.Full)
	if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(string(body), "daily") {
		t.Errorf("third call: status %d, body %s; want 429 on the daily quota", resp.StatusCode, body)
	}
	if n := upstreamCalls(h, path); n != 2 {
		t.Errorf("upstream calls = %d; want 2 (the refused call is not sent)", n)
	}
}

// TestPassThroughRouteOpenAPI: a pass-through route's answer, with its
// Cache-Status and Cache-Control, matches the document the admin listener
// serves, which says the route is never cached.
func TestPassThroughRouteOpenAPI(t *testing.T) {
	h := gatewaytest.New(t, withPassThrough)
	resp, err := h.Client.Get(h.Admin + "/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /openapi.yaml: %d, %v", resp.StatusCode, err)
	}
	if !strings.Contains(string(data), "never cached: every call is sent to the upstream") {
		t.Errorf("the served document does not say creators_list is never cached")
	}
	c := newContractFrom(t, h.Base, data)
	c.run(h, exchange{name: "creators, pass-through", target: "/api4/public/creators/list/v1", key: h.Limited, status: http.StatusOK})
}
