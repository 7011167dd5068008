package upstream

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"
	"trendgate/internal/breaker"
	"trendgate/internal/redisconn"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// RedisBudget is a Budget shared by every gateway instance through Redis:
// per-minute and per-day fixed UTC windows and the upstream's 429 back-off,
// kept under "<prefix>ub:{acct}:*" keys that all carry a TTL, and updated by
// Lua scripts that read Redis TIME (so instance clocks do not matter). When
// Redis fails, the fallback budget answers and the fallback is counted.
// Build it with NewRedisBudget; the zero value is not usable.
type RedisBudget struct {
	rdb      redis.Scripter
	keys     []string // minute window, day window, block-until, then the fair-share keys
	perMin   int64
	perDay   int64
	reserve  float64
	newcomer float64       // NewcomerReserve
	window   time.Duration // FairWindow
	lend     time.Duration // NewcomerLend
	timeout  time.Duration
	fallback Budget
	br       *breaker.Breaker // guards the client; shared with its other users
	log      *zap.Logger
	metrics  *Metrics

	minuteLeft atomic.Int64 // tokens left as of the last Redis answer; -1 unlimited
	dayLeft    atomic.Int64
}

var (
	_ Budget        = (*RedisBudget)(nil)
	_ tokenReporter = (*RedisBudget)(nil)
)

// NewRedisBudget returns a RedisBudget for cfg (its Plan preset applied).
// Keys start with prefix (which may carry a {hash tag} for Redis Cluster);
// timeout bounds each Redis call (0 means 200 ms). fallback answers while
// Redis fails and also sees every Observe, so it is warm when needed; a
// local budget at this instance's share is the usual choice. br guards the
// client: while it is open the fallback answers at once (nil builds a
// breaker of the budget's own). client and fallback are required; log nil
// discards logs, m nil uses unregistered metrics.
func NewRedisBudget(client redis.UniversalClient, cfg BudgetConfig, prefix string, timeout time.Duration,
	fallback Budget, log *zap.Logger, m *Metrics, br *breaker.Breaker) (*RedisBudget, error) {
	if client == nil {
		return nil, errors.New("upstream: redis budget needs a client")
	}
	if fallback == nil {
		return nil, errors.New("upstream: redis budget needs a fallback budget")
	}
	if timeout < 0 {
		return nil, errors.New("upstream: redis budget timeout must be >= 0")
	}
	if err := validateBudget(cfg); err != nil {
		return nil, err
	}
	if timeout == 0 {
		timeout = redisconn.BudgetTimeout
	}
	if log == nil {
		log = zap.NewNop()
	}
	if m == nil {
		m = NewMetrics(nil)
	}
	if br == nil {
		br = breaker.New("redis", breaker.Config{}, breaker.Options{Logger: log})
	}
	cfg = cfg.Resolved()
	base := prefix + "ub:{acct}:"
	b := &RedisBudget{
		rdb: client,
		keys: []string{base + "minute", base + "day", base + "block",
			base + "tenant-minute", base + "tenant-day", base + "tenant-seen", base + "tenant-weight"},
		perMin:   int64(cfg.PerMinute),
		perDay:   int64(cfg.PerDay),
		reserve:  cfg.RefreshReserve,
		newcomer: cfg.NewcomerReserve,
		window:   cfg.FairWindow,
		lend:     cfg.NewcomerLend,
		timeout:  timeout,
		fallback: fallback,
		br:       br,
		log:      log.Named("upstream.budget"),
		metrics:  m,
	}
	b.minuteLeft.Store(unlimitedOr(b.perMin))
	b.dayLeft.Store(unlimitedOr(b.perDay))
	return b, nil
}

func unlimitedOr(limit int64) int64 {
	if limit == 0 {
		return -1
	}
	return limit
}

// luaPrelude reads Redis TIME in milliseconds and loads a window hash
// {w = window start ms, n = tokens used, r = the upstream's reported reset
// ms, 0 for none}: a stale calendar window counts as unused, and a window
// with a reset counts until that reset, then as unused. wend is when a
// window's count starts over.
const luaPrelude = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function load(key, len)
  local w = now - (now % len)
  local v = redis.call('HMGET', key, 'w', 'n', 'r')
  local r = tonumber(v[3]) or 0
  if r > 0 then
    if now < r then return tonumber(v[1]) or w, tonumber(v[2]) or 0, r end
    return w, 0, 0
  end
  local n = 0
  if tonumber(v[1]) == w then n = tonumber(v[2]) or 0 end
  return w, n, 0
end
local function save(key, w, n, len, r)
  redis.call('HSET', key, 'w', w, 'n', n, 'r', r)
  redis.call('PEXPIREAT', key, math.max(w + 2 * len, r + len))
end
local function wend(w, r, len)
  if r > 0 then return r end
  return w + len
end
`

// takeScript spends one token from both windows unless blocked, exhausted,
// (background) into the reserve, or (an account's claim) beyond the account's
// fair share or per-minute cap; the rule is shareRefuses in fair.go.
// KEYS: minute, day, block, tenant-minute (hash: w = window start, tenant ->
// used), tenant-day (the same), tenant-seen (zset: tenant -> last claim ms),
// tenant-weight (hash: tenant -> weight). ARGV: per_minute, per_day,
// background (0/1), reserve, account ("" for none), weight, per-minute cap
// (0 none), newcomer reserve, fair window ms, lendAfter ms, newcomer lend
// ms (0: the newcomers' part is held all minute). Returns {verdict (1 granted, 0
// refused, 2 refused for the account's share, 3 blocked by the upstream's
// 429 or exhausted count, 4 refused for the account's per-minute cap),
// wait_ms, minute_left, day_left} (left -1: unlimited).
var takeScript = redis.NewScript(luaPrelude + `
local pm, pd, bg, reserve = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3] == '1', tonumber(ARGV[4])
local tenant, weight, cap = ARGV[5], tonumber(ARGV[6]), tonumber(ARGV[7])
local newcomer, fairwin, lendafter, lendlate = tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[10]), tonumber(ARGV[11])
local mw, mn, mr = load(KEYS[1], 60000)
local dw, dn, dr = load(KEYS[2], 86400000)
local ml, dl = -1, -1
if pm > 0 then ml = math.max(pm - mn, 0) end
if pd > 0 then dl = math.max(pd - dn, 0) end
local blk = tonumber(redis.call('GET', KEYS[3]) or '0') or 0
if blk > now then return {3, blk - now, ml, dl} end
local function allows(limit, used)
  if limit == 0 then return true end
  local left = limit - used - 1
  if left < 0 then return false end
  return (not bg) or left >= reserve * limit
end
local wait = 0
if not allows(pm, mn) then wait = wend(mw, mr, 60000) - now end
if not allows(pd, dn) then wait = wend(dw, dr, 86400000) - now end
local fair = tenant ~= '' and not bg
if fair then
  redis.call('ZADD', KEYS[6], now, tenant)
  redis.call('HSET', KEYS[7], tenant, weight)
  for _, k in ipairs({KEYS[6], KEYS[7]}) do redis.call('PEXPIRE', k, fairwin + 86400000) end
  for i, w in ipairs({mw, dw}) do
    local k = KEYS[3 + i]
    if tonumber(redis.call('HGET', k, 'w') or '-1') ~= w then
      redis.call('DEL', k)
      redis.call('HSET', k, 'w', w)
    end
    redis.call('PEXPIREAT', k, w + 2 * ({60000, 86400000})[i])
  end
end
if wait > 0 then return {0, wait, ml, dl} end
if fair then
  local mine_m = tonumber(redis.call('HGET', KEYS[4], tenant) or '0')
  local mine_d = tonumber(redis.call('HGET', KEYS[5], tenant) or '0')
  if cap > 0 and mine_m >= cap then return {4, wend(mw, mr, 60000) - now, ml, dl} end
  local active_d = redis.call('ZRANGEBYSCORE', KEYS[6], now - fairwin, '+inf')
  local active_m = redis.call('ZRANGEBYSCORE', KEYS[6], now - math.min(fairwin, 60000), '+inf')
  -- the minute lends (see fair.go): asking[t] while t claimed within
  -- lendafter; the day holds every active tenant's guarantee
  local asking = {}
  for _, t in ipairs(redis.call('ZRANGEBYSCORE', KEYS[6], now - math.min(fairwin, lendafter), '+inf')) do asking[t] = true end
  local drawn = 0
  for _, t in ipairs(redis.call('HKEYS', KEYS[4])) do
    if t ~= 'w' and t ~= tenant and not asking[t] then drawn = drawn + 1 end
  end
  local function refuses(limit, used, mine, key, active, lends)
    if limit == 0 then return false end
    local nres = 0
    if limit > 1 and newcomer > 0 then nres = math.min(math.ceil(newcomer * limit), limit - 1) end
    local pool = limit - nres
    local total = weight
    local others = {}
    for _, t in ipairs(active) do
      if t ~= tenant then
        local w = tonumber(redis.call('HGET', KEYS[7], t) or '1') or 1
        total = total + w
        others[#others + 1] = {w, tonumber(redis.call('HGET', key, t) or '0') or 0, (not lends) or asking[t]}
      end
    end
    local function guarantee(w) return math.floor(pool * w / total + 1e-9) end
    if mine < guarantee(weight) then return false end
    local held = 0
    if mine > 0 then
      if lends then
        held = math.max(nres - drawn, 0)
        local left = wend(mw, mr, 60000) - now
        if lendlate > 0 and left < lendlate then
          held = math.min(held, math.ceil(nres * math.max(left, 0) / lendlate))
        end
      else
        held = nres
      end
    end
    for _, o in ipairs(others) do
      if o[3] then held = held + math.max(guarantee(o[1]) - o[2], 0) end
    end
    return (limit - used - 1) < held
  end
  if refuses(pd, dn, mine_d, KEYS[5], active_d, false) then return {2, wend(dw, dr, 86400000) - now, ml, dl} end
  if refuses(pm, mn, mine_m, KEYS[4], active_m, true) then return {2, wend(mw, mr, 60000) - now, ml, dl} end
  redis.call('HINCRBY', KEYS[4], tenant, 1)
  redis.call('HINCRBY', KEYS[5], tenant, 1)
  redis.call('ZREMRANGEBYSCORE', KEYS[6], '-inf', now - fairwin - 86400000)
end
if pm > 0 then save(KEYS[1], mw, mn + 1, 60000, mr); ml = ml - 1 end
if pd > 0 then save(KEYS[2], dw, dn + 1, 86400000, dr); dl = dl - 1 end
return {1, 0, ml, dl}
`)

// observeScript reconciles with the upstream's headers and records a
// block, with the same rules as blockUntil but on Redis TIME. KEYS:
// minute, day, block. ARGV: per_minute, per_day, minute_remaining,
// day_remaining (-1: absent), is_429 (0/1), minute_reset_ms, day_reset_ms
// (0: absent), max_block_ms. A block only ever extends an existing one.
// Returns 1.
var observeScript = redis.NewScript(luaPrelude + `
local pm, pd = tonumber(ARGV[1]), tonumber(ARGV[2])
local mr, dr, is429 = tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5] == '1'
local mreset, dreset, maxblock = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local function adopt(reset)
  if reset > now and reset - now <= maxblock then return reset end
  return 0
end
-- A reset further ahead than its window is on a clock ahead of ours: absent.
if mreset > now + 61000 then mreset = 0 end
if dreset > now + 86460000 then dreset = 0 end
if pm > 0 and mr >= 0 then
  local w, n, r = load(KEYS[1], 60000)
  if pm - mr > n then save(KEYS[1], w, pm - mr, 60000, math.max(r, adopt(mreset))) end
end
if pd > 0 and dr >= 0 then
  local w, n, r = load(KEYS[2], 86400000)
  if pd - dr > n then save(KEYS[2], w, pd - dr, 86400000, math.max(r, adopt(dreset))) end
end
local untilms = 0
if is429 or mr == 0 then
  untilms = mreset
  if untilms <= now then untilms = now - (now % 60000) + 60000 end
end
if dr == 0 then
  local de = dreset
  if de <= now then de = now - (now % 86400000) + 86400000 end
  if de > untilms then untilms = de end
end
if untilms > now + maxblock then untilms = now + maxblock end
if untilms > now then
  local blk = tonumber(redis.call('GET', KEYS[3]) or '0') or 0
  if untilms > blk then redis.call('SET', KEYS[3], untilms, 'PX', untilms - now) end
end
return 1
`)

// Take implements Budget. On a Redis error it answers from the fallback.
func (b *RedisBudget) Take(ctx context.Context, c Claim) (Verdict, error) {
	rctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	bg := 0
	if c.Background {
		bg = 1
	}
	var res []int64
	ran, err := b.br.Do(ctx, func() (err error) {
		res, err = takeScript.Run(rctx, b.rdb, b.keys, b.perMin, b.perDay, bg, b.reserve,
			c.Account, c.weight(), c.PerMinute, b.newcomer, b.window.Milliseconds(), lendAfter.Milliseconds(), b.lend.Milliseconds()).Int64Slice()
		if err == nil && len(res) != 4 {
			err = fmt.Errorf("unexpected reply of %d values", len(res))
		}
		return err
	})
	if ran && err != nil && ctx.Err() != nil {
		return Verdict{}, fmt.Errorf("upstream: budget: %w", ctx.Err())
	}
	if !ran || err != nil {
		b.fellBack("take", err)
		return b.fallback.Take(ctx, c)
	}
	b.minuteLeft.Store(res[2])
	b.dayLeft.Store(res[3])
	if res[0] != 1 {
		return Verdict{RetryAfter: time.Duration(res[1]) * time.Millisecond,
			Share: res[0] == 2 || res[0] == 4, Cap: res[0] == 4, Upstream: res[0] == 3}, nil
	}
	return Verdict{OK: true}, nil
}

// Observe implements Budget. The fallback always observes too; a Redis
// error is logged and counted.
func (b *RedisBudget) Observe(ctx context.Context, h http.Header, status int) {
	b.fallback.Observe(ctx, h, status)
	// The resets are judged in the script against Redis TIME, not here.
	rh := parseRateHeadersAsSent(h)
	is429 := 0
	if status == http.StatusTooManyRequests {
		is429 = 1
	}
	rctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	ran, err := b.br.Do(ctx, func() error {
		return observeScript.Run(rctx, b.rdb, b.keys, b.perMin, b.perDay,
			rh.minuteRemaining, rh.dayRemaining, is429, unixMilli(rh.minuteReset), unixMilli(rh.dayReset),
			maxBlock.Milliseconds()).Err()
	})
	if !ran || err != nil {
		b.fellBack("observe", err)
	}
}

// withdrawScript makes an account inactive in the fair share: its last claim
// is set to 0 (the score ZRANGEBYSCORE's activity windows never reach),
// only if it has one. KEYS: tenant-seen. ARGV: tenant. Returns 1.
var withdrawScript = redis.NewScript(`
redis.call('ZADD', KEYS[1], 'XX', 0, ARGV[1])
return 1
`)

// Withdraw implements Budget: the fallback withdraws too, and a Redis
// error is logged and counted (the account then stays active until its
// claims age out of the fair window).
func (b *RedisBudget) Withdraw(ctx context.Context, account string) {
	b.fallback.Withdraw(ctx, account)
	rctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	ran, err := b.br.Do(ctx, func() error {
		return withdrawScript.Run(rctx, b.rdb, b.keys[5:6], account).Err()
	})
	if !ran || err != nil {
		b.fellBack("withdraw", err)
	}
}

// fellBack counts a fallback and logs a Redis error; err nil means the
// breaker kept Redis out of use, which the breaker itself has logged.
func (b *RedisBudget) fellBack(op string, err error) {
	b.metrics.BudgetFallbacks.Inc()
	if err == nil {
		return
	}
	if ce := b.log.Check(zap.WarnLevel, "redis budget failed; using the local fallback"); ce != nil {
		ce.Write(zap.String("op", op), zap.Error(err))
	}
}

// tokens reports the tokens left as of the last Redis answer.
func (b *RedisBudget) tokens() (minute, day int64) {
	return b.minuteLeft.Load(), b.dayLeft.Load()
}

// unixMilli returns t in unix milliseconds, 0 for the zero time.
func unixMilli(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}
