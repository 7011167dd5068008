package proxy

import (
	"context"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"trendgate/api"
	"trendgate/cache"
	"trendgate/series"
	"trendgate/upstream"
)

// Range-aware series: a time series over an absolute window (start, and
// usually end) is answered from the rows of an interval answer of the same
// topic and bucket the cache holds, without an upstream call and so without
// spending budget (package series cuts it). The cut answer is an ordinary
// entry under the narrow request's own key, so ETags, 304, projection, gzip
// and later hits work as for any other; it carries the wider answer's fetch
// time, and its freshness follows its own window from that time (closed
// buckets never change).
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
func (c *Chain) reading(ctx context.Context, req api.Request, set *Settings) series.Reading {
	return c.readings.get(ctx, c.statedReading, func(r series.Reading) bool { return r.Needs(req) }, c.clk.Now())
}

// fromWider answers req, an absolute-window series request, from a wider
// answer in the cache (within cache.max_stale), or returns nil. Freshness
// follows the rows: the cut is fresh by req's own rules from the wider
// answer's fetch time, so a window of buckets that had closed by then is
// fresh for series_closed even when the wider answer, which reaches the
// then current bucket, has gone stale. With stale, a stale cut will do too:
// the caller could not get the upstream's answer, and a stale answer beats
// none (stale-if-error, for windows never asked before).
func (c *Chain) fromWider(ctx context.Context, req api.Request, set *Settings, stale bool) (e *cache.Entry) {
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
	reading := c.reading(ctx, req, set)
	for _, src := range series.Sources(req, now) {
		wide, ok := c.cache.Peek(ctx, src.Key())
		if !ok || wide.Status != http.StatusOK {
			continue
		}
		if e := c.cut(wide, req, reading, set, now, stale); e != nil {
			return e
		}
	}
	return nil
}

// cut makes req's entry from the wide entry, or returns nil when wide does
// not cover req's window, the rows depend on an unknown reading, or (unless
// stale) the cut would not be fresh at now.
func (c *Chain) cut(wide *cache.Entry, req api.Request, reading series.Reading, set *Settings, now time.Time, stale bool) *cache.Entry {
	if sourceTooOld(wide, req) {
		return nil
	}
	body, rows, err := series.Cut(wide.Body, req, reading)
	if err != nil {
		return nil
	}
	class := cache.Class{Endpoint: req.Endpoint, Bucket: req.Bucket, End: req.WindowEnd(), Negative: rows == 0}
	fresh := set.ttl.FreshUntil(class, wide.Fetched)
	if !stale && !now.Before(fresh) {
		return nil
	}
	c.metrics.rangeFills.Inc()
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

// widened returns the one-week request to fetch instead of req, a cold
// hourly absolute window, when that window lies inside the week the
// upstream would return at now and reaches the current hour (both by the
// gateway's clock, a hint that the week will cover it), the reading the
// cut needs is known, and widening is not paused.
func (c *Chain) widened(ctx context.Context, req api.Request, set *Settings, now time.Time) (api.Request, bool) {
	if !series.Derivable(req) || req.Bucket != "hour" || now.UnixNano() < c.widenPausedUntil.Load() {
		return api.Request{}, false
	}
	const day, hour = 24 * 3600, 3600
	unix := now.Unix()
	weekStart := (unix - 7*day) / day * day
	if req.End != 0 && req.End/hour*hour != unix/hour*hour || req.Start < weekStart {
		return api.Request{}, false
	}
	if c.reading(ctx, req, set).Needs(req) {
		return api.Request{}, false // the cut would be refused: fetch the window itself
	}
	w := req
	w.Interval, w.Start, w.End = "1w", 0, 0
	return w, true
}

// fetchWidened fetches wide from the upstream for the caller of req,
// stores it under its own key and cuts req's entry from it (an upstream
// 404, an unknown topic, is req's answer too). The entry is an answer that
// needed the upstream, so it is not Derived. It returns nil, nil when the
// week's rows do not cover req (the caller then fetches req itself) and
// pauses widening.
func (c *Chain) fetchWidened(ctx context.Context, req, wide api.Request, up upstream.Request, set *Settings) (*cache.Entry, error) {
	up.Path, up.RawQuery, up.Reason = wide.UpstreamPath(), wide.UpstreamQuery(), "widen"
	resp, err := c.up.Do(ctx, up)
	if err != nil {
		return nil, err
	}
	now := c.received(resp)
	c.observeClock(wide, resp, now)
	e := entryOf(wide, resp, now, set)
	_ = c.cache.Put(context.WithoutCancel(ctx), e)
	c.metrics.rangeWidened.Inc()
	if resp.Status == http.StatusNotFound {
		// The topic is unknown to the upstream, in every window.
		return entryOf(req, resp, now, set), nil
	}
	if resp.Status != http.StatusOK {
		return nil, nil
	}
	body, rows, err := series.Cut(e.Body, req, c.reading(ctx, req, set))
	if err == nil && sourceTooOld(e, req) {
		err = series.ErrNotCovered
	}
	if err != nil {
		c.metrics.rangeWidenMisses.Inc()
		if !resp.Empty {
			// Rows that stop short of the window, or old data: the
			// upstream's clock, lag or edge cache is not ours. (No rows at
			// all is a topic without data, which says nothing of clocks.)
			c.widenPausedUntil.Store(now.Add(widenPause).UnixNano())
		}
		return nil, nil
	}
	n := entryOf(req, resp, now, set)
	n.Body = body
	if rows == 0 {
		n.FreshUntil = set.ttl.FreshUntil(cache.Class{Endpoint: req.Endpoint, Bucket: req.Bucket, End: req.WindowEnd(), Negative: true}, now)
	}
	return n, nil
}

// observeClock notes how far the upstream's clock is from ours, by the
// generated time of resp, its answer to q received at now. Only the list
// and series are regenerated within a minute; whatsup summaries lag by
// hours and say nothing of the clock.
func (c *Chain) observeClock(q api.Request, resp *upstream.Response, now time.Time) {
	if resp.Generated > 0 && (q.Endpoint == api.EndpointSeries || q.Endpoint == api.EndpointList) {
		c.upstreamSkew.Store(resp.Generated - now.Unix())
		c.skewKnown.Store(true)
	}
}

// learnReading teaches the gateway how the upstream reads bounds from
// resp, its answer to req as forwarded, beside an interval answer of the
// same topic and bucket the cache holds (series.Learn).
func (c *Chain) learnReading(ctx context.Context, req api.Request, resp *upstream.Response, set *Settings) {
	if !series.Derivable(req) || resp.Status != http.StatusOK {
		return
	}
	var ref []byte
	for _, src := range series.Sources(req, c.clk.Now()) {
		if w, ok := c.cache.Peek(ctx, src.Key()); ok && w.Status == http.StatusOK {
			ref = w.Body
			break
		}
	}
	if seen, absent := series.Learn(req, resp.Body, ref); seen != (series.Reading{}) || absent != (series.Reading{}) {
		c.readings.learn(ctx, seen, absent, c.statedReading)
	}
}
