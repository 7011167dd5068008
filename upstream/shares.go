package upstream

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// Share is one account's standing in the current minute's fair share (see
// the rule in fair.go), for the dashboard.
type Share struct {
	// Account is the account's id.
	Account string
	// Weight is the account's weight (its plan's upstream_weight).
	Weight float64
	// Active reports whether the account counts in this minute's split: it
	// asked within the last minute and was not withdrawn since.
	Active bool
	// Used is the upstream calls granted to the account this minute.
	Used int64
	// Guarantee is the whole calls of this minute's pool the account is
	// guaranteed while active (0 when not active, or with no minute limit).
	Guarantee int64
}

// shareReporter is implemented by budgets that can list the minute's
// shares.
type shareReporter interface {
	shares(ctx context.Context) ([]Share, error)
}

// Shares returns the accounts that are active this minute or were granted
// calls in it, ordered by account; nil when the budget cannot say.
func (c *Client) Shares(ctx context.Context) ([]Share, error) {
	if sr, ok := c.budget.(shareReporter); ok {
		return sr.shares(ctx)
	}
	return nil, nil
}

// withGuarantees fills in each active share's guarantee of the pool of a
// minute of limit perMinute, and sorts by account.
func withGuarantees(ss []Share, perMinute int64, newcomer float64) []Share {
	total := 0.0
	for _, s := range ss {
		if s.Active {
			total += s.Weight
		}
	}
	pool := perMinute - newcomerReserve(perMinute, newcomer)
	for i := range ss {
		if ss[i].Active && perMinute > 0 {
			ss[i].Guarantee = guarantee(pool, ss[i].Weight, total)
		}
	}
	slices.SortFunc(ss, func(a, b Share) int { return cmp.Compare(a.Account, b.Account) })
	return ss
}

// shares implements shareReporter.
func (b *LocalBudget) shares(context.Context) ([]Share, error) {
	now := b.clk.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	ms := minuteStart(now)
	var out []Share
	for id, u := range b.fair.byID {
		u.minute.roll(ms, now)
		active := !u.withdrawn && now.Sub(u.seen) <= minuteHorizon(b.fair.window)
		if active || u.minute.used > 0 {
			out = append(out, Share{Account: id, Weight: u.weight, Active: active, Used: u.minute.used})
		}
	}
	return withGuarantees(out, b.minute.limit, b.fair.reserve), nil
}

// sharesScript lists this minute's accounts without writing anything.
// KEYS: tenant-minute, tenant-seen, tenant-weight. ARGV: fair window ms.
// Returns flat {account, weight, used, active 0/1, ...}.
var sharesScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local used = {}
if tonumber(redis.call('HGET', KEYS[1], 'w') or '-1') == now - (now % 60000) then
  local all = redis.call('HGETALL', KEYS[1])
  for i = 1, #all, 2 do
    if all[i] ~= 'w' then used[all[i]] = tonumber(all[i + 1]) end
  end
end
local out = {}
local active = redis.call('ZRANGEBYSCORE', KEYS[2], now - math.min(tonumber(ARGV[1]), 60000), '+inf')
for _, id in ipairs(active) do
  out[#out + 1] = id
  out[#out + 1] = redis.call('HGET', KEYS[3], id) or '1'
  out[#out + 1] = used[id] or 0
  out[#out + 1] = 1
  used[id] = nil
end
for id, n in pairs(used) do
  if n > 0 then
    out[#out + 1] = id
    out[#out + 1] = redis.call('HGET', KEYS[3], id) or '1'
    out[#out + 1] = n
    out[#out + 1] = 0
  end
end
return out
`)

// shares implements shareReporter from Redis, so every instance shows the
// same shares.
func (b *RedisBudget) shares(ctx context.Context) ([]Share, error) {
	rctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	var v []any
	ran, err := b.br.Do(ctx, func() (err error) {
		v, err = sharesScript.Run(rctx, b.rdb, []string{b.keys[3], b.keys[5], b.keys[6]}, b.window.Milliseconds()).Slice()
		return err
	})
	if !ran {
		return nil, nil // Redis is away: nothing to show
	}
	if err != nil {
		return nil, fmt.Errorf("upstream: shares: %w", err)
	}
	out := make([]Share, 0, len(v)/4)
	for i := 0; i+3 < len(v); i += 4 {
		id, _ := v[i].(string)
		ws, _ := v[i+1].(string)
		w, err := strconv.ParseFloat(ws, 64)
		if err != nil {
			w = 1
		}
		used, _ := v[i+2].(int64)
		active, _ := v[i+3].(int64)
		out = append(out, Share{Account: id, Weight: w, Used: used, Active: active == 1})
	}
	return withGuarantees(out, b.perMin, b.newcomer), nil
}
