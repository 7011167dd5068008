package upstream

import (
	"context"
	"net/http"
	"testing"

	"trendgate/internal/breaker"
)

// The upstream's 400 is its answer to the request (kept by the caller),
// not a bad response: Do returns it as a Response, counted as rejected,
// and the breaker stays closed however often it comes.
func TestUpstream400IsAnAnswer(t *testing.T) {
	stub := newStub(t, respond(http.StatusBadRequest, `{"error":"start must be before end"}`))
	cfg := testConfig(stub.srv.URL)
	c, reg := newTestClient(t, cfg, nil)
	for i := range cfg.Breaker.Failures + 1 {
		resp, err := c.Do(context.Background(), seriesReq)
		if err != nil || resp.Status != http.StatusBadRequest || resp.Body != nil {
			t.Fatalf("call %d: %+v, %v; want a 400 Response without a body", i, resp, err)
		}
	}
	if st := c.State(); st != breaker.Closed {
		t.Errorf("breaker = %v; want closed", st)
	}
	if got := metricValue(t, reg, "trendgate_upstream_requests_total", "result", "rejected"); got != float64(cfg.Breaker.Failures+1) {
		t.Errorf("requests counted rejected = %v; want %d", got, cfg.Breaker.Failures+1)
	}
}
