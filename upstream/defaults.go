package upstream

import "time"

// DefaultConfig returns the upstream defaults from DESIGN.md.
func DefaultConfig() Config {
	return Config{
		BaseURL:               "https://lunarcrush.com",
		DialTimeout:           2 * time.Second,
		ResponseHeaderTimeout: 10 * time.Second,
		Timeout:               15 * time.Second,
		MaxBodyBytes:          8 << 20,
		MaxConns:              16,
		Retries:               1,
		Budget:                BudgetConfig{RefreshReserve: 0.25},
		Breaker:               BreakerConfig{Failures: 5, Backoff: 5 * time.Second, MaxBackoff: 2 * time.Minute},
	}
}

// Validate reports every problem in c. Each error text starts with the
// field's YAML path relative to the upstream section.
func (c Config) Validate() error { return nil } // TODO(upstream helper): implement
