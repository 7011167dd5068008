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
// id names the admission (see Redis.admissionKey): the script records it
// with what it charged, so running the same admission again charges nothing.
func (r *Redis) admitRedis(ctx context.Context, s Subject, id string, p Policy, cost int) (Decision, error) {
	w := windowAt(r.clk.Now())
	day, month := w.day, w.month
	for range 2 {
		res, err := r.runAdmit(ctx, s, id, p, cost, day, month)
		if err != nil {
			return Decision{}, err
		}
		if res.mismatch {
			day, month = res.day, res.month
			continue
		}
		d := res.decision(p, cost, day, month)
		d.admission = id
		return d, nil
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

func (r *Redis) runAdmit(ctx context.Context, s Subject, id string, p Policy, cost, day, month int) (admitResult, error) {
	ctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	var intervalUs float64
	if p.PerSecond > 0 {
		intervalUs = 1e6 / p.PerSecond
	}
	a := s.account()
	keys := []string{r.rateKey(s), r.dayKey(a, day), r.monthKey(a, month), r.admissionKey(a, id)}
	v, err := admitScript.Run(ctx, r.rdb, keys,
		fmt.Sprintf("%08d", day), fmt.Sprintf("%06d", month), cost, p.Daily, p.Monthly,
		dayEndOf(day).Unix(), monthEndOf(month).Unix(),
		strconv.FormatFloat(intervalUs, 'f', -1, 64), p.Burst,
		r.opts.AdmissionWindow.Milliseconds()).Slice()
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

// refundRedis gives d's reservation back in Redis: it settles d's
// admission at nothing charged. Settling is idempotent, so a refund that
// is retried, or replayed from the journal after a timeout, is applied
// once.
func (r *Redis) refundRedis(ctx context.Context, account string, d Decision) error {
	return r.settle(ctx, account, settlement{
		admission: d.admission, day: d.Day, month: d.Month,
		// The admission ran in Redis; if its record has expired, assume
		// it charged what it reserved.
		assumeDay: d.DayReserved, assumeMonth: d.MonthReserved,
	})
}

// settlement says what one admission must end up charging in Redis.
type settlement struct {
	admission              string
	day, month             int   // the admission's windows
	wantDay, wantMonth     int64 // units it must end up charging
	assumeDay, assumeMonth int64 // units it charged when Redis has no record of it
}

// settle runs settleScript for s on account's counters.
func (r *Redis) settle(ctx context.Context, account string, s settlement) error {
	ctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	keys := []string{r.dayKey(account, s.day), r.monthKey(account, s.month), r.admissionKey(account, s.admission)}
	err := settleScript.Run(ctx, r.rdb, keys, s.wantDay, s.wantMonth, s.assumeDay, s.assumeMonth,
		dayEndOf(s.day).Unix(), monthEndOf(s.month).Unix(), r.opts.AdmissionWindow.Milliseconds()).Err()
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("limits: redis settle: %w", err)
	}
	return nil
}

// The key functions below are the only places that build this limiter's
// Redis keys, one per kind. A token bucket belongs to an API key; quota
// counters, admission records and replay markers belong to an account (a
// key configured without an account is an account of its own: <acct> is
// then its key id). With a cluster client every key of one account carries
// the hash tag {<acct>}, so each script's keys share a slot:
//
//	single Redis                            Redis Cluster
//	<prefix>rl:<key>                        <prefix>{<acct>}:rl  (the account's own key)
//	                                        <prefix>{<acct>}:rl:<key>  (any other key)
//	<prefix>q:d:<acct>:<YYYYMMDD>           <prefix>{<acct>}:q:d:<YYYYMMDD>
//	<prefix>q:m:<acct>:<YYYYMM>             <prefix>{<acct>}:q:m:<YYYYMM>
//	<prefix>a:<acct>:<admission>            <prefix>{<acct>}:a:<admission>
//	<prefix>j:<acct>:<instance>:<seq>       <prefix>{<acct>}:j:<instance>:<seq>
//
// For a key that is an account of its own these are the names earlier
// versions wrote, so a running deployment keeps its counters. Account ids
// and the ids of keys without an account never coincide (config checks).

func (r *Redis) rateKey(s Subject) string {
	if r.tagged {
		a := s.account()
		if a == s.Key {
			return r.opts.Prefix + "{" + a + "}:rl"
		}
		return r.opts.Prefix + "{" + a + "}:rl:" + s.Key
	}
	return r.opts.Prefix + "rl:" + s.Key
}

func (r *Redis) dayKey(account string, day int) string {
	if r.tagged {
		return fmt.Sprintf("%s{%s}:q:d:%08d", r.opts.Prefix, account, day)
	}
	return fmt.Sprintf("%sq:d:%s:%08d", r.opts.Prefix, account, day)
}

func (r *Redis) monthKey(account string, month int) string {
	if r.tagged {
		return fmt.Sprintf("%s{%s}:q:m:%06d", r.opts.Prefix, account, month)
	}
	return fmt.Sprintf("%sq:m:%s:%06d", r.opts.Prefix, account, month)
}

// admissionKey records what admission id charged (see admitScript).
func (r *Redis) admissionKey(account, id string) string {
	if r.tagged {
		return r.opts.Prefix + "{" + account + "}:a:" + id
	}
	return r.opts.Prefix + "a:" + account + ":" + id
}

// markerKey is the replay marker of journal entry seq.
func (r *Redis) markerKey(account string, seq uint64) string {
	if r.tagged {
		return r.opts.Prefix + "{" + account + "}:j:" + r.instance + ":" + strconv.FormatUint(seq, 10)
	}
	return r.opts.Prefix + "j:" + account + ":" + r.instance + ":" + strconv.FormatUint(seq, 10)
}

// admitScript checks quotas (monthly, then daily) and the GCRA bucket, and
// only when all pass takes the tokens and increments the counters. It reads
// the time with TIME. KEYS: bucket, day counter, month counter, admission
// record. ARGV: day id (YYYYMMDD), month id (YYYYMM), cost, daily quota,
// monthly quota (0 = off), day end and month end (unix seconds), emission
// interval in µs per token (0 = no rate limit), burst, admission record
// lifetime (ms).
//
// When a quota is on, an admitted request writes its admission record
// ("<day units>:<month units>" charged). When the record already exists the
// admission has been handled (this is a retry, or the journal settled it
// first): the script admits without charging anything.
//
// Replies {-1, day, month} when the given ids are not Redis's current
// windows (windowPrelude); otherwise {allowed 0/1, reason "m"/"d"/"r"/"", retry µs (-1 =
// never fits), bucket debt µs, day used, month used, now µs}.
var admitScript = redis.NewScript(windowPrelude + `
local now_us = now_s * 1000000 + tonumber(t[2])

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

if (daily > 0 or monthly > 0) and redis.call('EXISTS', KEYS[4]) == 1 then
  return {1, '', 0, math.floor(tat - now_us), dused, mused, now_us}
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
if daily > 0 or monthly > 0 then
  local cd, cm = 0, 0
  if daily > 0 then cd = cost end
  if monthly > 0 then cm = cost end
  redis.call('SET', KEYS[4], cd .. ':' .. cm, 'PX', ARGV[10])
end
return {1, '', 0, math.floor(tat - now_us), dused, mused, now_us}
`)

// settleScript makes one admission end up charging exactly the wanted
// units. KEYS: day counter, month counter, admission record. ARGV: wanted
// day units, wanted month units, units assumed charged when there is no
// record (day, month), day end and month end (unix seconds), record
// lifetime (ms).
//
// The units charged so far are the record's, or the assumed ones without a
// record; the counters move by the difference (up with EXPIREAT, down never
// below 0; a counter that no longer exists is not created by a decrease),
// and the record then holds the wanted units. Running it twice changes
// nothing the second time, and an admission script for the same id that
// arrives afterwards finds the record and charges nothing.
var settleScript = redis.NewScript(`
local have = {tonumber(ARGV[3]), tonumber(ARGV[4])}
local rec = redis.call('GET', KEYS[3])
if rec then
  local d, m = string.match(rec, '^(%d+):(%d+)$')
  have = {tonumber(d), tonumber(m)}
end
local want = {tonumber(ARGV[1]), tonumber(ARGV[2])}
for i = 1, 2 do
  local delta = want[i] - have[i]
  if delta > 0 then
    redis.call('INCRBY', KEYS[i], delta)
    redis.call('EXPIREAT', KEYS[i], ARGV[4 + i])
  elseif delta < 0 then
    local v = tonumber(redis.call('GET', KEYS[i]) or '0')
    if v > 0 then redis.call('DECRBY', KEYS[i], math.min(-delta, v)) end
  end
end
redis.call('SET', KEYS[3], want[1] .. ':' .. want[2], 'PX', ARGV[7])
return 1
`)

// windowPrelude starts every script that works on the calendar windows: it
// reads the time from Redis (TIME: t, now_s), computes today's and this
// month's UTC ids (day YYYYMMDD, month YYYYMM), and replies {-1, day,
// month} when they are not ARGV[1] and ARGV[2], the windows the caller
// computed: a caller whose clock disagrees with Redis's around midnight
// retries with Redis's. civil turns days since 1970 into a proleptic
// Gregorian (y, m, d).
const windowPrelude = `
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
local y, m, d = civil(math.floor(now_s / 86400))
local day = string.format('%04d%02d%02d', y, m, d)
local month = string.format('%04d%02d', y, m)
if day ~= ARGV[1] or month ~= ARGV[2] then
  return {-1, day, month}
end
`
