package proxy

import (
	"context"
	"errors"
	"net/http"
	"time"

	"trendgate/api"
	"trendgate/cache"
	"trendgate/series"
	"trendgate/upstream"
)

// Range-aware series: a time series over an absolute window (start and
// end) is answered from the rows of a fresh interval answer of the same
// topic and bucket the cache holds, without an upstream call and so
// without spending budget (package series cuts it). The cut answer is an
// ordinary entry under the narrow request's own key, so ETags, 304,
// projection, gzip and later hits work as for any other; it carries the
// wider answer's fetch time, and its freshness follows its own window from
// that time (closed buckets never change).
//
// A cold hourly window that ends in the current hour and starts no earlier
// than the one-week window's start (the sliding "last 7 days" of a
// dashboard) is widened: the gateway fetches interval=1w instead, one
// upstream request all the same and about the same bytes, keeps it, and
// cuts the window from it. Every later window of that topic inside the
// week is then answered from it until it goes stale.

// fromWider answers req, an absolute-window series request, from a wider
// answer in the cache (within cache.max_stale), or returns nil. Freshness
// follows the rows: the cut is fresh by req's own rules from the wider
// answer's fetch time, so a window of buckets that had closed by then is
// fresh for series_closed even when the wider answer, which reaches the
// then current bucket, has gone stale. With stale, a stale cut will do too:
// the caller could not reach the upstream, and a stale answer beats none
// (stale-if-error, for windows never asked before).
func (g *Gateway) fromWider(ctx context.Context, req api.Request, rt *runtime, stale bool) *cache.Entry {
	now := g.clk.Now()
	for _, src := range series.Sources(req, now) {
		wide, ok := g.cache.Peek(ctx, src.Key())
		if !ok || wide.Status != http.StatusOK {
			continue
		}
		if e := g.cut(wide, req, rt, now, false, stale); e != nil {
			return e
		}
	}
	return nil
}

// serveStaleFromWider reports whether an upstream failure err leaves room
// for a stale cut: the upstream could not be asked or did not answer.
func serveStaleFromWider(err error) bool {
	for _, e := range []error{upstream.ErrBudgetExhausted, upstream.ErrShareExhausted, upstream.ErrRateLimited,
		upstream.ErrBreakerOpen, upstream.ErrUnavailable, upstream.ErrTimeout} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// cut makes req's entry from the wide entry, or returns nil when wide does
// not cover req's window or (unless stale) the cut would not be fresh at
// now. reaches says wide was fetched just now for a window reaching req's
// end.
func (g *Gateway) cut(wide *cache.Entry, req api.Request, rt *runtime, now time.Time, reaches, stale bool) *cache.Entry {
	cutFn := series.Cut
	if reaches {
		cutFn = series.CutReaching
	}
	body, rows, err := cutFn(wide.Body, req)
	if err != nil {
		return nil
	}
	class := cache.Class{Endpoint: req.Endpoint, Bucket: req.Bucket, End: req.WindowEnd(), Negative: rows == 0}
	fresh := rt.ttl.FreshUntil(class, wide.Fetched)
	if !stale && !now.Before(fresh) {
		return nil
	}
	g.metrics.rangeFills.Inc()
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
// upstream would return at now and reaches the current hour.
func widened(req api.Request, now time.Time) (api.Request, bool) {
	if !series.Derivable(req) || req.Bucket != "hour" {
		return api.Request{}, false
	}
	const day = 24 * 3600
	unix := now.Unix()
	weekStart := (unix - 7*day) / day * day
	if req.End != unix/3600*3600 || req.Start < weekStart {
		return api.Request{}, false
	}
	w := req
	w.Interval, w.Start, w.End = "1w", 0, 0
	return w, true
}

// fetchWidened fetches wide from the upstream for the caller of req,
// stores it under its own key and cuts req's entry from it (an upstream
// 404, an unknown topic, is req's answer too). It returns nil, nil when
// the fresh answer cannot be cut for req (the caller then fetches req
// itself).
func (g *Gateway) fetchWidened(ctx context.Context, req, wide api.Request, up upstream.Request, rt *runtime) (*cache.Entry, error) {
	up.Path, up.RawQuery = wide.UpstreamPath(), wide.UpstreamQuery()
	resp, err := g.up.Do(ctx, up)
	if err != nil {
		return nil, err
	}
	now := g.clk.Now()
	e := entryOf(wide, resp, now, rt)
	_ = g.cache.Put(context.WithoutCancel(ctx), e)
	g.metrics.rangeWidened.Inc()
	if resp.Status == http.StatusNotFound {
		// The topic is unknown to the upstream, in every window.
		n := entryOf(req, resp, now, rt)
		n.Derived = true
		return n, nil
	}
	if resp.Status != http.StatusOK {
		return nil, nil
	}
	return g.cut(e, req, rt, now, true, false), nil
}
