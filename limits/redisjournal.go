package limits

import (
	"context"
	"errors"
	"fmt"
	"time"
	"trendgate/internal/breaker"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// journalKey identifies one quota counter: account id, daily or monthly,
// window.
type journalKey struct {
	account string
	monthly bool
	window  int
}

// journalEntry is a net quota change waiting for Redis, or, when settle is
// set, the settlement of one admission that may already have reached
// Redis. Once sealed (in Redis.pending) it never changes, so replaying it
// twice is detectable.
type journalEntry struct {
	journalKey
	delta  int64
	seq    uint64
	settle *settlement
}

// journalSettle queues s for account. Settlements are never merged: each names
// one admission, and a later one for the same admission (its refund)
// replaces the effect of the earlier one when replayed after it.
func (r *Redis) journalSettle(account string, s settlement) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seq++
	r.settles = append(r.settles, &journalEntry{journalKey: journalKey{account: account}, seq: r.seq, settle: &s})
	r.m.JournalSize.Set(float64(r.journalLenLocked()))
}

// journalLenLocked counts the entries waiting; r.mu must be held.
func (r *Redis) journalLenLocked() int { return len(r.open) + len(r.settles) + len(r.pending) }

// journal records sign × the reservation of d for later replay.
func (r *Redis) journal(account string, d Decision, sign int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	add := func(k journalKey, delta int64) {
		if delta == 0 {
			return
		}
		e := r.open[k]
		if e == nil {
			r.seq++
			e = &journalEntry{journalKey: k, seq: r.seq}
			r.open[k] = e
		}
		e.delta += sign * delta
	}
	add(journalKey{account: account, window: d.Day}, d.DayReserved)
	add(journalKey{account: account, monthly: true, window: d.Month}, d.MonthReserved)
	r.m.JournalSize.Set(float64(r.journalLenLocked()))
}

// JournalLen returns the number of quota changes waiting for replay.
func (r *Redis) JournalLen() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.journalLenLocked()
}

// Reconcile replays the journal into Redis: each entry is applied at most
// once (INCRBY + EXPIREAT, or DECRBY never below 0, together with a replay
// marker) and removed when Redis confirms it. It stops at the first error,
// keeping what is left for the next call.
func (r *Redis) Reconcile(ctx context.Context) error {
	r.reconcileMu.Lock()
	defer r.reconcileMu.Unlock()
	return r.reconcileLocked(ctx)
}

// reconcileLocked is Reconcile; r.reconcileMu must be held.
func (r *Redis) reconcileLocked(ctx context.Context) error {
	r.mu.Lock()
	for k, e := range r.open { // seal: from now on these entries never change
		delete(r.open, k)
		if e.delta != 0 {
			r.pending = append(r.pending, e)
		}
	}
	r.pending = append(r.pending, r.settles...) // in the order they were made
	r.settles = nil
	todo := append([]*journalEntry(nil), r.pending...)
	r.mu.Unlock()

	for _, e := range todo {
		ran, err := r.br.Do(ctx, func() error { return r.replay(ctx, e) })
		if !ran {
			return errRedisUnavailable
		}
		if err != nil {
			return err
		}
		r.mu.Lock()
		r.pending = r.pending[1:] // e is always the head: only Reconcile removes, in order
		r.m.JournalSize.Set(float64(r.journalLenLocked()))
		r.mu.Unlock()
	}
	if len(todo) > 0 {
		r.log.Info("quota journal replayed", zap.Int("entries", len(todo)))
	}
	return nil
}

// errRedisUnavailable is Reconcile's error while the breaker keeps Redis
// out of use.
var errRedisUnavailable = errors.New("limits: redis unavailable (breaker open)")

// replay applies one sealed journal entry. A settlement needs no marker:
// settling is idempotent by itself.
func (r *Redis) replay(ctx context.Context, e *journalEntry) error {
	if e.settle != nil {
		return r.settle(ctx, e.account, *e.settle)
	}
	ctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	counter, end := r.dayKey(e.account, e.window), dayEndOf(e.window)
	if e.monthly {
		counter, end = r.monthKey(e.account, e.window), monthEndOf(e.window)
	}
	err := replayScript.Run(ctx, r.rdb, []string{counter, r.markerKey(e.account, e.seq)}, e.delta, end.Unix(), markerTTL).Err()
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("limits: redis replay: %w", err)
	}
	return nil
}

// reconciler replays the journal in the background while it is not empty.
func (r *Redis) reconciler() {
	defer close(r.done)
	t := time.NewTicker(r.opts.ReconcileEvery)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
		case <-r.kick:
		}
		if r.JournalLen() == 0 || r.br.State() == breaker.Open {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*r.opts.Timeout)
		if err := r.Reconcile(ctx); err != nil {
			r.log.Warn("quota journal replay failed", zap.Error(err))
		}
		cancel()
	}
}

// replayScript applies one journal entry unless its marker exists. KEYS:
// counter, marker. ARGV: delta, counter expiry (unix seconds), marker TTL.
var replayScript = redis.NewScript(`
if not redis.call('SET', KEYS[2], '1', 'NX', 'EX', ARGV[3]) then return 0 end
local delta = tonumber(ARGV[1])
if delta > 0 then
  redis.call('INCRBY', KEYS[1], delta)
  redis.call('EXPIREAT', KEYS[1], ARGV[2])
else
  local v = tonumber(redis.call('GET', KEYS[1]) or '0')
  if v > 0 then redis.call('DECRBY', KEYS[1], math.min(-delta, v)) end
end
return 1
`)

// markerTTL is how long a replay marker lives, in seconds: far longer than
// any retry of its entry.
const markerTTL = 7 * 24 * 3600
