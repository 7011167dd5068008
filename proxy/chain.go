package proxy

import (
	"context"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"trendgate/activity"
	"trendgate/cache"
	"trendgate/internal/breaker"
	"trendgate/internal/clock"
	"trendgate/internal/inflight"
	"trendgate/internal/tenantlabel"
	"trendgate/limits"
	"trendgate/rangecut"
	"trendgate/rollup"
	"trendgate/upstream"
)

// Upstream is what the chain needs from the upstream client.
type Upstream interface {
	Do(ctx context.Context, req upstream.Request) (*upstream.Response, error)
	State() breaker.State
	// Withdraw takes an account its own limits refuse out of the fair
	// share until it claims again.
	Withdraw(ctx context.Context, tenant string)
}

// Cache is what the chain needs from the response cache.
type Cache interface {
	Get(ctx context.Context, key string, fetch cache.Fetcher) (cache.Result, error)
	GetWithin(ctx context.Context, key string, stale time.Duration, fetch cache.Fetcher) (cache.Result, error)
	Peek(ctx context.Context, key string) (*cache.Entry, bool)
	Put(ctx context.Context, e *cache.Entry) error
}

var (
	_ Upstream       = (*upstream.Client)(nil)
	_ Cache          = (*cache.Cache)(nil)
	_ limits.Limiter = (*limits.Local)(nil)
	_ http.Handler   = (*Chain)(nil)
)

// Deps are the chain's collaborators, built by the process around it
// (package gateway). Every field is required unless it says otherwise.
type Deps struct {
	Clock clock.Clock
	// Logger receives errors; the access log is its "access" child.
	Logger *zap.Logger
	// Registry receives the chain's metrics.
	Registry prometheus.Registerer
	Upstream Upstream
	Cache    Cache
	// Local is the in-process cache tier, told of answers served but not
	// kept; nil means none.
	Local   *cache.Local
	Limiter limits.Limiter
	// Usage reads the limiter's counters for a client's own usage report
	// (usage.go); the Local and Redis limiters implement it.
	Usage        limits.UsageReader
	AuthFailures *limits.AuthFailures
	// Inflight bounds the bytes of variants being derived (the upstream
	// client shares it).
	Inflight *inflight.Bound
	// Activity receives every finished request, for the dashboard.
	Activity *activity.Recorder
	// Tracer makes the chain's spans; nil means tracing off.
	Tracer trace.Tracer
	// Labels bounds the account and key_id labels of the chain's
	// counters by tenant (metrics: in the config); nil labels each event
	// with its account and no key id, without a bound.
	Labels *tenantlabel.Labels
	// Ranges answers absolute series windows from wider cached answers
	// (package rangecut); nil makes one on Cache that states nothing of
	// the upstream and shares nothing with a cluster.
	Ranges *rangecut.Cutter
	// Rollups receives every authenticated, routed request and the
	// upstream calls it causes, for the usage history (record.go); and
	// gives a client its account's daily history (usage.go). Nil means
	// none is kept.
	Rollups rollup.Store
}

// Chain is the public API handler: observe, route, authenticate, check the
// plan, limit, then serveAPI (cache, upstream, projection, write). Build it
// with New.
type Chain struct {
	clk      clock.Clock
	log      *zap.Logger
	access   *zap.Logger // the access log; zap.NewNop() when log.access is off
	metrics  *metrics
	up       Upstream
	cache    Cache
	local    *cache.Local
	limiter  limits.Limiter
	usage    limits.UsageReader
	authFail *limits.AuthFailures
	act      *activity.Recorder
	keyStats activity.Keys // per-key 24 h counters, kept across reloads
	// inflight bounds the bytes that freshly derived variants hold
	// outside the cache.
	inflight *inflight.Bound
	// ranges cuts absolute series windows from wider cached answers and
	// keeps the upstream's window readings (package rangecut).
	ranges *rangecut.Cutter
	// upstreamSkew is how far the upstream's clock ran ahead of ours (in
	// seconds, negative when behind) by the generated time of its latest
	// list or series answer (see observeClock).
	upstreamSkew atomic.Int64
	skewKnown    atomic.Bool              // upstreamSkew was observed at least once
	settings     atomic.Pointer[Settings] // the reloadable configuration snapshot
	// servedFromCache is set once any response was served from the cache;
	// readiness then survives an open upstream breaker.
	servedFromCache atomic.Bool
	handler         http.Handler
	// tracer makes spans; nil with tracing off, which is all the hot path
	// checks (see trace.go).
	tracer trace.Tracer
	// rollups keeps the usage history; nil keeps none.
	rollups rollup.Store
}

// New builds the chain serving set (see Compile) on deps.
func New(set *Settings, deps Deps) *Chain {
	c := &Chain{
		clk: deps.Clock, log: deps.Logger, access: zap.NewNop(), metrics: newMetrics(deps.Registry, deps.Labels),
		up: deps.Upstream, cache: deps.Cache, local: deps.Local, limiter: deps.Limiter, usage: deps.Usage,
		authFail: deps.AuthFailures, act: deps.Activity, inflight: deps.Inflight,
		tracer: deps.Tracer, rollups: deps.Rollups,
	}
	if c.ranges = deps.Ranges; c.ranges == nil {
		c.ranges = rangecut.New(rangecut.Options{
			Clock: deps.Clock, Logger: deps.Logger.Named("series"), Registry: deps.Registry, Cache: deps.Cache, Tracer: deps.Tracer,
		})
	}
	if a := set.cfg.Log.Access; a == nil || *a {
		c.access = c.log.Named("access")
	}
	c.Swap(set)
	c.handler = c.chain()
	return c
}

// chain builds the public handler. Read it top to bottom: the first
// middleware listed is the outermost.
func (c *Chain) chain() http.Handler {
	return compose(http.HandlerFunc(c.serveAPI),
		c.observe,      // 1. request id, panic recovery, access log, metrics
		c.cors,         // 1b. CORS headers; preflights answered here, spending nothing
		c.selfUsage,    // 1c. GET /trendgate/v1/usage answered by its own chain (usage.go)
		c.route,        // 2. strict parse into a canonical Request; 400/404/405
		c.authenticate, // 3. Bearer key → Principal; 401
		c.checkPlan,    // 3b. endpoint and metric in the key's plan; 403, costs nothing
		c.limit,        // 4. per-key token bucket and quotas; 429
	) // 5-8. serveAPI: cache, upstream, projection, write
}

// compose wraps h in mws so that mws[0] is the outermost.
func compose(h http.Handler, mws ...func(http.Handler) http.Handler) http.Handler {
	for i := len(mws) - 1; i >= 0; i-- {
		h = mws[i](h)
	}
	return h
}

// ServeHTTP serves the public API.
func (c *Chain) ServeHTTP(w http.ResponseWriter, r *http.Request) { c.handler.ServeHTTP(w, r) }

// Swap makes set the configuration of every request that starts from now
// on and returns the one it replaces. Each key keeps its 24 h counters
// across the swap.
func (c *Chain) Swap(set *Settings) (old *Settings) {
	set = c.withUsage(set)
	set.gen = snapshotGens.Add(1)
	return c.settings.Swap(set)
}

// Settings returns the configuration snapshot in force.
func (c *Chain) Settings() *Settings { return c.settings.Load() }

// ServedFromCache reports whether any response was served from the cache.
func (c *Chain) ServedFromCache() bool { return c.servedFromCache.Load() }
