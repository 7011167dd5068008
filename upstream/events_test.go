package upstream

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"trendgate/api"
	"trendgate/internal/clock"
)

// TestBudgetStateChangesAreLoggedOnce is a regression test: the budget
// running out for the minute or the day, and the upstream's own limit
// being reached (its reset adopted), were silent. Each is now one line at
// the moment it happens, not one per refused request.
func TestBudgetStateChangesAreLoggedOnce(t *testing.T) {
	t.Run("minute and day budget", func(t *testing.T) {
		stub := newStub(t, respond(200, listBody))
		clk := clock.NewFake(t0)
		cfg := testConfig(stub.srv.URL)
		cfg.Budget.PerMinute, cfg.Budget.PerDay = 2, 3
		core, logs := observer.New(zap.InfoLevel)
		c, err := New(cfg, clk, zap.New(core), NewMetrics(prometheus.NewRegistry()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		do := func(n int) {
			for i := 0; i < n; i++ {
				_, _ = c.Do(context.Background(), Request{Endpoint: api.EndpointList, Path: "/api4/public/topics/list/v1", Account: "k"})
			}
		}
		do(5) // 2 sent, 3 refused: one line
		lines := logs.FilterMessageSnippet("upstream budget exhausted").All()
		if len(lines) != 1 || lines[0].ContextMap()["window"] != "minute" {
			t.Fatalf("budget lines %v; want one for the minute", lines)
		}
		clk.Advance(time.Minute)
		do(3) // 1 sent (the day's third), 2 refused: the day is out
		lines = logs.FilterMessageSnippet("upstream budget exhausted").All()
		if len(lines) != 2 || lines[1].ContextMap()["window"] != "day" {
			t.Fatalf("budget lines %v; want a second one for the day", lines)
		}
		clk.Advance(time.Minute)
		do(3) // still the same day: nothing new to say
		if n := logs.FilterMessageSnippet("upstream budget exhausted").Len(); n != 2 {
			t.Errorf("%d budget lines; want still 2", n)
		}
		if got := stub.calls.Load(); got != 3 {
			t.Errorf("upstream calls %d; want 3", got)
		}
	})
	t.Run("upstream 429", func(t *testing.T) {
		clk := clock.NewFake(t0)
		reset := t0.Truncate(time.Minute).Add(time.Minute)
		stub := newStub(t, respond(429, `{"error":"Rate limit exceeded (minute)"}`,
			"X-Rate-Limit-Minute-Remaining", "0", "X-Rate-Limit-Minute-Reset", strconv.FormatInt(reset.Unix(), 10)))
		core, logs := observer.New(zap.InfoLevel)
		c, err := New(testConfig(stub.srv.URL), clk, zap.New(core), NewMetrics(prometheus.NewRegistry()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		for i := 0; i < 3; i++ {
			_, _ = c.Do(context.Background(), Request{Endpoint: api.EndpointList, Path: "/api4/public/topics/list/v1"})
		}
		lines := logs.FilterMessageSnippet("upstream rate limit reached").All()
		if len(lines) != 1 {
			t.Fatalf("%d rate-limit lines; want 1", len(lines))
		}
		m := lines[0].ContextMap()
		if m["window"] != "minute" || !m["until"].(time.Time).Equal(reset) {
			t.Errorf("rate-limit line %v; want window minute until %v", m, reset)
		}
		if got := stub.calls.Load(); got != 1 {
			t.Errorf("upstream calls %d; want 1 (the others wait for the reset)", got)
		}
	})
}

// TestAdoptingUpstreamCountIsLoggedOnce: when the upstream reports fewer
// calls left than the budget counted (another user of the account, or a
// restart), the budget adopts its count until its reset; that is one line
// per reset, not one per answer.
func TestAdoptingUpstreamCountIsLoggedOnce(t *testing.T) {
	clk := clock.NewFake(t0)
	stub := newStub(t, func(w http.ResponseWriter, r *http.Request) {
		reset := clk.Now().Truncate(time.Minute).Add(time.Minute)
		respond(200, listBody, "X-Rate-Limit-Minute-Remaining", "2",
			"X-Rate-Limit-Minute-Reset", strconv.FormatInt(reset.Unix(), 10))(w, r)
	})
	cfg := testConfig(stub.srv.URL)
	cfg.Budget.PerMinute = 10
	core, logs := observer.New(zap.InfoLevel)
	c, err := New(cfg, clk, zap.New(core), NewMetrics(prometheus.NewRegistry()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	list := Request{Endpoint: api.EndpointList, Path: "/api4/public/topics/list/v1"}
	for i := 0; i < 3; i++ { // 1 by us, 8 by the upstream's count: adopted; then 9, 10 by us
		_, _ = c.Do(context.Background(), list)
	}
	lines := logs.FilterMessageSnippet("adopting its count").All()
	if len(lines) != 1 {
		t.Fatalf("%d adoption lines; want 1", len(lines))
	}
	if m := lines[0].ContextMap(); m["window"] != "minute" || m["remaining"] != int64(2) {
		t.Errorf("adoption line %v; want window minute, remaining 2", m)
	}
	clk.Advance(time.Minute) // a new minute, a new reset: adopted again
	_, _ = c.Do(context.Background(), list)
	if n := logs.FilterMessageSnippet("adopting its count").Len(); n != 2 {
		t.Errorf("%d adoption lines after the next minute's; want 2", n)
	}
}
