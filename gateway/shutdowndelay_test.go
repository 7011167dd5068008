package gateway_test

import (
	"net/http"
	"testing"
	"time"

	"trendgate/config"
	"trendgate/gateway/gatewaytest"
	"trendgate/internal/clock"
)

// TestShutdownDelay: once Serve's context is done, with
// server.shutdown_delay set, /readyz answers 503 while the public listener
// still accepts new connections and answers them; Serve does not return
// before the delay ends, and SkipShutdownDelay ends it (the delay here is
// an hour, so only the skip can end it within the test).
func TestShutdownDelay(t *testing.T) {
	clk := clock.NewFake(gatewaytest.Now)
	_, upSrv := gatewaytest.StartUpstream(t, clk, nil)
	s := gatewaytest.StartGateway(t, upSrv.URL, clk, func(c *config.Config) {
		c.Server.ShutdownDelay = time.Hour
		c.Server.ShutdownTimeout = 5 * time.Second
	})
	// A new connection for every request: what a load balancer still
	// sending traffic does.
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	list := "http://" + s.Public + "/api4/public/topics/list/v1"
	status := func(url, key string) int {
		resp, _, err := gatewaytest.GetWithKey(t, client, url, key)
		if err != nil {
			return 0
		}
		return resp.StatusCode
	}
	if got := status(s.Admin+"/readyz", ""); got != http.StatusOK {
		t.Fatalf("/readyz before shutdown: %d; want 200", got)
	}

	stopped := make(chan error, 1)
	go func() { stopped <- s.Stop(30 * time.Second) }()
	if !gatewaytest.PollUntil(func() bool { return status(s.Admin+"/readyz", "") == http.StatusServiceUnavailable }) {
		t.Fatal("/readyz did not turn 503 after the shutdown began")
	}
	for i := range 3 {
		if got := status(list, s.Key); got != http.StatusOK {
			t.Fatalf("request %d on a new connection during server.shutdown_delay: %d; want 200", i, got)
		}
	}
	select {
	case err := <-stopped:
		t.Fatalf("Serve returned during server.shutdown_delay: %v", err)
	default:
	}

	s.Gateway.SkipShutdownDelay()
	s.Gateway.SkipShutdownDelay() // a second call is harmless
	if err := <-stopped; err != nil {
		t.Fatalf("Serve after SkipShutdownDelay: %v; want nil", err)
	}
	if got := status(list, s.Key); got != 0 {
		t.Errorf("request after the drain: %d; want the connection refused", got)
	}
	if lines := gatewaytest.LogLines(t, s.Logs.String(), "shutting down: the rest of server.shutdown_delay skipped"); len(lines) != 1 {
		t.Errorf("%d skip log lines; want 1", len(lines))
	}
}
