package gateway

import "testing"

// TestNeedsRestart pins which settings a reload applies.
func TestNeedsRestart(t *testing.T) {
	tests := []struct {
		path string
		want bool
	}{
		{"keys", false},
		{"plans", false},
		{"limits.costs.whatsup", false},
		{"server.trusted_proxies", false},
		{"admin.token", false},
		{"cache.ttl.list", false},
		{"cache.max_stale", false},
		{"cache.max_bytes", true},
		{"cache.ttl_extra", true}, // not under cache.ttl
		{"server.listen", true},
		{"admin.listen", true},
		{"upstream.api_key", true},
		{"upstream.budget.per_minute", true},
		{"redis.url", true},
		{"tls.mode", true},
		{"log.level", true},
		{"limits.auth_failures.burst", true},
		{"limits.max_keys", true},
	}
	for _, tc := range tests {
		if got := needsRestart(tc.path); got != tc.want {
			t.Errorf("needsRestart(%q) = %v; want %v", tc.path, got, tc.want)
		}
	}
}
