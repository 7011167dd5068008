package proxy

import (
	"net/http/httptest"
	"net/netip"
	"testing"
)

// TestClientIP: X-Forwarded-For is believed only from trusted proxies, and
// only up to the first untrusted hop from the right.
func TestClientIP(t *testing.T) {
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	tests := []struct {
		name, peer string
		xff        []string
		trusted    []netip.Prefix
		want       string
	}{
		{"no proxies trusted", "10.1.2.3:5000", []string{"198.51.100.7"}, nil, "10.1.2.3"},
		{"untrusted peer ignores xff", "203.0.113.5:5000", []string{"198.51.100.7"}, trusted, "203.0.113.5"},
		{"trusted peer, one hop", "10.1.2.3:5000", []string{"198.51.100.7"}, trusted, "198.51.100.7"},
		{"spoofed left-most entry ignored", "10.1.2.3:5000", []string{"1.1.1.1, 198.51.100.7"}, trusted, "198.51.100.7"},
		{"chain of trusted proxies", "10.1.2.3:5000", []string{"198.51.100.7, 10.9.9.9"}, trusted, "198.51.100.7"},
		{"several header lines", "10.1.2.3:5000", []string{"198.51.100.7", "10.9.9.9"}, trusted, "198.51.100.7"},
		{"garbage hop stops the walk", "10.1.2.3:5000", []string{"198.51.100.7, nonsense"}, trusted, "10.1.2.3"},
		{"all trusted", "10.1.2.3:5000", []string{"10.4.4.4"}, trusted, "10.1.2.3"},
		{"ipv6 peer", "[2001:db8::1]:443", nil, trusted, "2001:db8::1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = tc.peer
			for _, v := range tc.xff {
				r.Header.Add("X-Forwarded-For", v)
			}
			if got := clientIP(r, tc.trusted); got != tc.want {
				t.Errorf("got %q; want %q", got, tc.want)
			}
		})
	}
}
