// Package clock abstracts the passage of time so that every time-dependent
// decision in trendgate (freshness, rate limits, quotas, budgets, breakers)
// can be driven by a fake clock in tests.
//
// It tells the time and nothing else. Timers and tickers (the lease poll,
// the quota reconciler, the certificate lock keep-alive, the retry jitter)
// use package time directly and are tested in testing/synctest bubbles,
// where package time runs on fake time.
package clock

import (
	"sync"
	"time"
)

// Clock tells the current time. Code that needs time takes a Clock; pure
// helpers take a now time.Time instead.
type Clock interface {
	Now() time.Time
}

// Real is the wall clock. The zero value is ready to use.
type Real struct{}

// Now returns time.Now().
func (Real) Now() time.Time { return time.Now() }

// Fake is a manually driven clock for tests. The zero value starts at the
// zero time; use NewFake to start somewhere meaningful.
type Fake struct {
	mu  sync.Mutex // guards now
	now time.Time
}

// NewFake returns a Fake clock set to t.
func NewFake(t time.Time) *Fake { return &Fake{now: t} }

// Now returns the fake current time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// Advance moves the clock forward by d and returns the new time.
func (f *Fake) Advance(d time.Duration) time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
	return f.now
}

// Set moves the clock to t.
func (f *Fake) Set(t time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = t
}

var (
	_ Clock = Real{}
	_ Clock = (*Fake)(nil)
)
