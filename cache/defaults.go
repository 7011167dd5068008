package cache

import "time"

// DefaultConfig returns the cache defaults from DESIGN.md.
func DefaultConfig() Config {
	return Config{
		MaxBytes:             256 << 20,
		StaleWhileRevalidate: time.Hour,
		MaxStale:             24 * time.Hour,
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
// field's YAML path relative to the cache section.
func (c Config) Validate() error { return nil } // TODO(cache helper): implement
