package gateway_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"trendgate/auth"
	"trendgate/config"
	"trendgate/gateway/gatewaytest"
	"trendgate/internal/buildinfo"
	"trendgate/internal/clock"
	"trendgate/internal/testing/promtest"
	"trendgate/limits"
)

// TestPlanCheckBeforeLimiter is a regression test: the plan check ran after
// the rate limiter, so a request for an endpoint outside the plan spent
// tokens and soon came back 429 rate_limited instead of 403. Now it is
// refused first and costs nothing.
func TestPlanCheckBeforeLimiter(t *testing.T) {
	h := gatewaytest.New(t, func(c *config.Config) {
		c.Plans["narrow"] = config.Plan{
			Policy:    limits.Policy{PerSecond: 0.001, Burst: 5},
			Endpoints: []string{"list"},
			DataMode:  config.DataModeFull,
		}
		c.Keys[0].Plan = "narrow"
	})
	for i := 0; i < 3; i++ {
		resp, body := h.Get("/api4/public/topic/bitcoin/whatsup/v1", h.Full)
		if resp.StatusCode != 403 || gatewaytest.DecodeError(t, body).Code != "endpoint_not_in_plan" {
			t.Fatalf("whatsup %d: %d %s; want 403 endpoint_not_in_plan", i, resp.StatusCode, body)
		}
		if got := resp.Header.Get("Retry-After"); got != "" {
			t.Errorf("whatsup %d: Retry-After %q on a 403; want none", i, got)
		}
		if resp.Header.Get("RateLimit-Policy") == "" {
			t.Errorf("whatsup %d: no RateLimit-Policy for a valid key", i)
		}
	}
	// The whole burst is still there: five list calls pass.
	for i := 0; i < 5; i++ {
		if resp, body := h.Get("/api4/public/topics/list/v1", h.Full); resp.StatusCode != 200 {
			t.Fatalf("list %d after refused whatsups: %d %s; want 200 (refusals spent tokens)", i, resp.StatusCode, body)
		}
	}
}

// TestAccessLogSaysWhy is a regression test: access lines of refusals did
// not carry the error code the client received (429 rate_limited and 429
// daily_quota_exceeded looked alike), nor the normalized parameters, and a
// failed upstream call logged "upstream": 0. A disabled or expired key
// that trendgate knows was logged without its id.
func TestAccessLogSaysWhy(t *testing.T) {
	rateKey, quotaKey, offKey := gatewaytest.NewKey(t), gatewaytest.NewKey(t), gatewaytest.NewKey(t)
	var clk atomic.Pointer[clock.Fake]
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		clk.Load().Advance(250 * time.Millisecond) // the upstream takes its time, then fails
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = io.WriteString(w, `{"error":"Internal server error"}`)
	}))
	t.Cleanup(failing.Close)
	h := gatewaytest.New(t, func(c *config.Config) {
		c.Plans["tight"] = config.Plan{Policy: limits.Policy{PerSecond: 0.001, Burst: 1}, Endpoints: []string{"list", "series"}, DataMode: config.DataModeFull}
		c.Plans["quota"] = config.Plan{Policy: limits.Policy{Daily: 1}, Endpoints: []string{"list", "series"}, DataMode: config.DataModeFull}
		c.Keys = append(c.Keys,
			config.Key{ID: "rate-team", SHA256: auth.Digest(rateKey), Plan: "tight"},
			config.Key{ID: "quota-team", SHA256: auth.Digest(quotaKey), Plan: "quota"},
			config.Key{ID: "gone-team", SHA256: auth.Digest(offKey), Plan: "full", Disabled: true})
		c.Accounts = []config.Account{{ID: "quota-acct", Plan: "quota"}}
		c.Keys[len(c.Keys)-2].Account, c.Keys[len(c.Keys)-2].Plan = "quota-acct", ""
	})
	clk.Store(h.Clock)

	type want struct {
		status int
		fields map[string]any
		absent []string
	}
	check := func(t *testing.T, resp *http.Response, body []byte, w want) {
		t.Helper()
		if resp.StatusCode != w.status {
			t.Fatalf("status %d %s; want %d", resp.StatusCode, body, w.status)
		}
		line := h.AccessLine(t, resp)
		if w.status >= 400 {
			if got, want := line["code"], gatewaytest.DecodeError(t, body).Code; got != want {
				t.Errorf("access code = %v; want %q (the client's)", got, want)
			}
		}
		for k, v := range w.fields {
			if got := line[k]; got != v {
				t.Errorf("access %s = %v (%T); want %v", k, got, got, v)
			}
		}
		for _, k := range w.absent {
			if v, ok := line[k]; ok {
				t.Errorf("access line has %s = %v; want none", k, v)
			}
		}
		for k, v := range line {
			if s, ok := v.(string); ok && (strings.Contains(s, "tg_") || strings.Contains(s, gatewaytest.UpstreamKey)) {
				t.Errorf("access %s = %q holds a key", k, s)
			}
		}
	}

	t.Run("rate vs quota", func(t *testing.T) {
		h.Get("/api4/public/topics/list/v1", rateKey)
		resp, body := h.Get("/api4/public/topics/list/v1", rateKey)
		check(t, resp, body, want{status: 429, fields: map[string]any{"code": "rate_limited", "key_id": "rate-team"}})
		h.Get("/api4/public/topics/list/v1", quotaKey)
		resp, body = h.Get("/api4/public/topics/list/v1", quotaKey)
		check(t, resp, body, want{status: 429, fields: map[string]any{"code": "daily_quota_exceeded", "key_id": "quota-team", "account": "quota-acct"}})
	})
	t.Run("account", func(t *testing.T) {
		// A key without an account is an account of its own.
		resp, body := h.Get("/api4/public/topics/list/v1", h.Full)
		check(t, resp, body, want{status: 200, fields: map[string]any{"key_id": "team-full", "account": "team-full"}})
	})
	t.Run("canonical request", func(t *testing.T) {
		resp, body := h.Get("/api4/public/topic/BitCoin/time-series/v1?interval=1m&bucket=days", h.Full)
		check(t, resp, body, want{status: 200, fields: map[string]any{
			"route": "series", "topic": "bitcoin", "bucket": "day", "interval": "1m",
		}, absent: []string{"code", "start", "end", "metric"}})
		resp, body = h.Get("/topic/bitcoin/time-series/sentiment.tsv", h.Full)
		check(t, resp, body, want{status: 200, fields: map[string]any{"route": "tsv", "metric": "sentiment"}})
	})
	t.Run("refused known key", func(t *testing.T) {
		resp, body := h.Get("/api4/public/topics/list/v1", offKey)
		check(t, resp, body, want{status: 401, fields: map[string]any{"code": "invalid_api_key"}})
		found := false
		for _, m := range gatewaytest.LogLines(t, h.Logs.String(), "key refused") {
			if m["request_id"] == resp.Header.Get("X-Request-Id") {
				found = true
				if m["key_id"] != "gone-team" || m["reason"] != "disabled" || m["level"] != "info" {
					t.Errorf("key refused line %v; want key_id gone-team, reason disabled, level info", m)
				}
			}
		}
		if !found {
			t.Errorf("no info line names the refused key")
		}
	})
	t.Run("upstream time on failure", func(t *testing.T) {
		// Reload onto the failing upstream: upstream.* needs a restart, so
		// build a second gateway on the same harness config instead.
		h2 := gatewaytest.New(t, func(c *config.Config) { c.Upstream.BaseURL = failing.URL })
		clk.Store(h2.Clock)
		resp, body := h2.Get("/api4/public/topic/bitcoin/whatsup/v1", h2.Full)
		if resp.StatusCode < 500 {
			t.Fatalf("status %d %s; want a 5xx", resp.StatusCode, body)
		}
		line := h2.AccessLine(t, resp)
		if got, want := line["code"], gatewaytest.DecodeError(t, body).Code; got != want {
			t.Errorf("access code = %v; want %q", got, want)
		}
		if got, _ := line["upstream"].(float64); got < 0.25 {
			t.Errorf("access upstream = %v; want the 250ms the failing call took", line["upstream"])
		}
	})
}

// TestRedisAvailableOnlyInClusterMode is a regression test: the gauge
// trendgate_limits_redis_available was exported as 0 by every gateway
// without Redis, so a "Redis down" alert fired on every single-instance
// deployment. (The cluster tests check it reads 1 and 0 with Redis.)
func TestRedisAvailableOnlyInClusterMode(t *testing.T) {
	h := gatewaytest.New(t, nil)
	if _, found := promtest.Sum(t, h.Gateway.Registry(), "trendgate_limits_redis_available"); found {
		t.Errorf("trendgate_limits_redis_available is exported without redis.url")
	}
	if _, found := promtest.Sum(t, h.Gateway.Registry(), "trendgate_limits_decisions_total"); !found {
		t.Errorf("trendgate_limits_decisions_total is missing: the other limits metrics must stay")
	}
}

// TestBuildInfo: trendgate_build_info carries the build's version, commit
// and Go version, and so does the startup ("serving") log line.
func TestBuildInfo(t *testing.T) {
	h := gatewaytest.New(t, nil)
	b := buildinfo.Read()
	if v, found := promtest.Sum(t, h.Gateway.Registry(), "trendgate_build_info", "version", b.Version, "commit", b.Commit, "goversion", b.GoVersion); !found || v != 1 {
		t.Errorf("trendgate_build_info = %v (found %v); want 1 with labels %+v", v, found, b)
	}
	var lines []map[string]any
	gatewaytest.PollUntil(func() bool { lines = gatewaytest.LogLines(t, h.Logs.String(), "serving"); return len(lines) > 0 })
	if len(lines) != 1 || lines[0]["version"] != b.Version || lines[0]["commit"] != b.Commit || lines[0]["go"] != b.GoVersion {
		t.Errorf("serving lines %v; want one with version %s, commit %s, go %s", lines, b.Version, b.Commit, b.GoVersion)
	}
}

// TestReloadSaysWhatHappened is a regression test for three gaps: a reload
// did not say what it changed; a changed setting that needs a restart
// (upstream.api_key, server.listen) was taken silently, so an operator
// rotating the upstream credential believed it live; and a file that did
// not parse was neither counted as refused nor logged only once.
func TestReloadSaysWhatHappened(t *testing.T) {
	h := gatewaytest.New(t, nil)
	boot := h.Gateway.Config()
	next := *boot
	next.Server.Listen = "127.0.0.1:18181"
	next.Upstream.APIKey = "rotated-upstream-credential"
	next.Cache.TTL.List = 2 * time.Minute
	next.Plans = map[string]config.Plan{"full": boot.Plans["full"], "limited": boot.Plans["limited"]}
	lp := next.Plans["limited"]
	lp.Burst = 11
	next.Plans["limited"] = lp
	newcomer := gatewaytest.NewKey(t)
	next.Keys = []config.Key{boot.Keys[0], {ID: "team-new", SHA256: auth.Digest(newcomer), Plan: "full"}}
	next.Keys[0].Disabled = true
	if err := h.Gateway.Reload(&next); err != nil {
		t.Fatal(err)
	}

	lines := gatewaytest.LogLines(t, h.Logs.String(), "config reloaded")
	if len(lines) != 1 {
		t.Fatalf("%d 'config reloaded' lines; want 1:\n%s", len(lines), h.Logs)
	}
	wantLists := map[string][]any{
		"keys_added":       {"team-new"},
		"keys_removed":     {"team-limited"},
		"keys_disabled":    {"team-full"},
		"plans_changed":    {"limited"},
		"settings_changed": {"cache.ttl.list"},
		"restart_pending":  {"server.listen", "upstream.api_key"},
	}
	for field, want := range wantLists {
		got, _ := lines[0][field].([]any)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("reload line %s = %v; want %v", field, lines[0][field], want)
		}
	}
	for _, setting := range []string{"server.listen", "upstream.api_key"} {
		if n := len(gatewaytest.LogLines(t, h.Logs.String(), setting+" changed; takes effect after a restart")); n != 1 {
			t.Errorf("%d warnings for %s; want 1", n, setting)
		}
	}
	if strings.Contains(h.Logs.String(), "rotated-upstream-credential") {
		t.Errorf("the log holds the new upstream credential")
	}
	if v := gatewaytest.Metric(t, h.Gateway.Registry(), "trendgate_config_restart_pending"); v != 1 {
		t.Errorf("trendgate_config_restart_pending = %v; want 1", v)
	}
	// Not live: the upstream still gets the credential the process started with.
	if resp, body := h.Get("/api4/public/topic/bitcoin/whatsup/v1", newcomer); resp.StatusCode != 200 {
		t.Fatalf("cold request after the reload: %d %s; want 200 with the old upstream credential", resp.StatusCode, body)
	}
	reqs := h.Up.Requests()
	if got := reqs[len(reqs)-1].Header.Get("Authorization"); got != "Bearer "+gatewaytest.UpstreamKey {
		t.Errorf("upstream Authorization after the reload = %q; want the startup credential", got)
	}

	// Back to the running values: nothing pending any more.
	if err := h.Gateway.Reload(boot); err != nil {
		t.Fatal(err)
	}
	if v := gatewaytest.Metric(t, h.Gateway.Registry(), "trendgate_config_restart_pending"); v != 0 {
		t.Errorf("trendgate_config_restart_pending after reverting = %v; want 0", v)
	}

	// Refusals: by validation, and a file that did not even parse. Each is
	// counted and logged once.
	bad := *boot
	bad.Log.Level = "loud"
	if err := h.Gateway.Reload(&bad); err == nil {
		t.Fatal("invalid config reloaded")
	}
	h.Gateway.RefuseReload(&config.Error{File: "trendgate.yaml", Problems: []string{"server.listn: unknown setting (line 2)"}})
	if v := gatewaytest.Metric(t, h.Gateway.Registry(), "trendgate_config_reloads_total", "result", "refused"); v != 2 {
		t.Errorf("refused reloads = %v; want 2", v)
	}
	if n := len(gatewaytest.LogLines(t, h.Logs.String(), "config reload refused; the previous configuration keeps serving")); n != 2 {
		t.Errorf("%d refusal lines; want 2 (one each)", n)
	}
}

// TestClientRequestID: an incoming X-Request-ID (the load balancer's) is
// logged as client_request_id, sanitized and bounded; from a trusted proxy
// a well-formed one becomes the request id itself.
func TestClientRequestID(t *testing.T) {
	long := strings.Repeat("x", 200)
	tests := []struct {
		name       string
		trusted    []string
		incoming   string
		adopted    bool
		wantClient string // the access line's client_request_id; "" absent
	}{
		{"untrusted peer", nil, "lb-7f3a:42", false, "lb-7f3a:42"},
		{"trusted peer", []string{"127.0.0.0/8"}, "lb-7f3a:42", true, ""},
		{"trusted peer, unsafe value", []string{"127.0.0.0/8"}, `a"b <script>`, false, "a_b__script_"},
		{"too long", []string{"127.0.0.0/8"}, long, false, long[:128]},
		{"other proxy trusted", []string{"10.0.0.0/8"}, "lb-1", false, "lb-1"},
		{"none", nil, "", false, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := gatewaytest.New(t, func(c *config.Config) { c.Server.TrustedProxies = tc.trusted })
			var hdr []string
			if tc.incoming != "" {
				hdr = []string{"X-Request-ID", tc.incoming}
			}
			resp, body := h.Get("/api4/public/topics/list/v1?bogus=1", h.Full, hdr...)
			id := resp.Header.Get("X-Request-Id")
			if got := gatewaytest.DecodeError(t, body).RequestID; got != id {
				t.Errorf("body request_id %q; want the X-Request-Id header %q", got, id)
			}
			if (id == tc.incoming) != tc.adopted {
				t.Errorf("request id %q, incoming %q: adopted %v; want %v", id, tc.incoming, id == tc.incoming, tc.adopted)
			}
			line := h.AccessLine(t, resp)
			if got, _ := line["client_request_id"].(string); got != tc.wantClient {
				t.Errorf("client_request_id = %q; want %q", got, tc.wantClient)
			}
		})
	}
}
