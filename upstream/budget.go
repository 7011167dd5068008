package upstream

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"time"

	"trendgate/internal/clock"
)

// Budget is the account-wide outbound request budget. Implementations are
// safe for concurrent use.
type Budget interface {
	// Take spends one token for an upstream attempt on c's behalf, or
	// refuses: when the account's windows are used up, when a background
	// claim (a refresh nobody waits for) would dip into the refresh
	// reserve, or when c's account has used its fair share (see the rule in
	// fair.go) or its per-minute cap. err reports a broken budget backend.
	Take(ctx context.Context, c Claim) (Verdict, error)
	// Observe reconciles the budget with an upstream answer's
	// x-rate-limit-{minute,day}-{remaining,reset} headers: tokens are lowered
	// to the upstream's remaining count when that is lower, and after a 429
	// (or a remaining count of 0) every Take fails until the reset.
	Observe(ctx context.Context, h http.Header, status int)
	// Withdraw makes account inactive in the fair share until its next
	// claim, so it holds no reservation while it cannot be served anyway
	// (its own quota or rate refuses it). What it used stays counted.
	Withdraw(ctx context.Context, account string)
}

// tokenReporter is implemented by budgets that can tell their tokens left
// for the metrics gauges; -1 means unlimited.
type tokenReporter interface {
	tokens() (minute, day int64)
}

// The rate-limit headers the upstream sends on every answer: how many
// requests are left in the current minute and day, and when each resets.
const (
	hdrMinuteRemaining = "X-Rate-Limit-Minute-Remaining"
	hdrMinuteReset     = "X-Rate-Limit-Minute-Reset"
	hdrDayRemaining    = "X-Rate-Limit-Day-Remaining"
	hdrDayReset        = "X-Rate-Limit-Day-Reset"
)

// maxBlock caps how long an upstream reset header can block the budget, so
// a garbled header cannot stop the gateway for longer than a day.
const maxBlock = 25 * time.Hour

// rateHeaders are the parsed x-rate-limit-* headers; -1 or the zero time
// means the header was absent or malformed.
type rateHeaders struct {
	minuteRemaining, dayRemaining int64
	minuteReset, dayReset         time.Time
}

// A reset is at most one window ahead of now (plus a little for clock
// jitter). One further ahead is on a clock that runs ahead of ours (the
// upstream's clock is its own): taken as given it would hold all calls for
// as long as the clocks differ, so it is treated as absent and the window's
// own boundary on our clock is used instead.
const (
	maxMinuteAhead = time.Minute + time.Second
	maxDayAhead    = 24*time.Hour + time.Minute
)

// parseRateHeaders reads the x-rate-limit-* headers of h, received at now.
func parseRateHeaders(h http.Header, now time.Time) rateHeaders {
	rh := parseRateHeadersAsSent(h)
	rh.minuteReset = plausibleReset(rh.minuteReset, now, maxMinuteAhead)
	rh.dayReset = plausibleReset(rh.dayReset, now, maxDayAhead)
	return rh
}

// parseRateHeadersAsSent reads the x-rate-limit-* headers of h without
// judging the resets (the Redis budget judges them on Redis TIME).
func parseRateHeadersAsSent(h http.Header) rateHeaders {
	return rateHeaders{
		minuteRemaining: headerInt(h, hdrMinuteRemaining),
		dayRemaining:    headerInt(h, hdrDayRemaining),
		minuteReset:     headerUnix(h, hdrMinuteReset),
		dayReset:        headerUnix(h, hdrDayReset),
	}
}

// plausibleReset returns reset, or the zero time when it lies more than
// maxAhead after now.
func plausibleReset(reset, now time.Time, maxAhead time.Duration) time.Time {
	if reset.Sub(now) > maxAhead {
		return time.Time{}
	}
	return reset
}

// headerInt parses a non-negative decimal header, -1 when absent or bad.
func headerInt(h http.Header, name string) int64 {
	v, err := strconv.ParseInt(h.Get(name), 10, 64)
	if err != nil || v < 0 {
		return -1
	}
	return v
}

// headerUnix parses a unix-seconds header, the zero time when absent or bad.
func headerUnix(h http.Header, name string) time.Time {
	v := headerInt(h, name)
	if v <= 0 {
		return time.Time{}
	}
	return time.Unix(v, 0)
}

// minuteStart and dayStart return the start of the fixed UTC window holding
// now. The upstream's minute windows are aligned to the calendar minute and
// its days are believed to reset at midnight UTC.
func minuteStart(now time.Time) time.Time { return now.Truncate(time.Minute) }
func dayStart(now time.Time) time.Time    { return now.UTC().Truncate(24 * time.Hour) }

// blockUntil returns until when an answer with headers rh and status,
// observed at now, stops all upstream calls, or the zero time. A 429 or a
// minute-remaining of 0 blocks until x-rate-limit-minute-reset (the next
// minute boundary when that is absent or past); a day-remaining of 0 blocks
// until x-rate-limit-day-reset (else the next UTC midnight). Capped at
// maxBlock.
func blockUntil(rh rateHeaders, status int, now time.Time) time.Time {
	var until time.Time
	if status == http.StatusTooManyRequests || rh.minuteRemaining == 0 {
		until = rh.minuteReset
		if !until.After(now) {
			until = minuteStart(now).Add(time.Minute)
		}
	}
	if rh.dayRemaining == 0 {
		dayEnd := rh.dayReset
		if !dayEnd.After(now) {
			dayEnd = dayStart(now).Add(24 * time.Hour)
		}
		if dayEnd.After(until) {
			until = dayEnd
		}
	}
	if until.IsZero() {
		return until
	}
	return capBlock(until, now)
}

func capBlock(until, now time.Time) time.Time {
	if until.Sub(now) > maxBlock {
		return now.Add(maxBlock)
	}
	return until
}

// window is one fixed-window counter. A zero limit means unlimited. Its
// boundaries are the calendar's (UTC minute, UTC day) unless the upstream
// reported its own: then the count it reported holds until its reset.
type window struct {
	limit   int64
	start   time.Time // start of the calendar window that used counts
	used    int64
	resetAt time.Time // the upstream's reported reset; zero: none adopted
}

// roll starts a new window when now has left the current one: at the
// adopted upstream reset when there is one, else at the calendar start.
func (w *window) roll(start, now time.Time) {
	if !w.resetAt.IsZero() {
		if now.Before(w.resetAt) {
			return // the upstream's window is still running
		}
		w.resetAt = time.Time{}
		w.start, w.used = start, 0
		return
	}
	if !w.start.Equal(start) {
		w.start, w.used = start, 0
	}
}

// end returns when the window's count starts over: the adopted upstream
// reset, else calendarEnd.
func (w *window) end(calendarEnd time.Time) time.Time {
	if !w.resetAt.IsZero() {
		return w.resetAt
	}
	return calendarEnd
}

func (w *window) remaining() int64 {
	if w.limit == 0 {
		return -1
	}
	return max(w.limit-w.used, 0)
}

// allows reports whether one more token may be spent; a background take
// must leave at least reserve×limit tokens behind.
func (w *window) allows(background bool, reserve float64) bool {
	if w.limit == 0 {
		return true
	}
	left := w.limit - w.used - 1
	if left < 0 {
		return false
	}
	return !background || float64(left) >= reserve*float64(w.limit)
}

// lower reconciles the window with the upstream's remaining count and, when
// it reported one in the future, adopts its reset: the lowered count holds
// until then, and not a moment longer. It reports whether it lowered the
// count.
func (w *window) lower(upstreamRemaining int64, reset, now time.Time) bool {
	if w.limit == 0 || upstreamRemaining < 0 {
		return false
	}
	if reported := w.limit - upstreamRemaining; reported > w.used {
		w.used = reported
		if reset.After(now) && reset.Sub(now) <= maxBlock {
			w.resetAt = reset
		}
		return true
	}
	return false
}

// LocalBudget is an in-process Budget: fixed per-minute and per-day windows
// aligned to UTC, plus the upstream's 429 back-off. Build it with
// NewLocalBudget; the zero value is not usable.
type LocalBudget struct {
	clk     clock.Clock
	reserve float64

	mu           sync.Mutex // guards minute, day, blockedUntil, fair and demand
	minute, day  window
	blockedUntil time.Time
	fair         fairAccounts
	demand       demandGate // the calls left go where the demand is (demand.go)

	// events, when set (by the Client that owns the budget, before use),
	// hears when Observe adopts the upstream's count.
	events *budgetEvents
}

var (
	_ Budget        = (*LocalBudget)(nil)
	_ tokenReporter = (*LocalBudget)(nil)
)

// NewLocalBudget returns a LocalBudget for cfg (its Plan preset applied);
// clk nil means the wall clock.
func NewLocalBudget(cfg BudgetConfig, clk clock.Clock) (*LocalBudget, error) {
	if err := validateBudget(cfg); err != nil {
		return nil, err
	}
	if clk == nil {
		clk = clock.Real{}
	}
	cfg = cfg.Resolved()
	return &LocalBudget{
		clk:     clk,
		reserve: cfg.RefreshReserve,
		minute:  window{limit: int64(cfg.PerMinute)},
		day:     window{limit: int64(cfg.PerDay)},
		fair:    fairAccounts{window: cfg.FairWindow, reserve: cfg.NewcomerReserve, lend: cfg.NewcomerLend},
	}, nil
}

// validateBudget checks the budget part of a Config.
func validateBudget(cfg BudgetConfig) error {
	c := DefaultConfig()
	c.Budget = cfg
	if err := c.Validate(); err != nil {
		return errors.Join(errors.New("upstream: invalid budget"), err)
	}
	return nil
}

// Take implements Budget; it never returns an error.
func (b *LocalBudget) Take(_ context.Context, c Claim) (Verdict, error) {
	now := b.clk.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	if c.Key == "" || c.Background {
		return b.take(c, nil, now), nil
	}
	d := b.demand.ask(c.Key, c.Account, now)
	v := b.take(c, d, now)
	if v.OK {
		b.demand.granted(c.Key, d)
	} else {
		b.demand.refused(c.Key, d, now)
	}
	return v, nil
}

// take decides c at now; d, when not nil, is what the demand gate knows
// of c's request. b.mu is held.
func (b *LocalBudget) take(c Claim, d *keyDemand, now time.Time) Verdict {
	if now.Before(b.blockedUntil) {
		return Verdict{RetryAfter: b.blockedUntil.Sub(now), Upstream: true}
	}
	ms, ds := minuteStart(now), dayStart(now)
	b.minute.roll(ms, now)
	b.day.roll(ds, now)
	minuteEnd := b.minute.end(ms.Add(time.Minute)).Sub(now)
	dayEnd := b.day.end(ds.Add(24 * time.Hour)).Sub(now)
	var wait time.Duration
	if !b.minute.allows(c.Background, b.reserve) {
		wait = minuteEnd
	}
	if !b.day.allows(c.Background, b.reserve) {
		wait = dayEnd
	}
	var account *accountUse
	guaranteed := false
	if c.Account != "" && !c.Background {
		account = b.fair.claim(c, now, ms, ds)
		if wait == 0 {
			share, capped, within := b.shareWait(c, account, now, ms, ds, minuteEnd, dayEnd)
			if share > 0 {
				return Verdict{RetryAfter: share, Share: true, Cap: capped}
			}
			guaranteed = within
		}
	}
	if wait > 0 {
		return Verdict{RetryAfter: wait}
	}
	if d != nil && b.demand.holds(c.Key, d, b.minute.remaining(), now, guaranteed) {
		return Verdict{RetryAfter: min(pendingFor, minuteEnd), Demand: true}
	}
	b.minute.used++
	b.day.used++
	if account != nil {
		account.minute.used++
		account.day.used++
	}
	return Verdict{OK: true}
}

// shareWait is how long account t must wait for its fair share or per-minute
// cap to allow c, 0 when they allow it now; capped says the cap refused,
// within that the call is within t's guarantee of the minute (not
// borrowed).
func (b *LocalBudget) shareWait(c Claim, t *accountUse, now, ms, ds time.Time, minuteEnd, dayEnd time.Duration) (wait time.Duration, capped, within bool) {
	if c.PerMinute > 0 && t.minute.used >= int64(c.PerMinute) {
		return minuteEnd, true, false
	}
	om, od, drawn := b.fair.others(t, now, ms, ds)
	dayReserve := newcomerReserve(b.day.limit, b.fair.reserve)
	if shareRefuses(b.day.limit, b.day.used, dayReserve, dayReserve, standing{t.weight, t.day.used, true}, od) {
		return dayEnd, false, false
	}
	reserve := newcomerReserve(b.minute.limit, b.fair.reserve)
	self := standing{t.weight, t.minute.used, true}
	if shareRefuses(b.minute.limit, b.minute.used, reserve, newcomersHeld(reserve, drawn, minuteEnd, b.fair.lend), self, om) {
		return minuteEnd, false, false
	}
	return 0, false, withinGuarantee(b.minute.limit, reserve, self, om)
}

// Withdraw implements Budget.
func (b *LocalBudget) Withdraw(_ context.Context, account string) {
	b.mu.Lock()
	b.fair.withdraw(account)
	b.mu.Unlock()
}

// Observe implements Budget.
func (b *LocalBudget) Observe(_ context.Context, h http.Header, status int) {
	now := b.clk.Now()
	rh := parseRateHeaders(h, now)
	b.mu.Lock()
	ms, ds := minuteStart(now), dayStart(now)
	b.minute.roll(ms, now)
	b.day.roll(ds, now)
	lowered := [2]bool{
		windowMinute: b.minute.lower(rh.minuteRemaining, rh.minuteReset, now),
		windowDay:    b.day.lower(rh.dayRemaining, rh.dayReset, now),
	}
	resets := [2]time.Time{windowMinute: b.minute.end(ms.Add(time.Minute)), windowDay: b.day.end(ds.Add(24 * time.Hour))}
	remaining := [2]int64{windowMinute: rh.minuteRemaining, windowDay: rh.dayRemaining}

	until := blockUntil(rh, status, now)
	if until.After(b.blockedUntil) {
		b.blockedUntil = until
	}
	b.mu.Unlock()
	for w, ok := range lowered {
		if ok && b.events != nil { // logged outside the lock
			b.events.adopted(w, remaining[w], resets[w])
		}
	}
}

// tokens reports the tokens left in the current windows.
func (b *LocalBudget) tokens() (minute, day int64) {
	now := b.clk.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.minute.roll(minuteStart(now), now)
	b.day.roll(dayStart(now), now)
	return b.minute.remaining(), b.day.remaining()
}
