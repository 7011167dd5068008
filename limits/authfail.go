package limits

import (
	"container/list"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"trendgate/internal/clock"
)

// AuthFailures is a token bucket per client IP for failed authentication
// attempts: each failure takes one token (Record), and an IP with less than
// one token left is Blocked until the bucket refills. Only IPs that failed
// get state; the map holds at most maxIPs entries, evicting the least
// recently failing IP first (which forgets that IP's budget: an attacker
// needs more than maxIPs addresses to profit from that). The zero value is
// not usable; use NewAuthFailures. A nil *AuthFailures blocks nothing.
type AuthFailures struct {
	every  rate.Limit
	burst  int
	maxIPs int
	clk    clock.Clock

	mu  sync.Mutex // guards ips and lru
	ips map[string]*list.Element
	lru *list.List // of *ipState; front = most recent failure
}

// ipState is one IP's failure budget. Guarded by AuthFailures.mu.
type ipState struct {
	ip     string
	bucket *rate.Limiter
}

// NewAuthFailures returns a per-IP failure limiter. cfg.PerMinute <= 0
// disables it (Blocked is always false); cfg.Burst < 1 means 1; maxIPs < 1
// means 100000. A nil clk is clock.Real{}.
func NewAuthFailures(cfg AuthFailureConfig, clk clock.Clock, maxIPs int) *AuthFailures {
	if clk == nil {
		clk = clock.Real{}
	}
	if maxIPs < 1 {
		maxIPs = 100000
	}
	return &AuthFailures{
		every:  rate.Limit(cfg.PerMinute / 60),
		burst:  max(cfg.Burst, 1),
		maxIPs: maxIPs,
		clk:    clk,
		ips:    make(map[string]*list.Element),
		lru:    list.New(),
	}
}

// Blocked reports whether ip has no failure budget left and, if so, how long
// until one more attempt is allowed. It consumes nothing and creates no
// state (the caller counts what it refuses).
func (a *AuthFailures) Blocked(ip string) (bool, time.Duration) {
	if a == nil || a.every <= 0 {
		return false, 0
	}
	now := a.clk.Now()
	a.mu.Lock()
	e := a.ips[ip]
	var tokens float64
	if e != nil {
		tokens = e.Value.(*ipState).bucket.TokensAt(now)
	}
	a.mu.Unlock()
	if e == nil || tokens >= 1 {
		return false, 0
	}
	return true, max(durationForTokens(1-tokens, float64(a.every)), time.Millisecond)
}

// Record consumes one failure token for ip (none is taken when the budget
// is already empty).
func (a *AuthFailures) Record(ip string) {
	if a == nil || a.every <= 0 {
		return
	}
	now := a.clk.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	e := a.ips[ip]
	if e == nil {
		st := &ipState{ip: ip, bucket: rate.NewLimiter(a.every, a.burst)}
		e = a.lru.PushFront(st)
		a.ips[ip] = e
		for a.lru.Len() > a.maxIPs {
			old := a.lru.Remove(a.lru.Back()).(*ipState)
			delete(a.ips, old.ip)
		}
	} else {
		a.lru.MoveToFront(e)
	}
	e.Value.(*ipState).bucket.AllowN(now, 1)
}

// Sweep forgets IPs whose bucket has refilled completely (they carry no
// information any more) and returns how many were forgotten.
func (a *AuthFailures) Sweep(now time.Time) int {
	if a == nil {
		return 0
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for ip, e := range a.ips {
		if e.Value.(*ipState).bucket.TokensAt(now) >= float64(a.burst) {
			a.lru.Remove(e)
			delete(a.ips, ip)
			n++
		}
	}
	return n
}
