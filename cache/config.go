package cache

import "time"

// Config configures the response cache. DefaultConfig returns the defaults;
// YAML decoding overlays them.
type Config struct {
	// MaxBytes bounds the memory of the local tier: entries cost their
	// bodies plus a fixed overhead, and the values derived from them (the
	// memo: projected bodies, gzip copies) are charged when made. An entry
	// costing more than MaxBytes/8 is served but not stored (default 256
	// MiB).
	MaxBytes int64 `yaml:"max_bytes"`
	// StaleWhileRevalidate is how long after FreshUntil an entry is served at
	// once while one background refresh runs (default 1h).
	StaleWhileRevalidate time.Duration `yaml:"stale_while_revalidate"`
	// MaxStale is how long after FreshUntil an entry may still be served when
	// the upstream fails (stale-if-error; default 24h).
	MaxStale time.Duration `yaml:"max_stale"`
	// StaleIfErrorWait is how long a request for an entry past
	// StaleWhileRevalidate (but within MaxStale) waits for the upstream
	// before the stale entry is served anyway; the fetch goes on and
	// refreshes the entry when it succeeds (default 2s).
	StaleIfErrorWait time.Duration `yaml:"stale_if_error_wait"`
	// FetchTimeout bounds one coalesced fetch, detached from any client
	// (default 20s).
	FetchTimeout time.Duration `yaml:"fetch_timeout"`
	// MaxDetachedFills bounds the fills that run with no caller waiting on
	// them, process-wide: fills every caller of which left (a client gone,
	// a stale entry served after StaleIfErrorWait) and background
	// refreshes. Past it, an abandoned fill is cancelled and a refresh is
	// not started (see the flight type). 0 (the default) means four times
	// upstream.max_conns (64 with its default).
	MaxDetachedFills int `yaml:"max_detached_fills"`
	// TTL holds the freshness lifetimes per endpoint.
	TTL TTLConfig `yaml:"ttl"`
	// PersistPath is the file the local tier is saved to when the gateway
	// drains and loaded from when it starts (see SaveSnapshot and
	// LoadSnapshot); empty (the default) turns persistence off. Read at
	// start only: a reload does not change it.
	PersistPath string `yaml:"persist_path"`
	// PersistMaxBytes bounds the snapshot file; 0 (the default) means
	// MaxBytes.
	PersistMaxBytes int64 `yaml:"persist_max_bytes"`
	// PersistKeyEnv names the environment variable holding the key that
	// authenticates the snapshot file (HMAC-SHA256; see
	// SnapshotOptions.Key); empty (the default) checks checksums only. A
	// named variable that is unset or shorter than 32 bytes stops the
	// start. Read at start only.
	PersistKeyEnv string `yaml:"persist_key_env"`
}

// PersistBound is the size bound of the snapshot file: PersistMaxBytes, or
// MaxBytes when that is 0.
func (c Config) PersistBound() int64 {
	if c.PersistMaxBytes > 0 {
		return c.PersistMaxBytes
	}
	return c.MaxBytes
}

// TTLConfig holds freshness lifetimes.
type TTLConfig struct {
	List    time.Duration `yaml:"list"`    // topics list (default 10m)
	Whatsup time.Duration `yaml:"whatsup"` // whatsup summaries (default 1h)
	// SeriesHourMax caps hourly series that reach now; they are otherwise
	// fresh until the next hour boundary plus Settle (default 10m).
	SeriesHourMax time.Duration `yaml:"series_hour_max"`
	Settle        time.Duration `yaml:"settle"`        // default 2m
	SeriesDay     time.Duration `yaml:"series_day"`    // daily series (default 1h)
	SeriesClosed  time.Duration `yaml:"series_closed"` // windows that ended over 2h ago (default 24h)
	TSV           time.Duration `yaml:"tsv"`           // TSV downloads (default 15m)
	Negative      time.Duration `yaml:"negative"`      // unknown topics (default 60s)
}
