package breaker

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"trendgate/internal/clock"
	"trendgate/internal/testing/promtest"
)

var errDown = errors.New("dial tcp 127.0.0.1:6379: connection refused")

func newTest(t *testing.T, cfg Config) (*Breaker, *clock.Fake, *observer.ObservedLogs, *prometheus.Registry, *[]State) {
	t.Helper()
	clk := clock.NewFake(time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC))
	core, logs := observer.New(zap.InfoLevel)
	reg := prometheus.NewRegistry()
	var changes []State
	b := New("redis", cfg, Options{Clock: clk, Logger: zap.New(core), Metrics: NewMetrics(reg)})
	b.Notify(func(s State) { changes = append(changes, s) })
	return b, clk, logs, reg, &changes
}

// fail makes n calls that fail.
func fail(t *testing.T, b *Breaker, n int) {
	t.Helper()
	for range n {
		probe, _, ok := b.Allow()
		if !ok {
			t.Fatal("call refused while closed")
		}
		b.Record(Failure, probe, errDown)
	}
}

func TestBreakerCycle(t *testing.T) {
	b, clk, logs, reg, changes := newTest(t, Config{Failures: 3, Backoff: 2 * time.Second, MaxBackoff: 5 * time.Second})
	fail(t, b, 2)
	if b.State() != Closed {
		t.Fatal("opened before the threshold")
	}
	b.Record(Success, false, nil) // a success resets the count
	fail(t, b, 2)
	if b.State() != Closed {
		t.Fatal("failures before a success counted")
	}
	fail(t, b, 1)
	if b.State() != Open {
		t.Fatalf("state %v after 3 consecutive failures; want open", b.State())
	}
	if _, wait, ok := b.Allow(); ok || wait != 2*time.Second {
		t.Fatalf("open breaker: ok %v wait %v; want refused, 2s", ok, wait)
	}

	// Failed probes double the back-off up to the cap.
	for _, want := range []time.Duration{4 * time.Second, 5 * time.Second, 5 * time.Second} {
		clk.Advance(b.backoff)
		probe, _, ok := b.Allow()
		if !ok || !probe {
			t.Fatalf("after the back-off: probe %v ok %v; want the probe", probe, ok)
		}
		if _, wait, ok := b.Allow(); ok || wait != ProbeWait {
			t.Fatalf("second call while probing: ok %v wait %v; want refused, %v", ok, wait, ProbeWait)
		}
		b.Record(Failure, true, errDown)
		if _, wait, ok := b.Allow(); ok || wait != want {
			t.Fatalf("after a failed probe: ok %v wait %v; want refused, %v", ok, wait, want)
		}
	}
	// A neutral probe leaves it half-open for the next caller.
	clk.Advance(5 * time.Second)
	probe, _, _ := b.Allow()
	b.Record(Neutral, probe, nil)
	if b.State() != HalfOpen {
		t.Fatalf("state %v after a neutral probe; want half-open", b.State())
	}
	probe, _, ok := b.Allow()
	if !ok || !probe {
		t.Fatal("next caller after a neutral probe is not the probe")
	}
	b.Record(Success, true, nil)
	if b.State() != Closed {
		t.Fatalf("state %v after a good probe; want closed", b.State())
	}
	// The back-off starts over.
	fail(t, b, 3)
	if _, wait, _ := b.Allow(); wait != 2*time.Second {
		t.Errorf("back-off after closing: %v; want 2s again", wait)
	}

	want := []State{Open, HalfOpen, Open, HalfOpen, Open, HalfOpen, Open, HalfOpen, Closed, Open}
	if len(*changes) != len(want) {
		t.Fatalf("changes %v; want %v", *changes, want)
	}
	for i := range want {
		if (*changes)[i] != want[i] {
			t.Fatalf("changes %v; want %v", *changes, want)
		}
	}
	if logs.Len() != len(want) {
		t.Errorf("%d log lines for %d changes; want one each", logs.Len(), len(want))
	}
	first := logs.All()[0]
	if !strings.Contains(first.Message, "opened") || first.ContextMap()["cause"] != errDown.Error() || first.ContextMap()["breaker"] != "redis" {
		t.Errorf("open line %q %v; want the cause and the breaker's name", first.Message, first.ContextMap())
	}
	if _, ok := first.ContextMap()["next_probe"]; !ok {
		t.Error("open line lacks next_probe")
	}
	if got, _ := promtest.Sum(t, reg, "trendgate_breaker_state", "dependency", "redis"); got != float64(Open) {
		t.Errorf("state gauge %v; want %d", got, Open)
	}
	if got, _ := promtest.Sum(t, reg, "trendgate_breaker_transitions_total", "dependency", "redis", "to", "open"); got != 5 {
		t.Errorf("transitions to open %v; want 5", got)
	}
}

func TestBreakerIgnoresStaleVerdicts(t *testing.T) {
	b, _, _, _, _ := newTest(t, Config{Failures: 1})
	_, _, ok := b.Allow() // let through while closed
	if !ok {
		t.Fatal("refused while closed")
	}
	fail(t, b, 1) // another call opens it
	b.Record(Success, false, nil)
	if b.State() != Open {
		t.Errorf("a verdict from before the opening closed the breaker")
	}
}

func TestZeroConfigDefaults(t *testing.T) {
	b := New("x", Config{}, Options{})
	for range 4 {
		b.Record(Failure, false, errDown)
	}
	if b.State() != Closed {
		t.Fatal("opened before 5 failures")
	}
	b.Record(Failure, false, errDown)
	if _, wait, ok := b.Allow(); ok || wait <= 4*time.Second || wait > 5*time.Second {
		t.Errorf("default back-off: ok %v wait %v; want about 5s", ok, wait)
	}
}

func TestDo(t *testing.T) {
	b, _, _, _, _ := newTest(t, Config{Failures: 2})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for range 3 { // the caller giving up is no verdict on the dependency
		if ran, _ := b.Do(ctx, func() error { return ctx.Err() }); !ran {
			t.Fatal("refused while closed")
		}
	}
	if b.State() != Closed {
		t.Fatal("canceled calls opened the breaker")
	}
	bg := context.Background()
	for range 2 {
		if ran, err := b.Do(bg, func() error { return errDown }); !ran || err != errDown {
			t.Fatalf("Do: ran %v err %v", ran, err)
		}
	}
	called := false
	if ran, err := b.Do(bg, func() error { called = true; return nil }); ran || err != nil || called {
		t.Errorf("open breaker: ran %v err %v called %v; want refused without calling", ran, err, called)
	}
}
