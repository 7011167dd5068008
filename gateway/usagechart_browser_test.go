package gateway_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"testing"
	"time"

	"trendgate/admin"
	"trendgate/auth"
	"trendgate/config"
	"trendgate/demo"
	"trendgate/gateway"
	"trendgate/gateway/gatewaytest"
	"trendgate/internal/clock"
)

// TestUsageChartInBrowser: after three simulated days of traffic from two
// accounts, the dashboard drawn by headless Chromium shows each account's
// units by day (the bars carry the admin API's figures) against its daily
// quota, and the top accounts by units this month in order.
func TestUsageChartInBrowser(t *testing.T) {
	bin := chromiumOrSkip(t)
	start := time.Date(2026, 11, 17, 10, 0, 0, 0, time.UTC)
	clk := clock.NewFake(start)
	up, err := demo.New(demo.Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	upSrv := httptest.NewServer(up)
	t.Cleanup(func() { up.Close(); upSrv.Close() })
	acme, solo := gatewaytest.NewKey(t), gatewaytest.NewKey(t)
	cfg := config.Default()
	cfg.Upstream.BaseURL = upSrv.URL
	noLog := false
	cfg.Log.Access = &noLog
	daily := int64(40)
	cfg.Accounts = []config.Account{{ID: "acme", Plan: "full", Daily: &daily}}
	cfg.Keys = []config.Key{
		{ID: "acme-web", SHA256: auth.Digest(acme), Account: "acme"},
		{ID: "solo", SHA256: auth.Digest(solo), Plan: "full"},
	}
	gw, err := gateway.New(cfg, gateway.Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	h := &gatewaytest.Harness{T: t, Clock: clk, Gateway: gw, Config: cfg}
	h.Serve()
	for day := range 3 {
		clk.Set(start.AddDate(0, 0, day))
		for range day + 1 {
			h.Get("/api4/public/topic/bitcoin/whatsup/v1", acme)
		}
		h.Get("/api4/public/topics/list/v1", solo)
	}

	dom := string(headless(t, bin, h.Admin+"/", "--virtual-time-budget=8000", "--dump-dom"))
	if !regexp.MustCompile(`<body[^>]*data-usage="drawn"`).MatchString(dom) {
		t.Fatalf("the usage charts were not drawn:\n%.3000s", dom)
	}
	resp, body := h.AdminDo(http.MethodGet, "/usage?from=2026-11-01&to=2026-11-19", "")
	var hist admin.UsageHistory
	if err := json.Unmarshal(body, &hist); resp.StatusCode != 200 || err != nil || len(hist.Series) != 2 {
		t.Fatalf("GET /usage: %d %s", resp.StatusCode, body)
	}
	bar := regexp.MustCompile(`<rect[^>]*data-date="([0-9-]+)"[^>]*data-units="([0-9]+)"`)
	for _, s := range hist.Series {
		chart := regexp.MustCompile(`(?s)<svg[^>]*data-account="` + s.Account + `".*?</svg>`).FindString(dom)
		if chart == "" {
			t.Fatalf("no chart for %s", s.Account)
		}
		got := map[string]string{}
		bars := bar.FindAllStringSubmatch(chart, -1)
		for _, m := range bars {
			if m[2] != "0" {
				got[m[1]] = m[2]
			}
		}
		want := map[string]string{}
		for _, d := range s.Days {
			want[d.Date.String()] = jsonNum(d.Units)
		}
		if len(bars) != 30 || !mapsEqual(got, want) {
			t.Errorf("%s: %d bars, non-zero %v; want 30 bars, non-zero %v", s.Account, len(bars), got, want)
		}
		hasQuota := regexp.MustCompile(`<line[^>]*data-quota="40"`).MatchString(chart)
		if hasQuota != (s.Account == "acme") {
			t.Errorf("%s: quota line %v, want it only for acme (daily 40)", s.Account, hasQuota)
		}
	}
	top := regexp.MustCompile(`<tr data-account="([^"]+)"`).FindAllStringSubmatch(dom, -1)
	if len(top) != 2 || top[0][1] != "acme" || top[1][1] != "solo" {
		t.Errorf("top accounts this month: %v, want acme then solo", top)
	}
}

func jsonNum(v int64) string { b, _ := json.Marshal(v); return string(b) }

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
