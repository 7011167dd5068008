package config

import (
	"runtime"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// server.event_loops set where no loop would run, or where every request
// would leave its loop, is valid but warned about; on a listener without
// Redis, plain or TLS, it is not.
func TestEventLoopWarnings(t *testing.T) {
	off := false
	for _, tc := range []struct {
		name string
		set  func(*Config)
		want string // a part of the one warning; "" for none
	}{
		{"off", func(c *Config) { c.Server.EventLoops = 0; c.Redis.URL = "redis://127.0.0.1:6379" }, ""},
		{"plain, no Redis", func(*Config) {}, ""},
		{"TLS", func(c *Config) { c.TLS.Mode = TLSModeFiles }, ""},
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

// server.event_loops reads auto or a count; anything else, a negative
// count included, is refused with its line, and a count above the bound
// by validation.
func TestEventLoopsSetting(t *testing.T) {
	for _, tc := range []struct {
		text string
		want EventLoops
		err  string // a part of the error; "" for none
	}{
		{"", LoopsAuto, ""},
		{"event_loops: auto", LoopsAuto, ""},
		{"event_loops: 0", 0, ""},
		{"event_loops: 4", 4, ""},
		{"event_loops: -1", 0, "server.event_loops: want auto or a number of loops (0: a goroutine per connection), got `-1` (line 2)"},
		{"event_loops: many", 0, "server.event_loops: want auto or a number of loops (0: a goroutine per connection), got `many` (line 2)"},
		{"event_loops: 257", 0, "server.event_loops: must be auto, 0 (a goroutine per connection) or 1 to 256, got 257"},
	} {
		cfg, err := Parse([]byte("server:\n  "+tc.text+"\n"), nil)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%q: error %v; want one containing %q", tc.text, err, tc.err)
		case tc.err == "" && err != nil:
			t.Errorf("%q: %v", tc.text, err)
		case tc.err == "" && cfg.Server.EventLoops != tc.want:
			t.Errorf("%q: event_loops %v; want %v", tc.text, cfg.Server.EventLoops, tc.want)
		}
	}
	if out, err := yaml.Marshal(Default().Server); err != nil || !strings.Contains(string(out), "event_loops: auto\n") {
		t.Errorf("the default marshals as %s (%v); want event_loops: auto", out, err)
	}
}

// LoopCount: auto runs a loop per processor the runtime started with on
// a listener without Redis, plain or TLS, and none in cluster mode or
// where loops cannot serve; a count runs that many wherever loops can
// serve.
func TestLoopCount(t *testing.T) {
	if runtime.GOOS != "linux" {
		if n := Default().LoopCount(); n != 0 {
			t.Fatalf("LoopCount on %s: %d; want 0", runtime.GOOS, n)
		}
		t.Skipf("event loops run on Linux only")
	}
	off := false
	for _, tc := range []struct {
		name  string
		loops EventLoops
		set   func(*Config)
		want  int
	}{
		{"auto", LoopsAuto, func(*Config) {}, min(startProcs, maxEventLoops)},
		{"auto, cluster mode", LoopsAuto, func(c *Config) { c.Redis.URL = "redis://127.0.0.1:6379" }, 0},
		{"auto, TLS", LoopsAuto, func(c *Config) { c.TLS.Mode = TLSModeFiles }, min(startProcs, maxEventLoops)},
		{"auto, fast_http1 off", LoopsAuto, func(c *Config) { c.Server.FastHTTP1 = &off }, 0},
		{"0", 0, func(*Config) {}, 0},
		{"3", 3, func(*Config) {}, 3},
		{"3, cluster mode", 3, func(c *Config) { c.Redis.URL = "redis://127.0.0.1:6379" }, 3},
		{"3, TLS", 3, func(c *Config) { c.TLS.Mode = TLSModeACME }, 3},
		{"3, fast_http1 off", 3, func(c *Config) { c.Server.FastHTTP1 = &off }, 0},
	} {
		c := Default()
		c.Server.EventLoops = tc.loops
		tc.set(c)
		if got := c.LoopCount(); got != tc.want {
			t.Errorf("%s: LoopCount %d; want %d", tc.name, got, tc.want)
		}
	}
	if startProcs < 1 {
		t.Errorf("startProcs %d; want at least 1", startProcs)
	}
}
