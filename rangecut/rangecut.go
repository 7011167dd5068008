// Package rangecut answers absolute-window time series from wider answers
// the cache holds: the fetch step that sits before and after the upstream
// call of a cold series window (package proxy calls it), as groupcache's
// getter sits under its group. It owns what the gateway knows of how the
// upstream reads a window's bounds (readings, learned from its answers and
// shared through Redis), the cut of a window from a wider answer (package
// series cuts the rows), the widening of a cold hourly window to the one
// week, and the metrics of these.
//
// Range-aware series: a time series over an absolute window (start, and
// usually end) is answered from the rows of an interval answer of the same
// topic and bucket the cache holds, without an upstream call and so without
// spending budget. The cut answer is an ordinary entry under the narrow
// request's own key, so ETags, 304, projection, gzip and later hits work as
// for any other; it carries the wider answer's fetch time, and its
// freshness follows its own window from that time (closed buckets never
// change).
//
// Truth before economy: a cut is made only when the wider answer's own rows
// (and its own now, config.generated) show that it holds the whole window,
// and only when the rows the window selects do not depend on a reading of
// its bounds the gateway has not learned (readings). Otherwise the window
// is forwarded like any other request, and its answer teaches the reading.
//
// A cold hourly window that reaches the current hour (by the gateway's
// clock: a hint only) and starts no earlier than the one-week window's
// start (the sliding "last 7 days" of a dashboard) is widened once the
// reading it needs is known: the gateway fetches interval=1w instead, one
// upstream request all the same and about the same bytes, keeps it, and
// cuts the window from it. When the week's rows do not cover the window
// (the upstream's clock is behind ours, its current hour is late), the
// window itself is fetched, and widening pauses for a while.
package rangecut

import (
	"context"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"trendgate/api"
	"trendgate/cache"
	"trendgate/internal/clock"
	"trendgate/series"
)

// Cache is what a Cutter needs of the cache: the wider answers it holds,
// and a place for the week fetched to widen a window.
type Cache interface {
	Peek(ctx context.Context, key string) (*cache.Entry, bool)
	Put(ctx context.Context, e *cache.Entry) error
}

// Options are a Cutter's collaborators. Every field is required unless it
// says otherwise.
type Options struct {
	Clock clock.Clock
	// Logger receives what is learned of the readings, and conflicts.
	Logger *zap.Logger
	// Registry receives the metrics; nil registers none.
	Registry prometheus.Registerer
	Cache    Cache
	// Stated is the operator's statement of the readings
	// (upstream.window_reading), used once an answer agrees with it.
	Stated series.Reading
	// Redis, when not nil, shares what the upstream's answers taught with
	// the cluster, in a hash under Prefix (see readings).
	Redis  redis.UniversalClient
	Prefix string
	// Tracer makes the "range cut" span; nil means tracing off.
	Tracer trace.Tracer
}

// Cutter is the range cut and the window readings. Build it with New.
type Cutter struct {
	clk    clock.Clock
	cache  Cache
	tracer trace.Tracer
	// stated is upstream.window_reading (at start); readings is what the
	// upstream's answers taught.
	stated   series.Reading
	readings *readings
	// widenPausedUntil is when widening may resume (unix nanoseconds),
	// after a widened answer did not cover its window.
	widenPausedUntil atomic.Int64

	fills       prometheus.Counter
	widened     prometheus.Counter
	widenMisses prometheus.Counter // widened answers that did not cover their window
}

// New builds a Cutter on o and registers its metrics.
func New(o Options) *Cutter {
	c := &Cutter{
		clk: o.Clock, cache: o.Cache, tracer: o.Tracer, stated: o.Stated,
		readings: newReadings(o.Logger, o.Redis, o.Prefix),
		fills: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "trendgate_series_range_fills_total",
			Help: "Absolute-window time series answered by cutting the rows of a wider cached answer, without an upstream call.",
		}),
		widened: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "trendgate_series_widened_fetches_total",
			Help: "Cold hourly windows for which the one-week answer was fetched (and kept) instead, to cut the window from it.",
		}),
		widenMisses: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "trendgate_series_widen_uncovered_total",
			Help: "Widened one-week answers whose rows did not cover the window they were fetched for (the upstream's clock or lag differs from the gateway's); the window was then fetched itself and widening paused for 10 minutes.",
		}),
	}
	if o.Registry != nil {
		o.Registry.MustRegister(c.fills, c.widened, c.widenMisses)
		c.readings.register(o.Registry, c.stated)
	}
	return c
}

// widenPause is how long widening stays off after a widened answer did not
// cover the window it was fetched for.
const widenPause = 10 * time.Minute

// maxSourceLag is how much older than its fetch a wider answer's data
// (config.generated) may be for windows whose rows may still change. An
// interval answer served from an upstream edge cache minutes old holds
// that old data for the current hour (and for hours still being revised);
// a window cut from it would carry it under a fresh fetch time, while the
// upstream answers the window itself with today's counts.
const maxSourceLag = 2 * time.Minute

// sourceTooOld reports whether wide's data is too old for req: it lags its
// fetch by more than maxSourceLag, and req reaches rows that may have
// changed since (a window open to now, or one whose last bucket closed
// less than cache.ClosedAfter before wide's data was generated).
func sourceTooOld(wide *cache.Entry, req api.Request) bool {
	if wide.Generated <= 0 {
		return false // nothing says how old the data is; its rows decide
	}
	generated := time.Unix(wide.Generated, 0)
	if wide.Fetched.Sub(generated) <= maxSourceLag {
		return false
	}
	end := req.WindowEnd()
	return end.IsZero() || end.Add(cache.ClosedAfter).After(generated)
}

// reading returns the reading of the upstream's bounds to cut req with.
func (c *Cutter) reading(ctx context.Context, req api.Request) series.Reading {
	return c.readings.get(ctx, c.stated, func(r series.Reading) bool { return r.Needs(req) }, c.clk.Now())
}

// FromWider answers req, an absolute-window series request, from a wider
// answer in the cache (within cache.max_stale), or returns nil; ttl gives
// the freshness. Freshness follows the rows: the cut is fresh by req's own
// rules from the wider answer's fetch time, so a window of buckets that
// had closed by then is fresh for series_closed even when the wider
// answer, which reaches the then current bucket, has gone stale. With
// stale, a stale cut will do too: the caller could not get the upstream's
// answer, and a stale answer beats none (stale-if-error, for windows never
// asked before).
func (c *Cutter) FromWider(ctx context.Context, req api.Request, ttl *cache.Config, stale bool) (e *cache.Entry) {
	if !series.Derivable(req) {
		return nil
	}
	if c.tracer != nil && trace.SpanFromContext(ctx).IsRecording() {
		var sp trace.Span
		ctx, sp = c.tracer.Start(ctx, "range cut", trace.WithAttributes(attribute.Bool("trendgate.stale_allowed", stale)))
		defer func() {
			sp.SetAttributes(attribute.Bool("trendgate.cut", e != nil))
			sp.End()
		}()
	}
	now := c.clk.Now()
	reading := c.reading(ctx, req)
	for _, src := range series.Sources(req, now) {
		wide, ok := c.cache.Peek(ctx, src.Key())
		if !ok || wide.Status != http.StatusOK {
			continue
		}
		if e := c.cut(wide, req, reading, ttl, now, stale); e != nil {
			return e
		}
	}
	return nil
}

// cut makes req's entry from the wide entry, or returns nil when wide does
// not cover req's window, the rows depend on an unknown reading, or (unless
// stale) the cut would not be fresh at now.
func (c *Cutter) cut(wide *cache.Entry, req api.Request, reading series.Reading, ttl *cache.Config, now time.Time, stale bool) *cache.Entry {
	if sourceTooOld(wide, req) {
		return nil
	}
	body, rows, err := series.Cut(wide.Body, req, reading)
	if err != nil {
		return nil
	}
	class := cache.Class{Endpoint: req.Endpoint, Bucket: req.Bucket, End: req.WindowEnd(), Negative: rows == 0}
	fresh := ttl.FreshUntil(class, wide.Fetched)
	if !stale && !now.Before(fresh) {
		return nil
	}
	c.fills.Inc()
	return &cache.Entry{
		Key:         req.Key(),
		Topic:       req.Topic,
		Status:      http.StatusOK,
		ContentType: wide.ContentType,
		Body:        body,
		Generated:   wide.Generated,
		Fetched:     wide.Fetched,
		FreshUntil:  fresh,
		Derived:     true,
	}
}

// Widened returns the one-week request to fetch instead of req, a cold
// hourly absolute window, when that window lies inside the week the
// upstream would return at now and reaches the current hour (both by the
// gateway's clock, a hint that the week will cover it), the reading the
// cut needs is known, and widening is not paused.
func (c *Cutter) Widened(ctx context.Context, req api.Request, now time.Time) (api.Request, bool) {
	if !series.Derivable(req) || req.Bucket != "hour" || now.UnixNano() < c.widenPausedUntil.Load() {
		return api.Request{}, false
	}
	const day, hour = 24 * 3600, 3600
	unix := now.Unix()
	weekStart := (unix - 7*day) / day * day
	if req.End != 0 && req.End/hour*hour != unix/hour*hour || req.Start < weekStart {
		return api.Request{}, false
	}
	if c.reading(ctx, req).Needs(req) {
		return api.Request{}, false // the cut would be refused: fetch the window itself
	}
	w := req
	w.Interval, w.Start, w.End = "1w", 0, 0
	return w, true
}

// CutWidened takes the upstream's answer to the week fetched instead of
// req (see Widened) as two entries, wide under the week's own key, which
// it stores, and narrow under req's key (empty: the answer had no rows),
// and returns req's entry cut from the week: narrow with the cut rows. An
// upstream 404, an unknown topic, is req's answer too. The entry is an
// answer that needed the upstream, so it is not Derived. It returns nil
// when the week's rows do not cover req (the caller then fetches req
// itself) and pauses widening.
func (c *Cutter) CutWidened(ctx context.Context, req api.Request, wide, narrow *cache.Entry, empty bool, ttl *cache.Config) *cache.Entry {
	_ = c.cache.Put(context.WithoutCancel(ctx), wide)
	c.widened.Inc()
	if wide.Status == http.StatusNotFound {
		// The topic is unknown to the upstream, in every window.
		return narrow
	}
	if wide.Status != http.StatusOK {
		return nil
	}
	body, rows, err := series.Cut(wide.Body, req, c.reading(ctx, req))
	if err == nil && sourceTooOld(wide, req) {
		err = series.ErrNotCovered
	}
	if err != nil {
		c.widenMisses.Inc()
		if !empty {
			// Rows that stop short of the window, or old data: the
			// upstream's clock, lag or edge cache is not ours. (No rows at
			// all is a topic without data, which says nothing of clocks.)
			c.widenPausedUntil.Store(wide.Fetched.Add(widenPause).UnixNano())
		}
		return nil
	}
	narrow.Body = body
	if rows == 0 {
		narrow.FreshUntil = ttl.FreshUntil(cache.Class{Endpoint: req.Endpoint, Bucket: req.Bucket, End: req.WindowEnd(), Negative: true}, wide.Fetched)
	}
	return narrow
}

// Learn teaches the Cutter how the upstream reads bounds from body, its
// answer (with status) to req as forwarded, beside an interval answer of
// the same topic and bucket the cache holds (series.Learn).
func (c *Cutter) Learn(ctx context.Context, req api.Request, status int, body []byte) {
	if !series.Derivable(req) || status != http.StatusOK {
		return
	}
	var ref []byte
	for _, src := range series.Sources(req, c.clk.Now()) {
		if w, ok := c.cache.Peek(ctx, src.Key()); ok && w.Status == http.StatusOK {
			ref = w.Body
			break
		}
	}
	if seen, absent := series.Learn(req, body, ref); seen != (series.Reading{}) || absent != (series.Reading{}) {
		c.readings.learn(ctx, seen, absent, c.stated)
	}
}
