package limits

import (
	"strconv"
	"testing"
	"time"

	"trendgate/internal/clock"
)

func TestAuthFailures(t *testing.T) {
	clk := clock.NewFake(t0)
	a := NewAuthFailures(AuthFailureConfig{PerMinute: 60, Burst: 3}, clk, 100)
	const ip = "192.0.2.1"

	if blocked, _ := a.Blocked(ip); blocked || a.size() != 0 {
		t.Fatalf("unknown IP: got blocked=%v, %d IPs with state; want false, 0", blocked, a.size())
	}
	for i := range 3 {
		if blocked, _ := a.Blocked(ip); blocked {
			t.Fatalf("after %d failures: got blocked; want not yet (burst 3)", i)
		}
		a.Record(ip)
	}
	for range 5 { // Blocked does not consume: the answer stays the same
		blocked, retry := a.Blocked(ip)
		if !blocked || retry != time.Second {
			t.Fatalf("after 3 failures: got %v %v; want blocked for 1s (60/min)", blocked, retry)
		}
	}
	if blocked, _ := a.Blocked("192.0.2.2"); blocked {
		t.Errorf("another IP: got blocked; want independent budgets")
	}
	clk.Advance(time.Second)
	if blocked, _ := a.Blocked(ip); blocked {
		t.Errorf("1s later: got blocked; want one attempt allowed")
	}
	a.Record(ip)
	if blocked, _ := a.Blocked(ip); !blocked {
		t.Errorf("after using the refilled token: got not blocked; want blocked")
	}

	clk.Advance(time.Hour)
	if n := a.Sweep(clk.Now()); n != 1 || a.size() != 0 {
		t.Errorf("Sweep after an hour: got %d forgotten, %d left; want 1, 0", n, a.size())
	}
}

func TestAuthFailuresBounded(t *testing.T) {
	clk := clock.NewFake(t0)
	a := NewAuthFailures(AuthFailureConfig{PerMinute: 1, Burst: 1}, clk, 10)
	for i := range 100 {
		a.Record("198.51.100." + strconv.Itoa(i))
	}
	if got := a.size(); got != 10 {
		t.Errorf("got %d IPs with state; want 10 (maxIPs)", got)
	}
	if blocked, _ := a.Blocked("198.51.100.99"); !blocked {
		t.Errorf("most recent IP: got not blocked; want blocked")
	}
	if blocked, _ := a.Blocked("198.51.100.0"); blocked {
		t.Errorf("evicted oldest IP: got blocked; want forgotten")
	}
}

func TestAuthFailuresDisabled(t *testing.T) {
	for _, a := range []*AuthFailures{nil, NewAuthFailures(AuthFailureConfig{}, nil, 0)} {
		for range 10 {
			a.Record("ip")
		}
		if blocked, _ := a.Blocked("ip"); blocked {
			t.Errorf("disabled limiter: got blocked; want never")
		}
	}
}
