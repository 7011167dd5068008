package limits

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

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

func (r *Redis) refundRedis(ctx context.Context, key string, d Decision) error {
	ctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	keys := []string{r.dayKey(key, d.Day), r.monthKey(key, d.Month)}
	if err := refundScript.Run(ctx, r.rdb, keys, d.DayReserved, d.MonthReserved).Err(); err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("limits: redis refund: %w", err)
	}
	return nil
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
