package proxy_test

import (
	"strings"
	"testing"

	"trendgate/config"
	"trendgate/gateway/gatewaytest"
)

// TestCORS drives the whole gateway: off by default (a preflight meets the
// 405 and no CORS header is sent); with an origin allowed, its preflight is
// answered 204 before authentication and limits (no key, nothing spent,
// nothing sent upstream), and its requests, errors included, carry
// Access-Control-Allow-Origin and keep Vary: Accept-Encoding beside Origin.
func TestCORS(t *testing.T) {
	const (
		target = "/api4/public/topics/list/v1"
		origin = "https://app.example.com"
	)
	preflight := []string{"Origin", origin, "Access-Control-Request-Method", "GET", "Access-Control-Request-Headers", "authorization"}

	t.Run("off", func(t *testing.T) {
		h := gatewaytest.New(t, nil)
		resp, _ := h.Do("OPTIONS", target, "", preflight...)
		if resp.StatusCode != 405 || resp.Header.Get("Access-Control-Allow-Origin") != "" {
			t.Errorf("preflight with CORS off: %d, Allow-Origin %q; want 405 and none", resp.StatusCode, resp.Header.Get("Access-Control-Allow-Origin"))
		}
		resp, _ = h.Get(target, h.Full, "Origin", origin)
		if resp.StatusCode != 200 || resp.Header.Get("Access-Control-Allow-Origin") != "" || strings.Contains(strings.Join(resp.Header.Values("Vary"), ","), "Origin") {
			t.Errorf("GET with CORS off: %d, Allow-Origin %q, Vary %v", resp.StatusCode, resp.Header.Get("Access-Control-Allow-Origin"), resp.Header.Values("Vary"))
		}
	})

	t.Run("on", func(t *testing.T) {
		h := gatewaytest.New(t, func(c *config.Config) {
			c.Server.CORS.AllowedOrigins = []string{origin}
			c.Plans["limited"] = func(p config.Plan) config.Plan { p.Burst, p.PerSecond = 5, 0.001; return p }(c.Plans["limited"])
		})
		for range 5 {
			resp, body := h.Do("OPTIONS", target, "", preflight...)
			if resp.StatusCode != 204 || len(body) != 0 {
				t.Fatalf("preflight: %d %s; want 204 and no body", resp.StatusCode, body)
			}
			if got := resp.Header.Get("Access-Control-Allow-Origin"); got != origin {
				t.Errorf("preflight Allow-Origin: got %q; want %q", got, origin)
			}
			if resp.Header.Get("RateLimit") != "" || resp.Header.Get("X-Request-ID") == "" {
				t.Errorf("preflight: RateLimit %q (want none: no limit consulted), X-Request-ID %q (want one)",
					resp.Header.Get("RateLimit"), resp.Header.Get("X-Request-ID"))
			}
		}
		if n := h.Up.Count(); n != 0 {
			t.Errorf("upstream requests after preflights: %d; want 0", n)
		}
		// The limited key's burst of 5 is intact after five preflights.
		for i, want := range []int{200, 200, 200, 200, 200, 429} {
			resp, body := h.Get(target, h.Limited, "Origin", origin, "Accept-Encoding", "gzip")
			if resp.StatusCode != want {
				t.Fatalf("GET %d: %d %s; want %d", i, resp.StatusCode, body, want)
			}
			if got := resp.Header.Get("Access-Control-Allow-Origin"); got != origin {
				t.Errorf("GET %d (%d): Allow-Origin %q; want %q", i, want, got, origin)
			}
			if got := resp.Header.Get("Access-Control-Expose-Headers"); !strings.Contains(got, "Retry-After") || !strings.Contains(got, "RateLimit") {
				t.Errorf("GET %d: Expose-Headers %q; want RateLimit and Retry-After", i, got)
			}
			vary := strings.Join(resp.Header.Values("Vary"), ", ")
			if !strings.Contains(vary, "Origin") || want == 200 && !strings.Contains(vary, "Accept-Encoding") {
				t.Errorf("GET %d: Vary %q; want Origin (and Accept-Encoding on the 200)", i, vary)
			}
		}
		// An origin not listed gets no CORS header, and its preflight the 405.
		resp, _ := h.Get(target, h.Full, "Origin", "https://evil.example")
		if got := resp.Header.Get("Access-Control-Allow-Origin"); got != "" {
			t.Errorf("other origin: Allow-Origin %q; want none", got)
		}
		resp, _ = h.Do("OPTIONS", target, "", "Origin", "https://evil.example", "Access-Control-Request-Method", "GET")
		if resp.StatusCode != 405 {
			t.Errorf("preflight from another origin: %d; want 405", resp.StatusCode)
		}
		// A 401 for the allowed origin carries the header too, so the page
		// can read the error.
		resp, _ = h.Get(target, "", "Origin", origin)
		if resp.StatusCode != 401 || resp.Header.Get("Access-Control-Allow-Origin") != origin {
			t.Errorf("401: %d, Allow-Origin %q", resp.StatusCode, resp.Header.Get("Access-Control-Allow-Origin"))
		}
	})
}
