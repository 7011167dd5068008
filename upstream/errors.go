package upstream

import (
	"errors"
	"fmt"
	"time"
)

// Sentinel errors returned (wrapped) by Client.Do. Callers branch on them
// with errors.Is; none of them carries upstream text or the API key.
var (
	// ErrBudgetExhausted means the account-wide outbound budget refused the
	// call; no request was made. RetryAfter tells when a token frees up.
	ErrBudgetExhausted = errors.New("upstream: outbound budget exhausted")
	// ErrShareExhausted means the budget had tokens left, but the claiming
	// account has used its fair share of them (or its per-minute cap) while
	// other accounts are asking for upstream data; no request was made.
	// RetryAfter tells when the account's window starts over.
	ErrShareExhausted = errors.New("upstream: tenant's share of the outbound budget exhausted")
	// ErrCapReached is the ErrShareExhausted (errors.Is holds) of an account
	// refused by its plan's per-minute cap rather than by the fair share.
	ErrCapReached = fmt.Errorf("%w: per-minute cap reached", ErrShareExhausted)
	// ErrRateLimited means the upstream is limiting the gateway: it
	// answered 429, or an earlier answer (a 429, or a remaining count of 0)
	// still blocks calls; no request was made in the second case.
	// RetryAfter tells the time to the upstream's reset.
	ErrRateLimited = errors.New("upstream: rate limited by upstream")
	// ErrBreakerOpen means the circuit breaker is open (or a probe is in
	// flight); no request was made. RetryAfter tells the time to the probe.
	ErrBreakerOpen = errors.New("upstream: circuit breaker open")
	// ErrBusy means every connection slot the claiming account may use was
	// taken for longer than SlotWait (see slots); no request was made, and
	// the upstream's health is not in question. RetryAfter is a second.
	ErrBusy = errors.New("upstream: no connection slot free")
	// ErrTimeout means the fetch ran out of time (dial, response headers,
	// the whole-fetch timeout or the caller's deadline).
	ErrTimeout = errors.New("upstream: timeout")
	// ErrUnavailable means the upstream could not be reached or the
	// connection broke.
	ErrUnavailable = errors.New("upstream: unavailable")
	// ErrBadResponse means the upstream answered with an unexpected status,
	// a redirect, an oversized body or a body that is not the expected shape.
	ErrBadResponse = errors.New("upstream: bad response")
)

// waitError is a sentinel error with a wait hint.
type waitError struct {
	kind error         // one of the sentinels above
	wait time.Duration // > 0
}

func (e *waitError) Error() string {
	return fmt.Sprintf("%v (retry in %s)", e.kind, e.wait.Round(time.Millisecond))
}

func (e *waitError) Unwrap() error { return e.kind }

// withWait wraps kind with a wait hint; a non-positive wait becomes one
// second so callers always get a usable Retry-After.
func withWait(kind error, wait time.Duration) error {
	if wait <= 0 {
		wait = time.Second
	}
	return &waitError{kind: kind, wait: wait}
}

// RetryAfter returns the wait hint carried by an ErrBudgetExhausted,
// ErrShareExhausted, ErrRateLimited, ErrBreakerOpen or ErrBusy error, and 0 for any other error
// (including nil).
func RetryAfter(err error) time.Duration {
	var we *waitError
	if errors.As(err, &we) {
		return we.wait
	}
	return 0
}
