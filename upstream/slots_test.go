package upstream

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"trendgate/internal/breaker"
)

// manualTimers replaces s's wait bound with channels the test fires; fire
// ends the oldest wait still bounded.
type manualTimers struct{ ch chan time.Time }

func manual(s *slots) *manualTimers {
	m := &manualTimers{ch: make(chan time.Time)}
	s.after = func(time.Duration) (<-chan time.Time, func() bool) { return m.ch, func() bool { return true } }
	return m
}

// waitResult is the outcome of one acquire run in the background.
type waitResult struct {
	release func()
	err     error
}

// acquireAsync starts an acquire for account and returns its outcome's
// channel once it is queued.
func acquireAsync(t *testing.T, s *slots, ctx context.Context, account string, weight float64, abandoned func() bool) <-chan waitResult {
	t.Helper()
	_, _, before := s.inUse(account)
	done := make(chan waitResult, 1)
	go func() { // ends when acquire returns
		rel, err := s.acquire(ctx, account, weight, time.Minute, abandoned)
		done <- waitResult{rel, err}
	}()
	until(t, account+" is queued or served", func() bool {
		select {
		case r := <-done:
			done <- r
			return true
		default:
		}
		_, _, n := s.inUse(account)
		return n > before
	})
	return done
}

// mustNow takes a slot that must be free at once.
func mustNow(t *testing.T, s *slots, account string, weight float64) func() {
	t.Helper()
	rel, err := s.acquire(context.Background(), account, weight, 0, nil)
	if err != nil {
		t.Fatalf("acquire(%q) = %v; want a free slot", account, err)
	}
	return rel
}

// pending fails the test when ch already has an outcome.
func pending(t *testing.T, ch <-chan waitResult, who string) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("%s got an outcome (err %v); want it still waiting", who, r.err)
	default:
	}
}

// The case in miniature: with 8 slots, one account holding every
// slot it may (its slow calls) leaves 2 for others, so another account's
// first call is served at once, not after the slow ones.
func TestSlotsReserveForAccountsHoldingNone(t *testing.T) {
	s := newSlots(8, 0.2)
	for range 6 {
		mustNow(t, s, "attacker", 1)
	}
	_, err := s.acquire(context.Background(), "attacker", 1, 0, nil)
	if !errors.Is(err, ErrBusy) {
		t.Fatalf("attacker's 7th slot: err %v; want ErrBusy (2 are kept for accounts holding none)", err)
	}
	relV := mustNow(t, s, "victim", 1)
	mustNow(t, s, "third", 1)
	if _, err := s.acquire(context.Background(), "victim", 1, 0, nil); !errors.Is(err, ErrBusy) {
		t.Fatalf("with all 8 held: err %v; want ErrBusy", err)
	}
	relV()
	relV() // a second release is a no-op
	if mine, all, _ := s.inUse("victim"); mine != 0 || all != 7 {
		t.Fatalf("after release: victim holds %d, all %d; want 0, 7", mine, all)
	}
}

// Alone, an account may hold every slot but the reserve; with no reserve,
// every slot.
func TestSlotsAloneUsesThePool(t *testing.T) {
	for _, tc := range []struct {
		name    string
		reserve float64
		want    int
	}{{"reserve 0.2", 0.2, 6}, {"no reserve", 0, 8}, {"reserve rounds up", 0.01, 7}} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSlots(8, tc.reserve)
			got := 0
			for range 10 {
				if _, err := s.acquire(context.Background(), "a", 1, 0, nil); err != nil {
					break
				}
				got++
			}
			if got != tc.want {
				t.Errorf("slots held alone = %d; want %d", got, tc.want)
			}
		})
	}
}

// A freed slot goes to the waiting account holding the fewest for its
// weight, not to the one that asked first.
func TestSlotsFreedSlotGoesToFewestHeld(t *testing.T) {
	s := newSlots(4, 0)
	manual(s)
	var held []func()
	for range 4 {
		held = append(held, mustNow(t, s, "a", 1))
	}
	a1 := acquireAsync(t, s, context.Background(), "a", 1, nil) // first in line
	b1 := acquireAsync(t, s, context.Background(), "b", 1, nil)
	held[0]()
	r := <-b1
	if r.err != nil {
		t.Fatalf("b: %v", r.err)
	}
	pending(t, a1, "a")
	held[1]()
	if r := <-a1; r.err != nil {
		t.Fatalf("a: %v", r.err)
	}
}

// Weighted: under contention, an account of weight 2 converges on twice
// the slots of one of weight 1.
func TestSlotsWeightedShare(t *testing.T) {
	s := newSlots(6, 0)
	manual(s)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel) // the waiters left over leave
	block := make([]func(), 0, 6)
	for range 6 {
		block = append(block, mustNow(t, s, "filler", 1))
	}
	for range 6 {
		acquireAsync(t, s, ctx, "heavy", 2, nil)
		acquireAsync(t, s, ctx, "light", 1, nil)
	}
	for _, rel := range block {
		rel()
	}
	if mine, _, _ := s.inUse("heavy"); mine != 4 {
		t.Errorf("heavy (weight 2) holds %d of 6; want 4", mine)
	}
	if mine, _, _ := s.inUse("light"); mine != 2 {
		t.Errorf("light (weight 1) holds %d of 6; want 2", mine)
	}
}

// Waiting is bounded: past the wait the call gets ErrBusy and leaves the
// queue; a caller gone leaves it with its context's error; a waiter whose
// fill was abandoned is dropped at the next hand-out instead of taking
// the slot.
func TestSlotsWaitEnds(t *testing.T) {
	s := newSlots(1, 0)
	timers := manual(s)
	rel := mustNow(t, s, "a", 1)

	busy := acquireAsync(t, s, context.Background(), "b", 1, nil)
	timers.ch <- time.Time{}
	if r := <-busy; !errors.Is(r.err, ErrBusy) {
		t.Fatalf("bounded wait: err %v; want ErrBusy", r.err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	gone := acquireAsync(t, s, ctx, "b", 1, nil)
	cancel()
	if r := <-gone; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("caller gone: err %v; want context.Canceled", r.err)
	}

	var left atomic.Bool
	abandoned := acquireAsync(t, s, context.Background(), "c", 1, left.Load)
	next := acquireAsync(t, s, context.Background(), "d", 1, nil)
	left.Store(true)
	rel()
	if r := <-abandoned; !errors.Is(r.err, errAbandoned) {
		t.Fatalf("abandoned: err %v; want errAbandoned", r.err)
	}
	r := <-next
	if r.err != nil {
		t.Fatalf("next in line: %v; want the slot the abandoned one left", r.err)
	}
	if _, _, waiting := s.inUse("d"); waiting != 0 {
		t.Errorf("waiting after all ended = %d; want 0", waiting)
	}
	r.release()
	if _, all, _ := s.inUse(""); all != 0 {
		t.Errorf("slots held at the end = %d; want 0", all)
	}
}

// Regression: a wait for a local slot was an upstream timeout, so one
// account's queued calls opened the breaker for every account. Now a call
// that finds no slot is refused as busy, sends nothing, spends no budget
// and leaves the breaker closed however often it happens.
func TestClientBusyIsNotAnUpstreamFailure(t *testing.T) {
	stub := newStub(t, respond(http.StatusOK, seriesBody))
	cfg := testConfig(stub.srv.URL)
	cfg.MaxConns = 1
	cfg.Budget = BudgetConfig{PerMinute: 100}
	c, reg := newTestClient(t, cfg, nil)
	timers := manual(c.conns)
	hold := mustNow(t, c.conns, "attacker", 1)
	req := seriesReq
	req.Account = "victim"
	for i := range cfg.Breaker.Failures + 2 {
		done := make(chan error, 1)
		go func() { // ends when Do returns
			_, err := c.Do(context.Background(), req)
			done <- err
		}()
		until(t, "the call waits for a slot", func() bool { _, _, n := c.conns.inUse(""); return n == 1 })
		timers.ch <- time.Time{}
		err := <-done
		if !errors.Is(err, ErrBusy) || RetryAfter(err) <= 0 {
			t.Fatalf("call %d: err %v; want ErrBusy with a Retry-After", i, err)
		}
	}
	if st := c.State(); st != breaker.Closed {
		t.Errorf("breaker = %v after busy refusals; want closed", st)
	}
	if n := stub.calls.Load(); n != 0 {
		t.Errorf("upstream calls = %d; want 0", n)
	}
	if m, _ := c.budget.(tokenReporter).tokens(); m != 100 {
		t.Errorf("minute tokens left = %d; want 100 (a busy call spends none)", m)
	}
	if got := metricValue(t, reg, "trendgate_upstream_refusals_total", "reason", "busy"); got != float64(cfg.Breaker.Failures+2) {
		t.Errorf("busy refusals = %v; want %d", got, cfg.Breaker.Failures+2)
	}
	hold()
	if _, err := c.Do(context.Background(), req); err != nil {
		t.Fatalf("with the slot back: %v", err)
	}
}
