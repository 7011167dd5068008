package limits

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// QuotaWindow names one of an account's quota windows: the current UTC
// day or the current UTC month. The zero value names neither.
type QuotaWindow string

// The quota windows. The values are the API's words for them (and the
// window label of the account quota metrics).
const (
	QuotaDay   QuotaWindow = "day"
	QuotaMonth QuotaWindow = "month"
)

// Sentinel errors of ResetQuota.
var (
	// ErrInvalidWindow is returned for a QuotaWindow other than QuotaDay
	// and QuotaMonth.
	ErrInvalidWindow = errors.New(`limits: quota window must be "day" or "month"`)
	// ErrUnavailable is wrapped by a Redis limiter's ResetQuota error when
	// the shared counters could not be reached: nothing was reset, unless
	// a command that timed out ran after all (retrying is safe).
	ErrUnavailable = errors.New("limits: quota counters unavailable")
)

// QuotaResetter clears an account's quota counter; Local and Redis
// implement it.
//
// ResetQuota clears account's counter of the current window w (day or
// month, UTC) and returns the units it held. Afterwards the account's
// usage in that window reads 0 and its whole quota is available again;
// the other window, other accounts and every key's token bucket are
// untouched. An account with no counter (unknown, or nothing used) clears
// 0 and is no error. Retrying a reset that failed is safe.
//
// A request admitted before the reset and refunded after it gives its
// units back against the new count (never below 0): a reset forgives at
// most the units in flight when it runs on top of the ones it clears.
type QuotaResetter interface {
	ResetQuota(ctx context.Context, account string, w QuotaWindow) (cleared int64, err error)
}

// Compile-time interface guards.
var (
	_ QuotaResetter = (*Local)(nil)
	_ QuotaResetter = (*Redis)(nil)
)

func checkReset(account string, w QuotaWindow) error {
	if account == "" {
		return ErrNoSubject
	}
	if w != QuotaDay && w != QuotaMonth {
		return ErrInvalidWindow
	}
	return nil
}

// ResetQuota implements QuotaResetter in this instance's memory.
//
// With a Keeper (SetKeeper) it returns once the reset is stored: what the
// keeper held for the window was a ceiling reserved ahead of the old
// count, which a crash would otherwise bring back, and which later
// checkpoints would keep (they never store below a committed ceiling). So
// the reset drops the window's ceiling, a checkpoint taken before the
// reset does not restore it when committed (see Commit), and ResetQuota
// waits for one taken after (Keeper.Sync). When that fails the reset holds
// in memory and the error says it is not stored: a crash before the next
// successful write brings back the stored count. A window presumed spent
// (PresumeSpent) is cleared too, reporting 0 units cleared: they were
// presumed, not counted.
func (l *Local) ResetQuota(ctx context.Context, account string, w QuotaWindow) (int64, error) {
	if err := checkReset(account, w); err != nil {
		return 0, err
	}
	now := l.clk.Now()
	l.mu.Lock()
	win := l.windowLocked(now)
	day := w == QuotaDay
	presumed := (day && win.day == l.spentDay) || (!day && win.month == l.spentMonth)
	q := l.quotas[account]
	if q == nil && !presumed {
		l.mu.Unlock()
		return 0, nil // nothing counted, nothing stored
	}
	counted := q != nil
	if q == nil {
		// A counter at zero, so the window is no longer presumed spent.
		q = l.quotasLocked(account)
	}
	var cleared int64
	if day {
		if q.day == win.day {
			cleared = q.dayUsed
		}
		q.day, q.dayUsed, q.dayCeil = win.day, 0, 0
	} else {
		if q.month == win.month {
			cleared = q.monthUsed
		}
		q.month, q.monthUsed, q.monthCeil = win.month, 0, 0
	}
	if l.keeper != nil {
		m := l.resets[account]
		m.day, m.month = m.day || day, m.month || !day
		l.resets[account] = m
		l.changedLocked(account, q)
	}
	l.mu.Unlock()

	if l.keeper != nil && counted {
		if err := l.keeper.Sync(ctx); err != nil {
			return cleared, fmt.Errorf("limits: reset in memory but not stored (a crash before the next write brings the count back): %w", err)
		}
	}
	return cleared, nil
}

// resetMark says which windows of an account were reset since the latest
// Checkpoint was taken.
type resetMark struct{ day, month bool }

// ResetQuota implements QuotaResetter on the counters every instance
// shares, in one script run that reads Redis TIME to find the current
// window (as Admit does). The quota journal is replayed first, so units
// the fallback admitted before the reset are cleared with the rest rather
// than added back by a later replay. This instance's fallback counter of
// the window is cleared too; the fallbacks of other instances, consulted
// only while Redis is unavailable, keep what they counted in an earlier
// outage (at most their local share). When Redis cannot be reached
// (breaker open, command failed) nothing is reset here and the error
// wraps ErrUnavailable.
func (r *Redis) ResetQuota(ctx context.Context, account string, w QuotaWindow) (int64, error) {
	if err := checkReset(account, w); err != nil {
		return 0, err
	}
	// Held until the counter is cleared, so no replay lands in between.
	r.reconcileMu.Lock()
	defer r.reconcileMu.Unlock()
	if err := r.reconcileLocked(ctx); err != nil {
		if ctx.Err() != nil {
			return 0, fmt.Errorf("limits: reset: %w", ctx.Err())
		}
		return 0, fmt.Errorf("limits: reset: replaying the quota journal first: %w: %w", ErrUnavailable, err)
	}
	var cleared int64
	ran, err := r.br.Do(ctx, func() (err error) {
		cleared, err = r.resetRedis(ctx, account, w)
		return err
	})
	switch {
	case !ran:
		return 0, fmt.Errorf("limits: reset: %w: %w", ErrUnavailable, errRedisUnavailable)
	case err == nil:
	case ctx.Err() != nil:
		return 0, fmt.Errorf("limits: reset: %w", ctx.Err())
	default:
		return 0, fmt.Errorf("limits: reset: %w: %w", ErrUnavailable, err)
	}
	if _, err := r.fallback.ResetQuota(ctx, account, w); err != nil {
		return cleared, err
	}
	return cleared, nil
}

// resetRedis runs the reset script, retrying once when Redis's clock puts
// it in a different UTC window than ours (as admitRedis does).
func (r *Redis) resetRedis(ctx context.Context, account string, w QuotaWindow) (int64, error) {
	win := windowAt(r.clk.Now())
	day, month := win.day, win.month
	for range 2 {
		key := r.dayKey(account, day)
		if w == QuotaMonth {
			key = r.monthKey(account, month)
		}
		v, err := r.runReset(ctx, key, day, month)
		if err != nil {
			return 0, err
		}
		if len(v) == 3 {
			res, err := parseAdmit(v)
			if err != nil {
				return 0, err
			}
			day, month = res.day, res.month
			continue
		}
		if len(v) == 1 {
			if n, ok := v[0].(int64); ok {
				return n, nil
			}
		}
		return 0, fmt.Errorf("limits: redis reset: unexpected reply %v", v)
	}
	return 0, errors.New("limits: redis: window keeps changing")
}

func (r *Redis) runReset(ctx context.Context, key string, day, month int) ([]any, error) {
	ctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	v, err := resetScript.Run(ctx, r.rdb, []string{key}, fmt.Sprintf("%08d", day), fmt.Sprintf("%06d", month)).Slice()
	if err != nil {
		return nil, fmt.Errorf("limits: redis reset: %w", err)
	}
	return v, nil
}

// resetScript deletes one quota counter and replies {the units it held}
// (0 when there was none); the next admission creates it again from zero
// with its expiry. KEYS: the counter (day or month) of the window named by
// ARGV: day id (YYYYMMDD), month id (YYYYMM). Replies {-1, day, month}
// when those are not Redis's current windows (windowPrelude), changing
// nothing.
var resetScript = redis.NewScript(windowPrelude + `
local n = tonumber(redis.call('GET', KEYS[1]) or '0')
redis.call('DEL', KEYS[1])
return {n}
`)
