package upstream

import "time"

// Config configures the upstream client. DefaultConfig returns the defaults;
// YAML decoding overlays them.
type Config struct {
	// BaseURL is the upstream's scheme and host, e.g. https://lunarcrush.com.
	// An http:// URL must name a loopback host unless AllowPlainHTTP is set.
	BaseURL string `yaml:"base_url"`
	// AllowPlainHTTP allows an http:// BaseURL to a host that is not
	// loopback (default false: Validate refuses it, since APIKey would
	// cross the network in clear and answers could be altered on the way).
	AllowPlainHTTP bool `yaml:"allow_plain_http"`
	// APIKey is the gateway's own upstream credential, sent as
	// "Authorization: Bearer <APIKey>". Usually "${TRENDGATE_UPSTREAM_KEY}".
	// Empty sends no Authorization header.
	APIKey string `yaml:"api_key"`
	// DialTimeout bounds connection setup (default 2s).
	DialTimeout time.Duration `yaml:"dial_timeout"`
	// ResponseHeaderTimeout bounds the wait for response headers (default 10s).
	ResponseHeaderTimeout time.Duration `yaml:"response_header_timeout"`
	// Timeout bounds one whole fetch, retries included (default 15s).
	Timeout time.Duration `yaml:"timeout"`
	// MaxBodyBytes caps a response body; larger bodies fail (default 8 MiB).
	MaxBodyBytes int64 `yaml:"max_body_bytes"`
	// MaxConns caps concurrent requests to the upstream, and so its
	// connections (default 16): a call takes one of MaxConns slots
	// before it spends the budget and asks the transport for a
	// connection, and gives it back once its body is read. Accounts share
	// the slots by weight (see SlotReserve and the rule in slots.go).
	MaxConns int `yaml:"max_conns"`
	// SlotReserve is the share (0 to below 1) of MaxConns kept for
	// accounts that hold no slot, so that one account's slow calls never
	// make another's first call wait (default 0.2, rounded up: 2 of 8).
	// 0 lets one account hold every slot.
	SlotReserve float64 `yaml:"slot_reserve"`
	// SlotWait bounds a call's wait for a slot (default 5s); past it the
	// call is refused as busy (503 upstream_busy), which the circuit
	// breaker does not count. 0 refuses at once when no slot is free.
	SlotWait time.Duration `yaml:"slot_wait"`
	// Retries is how many times a connection error is retried (0 or 1; default 1).
	Retries int `yaml:"retries"`
	// Budget is the account-wide outbound budget.
	Budget BudgetConfig `yaml:"budget"`
	// Breaker configures the circuit breaker.
	Breaker BreakerConfig `yaml:"breaker"`
	// WindowReading states how the upstream reads a time series window's
	// bounds. A stated fact is used once an upstream answer agrees with it;
	// what it leaves empty the gateway learns from the answers; evidence
	// that contradicts it wins (see proxy's readings).
	WindowReading WindowReading `yaml:"window_reading"`
}

// WindowReading names how the upstream turns a time series window's start
// and end into buckets. Empty fields are unknown, to be learned.
type WindowReading struct {
	// Start is "floor" (a start inside a bucket selects that bucket) or
	// "ceil" (only buckets beginning at or after start).
	Start string `yaml:"start"`
	// End is "inclusive" (buckets beginning at or before end), "exclusive"
	// (beginning before end) or "floor_exclusive" (beginning before end
	// floored to its bucket).
	End string `yaml:"end"`
}

// BudgetConfig is the upstream account's request budget.
type BudgetConfig struct {
	// Plan names a preset (hobby, individual, builder, scale) that fills
	// PerMinute and PerDay when they are zero. Empty means no preset.
	Plan string `yaml:"plan"`
	// PerMinute and PerDay are the account-wide token buckets; 0 means unlimited.
	PerMinute int `yaml:"per_minute"`
	PerDay    int `yaml:"per_day"`
	// RefreshReserve is the share (0..1) of each bucket kept for cold misses:
	// background refreshes may not dip into it (default 0.25).
	RefreshReserve float64 `yaml:"refresh_reserve"`
	// NewcomerReserve is the share (0 to below 1) of each window held back
	// for keys that have not used that window yet, so a key that arrives
	// after another has flooded the upstream still finds calls left
	// (default 0.2). See the fair-share rule in fair.go.
	NewcomerReserve float64 `yaml:"newcomer_reserve"`
	// NewcomerLend is the end of each minute during which the newcomer
	// reserve is lent too, shrinking to nothing as the minute ends, so it
	// is not left unused when no newcomer came (default 15s; 0 holds it to
	// the minute's end; at most 1m). See the rule in fair.go.
	NewcomerLend time.Duration `yaml:"newcomer_lend"`
	// FairWindow is how long a key counts as asking for upstream data after
	// its last cold miss; while others are, no key may take more than its
	// fair share of a window (default 5m; 0 also means 5m).
	FairWindow time.Duration `yaml:"fair_window"`
}

// BreakerConfig configures the circuit breaker.
type BreakerConfig struct {
	// Failures is how many consecutive failures open the breaker (default 5).
	Failures int `yaml:"failures"`
	// Backoff is the first open period before a probe (default 5s); it
	// doubles on each failed probe up to MaxBackoff (default 2m).
	Backoff    time.Duration `yaml:"backoff"`
	MaxBackoff time.Duration `yaml:"max_backoff"`
}
