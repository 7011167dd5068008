package gateway_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"trendgate/config"
	"trendgate/gateway/gatewaytest"
)

const adminToken = "admin-test-token"

// TestAdminToken: with admin.token set every admin route but the probes
// (/healthz, /readyz) needs it.
func TestAdminToken(t *testing.T) {
	h := gatewaytest.New(t, func(c *config.Config) { c.Admin.Token = adminToken })
	tests := []struct {
		name, method, path, token string
		want                      int
	}{
		{"healthz open", http.MethodGet, "/healthz", "", http.StatusOK},
		// Probes carry no secret: a probe has no token to send.
		{"readyz open", http.MethodGet, "/readyz", "", http.StatusOK},
		{"metrics without token", http.MethodGet, "/metrics", "", http.StatusUnauthorized},
		{"metrics wrong token", http.MethodGet, "/metrics", "wrong", http.StatusUnauthorized},
		{"metrics token prefix", http.MethodGet, "/metrics", adminToken[:5], http.StatusUnauthorized},
		{"metrics", http.MethodGet, "/metrics", adminToken, http.StatusOK},
		{"purge without token", http.MethodPost, "/purge?all=true", "", http.StatusUnauthorized},
		{"purge", http.MethodPost, "/purge?all=true", adminToken, http.StatusOK},
		{"purge without selector", http.MethodPost, "/purge", adminToken, http.StatusBadRequest},
		{"purge by GET", http.MethodGet, "/purge?all=true", adminToken, http.StatusMethodNotAllowed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := h.AdminDo(tc.method, tc.path, tc.token)
			if resp.StatusCode != tc.want {
				t.Fatalf("%s %s: got %d %s; want %d", tc.method, tc.path, resp.StatusCode, body, tc.want)
			}
			if tc.want == http.StatusUnauthorized {
				if e := gatewaytest.DecodeError(t, body); e.Code != "invalid_admin_token" {
					t.Errorf("code: got %q; want invalid_admin_token", e.Code)
				}
				if resp.Header.Get("WWW-Authenticate") == "" {
					t.Error("401 without WWW-Authenticate")
				}
			}
		})
	}
}

// TestAdminPurge: purging by key, topic or all removes exactly the selected
// entries, so the next request for them is a miss that reaches the
// upstream, while the others stay hits.
func TestAdminPurge(t *testing.T) {
	const (
		btcWhatsup = "/api4/public/topic/bitcoin/whatsup/v1"
		btcSeries  = "/api4/public/topic/bitcoin/time-series/v1"
		ethWhatsup = "/api4/public/topic/ethereum/whatsup/v1"
	)
	all := []string{btcWhatsup, btcSeries, ethWhatsup}
	tests := []struct {
		name   string
		query  string
		purged []string // targets that must miss afterwards; the rest must hit
	}{
		{"by key", "key=" + url.QueryEscape("v2|whatsup|bitcoin"), []string{btcWhatsup}},
		{"by topic", "topic=BitCoin", []string{btcWhatsup, btcSeries}},
		{"all", "all=true", all},
		{"unknown key", "key=" + url.QueryEscape("v2|whatsup|nosuch"), nil},
		// The public URL as a client sent it, in another spelling: the
		// admin canonicalizes it exactly as the request path does.
		{"by url", "url=/api4/public/topic/BITCOIN/time-series/v1?bucket=hours&interval=1w", []string{btcSeries}},
		{"by url, not cached", "url=/api4/public/topic/dogecoin/whatsup/v1", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := gatewaytest.New(t, nil)
			for _, target := range all {
				if resp, body := h.Get(target, h.Full); resp.StatusCode != http.StatusOK {
					t.Fatalf("warm %s: %d %s", target, resp.StatusCode, body)
				}
			}
			for _, target := range all { // all cached now
				before := h.Up.Count()
				h.Get(target, h.Full)
				if h.Up.Count() != before {
					t.Fatalf("%s reached the upstream while cached", target)
				}
			}
			resp, body := h.AdminDo(http.MethodPost, "/purge?"+tc.query, "")
			if len(tc.purged) == 0 {
				// Nothing matched: said so (it used to be a silent 0).
				if resp.StatusCode != http.StatusNotFound || gatewaytest.DecodeError(t, body).Code != "not_cached" {
					t.Errorf("purge answer: %d %s; want 404 not_cached", resp.StatusCode, body)
				}
			} else {
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("purge: %d %s", resp.StatusCode, body)
				}
				var out struct{ Purged int }
				if err := json.Unmarshal(body, &out); err != nil || out.Purged != len(tc.purged) {
					t.Errorf("purge answer: got %s (%v); want purged=%d", body, err, len(tc.purged))
				}
			}
			for _, target := range all {
				wantMiss := false
				for _, p := range tc.purged {
					wantMiss = wantMiss || p == target
				}
				before := h.Up.Count()
				resp, _ := h.Get(target, h.Full)
				miss := h.Up.Count() > before
				if resp.StatusCode != http.StatusOK || miss != wantMiss {
					t.Errorf("%s after purge: status %d, upstream fetched %v (Cache-Status %q); want 200 and fetched %v",
						target, resp.StatusCode, miss, resp.Header.Get("Cache-Status"), wantMiss)
				}
			}
		})
	}
}

// expoSample returns the sum of the counter or gauge samples of name whose
// labels include want; found is false when no sample matched.
func expoSample(fams map[string]*dto.MetricFamily, name string, want map[string]string) (v float64, found bool) {
	f, ok := fams[name]
	if !ok {
		return 0, false
	}
next:
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for k, val := range want {
			if have[k] != val {
				continue next
			}
		}
		found = true
		switch {
		case m.Counter != nil:
			v += m.GetCounter().GetValue()
		case m.Gauge != nil:
			v += m.GetGauge().GetValue()
		}
	}
	return v, found
}

// TestMetricsAfterTraffic drives known traffic and checks the exposition
// moved accordingly.
func TestMetricsAfterTraffic(t *testing.T) {
	one, burst := 1.0, 1
	h := gatewaytest.New(t, func(c *config.Config) {
		c.Keys[1].PerSecond, c.Keys[1].Burst = &one, &burst // team-limited: 1 request, then 429 (clock stands still)
		p := c.Plans["limited"]
		p.Endpoints = []string{"list", "series", "tsv"} // whatsup (cost 5) could never pass a burst of 1
		c.Plans["limited"] = p
	})
	const series = "/api4/public/topic/bitcoin/time-series/v1" // costs 1 unit
	for i, want := range []int{200, 200} {                     // a miss, then a hit
		if resp, body := h.Get(gatewaytest.ListPath, h.Full); resp.StatusCode != want {
			t.Fatalf("full request %d: %d %s", i, resp.StatusCode, body)
		}
	}
	if resp, _ := h.Get(series, h.Limited); resp.StatusCode != http.StatusOK {
		t.Fatalf("limited request: %d", resp.StatusCode)
	}
	if resp, _ := h.Get(series, h.Limited); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("limited request over burst: %d; want 429", resp.StatusCode)
	}
	if resp, _ := h.Get(gatewaytest.ListPath, "tg_wrong_key"); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("wrong key: %d; want 401", resp.StatusCode)
	}
	if err := h.Gateway.Reload(h.Config); err != nil {
		t.Fatal(err)
	}
	bad := *h.Config
	bad.Plans = nil
	if err := h.Gateway.Reload(&bad); err == nil {
		t.Fatal("Reload accepted a config without plans")
	}

	fams := h.Scrape("")
	tests := []struct {
		name   string
		metric string
		labels map[string]string
		want   float64 // exact, or a lower bound when least
		least  bool
	}{
		{"requests full list 200", "trendgate_requests_total", map[string]string{"route": "list", "status": "200", "plan": "full"}, 2, false},
		{"requests limited series 200", "trendgate_requests_total", map[string]string{"route": "series", "status": "200", "plan": "limited"}, 1, false},
		{"requests limited series 429", "trendgate_requests_total", map[string]string{"route": "series", "status": "429", "plan": "limited"}, 1, false},
		{"requests 401", "trendgate_requests_total", map[string]string{"status": "401"}, 1, false},
		{"cache hits", "trendgate_cache_requests_total", map[string]string{"outcome": "hit"}, 1, false},
		{"cache misses", "trendgate_cache_requests_total", map[string]string{"outcome": "miss"}, 2, false},
		{"upstream requests", "trendgate_upstream_requests_total", nil, 2, false},
		{"rate-limit rejections", "trendgate_rate_limited_total", map[string]string{"reason": "rate_limited"}, 1, false},
		{"quota units team-full", "trendgate_quota_charged_units_total", map[string]string{"account": "team-full"}, 2, true},
		{"quota units team-limited", "trendgate_quota_charged_units_total", map[string]string{"account": "team-limited"}, 1, true},
		{"auth failures", "trendgate_auth_failures_total", nil, 1, false},
		{"reloads ok", "trendgate_config_reloads_total", map[string]string{"result": "ok"}, 1, false},
		{"reloads refused", "trendgate_config_reloads_total", map[string]string{"result": "refused"}, 1, false},
		{"ready", "trendgate_ready", nil, 1, false},
		{"latency histogram", "trendgate_request_duration_seconds", nil, 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, found := expoSample(fams, tc.metric, tc.labels)
			if !found {
				t.Fatalf("%s%v: no sample", tc.metric, tc.labels)
			}
			if (tc.least && got < tc.want) || (!tc.least && got != tc.want) {
				t.Errorf("%s%v: got %v; want %v (at least: %v)", tc.metric, tc.labels, got, tc.want, tc.least)
			}
		})
	}
}
