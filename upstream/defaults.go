package upstream

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"sort"
	"strings"
	"time"
)

// DefaultConfig returns the upstream defaults (config.example.yaml shows each).
func DefaultConfig() Config {
	return Config{
		BaseURL:               "https://lunarcrush.com",
		DialTimeout:           2 * time.Second,
		ResponseHeaderTimeout: 10 * time.Second,
		Timeout:               15 * time.Second,
		MaxBodyBytes:          8 << 20,
		MaxConns:              16,
		SlotReserve:           0.2,
		SlotWait:              5 * time.Second,
		Retries:               1,
		Budget:                BudgetConfig{RefreshReserve: 0.25, NewcomerReserve: 0.2, NewcomerLend: 15 * time.Second, FairWindow: defaultFairWindow},
		Breaker:               BreakerConfig{Failures: 5, Backoff: 5 * time.Second, MaxBackoff: 2 * time.Minute},
	}
}

// planLimits is one upstream plan's budget preset.
type planLimits struct{ perMinute, perDay int }

// planPresets hold about 90% of each real plan's limits (the upstream's
// published plans, written beside each preset; docs/caching.md), so
// interactive calls keep headroom against the upstream's own counters.
var planPresets = map[string]planLimits{
	"hobby":      {perMinute: 3, perDay: 90},      // real: 4/min, 100/day
	"individual": {perMinute: 9, perDay: 1800},    // real: 10/min, 2,000/day
	"builder":    {perMinute: 90, perDay: 18000},  // real: 100/min, 20,000/day
	"scale":      {perMinute: 450, perDay: 90000}, // real: 500/min, 100,000/day
}

// planNames lists the preset names in a stable order for messages.
func planNames() string {
	names := make([]string, 0, len(planPresets))
	for n := range planPresets {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// defaultFairWindow is FairWindow's value when it is zero.
const defaultFairWindow = 5 * time.Minute

// Resolved returns b with its Plan preset applied: PerMinute and PerDay
// that are zero take the preset's numbers. An empty or unknown Plan (the
// latter is reported by Validate) leaves them unchanged. A zero FairWindow
// becomes 5m.
func (b BudgetConfig) Resolved() BudgetConfig {
	if b.FairWindow == 0 {
		b.FairWindow = defaultFairWindow
	}
	p, ok := planPresets[b.Plan]
	if !ok {
		return b
	}
	if b.PerMinute == 0 {
		b.PerMinute = p.perMinute
	}
	if b.PerDay == 0 {
		b.PerDay = p.perDay
	}
	return b
}

// Validate reports every problem in c. Each error text starts with the
// field's YAML path relative to the upstream section.
func (c Config) Validate() error {
	var errs []error
	add := func(path, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: "+format, append([]any{path}, args...)...))
	}

	if msg := checkBaseURL(c.BaseURL); msg != "" {
		add("base_url", "%s", msg)
	} else if host, plain := plainRemote(c.BaseURL); plain && !c.AllowPlainHTTP {
		add("base_url", "http:// to %s, which is not loopback, would send the upstream credential (api_key) in clear "+
			"and let anyone on the path alter answers; use https://, or set upstream.allow_plain_http: true "+
			"if the network to the upstream is trusted", host)
	}
	if strings.ContainsFunc(c.APIKey, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		add("api_key", "must not contain whitespace or control characters")
	}
	if c.DialTimeout <= 0 {
		add("dial_timeout", "must be > 0")
	}
	if c.ResponseHeaderTimeout <= 0 {
		add("response_header_timeout", "must be > 0")
	}
	if c.Timeout <= 0 {
		add("timeout", "must be > 0")
	}
	if c.MaxBodyBytes <= 0 {
		add("max_body_bytes", "must be > 0")
	}
	if c.MaxConns <= 0 {
		add("max_conns", "must be > 0")
	}
	if !(c.SlotReserve >= 0 && c.SlotReserve < 1) { // also rejects NaN
		add("slot_reserve", "must be at least 0 and below 1")
	}
	if c.SlotWait < 0 {
		add("slot_wait", "must be >= 0")
	}
	if c.Retries < 0 || c.Retries > 1 {
		add("retries", "must be 0 or 1")
	}

	b := c.Budget
	if _, ok := planPresets[b.Plan]; b.Plan != "" && !ok {
		add("budget.plan", "unknown plan %q (want one of %s)", b.Plan, planNames())
	}
	if b.PerMinute < 0 {
		add("budget.per_minute", "must be >= 0")
	}
	if b.PerDay < 0 {
		add("budget.per_day", "must be >= 0")
	}
	if !(b.RefreshReserve >= 0 && b.RefreshReserve <= 1) { // also rejects NaN
		add("budget.refresh_reserve", "must be between 0 and 1")
	}
	if !(b.NewcomerReserve >= 0 && b.NewcomerReserve < 1) {
		add("budget.newcomer_reserve", "must be at least 0 and below 1")
	}
	if b.NewcomerLend < 0 || b.NewcomerLend > time.Minute {
		add("budget.newcomer_lend", "must be between 0 and 1m")
	}
	if b.FairWindow < 0 {
		add("budget.fair_window", "must be >= 0 (0 means %s)", defaultFairWindow)
	}

	switch c.WindowReading.Start {
	case "", "floor", "ceil":
	default:
		add("window_reading.start", "unknown reading %q (want floor or ceil, or empty to learn it)", c.WindowReading.Start)
	}
	switch c.WindowReading.End {
	case "", "inclusive", "exclusive", "floor_exclusive":
	default:
		add("window_reading.end", "unknown reading %q (want inclusive, exclusive or floor_exclusive, or empty to learn it)", c.WindowReading.End)
	}

	k := c.Breaker
	if k.Failures < 1 {
		add("breaker.failures", "must be >= 1")
	}
	if k.Backoff <= 0 {
		add("breaker.backoff", "must be > 0")
	}
	if k.MaxBackoff < k.Backoff {
		add("breaker.max_backoff", "must be >= breaker.backoff")
	}
	return errors.Join(errs...)
}

// plainRemote reports whether raw (a valid base URL) is http:// to a host
// that is not loopback ("localhost" or a loopback address), and the host.
func plainRemote(raw string) (string, bool) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "http" {
		return "", false
	}
	host := u.Hostname()
	if strings.EqualFold(host, "localhost") {
		return host, false
	}
	ip, err := netip.ParseAddr(host)
	return host, err != nil || !ip.IsLoopback()
}

// checkBaseURL returns why raw is not an absolute http(s) URL without
// credentials, path, query or fragment, or "" when it is fine.
func checkBaseURL(raw string) string {
	if raw == "" {
		return "must be set"
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "must be a valid URL"
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return "must be an absolute http or https URL"
	case u.Host == "" || u.Opaque != "":
		return "must be an absolute http or https URL"
	case u.User != nil:
		return "must not contain credentials (use api_key)"
	case u.RawQuery != "" || u.ForceQuery:
		return "must not contain a query"
	case u.Fragment != "" || strings.Contains(raw, "#"):
		return "must not contain a fragment"
	case u.Path != "" && u.Path != "/":
		// The API paths (/api4/public/..., /topic/...) are the gateway's
		// own; a path here would be prepended to them.
		return fmt.Sprintf("must be scheme and host only, without a path (got path %q; the gateway adds /api4/... itself)", u.EscapedPath())
	}
	return ""
}
