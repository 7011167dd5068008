package limits

import (
	"strings"
	"testing"
	"time"
)

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*Config)
		want   []string // error lines, in order; nil = valid
	}{
		{"defaults are valid", func(*Config) {}, nil},
		{"zero cost", func(c *Config) { c.Costs.Whatsup = 0 }, []string{"costs.whatsup: must be >= 1"}},
		{"everything wrong at once", func(c *Config) { *c = Config{AuthFailures: AuthFailureConfig{PerMinute: -1}, IdleAfter: -time.Second} },
			[]string{
				"costs.list: ", "costs.series: ", "costs.whatsup: ", "costs.tsv: ",
				"auth_failures.per_minute: ", "auth_failures.burst: ", "max_keys: ", "idle_after: ",
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			tc.mutate(&c)
			err := c.Validate()
			if tc.want == nil {
				if err != nil {
					t.Fatalf("got %v; want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("got nil; want %d problems", len(tc.want))
			}
			lines := strings.Split(err.Error(), "\n")
			if len(lines) != len(tc.want) {
				t.Fatalf("got %d problems:\n%v\nwant %d", len(lines), err, len(tc.want))
			}
			for i, w := range tc.want {
				if !strings.HasPrefix(lines[i], w) {
					t.Errorf("problem %d: got %q; want prefix %q", i, lines[i], w)
				}
			}
		})
	}
}

func TestNewLocalRejectsInvalidConfig(t *testing.T) {
	if _, err := NewLocal(Config{}, nil, nil); err == nil || !strings.Contains(err.Error(), "max_keys") {
		t.Errorf("got %v; want an error naming max_keys", err)
	}
}
