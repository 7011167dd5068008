package limits

import "time"

// DefaultConfig returns the limits defaults from DESIGN.md.
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
func (c Config) Validate() error { return nil } // TODO(limits helper): implement
