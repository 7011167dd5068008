// Package breaker is the one circuit breaker trendgate puts in front of
// each dependency it can wait on: the upstream API and each Redis client.
//
// A Breaker counts consecutive failures; at Config.Failures it opens, and
// for a back-off (doubling after each failed probe, up to MaxBackoff) every
// call is refused at once, without touching the dependency. Then one probe
// is let through (half-open): success closes the breaker, failure opens it
// again. Time comes from an injected clock. Every change of state is logged
// once, with the cause and the next probe, and exported through Metrics.
package breaker

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"trendgate/internal/clock"
)

// State is a breaker's state. The zero value is Closed.
type State int

// Breaker states.
const (
	// Closed lets every call through.
	Closed State = iota
	// HalfOpen lets one probe through; other calls are refused.
	HalfOpen
	// Open refuses every call until the back-off has passed.
	Open
)

// String returns "closed", "half-open" or "open".
func (s State) String() string {
	switch s {
	case Closed:
		return "closed"
	case HalfOpen:
		return "half-open"
	case Open:
		return "open"
	}
	return "unknown"
}

// Outcome is how one call counts.
type Outcome int

// Outcomes.
const (
	// Neutral is no verdict on the dependency (the caller gave up, a
	// refusal that says nothing about its health).
	Neutral Outcome = iota
	// Success means the dependency answered properly.
	Success
	// Failure means it did not: connection error, timeout, bad answer.
	Failure
)

// ProbeWait is the wait hint given to calls refused while a probe is out.
const ProbeWait = time.Second

// Config tunes a Breaker. Zero values take the defaults named on the fields.
type Config struct {
	// Failures is how many consecutive failures open the breaker (5).
	Failures int
	// Backoff is the first open period before a probe (5s).
	Backoff time.Duration
	// MaxBackoff caps the open period, which doubles after each failed
	// probe (Backoff: no doubling).
	MaxBackoff time.Duration
}

func (c Config) withDefaults() Config {
	if c.Failures <= 0 {
		c.Failures = 5
	}
	if c.Backoff <= 0 {
		c.Backoff = 5 * time.Second
	}
	if c.MaxBackoff < c.Backoff {
		c.MaxBackoff = c.Backoff
	}
	return c
}

// Breaker is a consecutive-failure circuit breaker. Build it with New; it
// is safe for concurrent use.
type Breaker struct {
	name    string
	cfg     Config
	clk     clock.Clock
	log     *zap.Logger
	metrics *Metrics

	mu        sync.Mutex    // guards every field below
	listeners []func(State) // called after each change, outside the lock
	state     State
	failures  int           // consecutive failures while closed
	backoff   time.Duration // current open period
	openUntil time.Time     // when open: the earliest probe time
	probing   bool          // when half-open: a probe is out
}

// Options are a Breaker's optional hooks.
type Options struct {
	// Clock drives the back-off; nil means clock.Real{}.
	Clock clock.Clock
	// Logger receives one line per change of state; nil discards.
	Logger *zap.Logger
	// Metrics exports the state and the transitions; nil exports nothing.
	Metrics *Metrics
}

// New returns a closed breaker for the dependency called name (a metric
// label and log field, e.g. "upstream" or "redis").
func New(name string, cfg Config, o Options) *Breaker {
	cfg = cfg.withDefaults()
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	b := &Breaker{name: name, cfg: cfg, clk: o.Clock, log: o.Logger, metrics: o.Metrics, backoff: cfg.Backoff}
	b.metrics.set(name, Closed, false)
	return b
}

// Notify adds f to the functions called with the new state after each
// change of state, outside the breaker's lock.
func (b *Breaker) Notify(f func(State)) {
	b.mu.Lock()
	b.listeners = append(b.listeners, f)
	b.mu.Unlock()
}

// Do runs f unless the breaker refuses, and records its outcome: success
// for a nil error, neutral when ctx has ended (the caller gave up, which
// says nothing about the dependency), failure otherwise. ran is false when
// the breaker refused and f did not run: the caller falls back at once.
func (b *Breaker) Do(ctx context.Context, f func() error) (ran bool, err error) {
	probe, _, ok := b.Allow()
	if !ok {
		return false, nil
	}
	err = f()
	switch {
	case err == nil:
		b.Record(Success, probe, nil)
	case ctx.Err() != nil:
		b.Record(Neutral, probe, nil)
	default:
		b.Record(Failure, probe, err)
	}
	return true, err
}

// Allow decides whether a call may go to the dependency now. probe is true
// when the call is the half-open probe, which must be reported to Record;
// when ok is false, wait says when to try again.
func (b *Breaker) Allow() (probe bool, wait time.Duration, ok bool) {
	now := b.clk.Now()
	b.mu.Lock()
	switch b.state {
	case Open:
		if now.Before(b.openUntil) {
			b.mu.Unlock()
			return false, b.openUntil.Sub(now), false
		}
		b.state = HalfOpen
		b.probing = true
		b.mu.Unlock()
		b.changed(HalfOpen, zap.String("breaker", b.name))
		return true, 0, true
	case HalfOpen:
		defer b.mu.Unlock()
		if b.probing {
			return false, ProbeWait, false
		}
		b.probing = true
		return true, 0, true
	}
	b.mu.Unlock()
	return false, 0, true
}

// Record reports the outcome of a call that Allow let through; probe is
// what Allow said. cause, on a failure, is logged if it opens the breaker.
func (b *Breaker) Record(o Outcome, probe bool, cause error) {
	now := b.clk.Now()
	b.mu.Lock()
	var to State
	changed := false
	switch {
	case probe:
		b.probing = false
		switch o {
		case Success:
			b.state, b.failures, b.backoff = Closed, 0, b.cfg.Backoff
			to, changed = Closed, true
		case Failure:
			b.backoff = min(2*b.backoff, b.cfg.MaxBackoff)
			b.open(now)
			to, changed = Open, true
		}
		// Neutral: stay half-open; the next caller probes.
	case b.state != Closed:
		// A call let through before the breaker opened: its verdict is stale.
	case o == Success:
		b.failures = 0
	case o == Failure:
		b.failures++
		if b.failures >= b.cfg.Failures {
			b.backoff = b.cfg.Backoff
			b.open(now)
			to, changed = Open, true
		}
	}
	next := b.openUntil
	b.mu.Unlock()
	if !changed {
		return
	}
	if to == Open {
		b.changed(Open, zap.String("breaker", b.name), zap.NamedError("cause", cause), zap.Time("next_probe", next))
		return
	}
	b.changed(to, zap.String("breaker", b.name))
}

func (b *Breaker) open(now time.Time) {
	b.state = Open
	b.openUntil = now.Add(b.backoff)
	b.failures = 0
}

// changed logs, exports and announces a new state.
func (b *Breaker) changed(to State, fields ...zap.Field) {
	switch to {
	case Open:
		b.log.Warn("breaker opened: calls fail fast until the next probe", fields...)
	case HalfOpen:
		b.log.Info("breaker half-open: one probe goes through", fields...)
	case Closed:
		b.log.Info("breaker closed: the dependency answers again", fields...)
	}
	b.metrics.set(b.name, to, true)
	b.mu.Lock()
	listeners := b.listeners
	b.mu.Unlock()
	for _, f := range listeners {
		f(to)
	}
}

// State returns the current state. An open breaker whose back-off has
// passed reads Open until a call probes it.
func (b *Breaker) State() State {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state
}

// Metrics are the breakers' collectors, shared by every Breaker of a
// registry. A nil *Metrics exports nothing.
type Metrics struct {
	state       *prometheus.GaugeVec
	transitions *prometheus.CounterVec
}

// NewMetrics registers trendgate_breaker_state{dependency} (0 closed, 1
// half-open, 2 open) and trendgate_breaker_transitions_total{dependency,
// to} on reg, or returns the ones already registered there, so every
// package's breakers share them; reg nil leaves them unregistered.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		state: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "trendgate_breaker_state",
			Help: "Circuit breaker state by dependency: 0 closed, 1 half-open, 2 open.",
		}, []string{"dependency"}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trendgate_breaker_transitions_total",
			Help: "Circuit breaker changes of state by dependency and new state.",
		}, []string{"dependency", "to"}),
	}
	if reg != nil {
		m.state = register(reg, m.state)
		m.transitions = register(reg, m.transitions)
	}
	return m
}

// register registers c on reg, or returns the collector already there.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	var are prometheus.AlreadyRegisteredError
	if err := reg.Register(c); errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing
		}
	}
	return c
}

// set exports name's state s; a transition also counts it.
func (m *Metrics) set(name string, s State, transition bool) {
	if m == nil {
		return
	}
	m.state.WithLabelValues(name).Set(float64(s))
	if transition {
		m.transitions.WithLabelValues(name, s.String()).Inc()
	}
}
