package gateway_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"trendgate/admin"
	"trendgate/auth"
	"trendgate/config"
	"trendgate/gateway/gatewaytest"
)

// TestKeyUsage: GET /keys/{id} reports what the limiter counted and what
// the key did in the last 24 hours, never a secret or a digest.
func TestKeyUsage(t *testing.T) {
	disabled, expired := gatewaytest.NewKey(t), gatewaytest.NewKey(t)
	past := gatewaytest.Now.Add(-time.Hour)
	h := gatewaytest.New(t, func(c *config.Config) {
		p := c.Plans["full"]
		p.Daily, p.PerSecond, p.Burst = 20, 1, 40
		c.Plans["full"] = p
		c.Keys = append(c.Keys,
			config.Key{ID: "off", SHA256: auth.Digest(disabled), Plan: "full", Disabled: true},
			config.Key{ID: "old", SHA256: auth.Digest(expired), Plan: "limited", Expires: &past},
		)
	})
	series := "/api4/public/topic/bitcoin/time-series/v1"
	for range 3 { // a miss, then two hits: 3 units
		if resp, body := h.Get(series, h.Full); resp.StatusCode != 200 {
			t.Fatalf("series: %d %s", resp.StatusCode, body)
		}
	}
	if resp, _ := h.Get("/api4/public/topic/bitcoin/whatsup/v1", h.Full); resp.StatusCode != 200 { // 5 units
		t.Fatalf("whatsup: %d", resp.StatusCode)
	}
	if resp, _ := h.Get("/api4/public/topic/bitcoin/time-series/v1?bucket=hour&bucket=day", h.Full); resp.StatusCode != 400 {
		t.Fatalf("duplicate parameter: %d; want 400 (refused before auth: not the key's)", resp.StatusCode)
	}
	for range 3 { // 8 units used of 20: the next whatsups fit twice, then 429 daily_quota_exceeded
		h.Get("/api4/public/topic/%23ai/whatsup/v1", h.Full)
	}

	code, ku, body := h.KeyUsage("team-full")
	if code != 200 {
		t.Fatalf("GET /keys/team-full: %d %s", code, body)
	}
	remaining := int64(2)
	tomorrow := time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC)
	if ku.ID != "team-full" || ku.Plan != "full" || ku.State != "active" || ku.Source != "local" {
		t.Errorf("got %+v; want team-full, full, active, local", ku)
	}
	if ku.Daily.Used != 18 || ku.Daily.Limit != 20 || ku.Daily.Remaining == nil || *ku.Daily.Remaining != remaining || !ku.Daily.ResetsAt.Equal(tomorrow) {
		t.Errorf("got daily %+v; want 18 used of 20, 2 left, resets %v", ku.Daily, tomorrow)
	}
	if ku.Rate == nil || ku.Rate.Burst != 40 || ku.Rate.Tokens != 22 {
		t.Errorf("got rate %+v; want burst 40 with 22 tokens (18 taken, no time passed on the fake clock)", ku.Rate)
	}
	want := map[string]admin.UsageCount{
		"series/2xx":  {Endpoint: "series", Status: "2xx", Requests: 3, Units: 3},
		"whatsup/2xx": {Endpoint: "whatsup", Status: "2xx", Requests: 3, Units: 15},
		"whatsup/429": {Endpoint: "whatsup", Status: "429", Requests: 1},
	}
	if len(ku.Last24h.ByEndpoint) != len(want) {
		t.Errorf("got by endpoint %+v; want %v", ku.Last24h.ByEndpoint, want)
	}
	for _, c := range ku.Last24h.ByEndpoint {
		if w := want[c.Endpoint+"/"+c.Status]; c != w {
			t.Errorf("got %+v; want %+v", c, w)
		}
	}
	// Three cold misses (the series, bitcoin's and #ai's whatsup) each
	// cost one upstream request (issue 20: upstream calls caused per key).
	if ku.Last24h.UpstreamCalls != 3 {
		t.Errorf("got %d upstream calls caused; want 3", ku.Last24h.UpstreamCalls)
	}
	if ku.Last24h.Requests != 7 || ku.Last24h.Units != 18 || ku.Last24h.Scope != "instance" {
		t.Errorf("got last 24h %d requests, %d units, scope %q; want 7, 18, instance", ku.Last24h.Requests, ku.Last24h.Units, ku.Last24h.Scope)
	}
	if ku.LastSeen == nil || !ku.LastSeen.Equal(gatewaytest.Now) {
		t.Errorf("got last seen %v; want %v", ku.LastSeen, gatewaytest.Now)
	}

	for _, tc := range []struct{ id, state string }{{"off", "disabled"}, {"old", "expired"}, {"team-limited", "active"}} {
		if code, ku, body := h.KeyUsage(tc.id); code != 200 || ku.State != tc.state || ku.LastSeen != nil || ku.Daily.Used != 0 {
			t.Errorf("GET /keys/%s: %d %s; want 200, state %s, never seen, nothing used", tc.id, code, body, tc.state)
		}
	}

	// The list: every configured key, in id order, and no key material
	// anywhere.
	resp, list := h.AdminDo(http.MethodGet, "/keys", "")
	var kl admin.KeyList
	if err := json.Unmarshal(list, &kl); resp.StatusCode != 200 || err != nil || len(kl.Keys) != 4 || kl.Keys[0].ID != "off" || kl.Keys[3].ID != "team-limited" || kl.NextCursor != nil {
		t.Fatalf("GET /keys: %d %v %s", resp.StatusCode, err, list)
	}
	// Pages of two, the second through the first's cursor; filters.
	for _, tc := range []struct {
		query string
		want  []string
	}{
		{"limit=2", []string{"off", "old"}},
		{"state=disabled", []string{"off"}},
		{"state=active", []string{"team-full", "team-limited"}},
		{"state=expired&account=old", []string{"old"}},
		{"account=team-full", []string{"team-full"}},
	} {
		resp, body := h.AdminDo(http.MethodGet, "/keys?"+tc.query, "")
		var page admin.KeyList
		if err := json.Unmarshal(body, &page); resp.StatusCode != 200 || err != nil {
			t.Fatalf("GET /keys?%s: %d %v %s", tc.query, resp.StatusCode, err, body)
		}
		var got []string
		for _, k := range page.Keys {
			got = append(got, k.ID)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("GET /keys?%s: got %v; want %v", tc.query, got, tc.want)
		}
		if tc.query == "limit=2" {
			if page.NextCursor == nil {
				t.Fatalf("GET /keys?limit=2: no next_cursor")
			}
			_, body := h.AdminDo(http.MethodGet, "/keys?limit=2&cursor="+*page.NextCursor, "")
			var next admin.KeyList
			if err := json.Unmarshal(body, &next); err != nil || len(next.Keys) != 2 || next.Keys[0].ID != "team-full" || next.NextCursor != nil {
				t.Errorf("second page: %s; want team-full, team-limited and no cursor", body)
			}
		}
	}
	if resp, body := h.AdminDo(http.MethodGet, "/keys?account=nobody", ""); resp.StatusCode != 404 || !strings.Contains(string(body), `"unknown_account"`) {
		t.Errorf("GET /keys?account=nobody: %d %s; want 404 unknown_account", resp.StatusCode, body)
	}
	// The accounts: one per key here (none configured), with its quotas.
	resp, accounts := h.AdminDo(http.MethodGet, "/accounts?limit=3", "")
	var al admin.AccountList
	if err := json.Unmarshal(accounts, &al); resp.StatusCode != 200 || err != nil || len(al.Accounts) != 3 || al.NextCursor == nil ||
		al.Accounts[2].ID != "team-full" || al.Accounts[2].Daily.Used != 18 || al.Accounts[2].Last24h.Requests != 7 {
		t.Errorf("GET /accounts?limit=3: %d %v %s; want off, old, team-full (18 units used, 7 requests) and a cursor", resp.StatusCode, err, accounts)
	}
	for _, secret := range []string{h.Full, h.Limited, disabled, expired} {
		if strings.Contains(string(list), secret) || strings.Contains(string(list), auth.Digest(secret)) {
			t.Errorf("GET /keys shows a key or its digest: %s", list)
		}
	}

	// Unknown ids: 404 in the usual error shape.
	for _, id := range []string{"nobody", "team-ful", "%2e%2e"} {
		resp, body := h.AdminDo(http.MethodGet, "/keys/"+id, "")
		var e map[string]string
		if err := json.Unmarshal(body, &e); resp.StatusCode != 404 || err != nil || e["code"] != "unknown_key" || e["request_id"] != resp.Header.Get("X-Request-Id") || e["request_id"] == "" {
			t.Errorf("GET /keys/%s: %d %s; want 404 unknown_key with the request id", id, resp.StatusCode, body)
		}
	}
}

// TestKeyUsageSurvivesReload: the 24 h counters belong to the key id, not
// to one configuration snapshot; a removed key's are dropped.
func TestKeyUsageSurvivesReload(t *testing.T) {
	h := gatewaytest.New(t, nil)
	h.Get("/api4/public/topics/list/v1", h.Full)
	h.Get("/api4/public/topics/list/v1", h.Limited)
	next := *h.Config
	next.Keys = next.Keys[:1] // team-limited removed
	if err := h.Gateway.Reload(&next); err != nil {
		t.Fatal(err)
	}
	if code, ku, _ := h.KeyUsage("team-full"); code != 200 || ku.Last24h.Requests != 1 {
		t.Errorf("team-full after reload: %d, %d requests; want 200, 1", code, ku.Last24h.Requests)
	}
	if code, _, _ := h.KeyUsage("team-limited"); code != 404 {
		t.Errorf("removed key: got %d; want 404", code)
	}
	if err := h.Gateway.Reload(h.Config); err != nil {
		t.Fatal(err)
	}
	if code, ku, _ := h.KeyUsage("team-limited"); code != 200 || ku.Last24h.Requests != 0 || ku.Daily.Used != 1 {
		t.Errorf("re-added key: %d %+v; want fresh 24 h counters (the limiter's quota count is its own and stays at 1)", code, ku)
	}
}

// TestSummary: the dashboard's figures follow the traffic.
func TestSummary(t *testing.T) {
	h := gatewaytest.New(t, func(c *config.Config) {
		p := c.Plans["limited"]
		// A burst of 2 is below the whatsup cost: without whatsup.
		p.PerSecond, p.Burst, p.Endpoints = 1, 2, []string{"list", "series", "tsv"}
		c.Plans["limited"] = p
		c.Upstream.Budget.PerMinute, c.Upstream.Budget.PerDay = 50, 1000
	})
	for i := range 4 { // 1 miss + 3 hits
		h.Get("/api4/public/topic/bitcoin/time-series/v1", h.Full)
		if i < 2 {
			h.Get("/api4/public/topic/%23ai/whatsup/v1", h.Full) // 1 miss + 1 hit
		}
	}
	for range 3 { // the burst is 2: one 429
		h.Get("/api4/public/topics/list/v1", h.Limited)
	}
	h.Get("/api4/public/topics/list/v1", "tg_"+strings.Repeat("a", 49)) // malformed: 401
	h.Get("/api4/public/topics/list/v1", "")                            // missing: 401
	h.Clock.Advance(time.Second)                                        // the traffic's second is now complete

	s := h.Summary()
	want := map[string]uint64{"hit": 5, "stale": 0, "miss": 3, "error": 0, "limited": 1, "rejected": 2}
	for _, o := range s.Outcomes {
		if o.Total != want[o.Outcome] {
			t.Errorf("outcome %s: got total %d; want %d", o.Outcome, o.Total, want[o.Outcome])
		}
		if w := float64(want[o.Outcome]) / 10; o.PerSecond != w {
			t.Errorf("outcome %s: got %v/s; want %v (over 10 s)", o.Outcome, o.PerSecond, w)
		}
	}
	if s.HitRatioPct == nil || *s.HitRatioPct != 62.5 {
		t.Errorf("got hit ratio %v; want 62.5 (5 of 8)", s.HitRatioPct)
	}
	if int(s.Upstream.CallsLastMinute) != h.Up.Count() || s.Upstream.CallsTotal != 3 {
		t.Errorf("got %d upstream calls in the minute, %d total; the upstream saw %d, want 3", s.Upstream.CallsLastMinute, s.Upstream.CallsTotal, h.Up.Count())
	}
	if s.Upstream.Breaker != "closed" || s.Upstream.PerMinuteLimit == 0 || s.Upstream.MinuteLeft == nil || *s.Upstream.MinuteLeft != int64(s.Upstream.PerMinuteLimit-3) {
		t.Errorf("got upstream %+v; want closed, with 3 of the minute budget spent", s.Upstream)
	}
	if s.Latency.Samples != 11 {
		t.Errorf("got %d latency samples; want 11", s.Latency.Samples)
	}
	if len(s.TopTopics.ByRequests) != 2 || s.TopTopics.ByRequests[0] != (admin.TopicCount{Topic: "bitcoin", Requests: 4, UpstreamCalls: 1}) ||
		s.TopTopics.ByRequests[1] != (admin.TopicCount{Topic: "#ai", Requests: 2, UpstreamCalls: 1}) {
		t.Errorf("got top topics %+v; want bitcoin 4/1, #ai 2/1", s.TopTopics.ByRequests)
	}
	wantCodes := []admin.CodeCount{{Code: "invalid_api_key", Count: 1}, {Code: "missing_api_key", Count: 1}, {Code: "rate_limited", Count: 1}}
	if len(s.Refusals.ByCode) != 3 {
		t.Fatalf("got refusals %+v; want %+v", s.Refusals.ByCode, wantCodes)
	}
	for i := range wantCodes {
		if s.Refusals.ByCode[i] != wantCodes[i] {
			t.Errorf("got refusals %+v; want %+v", s.Refusals.ByCode, wantCodes)
		}
	}
	if len(s.TopKeys) != 2 || s.TopKeys[0].ID != "team-full" || s.TopKeys[0].Used != 14 || s.TopKeys[0].Window != "day" || s.TopKeys[1].Used != 2 {
		t.Errorf("got top keys %+v; want team-full (14 units today) first, then team-limited (2)", s.TopKeys)
	}

	// Ten seconds later the rates are gone, the totals stay.
	h.Clock.Advance(10 * time.Second)
	s = h.Summary()
	if s.Outcomes[0].PerSecond != 0 || s.Outcomes[0].Total != 5 || s.HitRatioPct != nil || *s.HitRatioTotalPct != 62.5 {
		t.Errorf("got %+v, ratio %v, total ratio %v; want rate 0, total 5, no ratio, 62.5 overall", s.Outcomes[0], s.HitRatioPct, s.HitRatioTotalPct)
	}
}

// TestQuotaGauges: the per-key quota gauges (of metrics.detail_keys) are
// read at scrape time; an unlimited quota has no limit series.
func TestQuotaGauges(t *testing.T) {
	h := gatewaytest.New(t, func(c *config.Config) {
		c.Metrics.DetailKeys = []string{"team-full", "team-limited"}
		p := c.Plans["limited"]
		p.Monthly = 0
		c.Plans["limited"] = p
	})
	h.Get("/api4/public/topic/bitcoin/whatsup/v1", h.Full)
	h.Get("/api4/public/topics/list/v1", h.Limited)
	reg := h.Gateway.Registry()
	for _, tc := range []struct {
		name, key, window string
		want              float64
	}{
		{"trendgate_key_quota_used_units", "team-full", "day", 5},
		{"trendgate_key_quota_used_units", "team-full", "month", 5},
		{"trendgate_key_quota_used_units", "team-limited", "day", 1},
		{"trendgate_key_quota_used_units", "team-limited", "month", 0}, // an unlimited window is not counted
		{"trendgate_key_quota_limit_units", "team-full", "day", 100000},
		{"trendgate_key_quota_limit_units", "team-limited", "day", 5000},
	} {
		if got := gatewaytest.Metric(t, reg, tc.name, "key_id", tc.key, "window", tc.window); got != tc.want {
			t.Errorf("%s{%s,%s}: got %v; want %v", tc.name, tc.key, tc.window, got, tc.want)
		}
	}
	_, body := h.AdminDo(http.MethodGet, "/metrics", "")
	if strings.Contains(string(body), `trendgate_key_quota_limit_units{key_id="team-limited",window="month"}`) {
		t.Errorf("an unlimited monthly quota has a limit series")
	}
}

// TestClusterKeyUsageSameOnEveryInstance: in cluster mode the quota and
// bucket figures come from Redis, so every instance answers the same.
func TestClusterKeyUsageSameOnEveryInstance(t *testing.T) {
	c := gatewaytest.NewCluster(t, gatewaytest.ClusterOptions{})
	for i := range 6 {
		if r := c.Send(i%2, "/api4/public/topic/bitcoin/time-series/v1", c.Full); r.Status != 200 {
			t.Fatalf("request %d: %+v", i, r)
		}
	}
	var first admin.KeyUsage
	start := time.Now()
	for i, h := range c.Nodes {
		code, ku, body := h.KeyUsage("team-full")
		if code != 200 || ku.Source != "redis" || ku.Daily.Used != 6 || ku.Monthly.Used != 6 {
			t.Fatalf("instance %d: %d %s; want 200, source redis, 6 units today and this month", i, code, body)
		}
		if i == 0 {
			first = ku
			continue
		}
		// The bucket refills on Redis's clock between the two reads: the
		// later read may show what refilled since, never fewer tokens.
		refill := 0.0
		if ku.Rate != nil {
			refill = ku.Rate.PerSecond * time.Since(start).Seconds()
		}
		if ku.Rate == nil || first.Rate == nil || ku.Rate.PerSecond != first.Rate.PerSecond || ku.Rate.Burst != first.Rate.Burst ||
			ku.Rate.Tokens < first.Rate.Tokens || float64(ku.Rate.Tokens-first.Rate.Tokens) > refill+1 ||
			!ku.Daily.ResetsAt.Equal(first.Daily.ResetsAt) {
			t.Errorf("instance %d: rate %+v resets %v; instance 0: %+v %v; want the same (tokens up to %.1f more)",
				i, ku.Rate, ku.Daily.ResetsAt, first.Rate, first.Daily.ResetsAt, refill)
		}
		// The 24 h counters are each instance's own. A request is counted
		// once its handler returns, which may be just after its client has
		// read a large body: wait for that.
		want := map[int]uint64{1: 3, 2: 0}[i]
		gatewaytest.WaitFor(func() bool { _, ku, _ = h.KeyUsage("team-full"); return ku.Last24h.Requests == want })
		if ku.Last24h.Requests != want {
			t.Errorf("instance %d: got %d requests in its 24 h; want %d (its own)", i, ku.Last24h.Requests, want)
		}
		// The account page and the summary's top list read the same
		// counters, on an instance that admitted none of the requests too.
		resp, body := h.AdminDo(http.MethodGet, "/accounts", "")
		var al admin.AccountList
		if err := json.Unmarshal(body, &al); resp.StatusCode != 200 || err != nil {
			t.Fatalf("instance %d: GET /accounts: %d %v %s", i, resp.StatusCode, err, body)
		}
		for _, a := range al.Accounts {
			if a.ID == "team-full" && (a.Source != "redis" || a.Daily.Used != 6) {
				t.Errorf("instance %d: account %+v; want source redis, 6 units today", i, a)
			}
		}
		resp, body = h.AdminDo(http.MethodGet, "/summary", "")
		var sum admin.Summary
		if err := json.Unmarshal(body, &sum); resp.StatusCode != 200 || err != nil || len(sum.TopKeys) == 0 {
			t.Fatalf("instance %d: GET /summary: %d %v %s", i, resp.StatusCode, err, body)
		}
		if tk := sum.TopKeys[0]; tk.ID != "team-full" || tk.Used != 6 {
			t.Errorf("instance %d: top key %+v; want team-full with 6 units used", i, tk)
		}
	}
}
