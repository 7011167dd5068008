//go:build linux

package gateway_test

import (
	"bytes"
	"crypto/tls"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"trendgate/config"
	"trendgate/gateway/gatewaytest"
	"trendgate/limits"
)

// With server.event_loops, the gateway answers as it does without: a miss
// leaves its loop once, to wait for the upstream, and the hits after it,
// on the same connections, stay on the loops.
func TestEventLoops(t *testing.T) {
	h := gatewaytest.New(t, func(c *config.Config) {
		c.Server.EventLoops = 2
		pl := c.Plans["full"]
		pl.Policy = limits.Policy{PerSecond: 1e9, Burst: 1e9, Daily: 1e12, Monthly: 1e13}
		c.Plans["full"] = pl
	})
	handovers := func() float64 {
		return gatewaytest.Metric(t, h.Gateway.Registry(), "trendgate_event_loop_handovers_total")
	}
	targets := []string{
		"/api4/public/topics/list/v1",
		"/api4/public/topic/golang/whatsup/v1",
		"/api4/public/topic/golang/time-series/v1?bucket=hour&interval=1d",
	}
	first := make([][]byte, len(targets))
	for i, target := range targets {
		resp, body := h.Get(target, h.Full)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: got %d %s", target, resp.StatusCode, body)
		}
		first[i] = body
	}
	misses := handovers()
	t.Logf("handovers after %d misses: %v", len(targets), misses)
	if misses < 1 {
		t.Fatalf("handovers after %d misses: got %v; want at least 1", len(targets), misses)
	}
	for range 20 {
		for i, target := range targets {
			resp, body := h.Get(target, h.Full)
			if resp.StatusCode != http.StatusOK || !bytes.Equal(body, first[i]) {
				t.Fatalf("%s, a hit: got %d and a different body", target, resp.StatusCode)
			}
			if got := resp.Header.Get("Cache-Status"); !strings.HasPrefix(got, "trendgate; hit") {
				t.Errorf("%s: Cache-Status %q; want a hit", target, got)
			}
		}
	}
	if got := handovers(); got != misses {
		t.Errorf("handovers after 60 hits: got %v; want %v, as after the misses", got, misses)
	}
	resp, body := h.Get(targets[0], "tg_not-a-key")
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a bad key: got %d %s", resp.StatusCode, body)
	}
}

// With nothing set (server.event_loops: auto), a plain listener runs a
// loop per processor the process started with: the start log says how
// many, and a miss leaves a loop, which only a loop can do.
func TestEventLoopsByDefault(t *testing.T) {
	h := gatewaytest.New(t, nil)
	want := h.Gateway.Config().LoopCount()
	if want < 1 {
		t.Fatalf("LoopCount of the default configuration: %d; want at least 1 on Linux", want)
	}
	var lines []map[string]any
	gatewaytest.PollUntil(func() bool { lines = gatewaytest.LogLines(t, h.Logs.String(), "serving"); return len(lines) > 0 })
	if got, ok := lines[0]["event_loops"].(float64); !ok || int(got) != want {
		t.Errorf("serving line event_loops %v; want %d", lines[0]["event_loops"], want)
	}
	if resp, body := h.Get("/api4/public/topics/list/v1", h.Full); resp.StatusCode != http.StatusOK {
		t.Fatalf("a miss: got %d %s", resp.StatusCode, body)
	}
	if got := gatewaytest.Metric(t, h.Gateway.Registry(), "trendgate_event_loop_handovers_total"); got < 1 {
		t.Errorf("handovers after a miss: %v; want at least 1 (the request was not on a loop)", got)
	}
}

// With TLS on and nothing set, HTTPS/1.1 connections run on the loops
// too, after their handshake: the start log counts them, misses over
// HTTPS leave a loop (which only a loop can do) and the hits after them,
// on the same connection, do not; h2 clients still get HTTP/2.
func TestEventLoopsServeTLSByDefault(t *testing.T) {
	gws, pool := gatewaytest.HttpsGateways(t, func(*config.Config) {})
	s := gws[0]
	want := s.Config.LoopCount()
	if want < 1 {
		t.Fatalf("LoopCount with TLS on: %d; want at least 1 on Linux", want)
	}
	var lines []map[string]any
	gatewaytest.PollUntil(func() bool { lines = gatewaytest.LogLines(t, s.Logs.String(), "serving"); return len(lines) > 0 })
	if got, ok := lines[0]["event_loops"].(float64); !ok || int(got) != want || lines[0]["tls"] != true {
		t.Errorf("serving line event_loops %v, tls %v; want %d and true", lines[0]["event_loops"], lines[0]["tls"], want)
	}
	handovers := func() float64 {
		return gatewaytest.Metric(t, s.Gateway.Registry(), "trendgate_event_loop_handovers_total")
	}
	client := func(proto string) *http.Client {
		return &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{
			TLSClientConfig:   &tls.Config{RootCAs: pool, ServerName: "tg.test", NextProtos: []string{proto}},
			ForceAttemptHTTP2: proto == "h2",
		}}
	}
	get := func(c *http.Client, wantProto, target string) []byte {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, "https://"+s.Public+target, nil)
		req.Header.Set("Authorization", "Bearer "+s.Key)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK || resp.Proto != wantProto {
			t.Fatalf("GET over %s: %s %d, %v", wantProto, resp.Proto, resp.StatusCode, err)
		}
		return body
	}
	h1c := client("http/1.1")
	defer h1c.CloseIdleConnections()
	// A connection's first request may come with the end of its handshake
	// and then runs on its goroutine; the next ones find it on the loops.
	list := get(h1c, "HTTP/1.1", gatewaytest.ListPath)
	for _, topic := range []string{"golang", "bitcoin", "ethereum"} {
		get(h1c, "HTTP/1.1", "/api4/public/topic/"+topic+"/whatsup/v1")
	}
	after := handovers()
	if after < 1 {
		t.Fatalf("handovers after four misses over HTTPS: %v; want at least 1 (no request was on a loop)", after)
	}
	for range 20 {
		if body := get(h1c, "HTTP/1.1", gatewaytest.ListPath); !bytes.Equal(body, list) {
			t.Fatal("a hit over HTTPS: a different body")
		}
	}
	if got := handovers(); got != after {
		t.Errorf("handovers after 20 hits over HTTPS: %v; want %v, as after the misses", got, after)
	}
	h2c := client("h2")
	defer h2c.CloseIdleConnections()
	if body := get(h2c, "HTTP/2.0", gatewaytest.ListPath); !bytes.Equal(body, list) {
		t.Error("a hit over HTTP/2: a different body")
	}
}
