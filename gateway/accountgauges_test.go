package gateway_test

import (
	"net/http"
	"strings"
	"testing"

	"trendgate/auth"
	"trendgate/config"
	"trendgate/gateway/gatewaytest"
)

// usageAccount gives cfg account "acme" (full plan, daily quota 100) with
// the keys acme-web and acme-batch.
func usageAccount(cfg *config.Config, web, batch string) {
	gatewaytest.RoomyFullPlan(cfg)
	daily := int64(100)
	cfg.Accounts = append(cfg.Accounts, config.Account{ID: "acme", Plan: config.PlanFull, Daily: &daily})
	cfg.Keys = append(cfg.Keys,
		config.Key{ID: "acme-web", SHA256: auth.Digest(web), Account: "acme"},
		config.Key{ID: "acme-batch", SHA256: auth.Digest(batch), Account: "acme"})
}

// TestAccountQuotaGauges: the account gauges sum what an account's keys
// used, once per account (not per key), and a key without an account is
// an account of its own.
func TestAccountQuotaGauges(t *testing.T) {
	web, batch := gatewaytest.NewKey(t), gatewaytest.NewKey(t)
	h := gatewaytest.New(t, func(c *config.Config) { usageAccount(c, web, batch) })
	h.Get("/api4/public/topics/list/v1", web)
	h.Get("/api4/public/topic/bitcoin/whatsup/v1", batch)
	h.Get("/api4/public/topics/list/v1", h.Full)
	costs := h.Config.Limits.Costs
	reg := h.Gateway.Registry()
	for _, tc := range []struct {
		name, account, window string
		want                  float64
	}{
		{"trendgate_account_quota_used_units", "acme", "day", float64(costs.List + costs.Whatsup)},
		{"trendgate_account_quota_used_units", "acme", "month", float64(costs.List + costs.Whatsup)},
		{"trendgate_account_quota_limit_units", "acme", "day", 100},
		{"trendgate_account_quota_used_units", "team-full", "day", float64(costs.List)},
		{"trendgate_account_quota_used_units", "team-limited", "day", 0},
	} {
		if got := gatewaytest.Metric(t, reg, tc.name, "account", tc.account, "window", tc.window); got != tc.want {
			t.Errorf("%s{%s,%s}: got %v; want %v", tc.name, tc.account, tc.window, got, tc.want)
		}
	}
	_, body := h.AdminDo(http.MethodGet, "/metrics", "")
	if n := strings.Count(string(body), `trendgate_account_quota_limit_units{account="acme",window="day"}`); n != 1 {
		t.Errorf("acme's daily limit series appears %d times; want once", n)
	}
	if strings.Contains(string(body), `account="acme-web"`) {
		t.Errorf("a key of an account has account series of its own")
	}
}
