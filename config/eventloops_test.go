package config

import (
	"strings"
	"testing"
)

// server.event_loops set where no loop would run, or where every request
// would leave its loop, is valid but warned about; on a plain listener
// without Redis it is not.
func TestEventLoopWarnings(t *testing.T) {
	off := false
	for _, tc := range []struct {
		name string
		set  func(*Config)
		want string // a part of the one warning; "" for none
	}{
		{"off", func(c *Config) { c.Server.EventLoops = 0; c.Redis.URL = "redis://127.0.0.1:6379" }, ""},
		{"plain, no Redis", func(*Config) {}, ""},
		{"TLS", func(c *Config) { c.TLS.Mode = TLSModeFiles }, "no effect with tls.mode files"},
		{"fast_http1 off", func(c *Config) { c.Server.FastHTTP1 = &off }, "no effect with server.fast_http1 off"},
		{"cluster mode", func(c *Config) { c.Redis.URL = "redis://127.0.0.1:6379" }, "every request leaves its loop"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			c.Server.EventLoops = 2
			tc.set(c)
			got := c.eventLoopWarnings()
			switch {
			case tc.want == "" && len(got) != 0:
				t.Errorf("warnings %q; want none", got)
			case tc.want != "" && (len(got) != 1 || !strings.HasPrefix(got[0], "server.event_loops: ") || !strings.Contains(got[0], tc.want)):
				t.Errorf("warnings %q; want one for server.event_loops containing %q", got, tc.want)
			}
		})
	}
}
