package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
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

// chromiumOrSkip returns the path of the chromium binary; without one the
// test is skipped, or fails when CI=true.
func chromiumOrSkip(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium is not on PATH (CI=true: .ci/run installs the Debian package chromium)")
	}
	t.Skip("chromium is not on PATH; skipping the real-browser dashboard test (apt-get install chromium to run it)")
	return ""
}

// headless runs chromium headless on url with extra flags and returns its
// standard output. Its whole process group is killed when it overruns.
func headless(t *testing.T, bin, url string, extra ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	args := append([]string{
		"--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--no-default-browser-check",
		"--disable-extensions", "--disable-background-networking", "--disable-sync", "--hide-scrollbars",
		"--disable-dev-shm-usage", // containers often have a tiny /dev/shm
		"--user-data-dir=" + t.TempDir(),
	}, extra...)
	cmd := exec.CommandContext(ctx, bin, append(args, url)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var stderr limitedBuffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium %v: %v\n%s", extra, err, stderr.String())
	}
	return out
}

// limitedBuffer keeps the first 8 KiB written to it.
type limitedBuffer struct{ b []byte }

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := 8<<10 - len(l.b); room > 0 {
		l.b = append(l.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (l *limitedBuffer) String() string { return string(l.b) }

// figureRE matches an element carrying a data-figure attribute and its text.
var figureRE = regexp.MustCompile(`<[a-z0-9]+[^>]*\sdata-figure="([^"]+)"[^>]*>([^<]*)<`)

// TestDashboardInBrowser starts the gateway in its demo configuration (the
// demo upstream, the built-in plans, a full and a limited key) with some
// traffic, opens the dashboard in headless Chromium, and checks that the
// figures in the live DOM are the admin API's. The injected clock stands
// still while the page loads, so the page and the test read the same
// summary; the demo upstream's answers move it by 120 ms each, so misses
// have a latency. TRENDGATE_SCREENSHOT=FILE.png keeps the 1280×800
// screenshot there (docs/dashboard.png is made so).
func TestDashboardInBrowser(t *testing.T) {
	bin := chromiumOrSkip(t)
	clk := clock.NewFake(gatewaytest.Now)
	up, err := demo.New(demo.Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	slowUp := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		clk.Advance(120 * time.Millisecond)
		up.ServeHTTP(w, r)
	})
	upSrv := httptest.NewServer(slowUp)
	t.Cleanup(func() { up.Close(); upSrv.Close() })

	full, limited := gatewaytest.NewKey(t), gatewaytest.NewKey(t)
	cfg := config.Default()
	cfg.Upstream.BaseURL = upSrv.URL
	cfg.Upstream.Budget.PerMinute, cfg.Upstream.Budget.PerDay = 60, 2000
	noLog := false
	cfg.Log.Access = &noLog
	cfg.Keys = []config.Key{
		{ID: "demo-full", SHA256: auth.Digest(full), Plan: "full"},
		{ID: "demo-limited", SHA256: auth.Digest(limited), Plan: "limited"},
	}
	// Account "small" has two keys: team-small and the disabled old-team.
	small, daily := gatewaytest.NewKey(t), int64(60)
	cfg.Accounts = []config.Account{{ID: "small", Plan: "limited", Daily: &daily}}
	cfg.Keys = append(cfg.Keys, config.Key{ID: "team-small", SHA256: auth.Digest(small), Account: "small"})
	// Keys the page marks: one disabled, one past its expiry.
	expired := gatewaytest.Now.Add(-time.Hour)
	cfg.Keys = append(cfg.Keys,
		config.Key{ID: "old-team", SHA256: auth.Digest(gatewaytest.NewKey(t)), Account: "small", Disabled: true},
		config.Key{ID: "trial", SHA256: auth.Digest(gatewaytest.NewKey(t)), Plan: "full", Expires: &expired})
	gw, err := gateway.New(cfg, gateway.Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	h := &gatewaytest.Harness{T: t, Clock: clk, Gateway: gw, Config: cfg, Full: full, Limited: limited}
	h.Serve()

	// Traffic over six seconds of the fake clock.
	topics := []string{"bitcoin", "%23ai", "ethereum", "ai%20agents", "%24capitalism", "solana"}
	for s := range 6 {
		for i, topic := range topics[:6-s] {
			h.Get("/api4/public/topic/"+topic+"/time-series/v1", full)
			if i%2 == 0 {
				h.Get("/api4/public/topic/"+topic+"/whatsup/v1", full)
			}
		}
		for range 7 { // burst 10, 5/s: some get 429
			h.Get("/api4/public/topics/list/v1", limited)
		}
		h.Get("/api4/public/topic/"+topics[s]+"/whatsup/v1", small) // 5 units a second
		h.Get("/api4/public/topics/list/v1", "tg_"+fmt.Sprint(s)+"nope")
		h.Get("/api4/public/topic/bitcoin/time-series/v1?bucket=week", full)
		clk.Set(gatewaytest.Now.Add(time.Duration(s+1) * time.Second))
	}

	// A reload that leaves a setting waiting for a restart, then one refused:
	// the page shows the refusal and what still waits.
	changed := *cfg
	changed.Cache.MaxBytes *= 2
	if err := gw.Reload(&changed); err != nil {
		t.Fatal(err)
	}
	gw.RefuseReload(errors.New(`config: keys[0].plan: unknown plan "gold"`))

	page := h.Admin + "/"
	dom := string(headless(t, bin, page, "--virtual-time-budget=8000", "--dump-dom"))
	if !regexp.MustCompile(`<body[^>]*data-state="live"`).MatchString(dom) {
		t.Fatalf("the page did not go live (its fetch of /summary failed?):\n%.3000s", dom)
	}
	got := map[string]string{}
	for _, m := range figureRE.FindAllStringSubmatch(dom, -1) {
		got[m[1]] = html.UnescapeString(m[2])
	}

	resp, body := h.AdminDo(http.MethodGet, "/summary", "")
	var s admin.Summary
	if err := json.Unmarshal(body, &s); resp.StatusCode != 200 || err != nil {
		t.Fatalf("GET /summary: %d %v", resp.StatusCode, err)
	}
	want := map[string]string{
		"version":           s.Version,
		"uptime":            uptimeText(s.UptimeSeconds),
		"cache_fill":        fmt.Sprintf("%.1f%%", s.Cache.FillPct),
		"cache_mib":         fmt.Sprintf("%.1f", float64(s.Cache.Bytes+s.Cache.PinnedBytes)/(1<<20)),
		"cache_max_mib":     fmt.Sprintf("%.1f", float64(s.Cache.MaxBytes)/(1<<20)),
		"cache_entries":     strconv.Itoa(s.Cache.Entries),
		"cache_rate_window": strconv.Itoa(s.RateWindowSeconds),
		"cache_hit_ratio":   fmt.Sprintf("%.1f%%", *s.HitRatioPct),
		"reload_result":     s.Reload.Result,
		"reload_at":         s.Reload.At.UTC().Format("2006-01-02 15:04:05") + " UTC",
		"reload_error":      s.Reload.Error,
		"restart_pending":   strings.Join(s.Reload.RestartPending, ", "),
		"rate_window":       strconv.Itoa(s.RateWindowSeconds),
		"hit_ratio":         fmt.Sprintf("%.1f%%", *s.HitRatioPct),
		"hit_ratio_total":   fmt.Sprintf("%.1f%%", *s.HitRatioTotalPct),
		"breaker":           s.Upstream.Breaker,
		"up_minute":         strconv.FormatUint(s.Upstream.CallsLastMinute, 10),
		"up_minute_limit":   strconv.Itoa(s.Upstream.PerMinuteLimit),
		"up_day_left":       strconv.FormatInt(*s.Upstream.DayLeft, 10),
		"up_day_limit":      strconv.Itoa(s.Upstream.PerDayLimit),
		"up_total":          strconv.FormatUint(s.Upstream.CallsTotal, 10),
		"p50":               fmt.Sprintf("%.2f", s.Latency.P50Ms),
		"p99":               fmt.Sprintf("%.2f", s.Latency.P99Ms),
		"latency_samples":   strconv.FormatUint(s.Latency.Samples, 10),
	}
	for _, o := range s.Outcomes {
		want["rate."+o.Outcome] = fmt.Sprintf("%.1f", o.PerSecond)
		want["total."+o.Outcome] = strconv.FormatUint(o.Total, 10)
	}
	quota := func(q *admin.QuotaShare) string {
		if q == nil {
			return "no quota"
		}
		return fmt.Sprintf("%d / %d", q.Used, q.Limit)
	}
	states := map[string]string{}
	for i, k := range s.TopKeys {
		p := "key." + strconv.Itoa(i) + "."
		want[p+"id"], want[p+"day"], want[p+"month"] = k.ID, quota(k.Daily), quota(k.Monthly)
		if k.State != "active" {
			want[p+"state"] = k.State
		}
		states[k.ID] = k.State
	}
	for i, sh := range s.Upstream.Shares {
		p := "share." + strconv.Itoa(i) + "."
		want[p+"account"], want[p+"used"], want[p+"guaranteed"] = sh.Account, strconv.FormatInt(sh.Used, 10), "–"
		if sh.Active {
			want[p+"guaranteed"] = strconv.FormatInt(sh.Guaranteed, 10)
		}
	}
	accountKeys := map[string][]string{}
	for i, a := range s.TopAccounts {
		p := "account." + strconv.Itoa(i) + "."
		want[p+"id"], want[p+"keys"] = a.ID, a.Plan+" · "+strings.Join(a.Keys, ", ")
		want[p+"day"], want[p+"month"] = quota(a.Daily), quota(a.Monthly)
		accountKeys[a.ID] = a.Keys
	}
	if len(s.TopAccounts) != 4 || !slices.Equal(accountKeys["small"], []string{"old-team", "team-small"}) {
		t.Errorf("top accounts %+v; want four, small with old-team and team-small (id order)", s.TopAccounts)
	}
	if states["old-team"] != "disabled" || states["trial"] != "expired" || states["demo-full"] != "active" {
		t.Errorf("key states %v; want old-team disabled, trial expired, the others active", states)
	}
	if s.Reload.Result != "refused" || !strings.Contains(s.Reload.Error, "unknown plan") || !slices.Equal(s.Reload.RestartPending, []string{"cache.max_bytes"}) {
		t.Errorf("reload %+v; want refused, its error, and cache.max_bytes pending", s.Reload)
	}
	if s.Cache.MaxBytes != cfg.Cache.MaxBytes || s.Cache.Entries == 0 || s.Cache.FillPct <= 0 {
		t.Errorf("cache %+v; want the configured max_bytes and some entries", s.Cache)
	}
	for i, tc := range s.TopTopics.ByRequests {
		want["topic_req."+strconv.Itoa(i)+".topic"], want["topic_req."+strconv.Itoa(i)+".n"] = tc.Topic, strconv.FormatUint(tc.Requests, 10)
	}
	for i, tc := range s.TopTopics.ByUpstream {
		want["topic_up."+strconv.Itoa(i)+".topic"], want["topic_up."+strconv.Itoa(i)+".n"] = tc.Topic, strconv.FormatUint(tc.UpstreamCalls, 10)
	}
	for i, c := range s.Refusals.ByCode {
		want["refusal."+strconv.Itoa(i)+".code"], want["refusal."+strconv.Itoa(i)+".n"] = c.Code, strconv.FormatUint(c.Count, 10)
	}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("figure %s: the page shows %q; the admin API says %q", name, got[name], w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("the page shows %d figures; the admin API has %d", len(got), len(want))
	}
	// The traffic must have produced every kind of figure, or the
	// comparison above proves little.
	if s.Outcomes[0].Total == 0 || s.Outcomes[2].Total == 0 || s.Outcomes[4].Total == 0 || s.Outcomes[5].Total == 0 ||
		len(s.TopKeys) != 5 || len(s.TopTopics.ByRequests) != 6 || len(s.Refusals.ByCode) < 3 || s.Latency.P99Ms < 100 {
		t.Errorf("the traffic left figures empty: %+v", s)
	}

	shot := filepath.Join(t.TempDir(), "dashboard.png")
	if p := os.Getenv("TRENDGATE_SCREENSHOT"); p != "" {
		shot = p
	}
	headless(t, bin, page, "--virtual-time-budget=8000", "--window-size=1280,800", "--screenshot="+shot)
	if fi, err := os.Stat(shot); err != nil || fi.Size() < 10_000 {
		t.Errorf("screenshot %s: %v; want a PNG of the page", shot, errOrSize(fi, err))
	}
	if p := os.Getenv("TRENDGATE_SCREENSHOT_PHONE"); p != "" {
		headless(t, bin, page, "--virtual-time-budget=8000", "--window-size=390,2300", "--screenshot="+p)
	}

	// With an admin token configured the page shows no figures: it asks
	// for the token (its fetch without one got 401).
	withToken := *cfg
	withToken.Admin.Token = "admin-browser-token"
	if err := gw.Reload(&withToken); err != nil {
		t.Fatal(err)
	}
	dom = string(headless(t, bin, page, "--virtual-time-budget=4000", "--dump-dom"))
	if !regexp.MustCompile(`<body[^>]*data-state="token"`).MatchString(dom) || !regexp.MustCompile(`<main id="figures" hidden`).MatchString(dom) ||
		!regexp.MustCompile(`data-figure="up_total">–<`).MatchString(dom) {
		t.Errorf("with a token configured the page did not ask for it:\n%.3000s", dom)
	}
}

// uptimeText is the page's duration(): the two largest units of whole
// seconds (3d 4h, 2h 5m, 5m 3s, 42s).
func uptimeText(sec int64) string {
	var parts []string
	for _, u := range []struct {
		name string
		size int64
	}{{"d", 86400}, {"h", 3600}, {"m", 60}, {"s", 1}} {
		if sec >= u.size || u.name == "s" && len(parts) == 0 {
			parts = append(parts, strconv.FormatInt(sec/u.size, 10)+u.name)
			sec %= u.size
		}
		if len(parts) == 2 {
			break
		}
	}
	return strings.Join(parts, " ")
}

func errOrSize(fi os.FileInfo, err error) error {
	if err != nil {
		return err
	}
	return errors.New(strconv.FormatInt(fi.Size(), 10) + " bytes")
}
