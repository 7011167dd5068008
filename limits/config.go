package limits

import (
	"time"
	"trendgate/api"
)

// Config configures per-key limiting. DefaultConfig returns the defaults;
// YAML decoding overlays them.
type Config struct {
	// Costs are the token and quota cost per endpoint.
	Costs Costs `yaml:"costs"`
	// AuthFailures limits failed authentication attempts per client IP.
	AuthFailures AuthFailureConfig `yaml:"auth_failures"`
	// MaxKeys bounds the number of per-key buckets held in memory
	// (default 100000); IdleAfter evicts buckets unused that long (default 10m).
	MaxKeys   int           `yaml:"max_keys"`
	IdleAfter time.Duration `yaml:"idle_after"`
}

// Costs are per-endpoint costs in tokens and quota units (defaults: list 1,
// series 1, whatsup 5, tsv 1).
type Costs struct {
	List    int `yaml:"list"`
	Series  int `yaml:"series"`
	Whatsup int `yaml:"whatsup"`
	TSV     int `yaml:"tsv"`
}

// AuthFailureConfig is a token bucket per client IP for failed auth attempts.
type AuthFailureConfig struct {
	PerMinute float64 `yaml:"per_minute"` // default 30
	Burst     int     `yaml:"burst"`      // default 20
}

// Policy is one key's effective limits. PerSecond 0 disables the rate
// limit; Burst 0 with PerSecond > 0 means ceil(PerSecond); Daily or Monthly
// 0 disables that quota (quotas are in cost units over UTC calendar windows).
// The zero value limits nothing.
type Policy struct {
	PerSecond float64 `yaml:"per_second"`
	Burst     int     `yaml:"burst"`
	Daily     int64   `yaml:"daily"`
	Monthly   int64   `yaml:"monthly"`
}

// For returns the cost of one request to endpoint e. An unknown endpoint,
// or a cost configured below 1, costs 1, so every admitted request costs
// something.
func (c Costs) For(e api.Endpoint) int {
	var n int
	switch e {
	case api.EndpointList:
		n = c.List
	case api.EndpointSeries:
		n = c.Series
	case api.EndpointWhatsup:
		n = c.Whatsup
	case api.EndpointTSV:
		n = c.TSV
	}
	return max(n, 1)
}
