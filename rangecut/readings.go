package rangecut

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"trendgate/series"
)

// readings keeps what the gateway has learned of how the upstream reads a
// window's bounds (series.Reading), from the upstream's own answers. In
// cluster mode what one instance learns is written to a Redis hash that the
// others read, so each fact is learned once for the cluster.
//
// A fact seen both ways (the upstream changed, or answers inconsistently)
// is a conflict: it stays unknown for good, so nothing that depends on it
// is cut again. The operator's statement (upstream.window_reading) is
// checked, not trusted blindly: a stated fact is used once an answer
// agrees with it (a row in the edge bucket for a bucket stated selected;
// none there, in a closed bucket, for one stated not selected), and one
// that an answer contradicts is dropped with a warning. Without a
// statement, a fact is used once an answer proves it (series.Learn).
type readings struct {
	log   *zap.Logger
	redis redis.UniversalClient // nil: this instance alone
	key   string                // the Redis hash

	mu       sync.Mutex     // guards the fields below
	learned  [3]series.Fact // by fact index (see series.Reading.Facts)
	conflict [3]bool
	polled   time.Time // when the Redis hash was last read
}

// readingPoll is how often an instance that needs a fact it does not know
// looks for it in Redis.
const readingPoll = 5 * time.Second

// readingTimeout bounds one Redis call of readings.
const readingTimeout = 250 * time.Millisecond

// factNames are the Redis hash fields, in series.Reading.Facts order.
var factNames = [3]string{"start_inside", "end_on", "end_inside"}

func newReadings(log *zap.Logger, rdb redis.UniversalClient, prefix string) *readings {
	return &readings{log: log, redis: rdb, key: prefix + "upstream:window_reading"}
}

// register exports what is known of each fact as
// trendgate_upstream_window_reading{fact}: 1 include, -1 exclude, 0 unknown
// (or in conflict), stated and learned facts merged as cuts use them.
func (k *readings) register(reg prometheus.Registerer, stated series.Reading) {
	for i, name := range factNames {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "trendgate_upstream_window_reading",
			Help:        "How the upstream reads a time series window's bounds, as stated or learned: 1 the bucket is selected, -1 it is not, 0 unknown (windows that depend on it are forwarded, not cut).",
			ConstLabels: prometheus.Labels{"fact": name},
		}, func() float64 {
			switch factsOf(k.merge(stated))[i] {
			case series.Include:
				return 1
			case series.Exclude:
				return -1
			}
			return 0
		}))
	}
}

func factsOf(r series.Reading) [3]series.Fact {
	return [3]series.Fact{r.StartInside, r.EndOn, r.EndInside}
}

func readingOf(f [3]series.Fact) series.Reading {
	return series.Reading{StartInside: f[0], EndOn: f[1], EndInside: f[2]}
}

// get returns the reading to cut with at now: the stated facts, and the
// learned ones where nothing is stated, less every fact in conflict. When
// the result lacks a fact need asks for, it first looks in Redis (at most
// every readingPoll).
func (k *readings) get(ctx context.Context, stated series.Reading, need func(series.Reading) bool, now time.Time) series.Reading {
	r := k.merge(stated)
	if need == nil || !need(r) || k.redis == nil {
		return r
	}
	k.mu.Lock()
	due := now.Sub(k.polled) >= readingPoll || now.Before(k.polled)
	if due {
		k.polled = now
	}
	k.mu.Unlock()
	if !due {
		return r
	}
	ctx, cancel := context.WithTimeout(ctx, readingTimeout)
	defer cancel()
	vals, err := k.redis.HGetAll(ctx, k.key).Result()
	if err != nil {
		return r
	}
	var seen [3]series.Fact
	var conflicts [3]bool
	for i, name := range factNames {
		if vals[name] == "conflict" {
			conflicts[i] = true
			continue
		}
		seen[i] = series.ParseFact(vals[name])
	}
	k.note(readingOf(seen), conflicts, "redis")
	return k.merge(stated)
}

// merge returns the facts cuts may use: those learned and not in conflict,
// less any that contradicts the statement. k.mu must not be held.
func (k *readings) merge(stated series.Reading) series.Reading {
	s := factsOf(stated)
	k.mu.Lock()
	defer k.mu.Unlock()
	var out [3]series.Fact
	for i := range out {
		if !k.conflict[i] && (s[i] == series.Unknown || k.learned[i] == s[i]) {
			out[i] = k.learned[i]
		}
	}
	return readingOf(out)
}

// learn records what an answer proved (seen) and where it agreed with a
// statement that a bucket is not selected (absent; see series.Learn),
// warns when it contradicts stated, and shares new facts through Redis.
func (k *readings) learn(ctx context.Context, seen, absent, stated series.Reading) {
	f, a, s := factsOf(seen), factsOf(absent), factsOf(stated)
	for i, v := range f {
		if v != series.Unknown && s[i] != series.Unknown && v != s[i] {
			k.log.Warn("the upstream's answer contradicts upstream.window_reading; windows that depend on it are no longer cut",
				zap.String("fact", factNames[i]), zap.Stringer("stated", s[i]), zap.Stringer("seen", v))
		}
	}
	fresh := k.note(seen, [3]bool{}, "answer")
	// An answer without a row where the statement says no bucket is
	// selected agrees with it: enough to use the statement here, not
	// proof to share with instances that may state nothing.
	var agreed [3]series.Fact
	for i := range agreed {
		if f[i] == series.Unknown && a[i] == series.Exclude && s[i] == series.Exclude {
			agreed[i] = series.Exclude
		}
	}
	k.note(readingOf(agreed), [3]bool{}, "answer agreeing with upstream.window_reading")
	if k.redis == nil || fresh == [3]string{} {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), readingTimeout)
	defer cancel()
	for i, v := range fresh {
		switch v {
		case "":
			continue
		case "conflict":
			_ = k.redis.HSet(ctx, k.key, factNames[i], v).Err()
			continue
		}
		// The first instance to learn a fact writes it; one that learned
		// the opposite marks the conflict for all.
		ok, err := k.redis.HSetNX(ctx, k.key, factNames[i], v).Result()
		if err != nil || ok {
			continue
		}
		if got, err := k.redis.HGet(ctx, k.key, factNames[i]).Result(); err == nil && got != v {
			_ = k.redis.HSet(ctx, k.key, factNames[i], "conflict").Err()
			k.note(series.Reading{}, conflictAt(i), "redis")
		}
	}
}

func conflictAt(i int) [3]bool {
	var c [3]bool
	c[i] = true
	return c
}

// note merges facts and conflicts into what is known and returns, per
// fact, what to share: the fact when it is new, "conflict" when it just
// became one, "" otherwise.
func (k *readings) note(seen series.Reading, conflicts [3]bool, source string) (fresh [3]string) {
	f := factsOf(seen)
	k.mu.Lock()
	defer k.mu.Unlock()
	for i := range f {
		switch {
		case k.conflict[i]:
		case conflicts[i] || f[i] != series.Unknown && k.learned[i] != series.Unknown && f[i] != k.learned[i]:
			k.conflict[i], k.learned[i] = true, series.Unknown
			fresh[i] = "conflict"
			k.log.Warn("the upstream read a window bound both ways; windows that depend on it are no longer cut",
				zap.String("fact", factNames[i]), zap.String("source", source))
		case f[i] != series.Unknown && k.learned[i] == series.Unknown:
			k.learned[i] = f[i]
			fresh[i] = f[i].String()
			k.log.Info("learned how the upstream reads a window bound",
				zap.String("fact", factNames[i]), zap.Stringer("value", f[i]), zap.String("source", source))
		}
	}
	return fresh
}
