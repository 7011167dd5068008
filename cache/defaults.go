package cache

import (
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// DefaultConfig returns the cache defaults (config.example.yaml shows each).
func DefaultConfig() Config {
	return Config{
		MaxBytes:             256 << 20,
		StaleWhileRevalidate: time.Hour,
		MaxStale:             24 * time.Hour,
		StaleIfErrorWait:     2 * time.Second,
		FetchTimeout:         20 * time.Second,
		TTL: TTLConfig{
			List:          10 * time.Minute,
			Whatsup:       time.Hour,
			SeriesHourMax: 10 * time.Minute,
			Settle:        2 * time.Minute,
			SeriesDay:     time.Hour,
			SeriesClosed:  24 * time.Hour,
			TSV:           15 * time.Minute,
			Negative:      60 * time.Second,
		},
	}
}

// Validate reports every problem in c. Each error text starts with the
// field's YAML path relative to the cache section, e.g.
// "ttl.list: must be > 0"; all problems are joined with errors.Join.
func (c Config) Validate() error {
	var errs []error
	bad := func(path, msg string) { errs = append(errs, fmt.Errorf("%s: %s", path, msg)) }
	if c.MaxBytes <= 0 {
		bad("max_bytes", "must be > 0")
	}
	if c.StaleWhileRevalidate < 0 {
		bad("stale_while_revalidate", "must be >= 0")
	}
	if c.MaxStale < 0 {
		bad("max_stale", "must be >= 0")
	}
	if c.StaleWhileRevalidate >= 0 && c.MaxStale >= 0 && c.StaleWhileRevalidate > c.MaxStale {
		bad("stale_while_revalidate", fmt.Sprintf("must be <= max_stale (%s)", c.MaxStale))
	}
	if c.StaleIfErrorWait <= 0 {
		bad("stale_if_error_wait", "must be > 0")
	}
	if c.FetchTimeout <= 0 {
		bad("fetch_timeout", "must be > 0")
	}
	if c.MaxDetachedFills < 0 {
		bad("max_detached_fills", "must be >= 0 (0: four times upstream.max_conns)")
	}
	positive := []struct {
		path string
		d    time.Duration
	}{
		{"ttl.list", c.TTL.List},
		{"ttl.whatsup", c.TTL.Whatsup},
		{"ttl.series_hour_max", c.TTL.SeriesHourMax},
		{"ttl.series_day", c.TTL.SeriesDay},
		{"ttl.series_closed", c.TTL.SeriesClosed},
		{"ttl.tsv", c.TTL.TSV},
		{"ttl.negative", c.TTL.Negative},
	}
	for _, p := range positive {
		if p.d <= 0 {
			bad(p.path, "must be > 0")
		}
	}
	if c.TTL.Settle < 0 {
		bad("ttl.settle", "must be >= 0")
	}
	if c.PersistKeyEnv != "" && !envName.MatchString(c.PersistKeyEnv) {
		bad("persist_key_env", "must be an environment variable name (letters, digits, _)")
	}
	if c.PersistMaxBytes < 0 {
		bad("persist_max_bytes", "must be >= 0 (0: max_bytes)")
	}
	if c.PersistPath != "" && (strings.HasSuffix(c.PersistPath, "/") || filepath.Base(c.PersistPath) == ".") {
		bad("persist_path", "must name a file, not a directory")
	}
	return errors.Join(errs...)
}

// envName is what cache.persist_key_env may name.
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
