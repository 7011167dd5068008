package upstream

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestDefaultConfigValid(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("got %v; want the defaults to be valid", err)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name  string
		edit  func(*Config)
		wants []string // error lines, each a prefix-bearing message
	}{
		{"http base with trailing slash", func(c *Config) { c.BaseURL = "http://127.0.0.1:9000/" }, nil},
		// Regression: a path was accepted and prepended to the API's own
		// paths (/api4/api4/...), though the example file says no path.
		{"base with path", func(c *Config) { c.BaseURL = "https://lunarcrush.com/api4" }, []string{`base_url: must be scheme and host only, without a path (got path "/api4"`}},
		{"base with prefix path", func(c *Config) { c.BaseURL = "http://127.0.0.1:9000/prefix/" }, []string{"base_url: must be scheme and host only"}},
		{"plan preset", func(c *Config) { c.Budget.Plan = "builder" }, nil},
		// Plain HTTP beyond loopback carries the upstream credential in clear.
		{"http to localhost", func(c *Config) { c.BaseURL = "http://localhost:9000" }, nil},
		{"http to ::1", func(c *Config) { c.BaseURL = "http://[::1]:9000" }, nil},
		{"http to a remote host", func(c *Config) { c.BaseURL = "http://upstream.example" },
			[]string{"base_url: http:// to upstream.example, which is not loopback, would send the upstream credential (api_key) in clear"}},
		{"http to a private address", func(c *Config) { c.BaseURL = "http://10.0.0.7:8080" },
			[]string{"base_url: http:// to 10.0.0.7, which is not loopback"}},
		{"http to a remote host, allowed", func(c *Config) { c.BaseURL, c.AllowPlainHTTP = "http://10.0.0.7:8080", true }, nil},
		{"empty base", func(c *Config) { c.BaseURL = "" }, []string{"base_url: must be set"}},
		{"relative base", func(c *Config) { c.BaseURL = "/api" }, []string{"base_url: must be an absolute http or https URL"}},
		{"ftp base", func(c *Config) { c.BaseURL = "ftp://example.com" }, []string{"base_url: must be an absolute http or https URL"}},
		{"no host", func(c *Config) { c.BaseURL = "https://" }, []string{"base_url: must be an absolute http or https URL"}},
		{"query", func(c *Config) { c.BaseURL = "https://example.com/?key=x" }, []string{"base_url: must not contain a query"}},
		{"empty query", func(c *Config) { c.BaseURL = "https://example.com/?" }, []string{"base_url: must not contain a query"}},
		{"fragment", func(c *Config) { c.BaseURL = "https://example.com/#x" }, []string{"base_url: must not contain a fragment"}},
		{"credentials", func(c *Config) { c.BaseURL = "https://u:p@example.com" }, []string{"base_url: must not contain credentials"}},
		{"bad url", func(c *Config) { c.BaseURL = "https://exa mple.com:xx" }, []string{"base_url: must be a valid URL"}},
		{"key with newline", func(c *Config) { c.APIKey = "abc\r\nX-Evil: 1" }, []string{"api_key: must not contain whitespace"}},
		{"timeouts", func(c *Config) {
			c.DialTimeout, c.ResponseHeaderTimeout, c.Timeout = 0, -time.Second, 0
		}, []string{"dial_timeout: must be > 0", "response_header_timeout: must be > 0", "timeout: must be > 0"}},
		{"sizes", func(c *Config) { c.MaxBodyBytes, c.MaxConns = 0, -1 },
			[]string{"max_body_bytes: must be > 0", "max_conns: must be > 0"}},
		{"retries", func(c *Config) { c.Retries = 2 }, []string{"retries: must be 0 or 1"}},
		{"budget", func(c *Config) {
			c.Budget = BudgetConfig{Plan: "gold", PerMinute: -1, PerDay: -2, RefreshReserve: 1.5}
		}, []string{"budget.plan: unknown plan \"gold\" (want one of builder, hobby, individual, scale)",
			"budget.per_minute: must be >= 0", "budget.per_day: must be >= 0", "budget.refresh_reserve: must be between 0 and 1"}},
		{"reserve NaN", func(c *Config) { c.Budget.RefreshReserve = math.NaN() }, []string{"budget.refresh_reserve: must be between 0 and 1"}},
		{"breaker", func(c *Config) { c.Breaker = BreakerConfig{Failures: 0, Backoff: 0, MaxBackoff: -1} },
			[]string{"breaker.failures: must be >= 1", "breaker.backoff: must be > 0", "breaker.max_backoff: must be >= breaker.backoff"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tc.edit(&cfg)
			err := cfg.Validate()
			if len(tc.wants) == 0 {
				if err != nil {
					t.Fatalf("got %v; want valid", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("got nil; want %q", tc.wants)
			}
			lines := strings.Split(err.Error(), "\n")
			if len(lines) != len(tc.wants) {
				t.Fatalf("got %d problems %q; want %d", len(lines), lines, len(tc.wants))
			}
			for i, want := range tc.wants {
				if !strings.HasPrefix(lines[i], want) {
					t.Errorf("got problem %q; want it to start with %q", lines[i], want)
				}
			}
		})
	}
}

func TestNewRejectsInvalidConfig(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxConns = 0
	if _, err := New(cfg, nil, nil, nil); err == nil || !strings.Contains(err.Error(), "max_conns") {
		t.Fatalf("got %v; want an error naming max_conns", err)
	}
}
