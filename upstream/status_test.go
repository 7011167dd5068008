package upstream

import (
	"context"
	"errors"
	"testing"

	"trendgate/internal/clock"
)

func TestSentAndBudgetLeft(t *testing.T) {
	tests := []struct {
		name       string
		closed     bool
		retries    int
		perMinute  int
		calls      int
		wantSent   int
		wantMinute int64
	}{
		{name: "two answered calls", perMinute: 5, calls: 2, wantSent: 2, wantMinute: 3},
		{name: "budget refuses the third", perMinute: 2, calls: 3, wantSent: 2, wantMinute: 0},
		{name: "connection refused, one retry", closed: true, retries: 1, perMinute: 5, calls: 1, wantSent: 2, wantMinute: 3},
		{name: "unlimited", perMinute: 0, calls: 1, wantSent: 1, wantMinute: -1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			stub := newStub(t, respond(200, seriesBody))
			base := stub.srv.URL
			if tc.closed {
				base = "http://" + closedAddr(t)
			}
			cfg := testConfig(base)
			cfg.Retries = tc.retries
			cfg.Budget = BudgetConfig{PerMinute: tc.perMinute, PerDay: 100}
			c, _ := newTestClient(t, cfg, clock.NewFake(t0))
			sent := 0
			req := seriesReq
			req.Sent = func() { sent++ }
			for range tc.calls {
				_, err := c.Do(context.Background(), req)
				if err != nil && !errors.Is(err, ErrBudgetExhausted) && !errors.Is(err, ErrUnavailable) {
					t.Fatalf("Do: %v", err)
				}
			}
			if sent != tc.wantSent {
				t.Errorf("got Sent called %d times; want %d", sent, tc.wantSent)
			}
			minute, day, ok := c.BudgetLeft()
			if !ok || minute != tc.wantMinute || day != 100-int64(tc.wantSent) {
				t.Errorf("got BudgetLeft %d, %d, %v; want %d, %d, true", minute, day, ok, tc.wantMinute, 100-tc.wantSent)
			}
			if pm, pd := c.BudgetLimits(); pm != tc.perMinute || pd != 100 {
				t.Errorf("got BudgetLimits %d, %d; want %d, 100", pm, pd, tc.perMinute)
			}
		})
	}
}
