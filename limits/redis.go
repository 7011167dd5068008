package limits

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"trendgate/internal/clock"
)

// RedisOptions tunes a Redis limiter. The zero value means all defaults.
type RedisOptions struct {
	// Prefix starts every key this limiter writes; default "tg:".
	Prefix string
	// Timeout bounds each Redis command; default 50ms.
	Timeout time.Duration
	// LocalShare scales the policy while Redis is unavailable and the local
	// fallback decides alone (PerSecond, Burst, Daily, Monthly × share, at
	// least 1); it should be 1/instances. Default 1/3.
	LocalShare float64
	// FailureThreshold is the number of consecutive failures that open the
	// breaker; default 3.
	FailureThreshold int
	// Backoff is how long the open breaker skips Redis before one probe;
	// default 5s (measured on the injected clock).
	Backoff time.Duration
	// ReconcileEvery is how often the background reconciler tries to replay
	// the journal while it is not empty; default 5s (wall time).
	ReconcileEvery time.Duration
}

func (o RedisOptions) withDefaults() (RedisOptions, error) {
	if o.Prefix == "" {
		o.Prefix = "tg:"
	}
	if o.Timeout == 0 {
		o.Timeout = 50 * time.Millisecond
	}
	if o.LocalShare == 0 {
		o.LocalShare = 1.0 / 3
	}
	if o.FailureThreshold == 0 {
		o.FailureThreshold = 3
	}
	if o.Backoff == 0 {
		o.Backoff = 5 * time.Second
	}
	if o.ReconcileEvery == 0 {
		o.ReconcileEvery = 5 * time.Second
	}
	var errs []error
	if o.Timeout < 0 {
		errs = append(errs, fmt.Errorf("timeout: must be > 0 (got %s)", o.Timeout))
	}
	if !(o.LocalShare > 0 && o.LocalShare <= 1) {
		errs = append(errs, fmt.Errorf("local_share: must be in (0, 1] (got %v)", o.LocalShare))
	}
	if o.FailureThreshold < 0 {
		errs = append(errs, fmt.Errorf("failure_threshold: must be >= 1 (got %d)", o.FailureThreshold))
	}
	if o.Backoff < 0 {
		errs = append(errs, fmt.Errorf("backoff: must be > 0 (got %s)", o.Backoff))
	}
	if o.ReconcileEvery < 0 {
		errs = append(errs, fmt.Errorf("reconcile_every: must be > 0 (got %s)", o.ReconcileEvery))
	}
	return o, errors.Join(errs...)
}

// Redis is the Limiter shared by all instances through one Redis. Rates use
// GCRA and quotas atomic counters, all inside one Lua script per Admit that
// reads Redis TIME (never the instance clock) and writes only keys that
// carry an expiry:
//
//	<prefix>rl:<keyID>                bucket (theoretical arrival time, µs); expires when full again
//	<prefix>q:d:<keyID>:<YYYYMMDD>    daily units; EXPIREAT the end of that UTC day
//	<prefix>q:m:<keyID>:<YYYYMM>      monthly units; EXPIREAT the end of that UTC month
//	<prefix>j:<instance>:<seq>        replay marker of one journal entry; expires after 7 days
//
// The three keys of one Admit are touched by one script, so under Redis
// Cluster they would need to share a slot; this limiter targets a single
// Redis (or a primary with replicas).
//
// While Redis fails (per-command Timeout; FailureThreshold consecutive
// failures open a breaker for Backoff, then one probe), Admit is served by
// the fallback Local at LocalShare of the policy and every quota change is
// journaled in memory; Reconcile replays the journal exactly once (each
// entry is applied together with a marker key, so a retried entry is
// skipped) and a background goroutine calls it while the journal is not
// empty. Close stops that goroutine; it does not close the client.
type Redis struct {
	rdb      redis.Scripter
	opts     RedisOptions
	fallback *Local
	clk      clock.Clock
	log      *zap.Logger
	m        *Metrics
	instance string // random id naming this instance's replay markers

	mu        sync.Mutex // guards failures, openUntil, open, pending and seq
	failures  int        // consecutive failures
	openUntil time.Time  // while failures >= threshold: skip Redis until then
	open      map[journalKey]*journalEntry
	pending   []*journalEntry // sealed entries being replayed, oldest first
	seq       uint64

	reconcileMu sync.Mutex // serialises Reconcile

	kick     chan struct{} // wakes the reconciler
	stop     chan struct{} // closed by Close
	done     chan struct{} // closed when the reconciler exits
	stopOnce sync.Once
}

// journalKey identifies one quota counter: key id, daily or monthly, window.
type journalKey struct {
	key     string
	monthly bool
	window  int
}

// journalEntry is a net quota change waiting for Redis. Once sealed (in
// Redis.pending) it never changes, so replaying it twice is detectable.
type journalEntry struct {
	journalKey
	delta int64
	seq   uint64
}

// NewRedis returns a Redis limiter and starts its reconciler; call Close to
// stop it. client is required and stays owned by the caller. fallback is
// required (it decides while Redis is unavailable). A nil clk is
// clock.Real{}, a nil log zap.NewNop(), a nil m an unregistered Metrics.
func NewRedis(client redis.UniversalClient, opts RedisOptions, fallback *Local, clk clock.Clock, log *zap.Logger, m *Metrics) (*Redis, error) {
	if client == nil {
		return nil, errors.New("limits: redis: nil client")
	}
	if fallback == nil {
		return nil, errors.New("limits: redis: nil fallback limiter")
	}
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("limits: redis options: %w", err)
	}
	if clk == nil {
		clk = clock.Real{}
	}
	if log == nil {
		log = zap.NewNop()
	}
	var id [6]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, fmt.Errorf("limits: redis: instance id: %w", err)
	}
	r := &Redis{
		rdb:      client,
		opts:     opts,
		fallback: fallback,
		clk:      clk,
		log:      log.Named("limits"),
		m:        m.orNew(),
		instance: hex.EncodeToString(id[:]),
		open:     make(map[journalKey]*journalEntry),
		kick:     make(chan struct{}, 1),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	r.m.RedisAvailable.Set(1)
	go r.reconciler()
	return r, nil
}

// Close stops the reconciler goroutine and waits for it. Journal entries not
// yet replayed are lost (they are logged). Close is idempotent.
func (r *Redis) Close() error {
	r.stopOnce.Do(func() { close(r.stop) })
	<-r.done
	r.mu.Lock()
	n := len(r.open) + len(r.pending)
	r.mu.Unlock()
	if n > 0 {
		r.log.Warn("closing with unreplayed quota journal", zap.Int("entries", n))
	}
	return nil
}

// Admit implements Limiter.
func (r *Redis) Admit(ctx context.Context, key string, p Policy, cost int) (Decision, error) {
	if err := checkArgs(key, cost); err != nil {
		return Decision{}, err
	}
	if err := p.Validate(); err != nil {
		return Decision{}, fmt.Errorf("limits: invalid policy: %w", err)
	}
	if p.PerSecond > 0 {
		p.Burst = effectiveBurst(p)
	}
	if p.PerSecond == 0 && p.Daily == 0 && p.Monthly == 0 {
		d := Decision{Allowed: true, Policy: p}
		r.m.decision(d)
		return d, nil
	}
	if r.usable() {
		d, err := r.admitRedis(ctx, key, p, cost)
		if err == nil {
			r.succeeded()
			r.m.decision(d)
			if d.Allowed {
				r.m.reserved(key, d)
			}
			return d, nil
		}
		if ctx.Err() != nil { // the caller gave up; not Redis's fault
			return Decision{}, fmt.Errorf("limits: admit: %w", ctx.Err())
		}
		r.failed(err)
	}
	return r.admitFallback(ctx, key, p, cost)
}

// admitFallback decides locally at the configured share and journals the
// reservation.
func (r *Redis) admitFallback(ctx context.Context, key string, p Policy, cost int) (Decision, error) {
	r.m.RedisFallbacks.Inc()
	d, err := r.fallback.Admit(ctx, key, scalePolicy(p, r.opts.LocalShare), cost)
	if err != nil {
		return Decision{}, err
	}
	d.fallback = true
	if d.Allowed {
		r.journal(key, d, 1)
	}
	return d, nil
}

// scalePolicy scales every limit of p by share, keeping each at least 1.
func scalePolicy(p Policy, share float64) Policy {
	if p.PerSecond > 0 {
		p.Burst = max(int(float64(effectiveBurst(p))*share), 1)
		p.PerSecond *= share
	}
	if p.Daily > 0 {
		p.Daily = max(int64(float64(p.Daily)*share), 1)
	}
	if p.Monthly > 0 {
		p.Monthly = max(int64(float64(p.Monthly)*share), 1)
	}
	return p
}

// admitRedis runs the admission script, retrying once when Redis's clock
// puts it in a different UTC window than ours.
func (r *Redis) admitRedis(ctx context.Context, key string, p Policy, cost int) (Decision, error) {
	w := windowAt(r.clk.Now())
	day, month := w.day, w.month
	for range 2 {
		res, err := r.runAdmit(ctx, key, p, cost, day, month)
		if err != nil {
			return Decision{}, err
		}
		if res.mismatch {
			day, month = res.day, res.month
			continue
		}
		return res.decision(p, cost, day, month), nil
	}
	return Decision{}, errors.New("limits: redis: window keeps changing")
}

// admitResult is the parsed reply of the admission script.
type admitResult struct {
	mismatch           bool
	day, month         int // Redis's windows, when mismatch
	allowed            bool
	reason             string // "m", "d", "r" or ""
	retryUs            int64  // -1: the cost can never fit the burst
	debtUs             int64  // theoretical arrival time minus now
	dayUsed, monthUsed int64
	nowUs              int64
}

func (r *Redis) runAdmit(ctx context.Context, key string, p Policy, cost, day, month int) (admitResult, error) {
	ctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	var intervalUs float64
	if p.PerSecond > 0 {
		intervalUs = 1e6 / p.PerSecond
	}
	keys := []string{r.rateKey(key), r.dayKey(key, day), r.monthKey(key, month)}
	v, err := admitScript.Run(ctx, r.rdb, keys,
		fmt.Sprintf("%08d", day), fmt.Sprintf("%06d", month), cost, p.Daily, p.Monthly,
		dayEndOf(day).Unix(), monthEndOf(month).Unix(),
		strconv.FormatFloat(intervalUs, 'f', -1, 64), p.Burst).Slice()
	if err != nil {
		return admitResult{}, fmt.Errorf("limits: redis admit: %w", err)
	}
	return parseAdmit(v)
}

func parseAdmit(v []any) (admitResult, error) {
	bad := fmt.Errorf("limits: redis admit: unexpected reply %v", v)
	if len(v) == 3 {
		status, _ := v[0].(int64)
		ds, _ := v[1].(string)
		ms, _ := v[2].(string)
		d, err1 := strconv.Atoi(ds)
		m, err2 := strconv.Atoi(ms)
		if status != -1 || err1 != nil || err2 != nil {
			return admitResult{}, bad
		}
		return admitResult{mismatch: true, day: d, month: m}, nil
	}
	if len(v) != 7 {
		return admitResult{}, bad
	}
	var n [7]int64
	var reason string
	for i, x := range v {
		switch t := x.(type) {
		case int64:
			n[i] = t
		case string:
			if i != 1 {
				return admitResult{}, bad
			}
			reason = t
		default:
			return admitResult{}, bad
		}
	}
	return admitResult{
		allowed: n[0] == 1, reason: reason, retryUs: n[2], debtUs: n[3],
		dayUsed: n[4], monthUsed: n[5], nowUs: n[6],
	}, nil
}

// decision turns a script result into a Decision.
func (a admitResult) decision(p Policy, cost, day, month int) Decision {
	now := time.UnixMicro(a.nowUs).UTC()
	d := Decision{Allowed: a.allowed, Policy: p}
	if a.allowed {
		if p.Daily > 0 {
			d.DayReserved = int64(cost)
		}
		if p.Monthly > 0 {
			d.MonthReserved = int64(cost)
		}
	} else {
		switch a.reason {
		case "m":
			d.Reason = ReasonMonthly
		case "d":
			d.Reason = ReasonDaily
		default:
			d.Reason = ReasonRate
		}
		d.RetryAfter = time.Duration(a.retryUs) * time.Microsecond
		if a.retryUs < 0 {
			d.RetryAfter = neverFits(p)
		}
	}
	if p.PerSecond > 0 {
		debt := time.Duration(a.debtUs) * time.Microsecond
		full := burstWindow(p.PerSecond, p.Burst)
		tokens := float64(full-debt) / float64(time.Second) * p.PerSecond
		d.BurstRemaining = max(int(math.Floor(tokens+1e-9)), 0)
		d.BurstReset = max(debt, 0)
	}
	w := window{day: day, month: month, dayEnd: dayEndOf(day), monthEnd: monthEndOf(month)}
	w.dayStart, w.monthStart = w.dayEnd.AddDate(0, 0, -1), w.monthEnd.AddDate(0, -1, 0)
	d.fillQuota(p, w, now, a.dayUsed, a.monthUsed)
	return d
}

// Refund implements Limiter. A reservation made by the fallback is given
// back there and journaled (it may not be in Redis yet); one made in Redis
// is given back in Redis with DECRBY (never below 0), or journaled when
// Redis fails.
func (r *Redis) Refund(ctx context.Context, key string, d Decision) error {
	if key == "" {
		return ErrInvalidKey
	}
	if !d.Allowed || (d.DayReserved == 0 && d.MonthReserved == 0) {
		return nil
	}
	if d.fallback {
		if err := r.fallback.Refund(ctx, key, d); err != nil {
			return err
		}
		r.journal(key, d, -1)
		return nil
	}
	if r.usable() {
		err := r.refundRedis(ctx, key, d)
		if err == nil {
			r.succeeded()
			r.m.refunded(key, d)
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("limits: refund: %w", ctx.Err())
		}
		r.failed(err)
	}
	r.m.RedisFallbacks.Inc()
	r.m.refunded(key, d)
	r.journal(key, d, -1)
	return nil
}

func (r *Redis) refundRedis(ctx context.Context, key string, d Decision) error {
	ctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	keys := []string{r.dayKey(key, d.Day), r.monthKey(key, d.Month)}
	if err := refundScript.Run(ctx, r.rdb, keys, d.DayReserved, d.MonthReserved).Err(); err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("limits: redis refund: %w", err)
	}
	return nil
}

// journal records sign × the reservation of d for later replay.
func (r *Redis) journal(key string, d Decision, sign int64) {
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
	add(journalKey{key: key, window: d.Day}, d.DayReserved)
	add(journalKey{key: key, monthly: true, window: d.Month}, d.MonthReserved)
	r.m.JournalSize.Set(float64(len(r.open) + len(r.pending)))
}

// JournalLen returns the number of quota changes waiting for replay.
func (r *Redis) JournalLen() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.open) + len(r.pending)
}

// Reconcile replays the journal into Redis: each entry is applied at most
// once (INCRBY + EXPIREAT, or DECRBY never below 0, together with a replay
// marker) and removed when Redis confirms it. It stops at the first error,
// keeping what is left for the next call.
func (r *Redis) Reconcile(ctx context.Context) error {
	r.reconcileMu.Lock()
	defer r.reconcileMu.Unlock()

	r.mu.Lock()
	for k, e := range r.open { // seal: from now on these entries never change
		delete(r.open, k)
		if e.delta != 0 {
			r.pending = append(r.pending, e)
		}
	}
	todo := append([]*journalEntry(nil), r.pending...)
	r.mu.Unlock()

	for _, e := range todo {
		if err := r.replay(ctx, e); err != nil {
			if ctx.Err() == nil {
				r.failed(err)
			}
			return err
		}
		r.succeeded()
		r.mu.Lock()
		r.pending = r.pending[1:] // e is always the head: only Reconcile removes, in order
		r.m.JournalSize.Set(float64(len(r.open) + len(r.pending)))
		r.mu.Unlock()
	}
	if len(todo) > 0 {
		r.log.Info("quota journal replayed", zap.Int("entries", len(todo)))
	}
	return nil
}

// replay applies one sealed journal entry.
func (r *Redis) replay(ctx context.Context, e *journalEntry) error {
	ctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	counter, end := r.dayKey(e.key, e.window), dayEndOf(e.window)
	if e.monthly {
		counter, end = r.monthKey(e.key, e.window), monthEndOf(e.window)
	}
	marker := r.opts.Prefix + "j:" + r.instance + ":" + strconv.FormatUint(e.seq, 10)
	err := replayScript.Run(ctx, r.rdb, []string{counter, marker}, e.delta, end.Unix(), markerTTL).Err()
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("limits: redis replay: %w", err)
	}
	return nil
}

// markerTTL is how long a replay marker lives, in seconds: far longer than
// any retry of its entry.
const markerTTL = 7 * 24 * 3600

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
		if r.JournalLen() == 0 || !r.usable() {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*r.opts.Timeout)
		if err := r.Reconcile(ctx); err != nil {
			r.log.Warn("quota journal replay failed", zap.Error(err))
		}
		cancel()
	}
}

// usable reports whether to try Redis now: the breaker is closed, or its
// back-off has passed (then this caller is the probe and the next back-off
// starts, so only one probe runs at a time).
func (r *Redis) usable() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.failures < r.opts.FailureThreshold {
		return true
	}
	now := r.clk.Now()
	if now.Before(r.openUntil) {
		return false
	}
	r.openUntil = now.Add(r.opts.Backoff)
	return true
}

// failed counts a Redis failure and opens the breaker at the threshold.
func (r *Redis) failed(err error) {
	r.mu.Lock()
	r.failures++
	opened := r.failures == r.opts.FailureThreshold
	if r.failures >= r.opts.FailureThreshold {
		r.openUntil = r.clk.Now().Add(r.opts.Backoff)
	}
	r.mu.Unlock()
	if opened {
		r.m.RedisAvailable.Set(0)
		r.log.Warn("redis unavailable; limiting locally at share", zap.Error(err),
			zap.Float64("share", r.opts.LocalShare))
	}
}

// succeeded closes the breaker and, when it was open, wakes the reconciler.
func (r *Redis) succeeded() {
	r.mu.Lock()
	wasOpen := r.failures >= r.opts.FailureThreshold
	r.failures = 0
	r.mu.Unlock()
	if wasOpen {
		r.m.RedisAvailable.Set(1)
		r.log.Info("redis available again")
		select {
		case r.kick <- struct{}{}:
		default:
		}
	}
}

func (r *Redis) rateKey(key string) string { return r.opts.Prefix + "rl:" + key }

func (r *Redis) dayKey(key string, day int) string {
	return fmt.Sprintf("%sq:d:%s:%08d", r.opts.Prefix, key, day)
}

func (r *Redis) monthKey(key string, month int) string {
	return fmt.Sprintf("%sq:m:%s:%06d", r.opts.Prefix, key, month)
}

// admitScript checks quotas (monthly, then daily) and the GCRA bucket, and
// only when all pass takes the tokens and increments the counters. It reads
// the time with TIME. KEYS: bucket, day counter, month counter. ARGV: day id
// (YYYYMMDD), month id (YYYYMM), cost, daily quota, monthly quota (0 = off),
// day end and month end (unix seconds), emission interval in µs per token
// (0 = no rate limit), burst.
//
// Replies {-1, day, month} when the given ids are not Redis's current
// windows; otherwise {allowed 0/1, reason "m"/"d"/"r"/"", retry µs (-1 =
// never fits), bucket debt µs, day used, month used, now µs}.
var admitScript = redis.NewScript(`
local function civil(days)
  local z = days + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524) - math.floor(doe / 146096)) / 365)
  local y = yoe + era * 400
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local d = doy - math.floor((153 * mp + 2) / 5) + 1
  local m = mp + 3
  if mp >= 10 then m = mp - 9 end
  if m <= 2 then y = y + 1 end
  return y, m, d
end

local t = redis.call('TIME')
local now_s = tonumber(t[1])
local now_us = now_s * 1000000 + tonumber(t[2])
local y, m, d = civil(math.floor(now_s / 86400))
local day = string.format('%04d%02d%02d', y, m, d)
local month = string.format('%04d%02d', y, m)
if day ~= ARGV[1] or month ~= ARGV[2] then
  return {-1, day, month}
end

local cost = tonumber(ARGV[3])
local daily = tonumber(ARGV[4])
local monthly = tonumber(ARGV[5])
local interval = tonumber(ARGV[8])
local burst = tonumber(ARGV[9])

local dused = 0
local mused = 0
if daily > 0 then dused = tonumber(redis.call('GET', KEYS[2]) or '0') end
if monthly > 0 then mused = tonumber(redis.call('GET', KEYS[3]) or '0') end
local tat = now_us
if interval > 0 then
  tat = math.max(tonumber(redis.call('GET', KEYS[1]) or '0'), now_us)
end

local reason = ''
local retry = 0
if monthly > 0 and mused + cost > monthly then
  reason = 'm'
  retry = (tonumber(ARGV[7]) - now_s) * 1000000
elseif daily > 0 and dused + cost > daily then
  reason = 'd'
  retry = (tonumber(ARGV[6]) - now_s) * 1000000
elseif interval > 0 then
  if cost > burst then
    reason = 'r'
    retry = -1
  else
    local allow_at = tat + cost * interval - burst * interval
    if allow_at > now_us then
      reason = 'r'
      retry = math.ceil(allow_at - now_us)
    end
  end
end
if reason ~= '' then
  return {0, reason, retry, math.floor(tat - now_us), dused, mused, now_us}
end

if interval > 0 then
  tat = tat + cost * interval
  redis.call('SET', KEYS[1], string.format('%.0f', tat), 'PX', math.max(math.ceil((tat - now_us) / 1000), 1))
end
if daily > 0 then
  dused = redis.call('INCRBY', KEYS[2], cost)
  redis.call('EXPIREAT', KEYS[2], ARGV[6])
end
if monthly > 0 then
  mused = redis.call('INCRBY', KEYS[3], cost)
  redis.call('EXPIREAT', KEYS[3], ARGV[7])
end
return {1, '', 0, math.floor(tat - now_us), dused, mused, now_us}
`)

// refundScript gives back ARGV[i] units of counter KEYS[i], never below 0;
// a counter that no longer exists (its window ended) is left alone.
var refundScript = redis.NewScript(`
for i = 1, #KEYS do
  local n = tonumber(ARGV[i])
  if n > 0 then
    local v = tonumber(redis.call('GET', KEYS[i]) or '0')
    if v > 0 then redis.call('DECRBY', KEYS[i], math.min(n, v)) end
  end
end
return 1
`)

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
