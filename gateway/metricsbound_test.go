package gateway_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"trendgate/auth"
	"trendgate/config"
	"trendgate/gateway/gatewaytest"
	"trendgate/internal/tenantlabel"
)

// manyKeys gives cfg n more keys (load-0 ... load-<n-1>), each an account
// of its own on the full plan, and returns their secrets.
func manyKeys(t *testing.T, cfg *config.Config, n int) []string {
	t.Helper()
	gatewaytest.RoomyFullPlan(cfg)
	secrets := make([]string, n)
	for i := range secrets {
		secrets[i] = gatewaytest.NewKey(t)
		cfg.Keys = append(cfg.Keys, config.Key{ID: fmt.Sprintf("load-%d", i), SHA256: auth.Digest(secrets[i]), Plan: config.PlanFull})
	}
	return secrets
}

// scrapeAfterTraffic starts a gateway with configured keys, sends one
// request with each of the first used of them, and returns the size of a
// /metrics scrape.
func scrapeAfterTraffic(t *testing.T, configured, used int) int {
	var secrets []string
	h := gatewaytest.New(t, func(c *config.Config) { secrets = manyKeys(t, c, configured) })
	for _, s := range secrets[:used] {
		if resp, _ := h.Get("/api4/public/topics/list/v1", s); resp.StatusCode != http.StatusOK {
			t.Fatalf("a request: got %d; want 200", resp.StatusCode)
		}
	}
	resp, body := h.AdminDo(http.MethodGet, "/metrics", "")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: got %d; want 200", resp.StatusCode)
	}
	if strings.Contains(string(body), `key_id="load-`) {
		t.Errorf("a key not in metrics.detail_keys has a series of its own")
	}
	if n := strings.Count(string(body), `trendgate_quota_charged_units_total{account=`); n != tenantlabel.DefaultMaxAccounts+1 {
		t.Errorf("got %d charged-units series; want %d (max_accounts and %s)", n, tenantlabel.DefaultMaxAccounts+1, tenantlabel.Other)
	}
	return len(body)
}

// TestMetricsSizeBounded: what a /metrics scrape costs does not grow with
// the keys configured or used. Per-key series made a scrape at 100,000
// keys 56 MB; with per-account series past a limit folded into one, the
// scrape of 10,000 keys, 1,500 of them used, is no larger than that of
// 1,500 keys all used, and far under 1 MB.
func TestMetricsSizeBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a gateway of 10,000 keys")
	}
	const used = 1500
	small := scrapeAfterTraffic(t, used, used)
	large := scrapeAfterTraffic(t, 10000, used)
	t.Logf("/metrics: %d bytes with %d keys, %d bytes with 10000 (%d used in each)", small, used, large, used)
	if large > 1<<20 {
		t.Errorf("/metrics with 10,000 keys: got %d bytes; want under 1 MiB", large)
	}
	// Numbers differ in their digits (memory, durations): allow for that,
	// not for a series per key (some 100 bytes each, 850 KB here).
	if large-small > 16<<10 {
		t.Errorf("/metrics grew by %d bytes from %d to 10,000 configured keys; want at most 16 KiB", large-small, used)
	}
}

// TestMetricsDetailKeys: no series names a key by default; a reload that
// lists a key in metrics.detail_keys gives its traffic series of its own
// (and its quota gauges), apart from its account's, and removing it stops
// them.
func TestMetricsDetailKeys(t *testing.T) {
	web, batch := gatewaytest.NewKey(t), gatewaytest.NewKey(t)
	h := gatewaytest.New(t, func(c *config.Config) { usageAccount(c, web, batch) })
	reg := h.Gateway.Registry()
	h.Get("/api4/public/topics/list/v1", web)
	h.Get("/api4/public/topics/list/v1", batch)
	// A charge is counted once the handler returns, which may be just
	// after the client has its answer.
	charged := func(key string) float64 {
		return gatewaytest.Metric(t, reg, "trendgate_quota_charged_units_total", "account", "acme", "key_id", key)
	}
	if !gatewaytest.WaitFor(func() bool { return charged("") == 2 }) {
		t.Errorf("acme's charged units: got %v; want 2", charged(""))
	}
	_, body := h.AdminDo(http.MethodGet, "/metrics", "")
	if strings.Contains(string(body), `key_id="acme-web"`) {
		t.Errorf("acme-web has series of its own without metrics.detail_keys")
	}

	next := *h.Config
	next.Metrics.DetailKeys = []string{"acme-web"}
	if err := h.Gateway.Reload(&next); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{web, batch} {
		if resp, b := h.Get("/api4/public/topics/list/v1", k); resp.StatusCode != http.StatusOK {
			t.Fatalf("after the reload: got %d %s; want 200", resp.StatusCode, b)
		}
	}
	gatewaytest.WaitFor(func() bool { return charged("") == 3 && charged("acme-web") == 1 })
	for _, tc := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"trendgate_quota_charged_units_total", []string{"account", "acme", "key_id", "acme-web"}, 1},
		{"trendgate_quota_charged_units_total", []string{"account", "acme", "key_id", ""}, 3},
		{"trendgate_limits_quota_units_reserved_total", []string{"account", "acme", "key_id", "acme-web"}, 1},
		{"trendgate_key_quota_used_units", []string{"key_id", "acme-web", "window", "day"}, 4}, // the account's, which its keys share
		{"trendgate_key_quota_limit_units", []string{"key_id", "acme-web", "window", "day"}, 100},
	} {
		if got := gatewaytest.Metric(t, reg, tc.name, tc.labels...); got != tc.want {
			t.Errorf("%s%v: got %v; want %v", tc.name, tc.labels, got, tc.want)
		}
	}
	_, body = h.AdminDo(http.MethodGet, "/metrics", "")
	if strings.Contains(string(body), `key_id="acme-batch"`) {
		t.Errorf("acme-batch, not listed, has series of its own")
	}

	next.Metrics.DetailKeys = nil
	if err := h.Gateway.Reload(&next); err != nil {
		t.Fatal(err)
	}
	h.Get("/api4/public/topics/list/v1", web)
	if !gatewaytest.WaitFor(func() bool { return charged("") == 4 }) || charged("acme-web") != 1 {
		t.Errorf("after acme-web left detail_keys: got %v for acme, %v for acme-web; want 4 and 1 (no longer counted apart)", charged(""), charged("acme-web"))
	}
	_, body = h.AdminDo(http.MethodGet, "/metrics", "")
	if strings.Contains(string(body), `trendgate_key_quota_used_units{key_id="acme-web"`) {
		t.Errorf("acme-web's quota gauges stay after it left detail_keys")
	}
}

// TestAccountGaugesBounded: past metrics.max_accounts, the account quota
// gauges are those of the accounts nearest a quota, plus the detail
// accounts; the others have none (their use is in GET /keys).
func TestAccountGaugesBounded(t *testing.T) {
	web, batch := gatewaytest.NewKey(t), gatewaytest.NewKey(t)
	h := gatewaytest.New(t, func(c *config.Config) {
		usageAccount(c, web, batch) // acme: daily quota 100
		c.Metrics.MaxAccounts = 1
		c.Metrics.DetailAccounts = []string{"team-limited"}
	})
	h.Get("/api4/public/topic/bitcoin/whatsup/v1", web) // 5 of acme's 100
	h.Get("/api4/public/topics/list/v1", h.Full)        // 1 of team-full's 100,000
	_, body := h.AdminDo(http.MethodGet, "/metrics", "")
	for _, tc := range []struct {
		account string
		want    bool
	}{{"acme", true}, {"team-limited", true}, {"team-full", false}} {
		got := strings.Contains(string(body), `trendgate_account_quota_used_units{account="`+tc.account+`",window="day"}`)
		if got != tc.want {
			t.Errorf("%s has account gauges: got %v; want %v", tc.account, got, tc.want)
		}
	}
}
