package limits

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// DefaultConfig returns the limits defaults (config.example.yaml shows each).
func DefaultConfig() Config {
	return Config{
		Costs:        Costs{List: 1, Series: 1, Whatsup: 5, TSV: 1},
		AuthFailures: AuthFailureConfig{PerMinute: 30, Burst: 20},
		MaxKeys:      100000,
		IdleAfter:    10 * time.Minute,
	}
}

// Validate reports every problem in c. Each error text starts with the
// field's YAML path relative to the limits section.
func (c Config) Validate() error {
	var errs []error
	bad := func(path, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: "+format, append([]any{path}, args...)...))
	}
	for _, f := range []struct {
		path string
		v    int
	}{
		{"costs.list", c.Costs.List},
		{"costs.series", c.Costs.Series},
		{"costs.whatsup", c.Costs.Whatsup},
		{"costs.tsv", c.Costs.TSV},
	} {
		if f.v < 1 {
			bad(f.path, "must be >= 1 (got %d)", f.v)
		}
	}
	if !(c.AuthFailures.PerMinute > 0) { // also rejects NaN
		bad("auth_failures.per_minute", "must be > 0 (got %v)", c.AuthFailures.PerMinute)
	}
	if c.AuthFailures.Burst < 1 {
		bad("auth_failures.burst", "must be >= 1 (got %d)", c.AuthFailures.Burst)
	}
	if c.MaxKeys < 1 {
		bad("max_keys", "must be >= 1 (got %d)", c.MaxKeys)
	}
	if c.IdleAfter <= 0 {
		bad("idle_after", "must be > 0 (got %s)", c.IdleAfter)
	}
	return errors.Join(errs...)
}

// Validate reports every problem in p. Each error text starts with the
// field name relative to the policy (per_second, burst, daily, monthly).
func (p Policy) Validate() error {
	var errs []error
	if !(p.PerSecond >= 0) || math.IsInf(p.PerSecond, 0) {
		errs = append(errs, fmt.Errorf("per_second: must be a finite number >= 0 (got %v)", p.PerSecond))
	}
	if p.Burst < 0 {
		errs = append(errs, fmt.Errorf("burst: must be >= 0 (got %d)", p.Burst))
	}
	if p.Daily < 0 {
		errs = append(errs, fmt.Errorf("daily: must be >= 0 (got %d)", p.Daily))
	}
	if p.Monthly < 0 {
		errs = append(errs, fmt.Errorf("monthly: must be >= 0 (got %d)", p.Monthly))
	}
	return errors.Join(errs...)
}
