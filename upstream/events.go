package upstream

import (
	"net/http"
	"sync"
	"time"

	"go.uber.org/zap"
)

// budgetEvents logs the budget's changes of state, each once, at the
// moment it happens: the account budget running out for the minute or the
// day, and the upstream saying its own limit is reached (a 429, or a
// remaining count of 0), whose reset the budget then adopts. The requests
// refused meanwhile each show in the access log and the metrics, not here.
type budgetEvents struct {
	log *zap.Logger

	mu          sync.Mutex   // guards the fields below
	outUntil    [2]time.Time // per window (minute, day): end of the episode last logged
	blocked     time.Time    // the end of the upstream block last logged
	adoptedTill [2]time.Time // per window: the adopted reset last logged
}

// Budget windows, indexes of budgetEvents.outUntil.
const (
	windowMinute = iota
	windowDay
)

var windowNames = [2]string{windowMinute: "minute", windowDay: "day"}

// exhausted notes a cold miss refused by the account budget at now, which
// frees a token after retry; window is windowMinute or windowDay. Only the
// first refusal of an episode is logged.
func (e *budgetEvents) exhausted(now time.Time, window int, retry time.Duration) {
	until := now.Add(retry)
	e.mu.Lock()
	if now.Before(e.outUntil[window]) {
		e.mu.Unlock()
		return
	}
	e.outUntil[window] = until
	e.mu.Unlock()
	e.log.Warn("upstream budget exhausted for the "+windowNames[window]+
		": cold misses are served stale or refused (503 upstream_budget_exhausted) until it refills",
		zap.String("window", windowNames[window]), zap.Time("until", until))
}

// observed notes an upstream answer's status and x-rate-limit-* headers
// at now. When they stop upstream calls (see blockUntil) until a moment
// later than the block last logged, that is logged once.
func (e *budgetEvents) observed(now time.Time, h http.Header, status int) {
	rh := parseRateHeaders(h, now)
	until := blockUntil(rh, status, now)
	if !until.After(now) {
		return
	}
	e.mu.Lock()
	if !until.After(e.blocked) {
		e.mu.Unlock()
		return
	}
	e.blocked = until
	e.mu.Unlock()
	window := windowNames[windowMinute]
	if rh.dayRemaining == 0 {
		window = windowNames[windowDay]
	}
	e.log.Warn("upstream rate limit reached: adopting its reset, no upstream calls until then",
		zap.Int("status", status), zap.String("window", window), zap.Time("until", until),
		zap.Int64("minute_remaining", rh.minuteRemaining), zap.Int64("day_remaining", rh.dayRemaining))
}

// adopted notes that the budget lowered its count for window to the
// upstream's remaining count, which then holds until reset (the upstream's
// reported reset, or the calendar window's end): logged once per reset,
// however many answers repeat it. It happens when something else uses the
// same upstream account, or after a restart.
func (e *budgetEvents) adopted(window int, remaining int64, reset time.Time) {
	e.mu.Lock()
	if reset.Equal(e.adoptedTill[window]) {
		e.mu.Unlock()
		return
	}
	e.adoptedTill[window] = reset
	e.mu.Unlock()
	e.log.Info("upstream reports fewer calls left than the budget counted: adopting its count for the "+windowNames[window],
		zap.String("window", windowNames[window]), zap.Int64("remaining", remaining), zap.Time("until", reset))
}

// exhaustedWindow says which window refused a foreground claim: the day
// when the budget reports no day tokens left (or, for a budget that cannot
// tell, when the wait is longer than a minute), else the minute.
func exhaustedWindow(b Budget, retry time.Duration) int {
	if r, ok := b.(tokenReporter); ok {
		if _, day := r.tokens(); day == 0 {
			return windowDay
		}
		return windowMinute
	}
	if retry > time.Minute {
		return windowDay
	}
	return windowMinute
}
