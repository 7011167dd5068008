package cache

import (
	"errors"
	"strings"
	"testing"
	"time"
	"trendgate/api"
)

func TestFreshUntil(t *testing.T) {
	cfg := DefaultConfig()
	at := func(h, m int) time.Time { return time.Date(2026, 11, 22, h, m, 0, 0, time.UTC) }
	tests := []struct {
		name string
		cl   Class
		now  time.Time
		want time.Time
	}{
		{"list", Class{Endpoint: api.EndpointList}, at(10, 17), at(10, 27)},
		{"whatsup", Class{Endpoint: api.EndpointWhatsup}, at(10, 17), at(11, 17)},
		{"tsv", Class{Endpoint: api.EndpointTSV}, at(10, 17), at(10, 32)},
		{"negative wins over endpoint", Class{Endpoint: api.EndpointWhatsup, Negative: true}, at(10, 17), at(10, 18)},
		{"series day reaching now", Class{Endpoint: api.EndpointSeries, Bucket: "day"}, at(10, 17), at(11, 17)},
		{"series hour capped at 10m", Class{Endpoint: api.EndpointSeries, Bucket: "hour"}, at(10, 17), at(10, 27)},
		{"series hour near boundary gets boundary plus settle", Class{Endpoint: api.EndpointSeries, Bucket: "hour"}, at(10, 55), at(11, 2)},
		{"series hour just before boundary", Class{Endpoint: api.EndpointSeries, Bucket: "hour"}, at(10, 59), at(11, 2)},
		{"series hour on the boundary is capped", Class{Endpoint: api.EndpointSeries, Bucket: "hour"}, at(11, 0), at(11, 10)},
		{"series hour at cap equals settle point", Class{Endpoint: api.EndpointSeries, Bucket: "hour"}, at(10, 52), at(11, 2)},
		{"closed window over 2h ago", Class{Endpoint: api.EndpointSeries, Bucket: "hour", End: at(8, 0)}, at(10, 17), at(10, 17).Add(24 * time.Hour)},
		{"closed daily window", Class{Endpoint: api.EndpointSeries, Bucket: "day", End: at(0, 0)}, at(10, 17), at(10, 17).Add(24 * time.Hour)},
		{"window ended exactly 2h ago is still open", Class{Endpoint: api.EndpointSeries, Bucket: "hour", End: at(8, 17)}, at(10, 17), at(10, 27)},
		{"window ended within 2h follows the hour rule", Class{Endpoint: api.EndpointSeries, Bucket: "hour", End: at(10, 0)}, at(10, 55), at(11, 2)},
		{"unknown endpoint is never fresh", Class{Endpoint: api.Endpoint(99)}, at(10, 17), at(10, 17)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := cfg.FreshUntil(tc.cl, tc.now); !got.Equal(tc.want) {
				t.Errorf("FreshUntil(%+v, %s) = %s; want %s", tc.cl, tc.now.Format(time.TimeOnly), got.Format(time.DateTime), tc.want.Format(time.DateTime))
			}
		})
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*Config)
		want   []string // substrings, one per expected problem; none = valid
	}{
		{"defaults", func(*Config) {}, nil},
		{"zero max bytes", func(c *Config) { c.MaxBytes = 0 }, []string{"max_bytes: must be > 0"}},
		{"negative stale", func(c *Config) { c.StaleWhileRevalidate = -1; c.MaxStale = -1 },
			[]string{"stale_while_revalidate: must be >= 0", "max_stale: must be >= 0"}},
		{"swr beyond max stale", func(c *Config) { c.StaleWhileRevalidate = 2 * time.Hour; c.MaxStale = time.Hour },
			[]string{"stale_while_revalidate: must be <= max_stale"}},
		{"no fetch timeout", func(c *Config) { c.FetchTimeout = 0 }, []string{"fetch_timeout: must be > 0"}},
		{"every ttl at once", func(c *Config) { c.TTL = TTLConfig{Settle: -1} }, []string{
			"ttl.list: must be > 0", "ttl.whatsup: must be > 0", "ttl.series_hour_max: must be > 0",
			"ttl.series_day: must be > 0", "ttl.series_closed: must be > 0", "ttl.tsv: must be > 0",
			"ttl.negative: must be > 0", "ttl.settle: must be >= 0"}},
		{"zero settle is fine", func(c *Config) { c.TTL.Settle = 0 }, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tc.mutate(&cfg)
			err := cfg.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Validate() = %v; want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil; want %d problems", len(tc.want))
			}
			lines := strings.Split(err.Error(), "\n")
			if len(lines) != len(tc.want) {
				t.Errorf("got %d problems %q; want %d", len(lines), lines, len(tc.want))
			}
			for i, w := range tc.want {
				if i < len(lines) && !strings.HasPrefix(lines[i], w) {
					t.Errorf("problem %d = %q; want prefix %q", i, lines[i], w)
				}
			}
		})
	}
}

func TestOutcomeString(t *testing.T) {
	tests := []struct {
		o    Outcome
		want string
	}{{Hit, "hit"}, {Miss, "miss"}, {Stale, "stale"}, {StaleIfError, "stale-if-error"}, {Outcome(9), "unknown"}}
	for _, tc := range tests {
		if got := tc.o.String(); got != tc.want {
			t.Errorf("Outcome(%d).String() = %q; want %q", int(tc.o), got, tc.want)
		}
	}
}

func TestEntryAgeAndMemo(t *testing.T) {
	e := entry("k", "", t0, time.Minute, "{}")
	if got := e.Age(t0.Add(90 * time.Second)); got != 90*time.Second {
		t.Errorf("Age = %s; want 1m30s", got)
	}
	if got := e.Age(t0.Add(-time.Second)); got != 0 {
		t.Errorf("Age before Fetched = %s; want 0", got)
	}
	if got := (&Entry{}).Age(t0); got != 0 {
		t.Errorf("Age of unknown fetch time = %s; want 0", got)
	}
	type memoKey string
	if _, ok := e.Memo(memoKey("gz")); ok {
		t.Fatalf("Memo on a new entry found a value")
	}
	if got := e.StoreMemo(memoKey("gz"), "first", 5); got != "first" {
		t.Errorf("StoreMemo = %v; want first", got)
	}
	if got := e.StoreMemo(memoKey("gz"), "second", 6); got != "first" {
		t.Errorf("second StoreMemo = %v; want first (LoadOrStore)", got)
	}
	if v, ok := e.Memo(memoKey("gz")); !ok || v != "first" {
		t.Errorf("Memo = %v, %v; want first, true", v, ok)
	}
}

var errUpstream = errors.New("upstream down")
