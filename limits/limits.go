package limits

import (
	"context"
	"errors"
	"math"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"trendgate/api"
)

// Reason says why a request was refused. The zero value "" means allowed.
type Reason string

// The reasons a Decision can refuse a request. They double as the stable
// error codes of the 429 response.
const (
	ReasonRate    Reason = "rate_limited"
	ReasonDaily   Reason = "daily_quota_exceeded"
	ReasonMonthly Reason = "monthly_quota_exceeded"
)

// Sentinel errors callers may branch on.
var (
	// ErrNoSubject is returned when Admit is called with an empty key id
	// (a zero Subject).
	ErrNoSubject = errors.New("limits: empty key id")
	// ErrInvalidCost is returned when Admit is called with a cost below 1.
	ErrInvalidCost = errors.New("limits: cost must be >= 1")
)

// Limiter admits requests. Admit takes cost tokens from the subject's key's
// bucket and reserves cost units of the subject's account's daily and
// monthly quota atomically (refusing if either would be exceeded; a refused
// request consumes nothing). Refund gives the quota reservation back; the
// gateway calls it when the response is not delivered as 2xx/304. Tokens
// are not refunded.
type Limiter interface {
	Admit(ctx context.Context, s Subject, p Policy, cost int) (Decision, error)
	Refund(ctx context.Context, s Subject, d Decision) error
}

// Subject names whose limits a request is admitted against: the token
// bucket is Key's, the quota counters are Account's (shared by all the
// account's keys). Both are opaque strings to the limiters; an empty
// Account means the key is an account of its own, named by Key. The zero
// value is refused (ErrNoSubject).
type Subject struct {
	Key     string
	Account string
}

// account returns the id the quota counters are kept under.
func (s Subject) account() string { return api.AccountOf(s.Key, s.Account) }

// Compile-time interface guards.
var (
	_ Limiter = (*Local)(nil)
	_ Limiter = (*Redis)(nil)
)

// Decision is the outcome of Admit. The zero value is an allowed decision
// with no policy, which writes no rate-limit headers and refunds nothing.
type Decision struct {
	// Allowed reports whether the request may proceed.
	Allowed bool
	// Reason says which limit refused the request; "" when allowed.
	Reason Reason
	// RetryAfter is how long to wait before retrying; set when !Allowed.
	RetryAfter time.Duration

	// Policy is the effective policy the decision was made under (burst
	// defaulted, scaled down while a Redis limiter runs on its fallback).
	Policy Policy
	// BurstRemaining is the whole tokens left in the bucket and BurstReset
	// the time until the bucket is full again (PerSecond > 0 only).
	BurstRemaining int
	BurstReset     time.Duration
	// DailyRemaining and MonthlyRemaining are the quota units left in the
	// current windows; DailyReset and MonthlyReset the time until those
	// windows end; MonthlyWindow the length of the current month.
	DailyRemaining   int64
	DailyReset       time.Duration
	MonthlyRemaining int64
	MonthlyReset     time.Duration
	MonthlyWindow    time.Duration

	// Day (YYYYMMDD) and Month (YYYYMM) identify the UTC windows the
	// reservation was made in; DayReserved and MonthReserved are the units
	// reserved there (0 when refused or when that quota is off). Refund
	// gives back exactly these.
	Day, Month                 int
	DayReserved, MonthReserved int64

	// fallback is set when a Redis limiter served the decision from its
	// local fallback, so Refund goes to the same place.
	fallback bool
	// admission is the id a Redis limiter gave this admission ("" when no
	// quota is on, or Redis was not tried); Refund settles it by id.
	admission string
}

// Policy names used in the RateLimit-Policy and RateLimit fields.
const (
	policyBurst   = "burst"
	policyDaily   = "daily"
	policyMonthly = "monthly"
)

// SetHeaders writes the rate-limit header fields for d to h:
//
//	RateLimit-Policy: "burst";q=<burst>;w=<ceil(burst/per_second)>, "daily";q=<daily>;w=86400, "monthly";q=<monthly>;w=<seconds in this month>
//	RateLimit: "burst";r=<tokens left>;t=<seconds until full>, "daily";r=..;t=<seconds to UTC midnight>, "monthly";r=..;t=..
//
// Only the limits that are on appear. The legacy X-RateLimit-Limit,
// X-RateLimit-Remaining and X-RateLimit-Reset (delta seconds) describe the
// most restrictive limit: the one with the fewest units remaining relative
// to its quota (ties go to the longer reset). When !d.Allowed, Retry-After
// is set too (whole seconds, rounded up, at least 1). A zero policy writes
// nothing but Retry-After.
func (d Decision) SetHeaders(h http.Header) {
	var items [3]item
	n := 0
	p := d.Policy
	if p.PerSecond > 0 {
		b := effectiveBurst(p)
		items[n] = item{policyBurst, int64(b), ceilSeconds(burstWindow(p.PerSecond, b)), int64(d.BurstRemaining), ceilSeconds(d.BurstReset)}
		n++
	}
	if p.Daily > 0 {
		items[n] = item{policyDaily, p.Daily, 86400, d.DailyRemaining, ceilSeconds(d.DailyReset)}
		n++
	}
	if p.Monthly > 0 {
		items[n] = item{policyMonthly, p.Monthly, ceilSeconds(d.MonthlyWindow), d.MonthlyRemaining, ceilSeconds(d.MonthlyReset)}
		n++
	}
	if n > 0 {
		// All five values are cut from one buffer and one backing array, and
		// the header keys are set in canonical form: this runs on every
		// authenticated response, cache hits included.
		var buf [384]byte
		b := appendItems(buf[:0], items[:n], false)
		polEnd := len(b)
		b = appendItems(b, items[:n], true)
		curEnd := len(b)
		m := mostRestrictive(items[:n])
		b = strconv.AppendInt(b, m.quota, 10)
		limEnd := len(b)
		b = strconv.AppendInt(b, m.remaining, 10)
		remEnd := len(b)
		b = strconv.AppendInt(b, m.reset, 10)
		all := string(b)
		vals := [5]string{all[:polEnd], all[polEnd:curEnd], all[curEnd:limEnd], all[limEnd:remEnd], all[remEnd:]}
		v := vals[:]
		h["Ratelimit-Policy"] = v[0:1:1]
		h["Ratelimit"] = v[1:2:2]
		h["X-Ratelimit-Limit"] = v[2:3:3]
		h["X-Ratelimit-Remaining"] = v[3:4:4]
		h["X-Ratelimit-Reset"] = v[4:5:5]
	}
	if !d.Allowed {
		h.Set("Retry-After", strconv.FormatInt(max(ceilSeconds(d.RetryAfter), 1), 10))
	}
}

// appendItems appends items as a structured-field list: the policy form
// ("name";q=quota;w=window) or, with current, the RateLimit form
// ("name";r=remaining;t=reset).
func appendItems(b []byte, items []item, current bool) []byte {
	for i, it := range items {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = append(b, '"')
		b = append(b, it.name...)
		if current {
			b = append(b, `";r=`...)
			b = strconv.AppendInt(b, it.remaining, 10)
			b = append(b, ";t="...)
			b = strconv.AppendInt(b, it.reset, 10)
		} else {
			b = append(b, `";q=`...)
			b = strconv.AppendInt(b, it.quota, 10)
			b = append(b, ";w="...)
			b = strconv.AppendInt(b, it.window, 10)
		}
	}
	return b
}

// item is one limit as written to the headers.
type item struct {
	name             string
	quota, window    int64
	remaining, reset int64
}

// mostRestrictive picks the item with the lowest remaining/quota ratio;
// ties go to the one that resets later.
func mostRestrictive(items []item) item {
	best := items[0]
	for _, it := range items[1:] {
		// Compare remaining/quota without division: a/b < c/d  <=>  a*d < c*b.
		l, r := it.remaining*best.quota, best.remaining*it.quota
		if l < r || (l == r && it.reset > best.reset) {
			best = it
		}
	}
	return best
}

// ceilSeconds rounds d up to whole seconds (0 for d <= 0).
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// effectiveBurst is p.Burst, or ceil(p.PerSecond) when Burst is 0.
func effectiveBurst(p Policy) int {
	if p.Burst > 0 {
		return p.Burst
	}
	return max(int(math.Ceil(p.PerSecond)), 1)
}

// burstWindow is how long an empty bucket of burst tokens takes to refill.
func burstWindow(perSecond float64, burst int) time.Duration {
	return durationForTokens(float64(burst), perSecond)
}

// durationForTokens is how long perSecond takes to produce tokens.
func durationForTokens(tokens, perSecond float64) time.Duration {
	if tokens <= 0 {
		return 0
	}
	return time.Duration(math.Ceil(tokens / perSecond * float64(time.Second)))
}

// window identifies the UTC calendar day and month containing a moment.
type window struct {
	day, month           int // YYYYMMDD, YYYYMM
	dayStart, dayEnd     time.Time
	monthStart, monthEnd time.Time
}

// lastWindow is the window windowAt returned last: the requests of a
// whole day ask for the same one, and working out dates is a good part of
// what admitting a request costs.
var lastWindow atomic.Pointer[window]

// windowAt returns the UTC day and month windows containing now.
func windowAt(now time.Time) window {
	if w := lastWindow.Load(); w != nil && !now.Before(w.dayStart) && now.Before(w.dayEnd) {
		return *w
	}
	w := makeWindow(now)
	lastWindow.Store(&w)
	return w
}

// makeWindow is windowAt worked out.
func makeWindow(now time.Time) window {
	u := now.UTC()
	y, m, d := u.Date()
	dayStart := time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
	monthStart := time.Date(y, m, 1, 0, 0, 0, 0, time.UTC)
	return window{
		day:        y*10000 + int(m)*100 + d,
		month:      y*100 + int(m),
		dayStart:   dayStart,
		dayEnd:     dayStart.AddDate(0, 0, 1),
		monthEnd:   monthStart.AddDate(0, 1, 0),
		monthStart: monthStart,
	}
}

// dayEndOf returns the end of the UTC day with id YYYYMMDD.
func dayEndOf(day int) time.Time {
	return time.Date(day/10000, time.Month(day/100%100), day%100, 0, 0, 0, 0, time.UTC).AddDate(0, 0, 1)
}

// monthEndOf returns the end of the UTC month with id YYYYMM.
func monthEndOf(month int) time.Time {
	return time.Date(month/100, time.Month(month%100), 1, 0, 0, 0, 0, time.UTC).AddDate(0, 1, 0)
}

// fillQuota sets the quota fields of d for the used units in window w at now.
func (d *Decision) fillQuota(p Policy, w window, now time.Time, dayUsed, monthUsed int64) {
	d.Day, d.Month = w.day, w.month
	d.DailyReset = w.dayEnd.Sub(now)
	d.MonthlyReset = w.monthEnd.Sub(now)
	d.MonthlyWindow = w.monthEnd.Sub(w.monthStart)
	if p.Daily > 0 {
		d.DailyRemaining = max(p.Daily-dayUsed, 0)
	}
	if p.Monthly > 0 {
		d.MonthlyRemaining = max(p.Monthly-monthUsed, 0)
	}
}

// quotaCheck decides whether cost more units fit into the used counts.
// It checks the monthly quota first: when both are exhausted, waiting for
// the day to end would not help.
func quotaCheck(p Policy, w window, now time.Time, dayUsed, monthUsed int64, cost int) (Reason, time.Duration) {
	if p.Monthly > 0 && monthUsed+int64(cost) > p.Monthly {
		return ReasonMonthly, w.monthEnd.Sub(now)
	}
	if p.Daily > 0 && dayUsed+int64(cost) > p.Daily {
		return ReasonDaily, w.dayEnd.Sub(now)
	}
	return "", 0
}

// neverFits is the Retry-After for a cost larger than the burst: it can
// never pass, so the client is told to wait one full refill.
func neverFits(p Policy) time.Duration {
	return max(burstWindow(p.PerSecond, effectiveBurst(p)), time.Second)
}

func checkArgs(s Subject, cost int) error {
	if s.Key == "" {
		return ErrNoSubject
	}
	if cost < 1 {
		return ErrInvalidCost
	}
	return nil
}

// Unservable names the limit of p that a request of this cost can never
// pass, whatever it waits: "burst" when the cost exceeds the bucket's
// burst, "daily" or "monthly" when it exceeds that quota. It returns ""
// when the cost fits. Such a request must get a non-retryable refusal, not
// a 429 whose Retry-After a client would honour forever. most is that
// limit's size.
func (p Policy) Unservable(cost int) (limit string, most int64) {
	switch c := int64(cost); {
	case p.PerSecond > 0 && c > int64(effectiveBurst(p)):
		return policyBurst, int64(effectiveBurst(p))
	case p.Daily > 0 && c > p.Daily:
		return policyDaily, p.Daily
	case p.Monthly > 0 && c > p.Monthly:
		return policyMonthly, p.Monthly
	}
	return "", 0
}

// SetPolicyHeader writes only the RateLimit-Policy field for p (see
// Decision.SetHeaders), for a response refused before any limit was
// consulted: the policy is known, its current state is not. now picks the
// month whose length is the monthly window.
func SetPolicyHeader(h http.Header, p Policy, now time.Time) {
	var items [3]item
	n := 0
	if p.PerSecond > 0 {
		b := effectiveBurst(p)
		items[n] = item{name: policyBurst, quota: int64(b), window: ceilSeconds(burstWindow(p.PerSecond, b))}
		n++
	}
	if p.Daily > 0 {
		items[n] = item{name: policyDaily, quota: p.Daily, window: 86400}
		n++
	}
	if p.Monthly > 0 {
		w := windowAt(now)
		items[n] = item{name: policyMonthly, quota: p.Monthly, window: ceilSeconds(w.monthEnd.Sub(w.monthStart))}
		n++
	}
	if n > 0 {
		h["Ratelimit-Policy"] = []string{string(appendItems(nil, items[:n], false))}
	}
}
