package admin

import (
	"context"
	"embed"
	"io/fs"
	"net/http"
	"time"

	"trendgate/internal/httperr"
)

// SummarySource reports the figures of the dashboard for GET /summary;
// gateway.Gateway implements it.
type SummarySource interface {
	Summary(ctx context.Context) (Summary, error)
}

// Summary is the body of GET /summary: what the dashboard page shows.
// Traffic figures (outcomes, latency, upstream calls, topics, refusals)
// are this instance's; quota figures in TopKeys follow KeyUsage.Source.
// Rates and percentages are rounded to one decimal, milliseconds to two,
// so a display of the same precision shows them exactly.
type Summary struct {
	GeneratedAt time.Time `json:"generated_at"`
	Started     time.Time `json:"started"`
	// UptimeSeconds is GeneratedAt − Started in whole seconds.
	UptimeSeconds int64 `json:"uptime_seconds"`
	// Version is the build's version and commit, as trendgate version
	// prints them.
	Version string `json:"version"`
	Cluster bool   `json:"cluster"`
	// RateWindowSeconds is the span PerSecond rates average over: the full
	// seconds before GeneratedAt's.
	RateWindowSeconds int `json:"rate_window_seconds"`
	// Outcomes lists hit, stale, miss, error, limited and rejected (any
	// other 4xx), in that order.
	Outcomes []OutcomeRate `json:"outcomes"`
	// HitRatioPct is 100 × (hit + stale) / (hit + stale + miss) over the
	// rate window, HitRatioTotalPct since Started; nil (null) without such
	// answers.
	HitRatioPct      *float64       `json:"hit_ratio_pct"`
	HitRatioTotalPct *float64       `json:"hit_ratio_total_pct"`
	Latency          LatencySummary `json:"latency"`
	Upstream         UpstreamStatus `json:"upstream"`
	// TopKeys lists up to ten keys by their highest share of a quota used
	// (day or month), then keys without quotas by units used today.
	TopKeys   []TopKey       `json:"top_keys"`
	TopTopics TopTopics      `json:"top_topics"`
	Refusals  RefusalSummary `json:"refusals"`
	Cache     CacheStatus    `json:"cache"`
	Reload    ReloadStatus   `json:"reload"`
}

// CacheStatus is this instance's local cache: the bytes it holds (entries
// and their derived copies) and those pinned by responses in flight,
// against its bound (cache.max_bytes); FillPct is 100 × (Bytes +
// PinnedBytes) / MaxBytes. The hit ratio is Summary's.
type CacheStatus struct {
	Bytes       int64   `json:"bytes"`
	PinnedBytes int64   `json:"pinned_bytes"`
	MaxBytes    int64   `json:"max_bytes"`
	FillPct     float64 `json:"fill_pct"`
	Entries     int     `json:"entries"`
}

// ReloadStatus is the latest configuration reload of this instance:
// Result "ok" or "refused", or "" (and At nil) before any; Error is why
// the latest was refused. RestartPending lists the settings the file
// changes that take effect only after a restart (empty: none).
type ReloadStatus struct {
	At             *time.Time `json:"at"`
	Result         string     `json:"result"`
	Error          string     `json:"error,omitempty"`
	RestartPending []string   `json:"restart_pending"`
}

// OutcomeRate is one outcome's rate over the rate window and its count
// since the start.
type OutcomeRate struct {
	Outcome   string  `json:"outcome"`
	PerSecond float64 `json:"per_second"`
	Total     uint64  `json:"total"`
}

// LatencySummary holds request latency quantiles over WindowSeconds (from a
// histogram whose buckets are 25% apart, so within 25%).
type LatencySummary struct {
	WindowSeconds int     `json:"window_seconds"`
	Samples       uint64  `json:"samples"`
	P50Ms         float64 `json:"p50_ms"`
	P99Ms         float64 `json:"p99_ms"`
}

// UpstreamStatus is the upstream side: calls sent in the last minute and
// since the start (this instance), the account budget (limits 0 =
// unlimited; tokens left -1 = unlimited, nil = unknown) and the breaker
// state (closed, half-open, open).
type UpstreamStatus struct {
	CallsLastMinute uint64 `json:"calls_last_minute"`
	CallsTotal      uint64 `json:"calls_total"`
	PerMinuteLimit  int    `json:"per_minute_limit"`
	PerDayLimit     int    `json:"per_day_limit"`
	MinuteLeft      *int64 `json:"minute_left"`
	DayLeft         *int64 `json:"day_left"`
	Breaker         string `json:"breaker"`
	// Shares are this minute's fair shares of the upstream budget: the
	// accounts asking for upstream data or granted calls this minute.
	Shares []UpstreamShare `json:"shares"`
}

// UpstreamShare is one account's standing in this minute's fair share:
// Active accounts split the pool, each Guaranteed whole calls by Weight;
// Used is the calls granted to it this minute.
type UpstreamShare struct {
	Account    string  `json:"account"`
	Weight     float64 `json:"weight"`
	Active     bool    `json:"active"`
	Used       int64   `json:"used"`
	Guaranteed int64   `json:"guaranteed"`
}

// TopKey is one key's quota use: Window is "day" or "month" (the one more
// used), or "" when the key has no quota; Pct is Used / Limit × 100.
// Daily and Monthly give each window (nil: no quota in that window).
// State is the key's: active, disabled or expired.
type TopKey struct {
	ID string `json:"id"`
	// Account is the key's account (its quotas are the account's).
	Account string      `json:"account"`
	Plan    string      `json:"plan"`
	State   string      `json:"state"`
	Window  string      `json:"window"`
	Used    int64       `json:"used"`
	Limit   int64       `json:"limit"`
	Pct     float64     `json:"pct"`
	Daily   *QuotaShare `json:"daily"`
	Monthly *QuotaShare `json:"monthly"`
}

// QuotaShare is the use of one quota window: Pct is Used / Limit × 100,
// rounded to one decimal.
type QuotaShare struct {
	Used  int64   `json:"used"`
	Limit int64   `json:"limit"`
	Pct   float64 `json:"pct"`
}

// TopTopics are the topics with the most requests and the most upstream
// calls since Since (5 to 10 minutes); OtherRequests counts requests for
// topics the bounded tables had no room for.
type TopTopics struct {
	Since         time.Time    `json:"since"`
	ByRequests    []TopicCount `json:"by_requests"`
	ByUpstream    []TopicCount `json:"by_upstream"`
	OtherRequests uint64       `json:"other_requests"`
}

// TopicCount is one topic's requests and upstream calls.
type TopicCount struct {
	Topic         string `json:"topic"`
	Requests      uint64 `json:"requests"`
	UpstreamCalls uint64 `json:"upstream_calls"`
}

// RefusalSummary counts error answers by code over WindowSeconds.
type RefusalSummary struct {
	WindowSeconds int         `json:"window_seconds"`
	ByCode        []CodeCount `json:"by_code"`
}

// CodeCount is one error code's count.
type CodeCount struct {
	Code  string `json:"code"`
	Count uint64 `json:"count"`
}

//go:embed dashboard
var dashboardFiles embed.FS

// registerDashboard adds the page at / with its two files under
// /dashboard/, and GET /summary behind the admin token. The page and its
// files hold no data and are served without the token (a browser cannot
// attach a header to a navigation); the page asks for the token and sends
// it as an Authorization header on its fetches of /summary.
func (s *server) registerDashboard(mux *http.ServeMux) {
	sub, _ := fs.Sub(dashboardFiles, "dashboard") // cannot fail: the folder is embedded
	files := http.FileServerFS(sub)
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		pageHeaders(w.Header())
		http.ServeFileFS(w, r, sub, "index.html")
	})
	mux.Handle("GET /dashboard/{file}", http.StripPrefix("/dashboard", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pageHeaders(w.Header())
		files.ServeHTTP(w, r)
	})))
	mux.Handle("GET /summary", s.auth(http.HandlerFunc(s.serveSummary)))
}

// pageHeaders locks the page down: its own scripts, styles and fetches
// only, never framed, no referrer.
func pageHeaders(h http.Header) {
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; form-action 'none'; base-uri 'none'; frame-ancestors 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-cache")
}

func (s *server) serveSummary(w http.ResponseWriter, r *http.Request) {
	sum, err := s.o.Dashboard.Summary(r.Context())
	if err != nil {
		httperr.Write(w, requestID(w), errInternal)
		return
	}
	writeJSON(w, http.StatusOK, sum)
}
