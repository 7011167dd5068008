package limits

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/redis/go-redis/v9"
)

// Where Usage figures come from.
const (
	// SourceLocal: this instance's in-memory limiter (no cluster mode).
	SourceLocal = "local"
	// SourceRedis: the counters every instance shares; the same whichever
	// instance answers.
	SourceRedis = "redis"
	// SourceFallback: Redis is unavailable; the figures are this
	// instance's fallback limiter, which enforces its local share of each
	// limit (Policy is that share).
	SourceFallback = "local-fallback"
)

// KeyPolicy names a key, its account ("" means the key is an account of
// its own) and the policy it is limited by.
type KeyPolicy struct {
	Key     string
	Account string
	Policy  Policy
}

func (kp KeyPolicy) subject() Subject { return Subject{Key: kp.Key, Account: kp.Account} }

// Usage is one key's standing in its limits, read without taking or
// charging anything: its own token bucket and its account's quota counters
// (the same for every key of the account). The zero value is a key nothing
// is known about.
type Usage struct {
	// Policy is the policy the figures are read under (burst defaulted;
	// scaled to the local share when Source is SourceFallback).
	Policy Policy
	// BurstTokens is the whole tokens in the key's bucket (a key with no
	// state has a full bucket); meaningful when Policy.PerSecond > 0.
	BurstTokens int
	// DayUsed and MonthUsed are the quota units used in the current UTC
	// day and month; 0 for a window the policy does not limit (the
	// limiter does not count it).
	DayUsed, MonthUsed int64
	// DayEnd and MonthEnd are when the current windows end and the
	// counters restart.
	DayEnd, MonthEnd time.Time
	// Source is SourceLocal, SourceRedis or SourceFallback.
	Source string
}

// UsageReader reads the standing of keys; Local and Redis implement it.
// The result has one Usage per key, in order.
type UsageReader interface {
	Usage(ctx context.Context, keys []KeyPolicy) ([]Usage, error)
}

// Compile-time interface guards.
var (
	_ UsageReader = (*Local)(nil)
	_ UsageReader = (*Redis)(nil)
)

// Usage implements UsageReader from this instance's memory. It takes the
// limiter's mutex once per key, never across the whole list, so a reader
// of many keys (an admin view) delays an admission by at most one key's
// read.
func (l *Local) Usage(ctx context.Context, keys []KeyPolicy) ([]Usage, error) {
	now := l.clk.Now()
	w := windowAt(now)
	out := make([]Usage, len(keys))
	for i, kp := range keys {
		out[i] = l.usageOf(kp, now, w)
	}
	return out, nil
}

// usageOf reads one key's standing under l.mu.
func (l *Local) usageOf(kp KeyPolicy, now time.Time, w window) Usage {
	p := kp.Policy
	if p.PerSecond > 0 {
		p.Burst = effectiveBurst(p)
	}
	u := Usage{Policy: p, DayEnd: w.dayEnd, MonthEnd: w.monthEnd, Source: SourceLocal, BurstTokens: p.Burst}
	l.mu.Lock()
	defer l.mu.Unlock()
	u.DayUsed, u.MonthUsed = l.presumedLocked(w, p)
	if q := l.quotas[kp.subject().account()]; q != nil {
		if q.day == w.day {
			u.DayUsed = q.dayUsed
		}
		if q.month == w.month {
			u.MonthUsed = q.monthUsed
		}
	}
	if st := l.keys[kp.Key]; st != nil && p.PerSecond > 0 && st.bucket != nil {
		u.BurstTokens = min(max(int(math.Floor(st.bucket.TokensAt(now))), 0), p.Burst)
	}
	return u
}

// Usage implements UsageReader from Redis, so every instance reports the
// same figures, in one script run that reads Redis TIME. While Redis is
// unavailable it reports the fallback's figures, marked SourceFallback.
func (r *Redis) Usage(ctx context.Context, keys []KeyPolicy) ([]Usage, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	var out []Usage
	ran, err := r.br.Do(ctx, func() (err error) {
		out, err = r.usageRedis(ctx, keys)
		return err
	})
	switch {
	case ran && err == nil:
		return out, nil
	case ran && ctx.Err() != nil:
		return nil, fmt.Errorf("limits: usage: %w", ctx.Err())
	}
	scaled := make([]KeyPolicy, len(keys))
	for i, kp := range keys {
		scaled[i] = KeyPolicy{Key: kp.Key, Account: kp.Account, Policy: scalePolicy(kp.Policy, r.opts.LocalShare)}
	}
	out, err = r.fallback.Usage(ctx, scaled)
	for i := range out {
		out[i].Source = SourceFallback
	}
	return out, err
}

// usageRedis reads keys' usage: in one script run on a single Redis; on a
// Redis Cluster one run per key, since one script may only touch keys of
// one slot and each account's keys carry their own hash tag.
func (r *Redis) usageRedis(ctx context.Context, keys []KeyPolicy) ([]Usage, error) {
	if !r.tagged {
		return r.usageBatch(ctx, keys)
	}
	out := make([]Usage, 0, len(keys))
	for i := range keys {
		u, err := r.usageBatch(ctx, keys[i:i+1])
		if err != nil {
			return nil, err
		}
		out = append(out, u...)
	}
	return out, nil
}

// usageBatch runs the read script, retrying once when Redis's clock puts it
// in a different UTC window than ours (as admitRedis does).
func (r *Redis) usageBatch(ctx context.Context, keys []KeyPolicy) ([]Usage, error) {
	w := windowAt(r.clk.Now())
	day, month := w.day, w.month
	for range 2 {
		v, err := r.runUsage(ctx, keys, day, month)
		if err != nil {
			return nil, err
		}
		if len(v) == 3 {
			if status, _ := v[0].(int64); status == -1 {
				res, err := parseAdmit(v)
				if err != nil {
					return nil, err
				}
				day, month = res.day, res.month
				continue
			}
		}
		return parseUsage(v, keys, day, month)
	}
	return nil, errors.New("limits: redis: window keeps changing")
}

func (r *Redis) runUsage(ctx context.Context, keys []KeyPolicy, day, month int) ([]any, error) {
	ctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	names := make([]string, 0, 3*len(keys))
	for _, kp := range keys {
		a := kp.subject().account()
		names = append(names, r.rateKey(kp.subject()), r.dayKey(a, day), r.monthKey(a, month))
	}
	v, err := usageScript.Run(ctx, r.rdb, names, fmt.Sprintf("%08d", day), fmt.Sprintf("%06d", month)).Slice()
	if err != nil {
		return nil, fmt.Errorf("limits: redis usage: %w", err)
	}
	return v, nil
}

// parseUsage turns the script's reply {now µs, then per key: bucket
// theoretical arrival time µs, day used, month used} into Usages.
func parseUsage(v []any, keys []KeyPolicy, day, month int) ([]Usage, error) {
	if len(v) != 1+3*len(keys) {
		return nil, fmt.Errorf("limits: redis usage: unexpected reply of %d values for %d keys", len(v), len(keys))
	}
	n := make([]int64, len(v))
	for i, x := range v {
		var ok bool
		if n[i], ok = x.(int64); !ok {
			return nil, fmt.Errorf("limits: redis usage: unexpected value %v", x)
		}
	}
	nowUs := n[0]
	out := make([]Usage, len(keys))
	for i, kp := range keys {
		p := kp.Policy
		tat, dayUsed, monthUsed := n[1+3*i], n[2+3*i], n[3+3*i]
		u := Usage{DayUsed: dayUsed, MonthUsed: monthUsed, DayEnd: dayEndOf(day), MonthEnd: monthEndOf(month), Source: SourceRedis}
		if p.PerSecond > 0 {
			p.Burst = effectiveBurst(p)
			debt := time.Duration(max(tat-nowUs, 0)) * time.Microsecond
			full := burstWindow(p.PerSecond, p.Burst)
			tokens := float64(full-debt) / float64(time.Second) * p.PerSecond
			u.BurstTokens = min(max(int(math.Floor(tokens+1e-9)), 0), p.Burst)
		}
		u.Policy = p
		out[i] = u
	}
	return out, nil
}

// usageScript reads, without writing anything, each key's GCRA bucket and
// quota counters. KEYS: per key, bucket, day counter, month counter. ARGV:
// day id (YYYYMMDD), month id (YYYYMM). Replies {-1, day, month} when those
// are not Redis's current windows (TIME); otherwise {now µs, then per key:
// theoretical arrival time µs (0: none), day used, month used}.
var usageScript = redis.NewScript(windowPrelude + `
local out = {now_s * 1000000 + tonumber(t[2])}
for i = 1, #KEYS do
  out[#out + 1] = tonumber(redis.call('GET', KEYS[i]) or '0')
end
return out
`)
