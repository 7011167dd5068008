package limits

import (
	"context"
	"time"
)

// Durable quota counters. A single instance keeps its quota counters in
// memory; a Keeper (package state) stores them on disk so that a restart
// does not hand every account a fresh day and month. A clean stop stores
// the exact counts. For a crash (kill -9, OOM) the Local reserves ahead:
//
//   - Checkpoint(true) hands the keeper each account's counters raised by a
//     reservation: the units it may reserve before the next checkpoint.
//   - Once the keeper has stored them, Commit makes those raised counts the
//     accounts' ceilings, and Admit never reserves past a ceiling: a request
//     that would waits for the keeper to store the next checkpoint (Sync),
//     which reserves what it needs.
//
// So what is on disk is never below what was reserved: a crash can charge
// an account units it did not use (its reservation, never past its quota)
// but never forgets a unit it did. The reservation is twice what the
// account reserved since the previous checkpoint, at most 1% of its smaller
// quota (and at least 1), plus whatever a waiting request needs; an account
// that reserved nothing since gets none, so its next request waits for one
// checkpoint (one record appended and synced, shared with every request
// waiting then). A checkpoint holds only the accounts that changed since
// the previous one, so its cost follows the traffic, not the accounts.

// Counter is one account's quota counters, as a Keeper stores them. The
// Subject is the account id the limiter counts quotas by (Subject.Account,
// or Subject.Key for a key that is an account of its own).
type Counter struct {
	Subject   string
	Day       int // UTC day, YYYYMMDD
	DayUsed   int64
	Month     int // UTC month, YYYYMM
	MonthUsed int64
}

// A Keeper stores the counters of a Local (see SetKeeper).
type Keeper interface {
	// Sync returns once a checkpoint taken after the call has been stored
	// and committed, or with the error that kept it from being stored.
	Sync(ctx context.Context) error
}

// reserveFraction is the largest reservation ahead, as a fraction of the
// smaller quota: a crash charges at most 1% of a quota not used.
const reserveFraction = 100

// SetKeeper makes the quota counters durable through k, as described
// above. Call it before the first Admit; nil (the default) keeps counters
// in memory only.
func (l *Local) SetKeeper(k Keeper) { l.keeper = k }

// admitKept is admit, waiting for the keeper whenever a reservation would
// pass its account's stored ceiling. When the keeper fails to store a
// checkpoint, the request is admitted past the ceiling (the failure is the
// keeper's to report): refusing every customer because a disk is full
// would turn a durability problem into an outage.
func (l *Local) admitKept(ctx context.Context, s Subject, p Policy, cost int) (Decision, error) {
	force := false
	for {
		d, short := l.admit(s, p, cost, l.clk.Now(), force)
		if !short {
			return d, nil
		}
		if err := l.keeper.Sync(ctx); err != nil {
			if ctx.Err() != nil {
				return Decision{}, ctx.Err()
			}
			force = true
		}
	}
}

// pastCeiling reports whether reserving cost more units on q under p
// would pass a stored ceiling. Local.mu must be held.
func (q *quotaCounts) pastCeiling(p Policy, cost int) bool {
	c := int64(cost)
	return (p.Daily > 0 && q.dayUsed+c > q.dayCeil) || (p.Monthly > 0 && q.monthUsed+c > q.monthCeil)
}

// enterWindowsLocked moves q's counters into the windows w, starting a
// window's count at zero, or at the whole quota in a window presumed
// spent, which is a change the keeper must store (a crash would otherwise
// forgive it). It also notes p's quotas, which ceilings may not pass. l.mu
// must be held.
func (l *Local) enterWindowsLocked(account string, q *quotaCounts, w window, p Policy) {
	q.daily, q.monthly = p.Daily, p.Monthly
	if q.day != w.day {
		q.day, q.dayUsed, q.dayCeil = w.day, 0, 0
		if w.day == l.spentDay {
			q.dayUsed, q.dayCeil = p.Daily, p.Daily
			l.changedLocked(account, q)
		}
	}
	if q.month != w.month {
		q.month, q.monthUsed, q.monthCeil = w.month, 0, 0
		if w.month == l.spentMonth {
			q.monthUsed, q.monthCeil = p.Monthly, p.Monthly
			l.changedLocked(account, q)
		}
	}
}

// Checkpoint returns quota counters for the keeper to store. With
// reserve, it returns those of the accounts whose counters changed since
// the previous checkpoint (they reserved units, wait to reserve some, or
// had a window reset), each raised by the account's reservation ahead (see
// the top of this file), and clears the pending needs: the keeper stores
// them over what it holds (an upsert), and an account left out keeps what
// was stored for it. Without reserve it returns every account's exact
// counts, for the last checkpoint of a clean stop, after which nothing is
// admitted; the keeper then stores them in place of everything it holds.
// Call Commit with the result once it is stored.
func (l *Local) Checkpoint(now time.Time, reserve bool) []Counter {
	w := windowAt(now)
	l.mu.Lock()
	defer l.mu.Unlock()
	clear(l.resets) // this checkpoint has the windows reset so far
	if !reserve {
		out := make([]Counter, 0, len(l.quotas))
		for account, q := range l.quotas {
			if c := q.checkpoint(account, w, false); c.DayUsed != 0 || c.MonthUsed != 0 {
				out = append(out, c)
			}
		}
		return out
	}
	out := make([]Counter, 0, len(l.changed))
	for account, q := range l.changed {
		q.changed = false
		// Zero counts too: they replace what the keeper held (a reset).
		out = append(out, q.checkpoint(account, w, true))
	}
	clear(l.changed)
	return out
}

// CheckpointAll returns every account's counters raised by its
// reservation ahead, as Checkpoint(now, true) does for the changed ones,
// and clears every pending need: the keeper stores them in place of
// everything it holds (a compaction). Accounts at zero are left out.
func (l *Local) CheckpointAll(now time.Time) []Counter {
	w := windowAt(now)
	l.mu.Lock()
	defer l.mu.Unlock()
	clear(l.resets)
	for _, q := range l.changed {
		q.changed = false
	}
	clear(l.changed)
	out := make([]Counter, 0, len(l.quotas))
	for account, q := range l.quotas {
		if c := q.checkpoint(account, w, true); c.DayUsed != 0 || c.MonthUsed != 0 {
			out = append(out, c)
		}
	}
	return out
}

// PeekAll returns what CheckpointAll would, every account's counters
// raised by its reservation ahead, but clears nothing: what the accounts
// reserved, need and changed stays for the next Checkpoint. It is for a
// keeper that writes a snapshot beside its records (a compaction that does
// not hold them up): it commits the snapshot's counters only for the
// accounts no record written after it stored, and a request waiting for
// its ceiling when the snapshot was taken is served by the next record.
// Accounts at zero are left out.
//
// It holds the lock for a list of the accounts, then for lockPart of
// them at a time, so that admissions wait for a part of the accounts, not
// all of them. An account dropped meanwhile (Sweep) may be returned
// with what it last held, at most its reservation; Commit skips it. One
// added meanwhile is left out: it has changed, so the next checkpoint
// holds it.
func (l *Local) PeekAll(now time.Time) []Counter {
	w := windowAt(now)
	l.mu.Lock()
	all := l.accountsLocked()
	l.mu.Unlock()
	out := make([]Counter, 0, len(all))
	l.inParts(len(all), func(i int) {
		if c := all[i].q.counter(all[i].account, w, true); c.DayUsed != 0 || c.MonthUsed != 0 {
			out = append(out, c)
		}
	})
	return out
}

// checkpoint returns q's counter (see counter), clearing with reserve what
// the account reserved and needs since the previous checkpoint. Local.mu
// must be held.
func (q *quotaCounts) checkpoint(account string, w window, reserve bool) Counter {
	c := q.counter(account, w, reserve)
	if reserve {
		q.recent, q.need = 0, 0
	}
	return c
}

// counter returns q's counters of the windows w: exact, or with reserve
// raised by the reservation ahead (never below the stored ceiling).
// Local.mu must be held.
func (q *quotaCounts) counter(account string, w window, reserve bool) Counter {
	c := Counter{Subject: account, Day: w.day, Month: w.month}
	if q.day == w.day {
		c.DayUsed = q.dayUsed
		if reserve {
			c.DayUsed = max(ceiling(q.dayUsed, q.daily, q.recent, q.need), q.dayCeil)
		}
	}
	if q.month == w.month {
		c.MonthUsed = q.monthUsed
		if reserve {
			c.MonthUsed = max(ceiling(q.monthUsed, q.monthly, q.recent, q.need), q.monthCeil)
		}
	}
	return c
}

// changedLocked notes that account's counters q changed since the latest
// checkpoint (with a keeper only). l.mu must be held.
func (l *Local) changedLocked(account string, q *quotaCounts) {
	if l.keeper != nil && !q.changed {
		q.changed = true
		l.changed[account] = q
	}
}

// ceiling is an account's stored count for one window: used, raised by a
// reservation of twice recent (at least 1, at most quota/reserveFraction)
// plus need, never past quota; used alone when the window has no quota or
// the account reserved and needs nothing. Checkpoint never stores less
// than the ceiling already stored: units reserved under it since the
// checkpoint was taken must stay covered.
func ceiling(used, quota, recent, need int64) int64 {
	if quota <= 0 || (recent == 0 && need == 0) {
		return used
	}
	ahead := min(max(2*recent, 1), max(quota/reserveFraction, 1))
	return max(min(used+need+ahead, quota), used)
}

// Commit makes stored counters the ceilings their accounts' reservations
// may not pass. cs must be the latest checkpoint's (a keeper takes, stores
// and commits one checkpoint at a time); accounts not in cs keep their
// ceilings, as the keeper keeps what it stored for them. A counter of a
// window that has since ended is ignored. A window reset (ResetQuota)
// after cs was taken keeps its ceiling at zero: cs has the count from
// before the reset, which the next checkpoint would otherwise never store
// below.
func (l *Local) Commit(cs []Counter) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range cs {
		q := l.quotas[c.Subject]
		if q == nil {
			continue
		}
		reset := l.resets[c.Subject]
		if c.Day == q.day && !reset.day {
			q.dayCeil = c.DayUsed
		}
		if c.Month == q.month && !reset.month {
			q.monthCeil = c.MonthUsed
		}
	}
}

// Restore loads stored counters before the limiter serves: each becomes
// its account's count and ceiling in its windows, when those contain now;
// counters of ended windows are dropped. It returns how many accounts it
// restored.
func (l *Local) Restore(cs []Counter, now time.Time) int {
	w := windowAt(now)
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, c := range cs {
		if c.Subject == "" || (c.Day != w.day && c.Month != w.month) {
			continue
		}
		q := l.quotasLocked(c.Subject)
		if c.Day == w.day {
			q.day, q.dayUsed, q.dayCeil = c.Day, c.DayUsed, c.DayUsed
		}
		if c.Month == w.month {
			q.month, q.monthUsed, q.monthCeil = c.Month, c.MonthUsed, c.MonthUsed
		}
		n++
	}
	return n
}

// PresumeSpent makes every account whose counters were not restored start
// the day and month containing now with its whole quota used, so that
// counters that could not be read charge rather than forgive: the gateway
// calls it when its stored state is damaged and the operator chose to
// start anyway. The next day and month start from zero as usual.
func (l *Local) PresumeSpent(now time.Time) {
	w := windowAt(now)
	l.mu.Lock()
	l.spentDay, l.spentMonth = w.day, w.month
	l.mu.Unlock()
}

// presumedLocked returns the counts an account with no counters has in the windows
// w under p: its whole quotas in windows presumed spent, else zero.
// l.mu must be held.
func (l *Local) presumedLocked(w window, p Policy) (day, month int64) {
	if w.day == l.spentDay {
		day = p.Daily
	}
	if w.month == l.spentMonth {
		month = p.Monthly
	}
	return day, month
}
