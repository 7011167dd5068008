package rollup

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"trendgate/api"
	"trendgate/internal/clock"
)

// Redis keeps the rollups of every instance of a cluster in Redis: one
// hash per account and day, "<prefix>usage:{<account>}:<YYYYMMDD>", whose
// fields are
//
//	u|<key>                   units charged
//	x|<key>                   upstream calls caused
//	b|<key>                   bytes sent
//	r|<key>|<class>|<route>   requests
//
// and one set per month, "<prefix>usage:accounts:<YYYYMM>", of the
// accounts with usage in it. Each instance counts what it served: Record
// adds to a table in memory, Flush adds that table to the hashes with
// HINCRBY in one MULTI per account (the braces put an account's days in
// one Redis Cluster slot), so every event is counted once across the
// instances. Every key expires one day after the retention. A Flush that
// fails keeps its table and is retried by the next; if Redis applied a
// MULTI whose reply was lost, the retry counts it twice (a failover at
// that instant is the only way). Safe for concurrent use.
type Redis struct {
	rdb    redis.UniversalClient
	prefix string
	clk    clock.Clock
	log    *zap.Logger
	cfg    Config

	flushMu sync.Mutex // serializes Flush
	mu      sync.Mutex // guards pending
	pending table
}

// NewRedis returns the cluster store on rdb under prefix.
func NewRedis(rdb redis.UniversalClient, prefix string, cfg Config, clk clock.Clock, log *zap.Logger) (*Redis, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("rollup: %w", err)
	}
	if clk == nil {
		clk = clock.Real{}
	}
	if log == nil {
		log = zap.NewNop()
	}
	return &Redis{rdb: rdb, prefix: prefix, clk: clk, log: log, cfg: cfg.withDefaults(), pending: newTable()}, nil
}

// Oldest is the first day kept at now.
func (s *Redis) Oldest(now time.Time) Date { return oldest(DateOf(now), s.cfg.RetentionDays) }

// Retention returns the days kept.
func (s *Redis) Retention() int { return s.cfg.RetentionDays }

// FlushInterval is the configured interval between flushes.
func (s *Redis) FlushInterval() time.Duration { return s.cfg.FlushInterval }

// Record adds e to the next Flush.
func (s *Redis) Record(e Event) {
	if e.Key == "" {
		return
	}
	e.Account = api.AccountOf(e.Key, e.Account)
	day := e.Day
	if day == 0 {
		day = DateOf(s.clk.Now())
	}
	s.mu.Lock()
	s.pending.add(day, &e)
	s.mu.Unlock()
}

func (s *Redis) dayKey(account string, d Date) string {
	return s.prefix + "usage:{" + account + "}:" + strconv.Itoa(int(d))
}

func (s *Redis) monthKey(month int) string {
	return s.prefix + "usage:accounts:" + strconv.Itoa(month)
}

// Flush adds what was recorded since the last Flush to Redis. A row of a
// month closed by now lands in today (see the package comment). Nothing
// is sent when nothing was recorded.
func (s *Redis) Flush(ctx context.Context) error {
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	s.mu.Lock()
	rows := s.pending
	s.pending = newTable()
	s.mu.Unlock()
	if len(rows.rows) == 0 {
		return nil
	}
	today := DateOf(s.clk.Now())
	landed := newTable()
	for k, r := range rows.rows {
		k.day = landing(k.day, today)
		landed.merge(k, r)
	}
	ttl := time.Duration(s.cfg.RetentionDays+1) * 24 * time.Hour
	byAccount := map[string][]rowKey{}
	for k := range landed.rows {
		byAccount[k.account] = append(byAccount[k.account], k)
	}
	var failed []string
	var firstErr error
	for account, keys := range byAccount {
		_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			for _, k := range keys {
				r := landed.rows[k]
				h := s.dayKey(account, k.day)
				if r.units != 0 {
					p.HIncrBy(ctx, h, "u|"+k.key, r.units)
				}
				if r.upstream != 0 {
					p.HIncrBy(ctx, h, "x|"+k.key, r.upstream)
				}
				if r.bytes != 0 {
					p.HIncrBy(ctx, h, "b|"+k.key, r.bytes)
				}
				for _, c := range r.reqs {
					p.HIncrBy(ctx, h, "r|"+k.key+"|"+c.Class.String()+"|"+c.Route, c.Requests)
				}
				p.Expire(ctx, h, ttl)
			}
			return nil
		})
		if err == nil {
			months := map[int]bool{}
			for _, k := range keys {
				months[k.day.Month()] = true
			}
			for m := range months {
				mk := s.monthKey(m)
				if err = s.rdb.SAdd(ctx, mk, account).Err(); err == nil {
					err = s.rdb.Expire(ctx, mk, ttl+31*24*time.Hour).Err()
				}
			}
		}
		if err != nil {
			failed = append(failed, account)
			if firstErr == nil {
				firstErr = err
			}
		}
	}
	if len(failed) > 0 {
		s.mu.Lock()
		for _, a := range failed {
			for _, k := range byAccount[a] {
				s.pending.merge(k, landed.rows[k])
			}
		}
		s.mu.Unlock()
		return fmt.Errorf("rollup: flush to redis (%d accounts kept for the next): %w", len(failed), firstErr)
	}
	return nil
}

// Run flushes every tick until ctx ends, then flushes once more on a
// context of its own bounded by 5 s. Errors are logged.
func (s *Redis) Run(ctx context.Context, tick <-chan time.Time) {
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			if err := s.Flush(fctx); err != nil {
				s.log.Error("usage rollups: last flush failed", zap.Error(err))
			}
			cancel()
			return
		case <-tick:
			if err := s.Flush(ctx); err != nil {
				s.log.Warn("usage rollups: flush failed", zap.Error(err))
			}
		}
	}
}

// Query reads the hashes q selects. Every account: those the monthly sets
// name.
func (s *Redis) Query(ctx context.Context, q Query) ([]Series, error) {
	if q.From > q.To {
		return nil, ErrRange
	}
	accounts := []string{q.Account}
	if q.Account == "" {
		seen := map[string]bool{}
		accounts = accounts[:0]
		for m := q.From.Month(); m <= q.To.Month(); m = nextMonth(m) {
			names, err := s.rdb.SMembers(ctx, s.monthKey(m)).Result()
			if err != nil {
				return nil, fmt.Errorf("rollup: %w", err)
			}
			for _, a := range names {
				if !seen[a] {
					seen[a] = true
					accounts = append(accounts, a)
				}
			}
		}
		accounts = q.page(accounts)
	}
	t := newTable()
	for _, a := range accounts {
		var cmds []*redis.MapStringStringCmd
		var days []Date
		_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for d := q.From; d <= q.To; d = d.AddDays(1) {
				cmds = append(cmds, p.HGetAll(ctx, s.dayKey(a, d)))
				days = append(days, d)
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("rollup: %w", err)
		}
		for i, c := range cmds {
			for f, v := range c.Val() {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					continue
				}
				addField(t, rowKey{day: days[i], account: a}, f, n, q.Key)
			}
		}
	}
	return collect(func(yield func(rowKey, *row)) {
		for k, r := range t.rows {
			yield(k, r)
		}
	}, q.Key != ""), nil
}

// addField adds one hash field's value to t; with onlyKey set, other
// keys' fields are skipped.
func addField(t table, k rowKey, field string, n int64, onlyKey string) {
	kind, rest, ok := strings.Cut(field, "|")
	if !ok {
		return
	}
	e := Event{Account: k.account}
	switch kind {
	case "u":
		e.Key, e.Units = rest, n
	case "x":
		e.Key, e.Upstream = rest, n
	case "b":
		e.Key, e.Bytes = rest, n
	case "r":
		parts := strings.SplitN(rest, "|", 3)
		if len(parts) != 3 || e.Class.UnmarshalText([]byte(parts[1])) != nil {
			return
		}
		e.Key, e.Route, e.Requests = parts[0], parts[2], n
	default:
		return
	}
	if onlyKey != "" && e.Key != onlyKey {
		return
	}
	t.add(k.day, &e)
}

func nextMonth(m int) int {
	if m%100 == 12 {
		return (m/100+1)*100 + 1
	}
	return m + 1
}
