package upstream

import (
	"sync"
	"time"
)

// BreakerState is the circuit breaker's state. The zero value is
// BreakerClosed.
type BreakerState int

// Breaker states.
const (
	// BreakerClosed lets every call through.
	BreakerClosed BreakerState = iota
	// BreakerHalfOpen lets one probe through; other calls fail fast.
	BreakerHalfOpen
	// BreakerOpen fails every call without a network request until the
	// backoff has passed.
	BreakerOpen
)

// String returns "closed", "half-open" or "open".
func (s BreakerState) String() string {
	switch s {
	case BreakerClosed:
		return "closed"
	case BreakerHalfOpen:
		return "half-open"
	case BreakerOpen:
		return "open"
	}
	return "unknown"
}

// outcome is how one Do call counts for the breaker.
type outcome int

const (
	outcomeNeutral outcome = iota // no verdict: budget refusal, 429, 4xx, caller gone
	outcomeSuccess                // the upstream answered properly (200, 404)
	outcomeFailure                // connection error, timeout, 5xx, 3xx, invalid body
)

// probeWait is the wait hint given to callers refused while a probe is in
// flight.
const probeWait = time.Second

// breaker is a consecutive-failure circuit breaker driven by injected time.
type breaker struct {
	cfg BreakerConfig

	mu        sync.Mutex // guards every field below
	state     BreakerState
	failures  int           // consecutive failures while closed
	backoff   time.Duration // current open period
	openUntil time.Time     // when open: the earliest probe time
	probing   bool          // when half-open: a probe is in flight
}

func newBreaker(cfg BreakerConfig) *breaker {
	return &breaker{cfg: cfg, backoff: cfg.Backoff}
}

// allow decides whether a call may go out at now. probe is true when the
// call is the half-open probe; when ok is false, wait says when to retry.
func (b *breaker) allow(now time.Time) (probe bool, wait time.Duration, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case BreakerOpen:
		if now.Before(b.openUntil) {
			return false, b.openUntil.Sub(now), false
		}
		b.state = BreakerHalfOpen
		fallthrough
	case BreakerHalfOpen:
		if b.probing {
			return false, probeWait, false
		}
		b.probing = true
		return true, 0, true
	}
	return false, 0, true
}

// record applies the outcome of a call admitted by allow at now.
func (b *breaker) record(o outcome, probe bool, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if probe {
		b.probing = false
		switch o {
		case outcomeSuccess:
			b.close()
		case outcomeFailure:
			b.backoff = min(2*b.backoff, b.cfg.MaxBackoff)
			b.open(now)
		}
		// neutral: stay half-open; the next caller probes.
		return
	}
	if b.state != BreakerClosed {
		// A call admitted before the breaker opened; its verdict is stale.
		return
	}
	switch o {
	case outcomeSuccess:
		b.failures = 0
	case outcomeFailure:
		b.failures++
		if b.failures >= b.cfg.Failures {
			b.backoff = b.cfg.Backoff
			b.open(now)
		}
	}
}

func (b *breaker) open(now time.Time) {
	b.state = BreakerOpen
	b.openUntil = now.Add(b.backoff)
	b.failures = 0
}

func (b *breaker) close() {
	b.state = BreakerClosed
	b.failures = 0
	b.backoff = b.cfg.Backoff
}

// current returns the state.
func (b *breaker) current() BreakerState {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state
}
