package gateway

import (
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"trendgate/activity"
	"trendgate/cache"
	"trendgate/config"
	"trendgate/internal/breaker"
	"trendgate/internal/inflight"
	"trendgate/internal/redisconn"
	"trendgate/limits"
	"trendgate/proxy"
	"trendgate/rangecut"
	"trendgate/series"
	"trendgate/upstream"
)

// maxTrackedIPs bounds the per-IP failed-auth limiter's memory.
const maxTrackedIPs = 100_000

// build constructs the upstream client, cache and limiter from cfg, on
// Redis when cluster mode is on, and returns them as the chain's
// dependencies (without clock, logger, registry, activity and tracer,
// which are the gateway's own). Each names its own logger.
func (g *Gateway) build(cfg *config.Config, opts Options) (proxy.Deps, error) {
	var deps proxy.Deps
	upMetrics := upstream.NewMetrics(g.reg)
	cacheMetrics := cache.NewMetrics(g.reg)
	limitMetrics := limits.NewMetrics(g.reg)
	limitMetrics.Labels = g.labels

	local, err := limits.NewLocal(cfg.Limits, g.clk, limitMetrics)
	if err != nil {
		return deps, err
	}
	deps.Limiter, deps.Usage, g.usage, g.quotas, g.localLimits = local, local, local, local, local
	deps.AuthFailures = limits.NewAuthFailures(cfg.Limits.AuthFailures, g.clk, maxTrackedIPs)

	store, err := cache.NewLocal(cfg.Cache.MaxBytes, cacheMetrics)
	if err != nil {
		return deps, err
	}
	g.local, deps.Local = store, store
	// Closed after the cache itself (see Close), which stops fills first.
	g.closers = append(g.closers, func() error { store.Close(); return nil })
	var cacheStore cache.Store = store
	// Fills nobody waits for any more are bounded at a few times the
	// upstream connections they queue for (cache.max_detached_fills).
	cacheOpts := []cache.Option{cache.WithDetachedFills(detachedFillsPerConn * cfg.Upstream.MaxConns)}

	deps.Inflight = inflight.New(inflightBytes(cfg))
	watchInflight(g.reg, deps.Inflight)
	upOpts := []upstream.Option{upstream.WithInflight(deps.Inflight)}
	if g.tracing != nil {
		upOpts = append(upOpts, upstream.WithTracing(g.tracing.TracerProvider()))
	}
	if opts.UpstreamTransport != nil {
		upOpts = append(upOpts, upstream.WithTransport(opts.UpstreamTransport))
	}

	stated, err := series.Named(cfg.Upstream.WindowReading.Start, cfg.Upstream.WindowReading.End)
	if err != nil {
		return deps, err
	}
	var readingsRedis redis.UniversalClient // what the upstream's answers teach, shared in cluster mode
	if cfg.ClusterMode() {
		cl, err := g.buildCluster(cfg, local, store, limitMetrics, cacheMetrics, upMetrics)
		if err != nil {
			return deps, err
		}
		readingsRedis = cl.counters
		g.keysRedis = cl.counters
		g.kept.checkRedis(cfg, cl.counters)
		deps.Limiter, deps.Usage, g.usage, g.quotas = cl.limiter, cl.limiter, cl.limiter, cl.limiter
		cacheStore = cache.Tiered(store, cl.shared)
		cacheOpts = append(cacheOpts, cache.WithLease(cl.lease, cl.shared, leaseWait))
		upOpts = append(upOpts, upstream.WithBudget(cl.budget))
		g.lastUsed = activity.NewLastUsed(cl.counters, cfg.Redis.Prefix, 0)
		g.closers = append(g.closers, startLastUsed(g.SyncLastUsed, g.log))
	}

	up, err := upstream.New(cfg.Upstream, g.clk, g.log, upMetrics, upOpts...)
	if err != nil {
		return deps, err
	}
	g.up, deps.Upstream = up, up
	g.closers = append(g.closers, func() error { up.Close(); return nil })
	c, err := cache.New(cfg.Cache, cacheStore, g.clk, g.log, cacheMetrics, cacheOpts...)
	if err != nil {
		return deps, err
	}
	g.cache, deps.Cache = c, c
	deps.Ranges = rangecut.New(rangecut.Options{
		Clock: g.clk, Logger: g.log.Named("series"), Registry: g.reg, Cache: c, Stated: stated,
		Redis: readingsRedis, Prefix: cfg.Redis.Prefix, Tracer: g.tracing.Tracer("trendgate/proxy"),
	})
	if g.history, err = openHistory(g, cfg, &deps); err != nil {
		return deps, err
	}
	return deps, nil
}

// detachedFillsPerConn is how many detached fills (see cache.flight) each
// upstream connection allows while cache.max_detached_fills is 0: enough
// to keep every connection busy with fills whose callers left, a few times
// over, and no more.
const detachedFillsPerConn = 4

// inflightBytes is the bound on bytes in flight outside the cache: upstream
// bodies being read and checked, variants being derived. A quarter of
// cache.max_bytes is what the derived memory limit (max_bytes +
// max_bytes/4 + 32 MiB) leaves for them above the cache; it is at least
// upstream.max_body_bytes, though a single request larger than the bound
// is let through alone in any case.
func inflightBytes(cfg *config.Config) int64 {
	return max(cfg.Cache.MaxBytes/4, cfg.Upstream.MaxBodyBytes)
}

// redisBreaker is the breaker of each Redis client: three consecutive
// failures open it; a probe goes through after 2 s, then after up to 30 s
// while Redis stays away.
var redisBreaker = breaker.Config{Failures: 3, Backoff: 2 * time.Second, MaxBackoff: 30 * time.Second}

// leaseWait bounds how long an instance waits for another instance's fetch
// of the same key before fetching itself.
const leaseWait = 5 * time.Second

// cluster holds the Redis-backed pieces.
type cluster struct {
	limiter *limits.Redis
	shared  cache.Store
	lease   cache.Lease
	budget  upstream.Budget
	// counters is the counters' Redis client, which also keeps what the
	// cluster learned of the upstream (readings).
	counters redis.UniversalClient
}

// buildCluster connects to Redis (counters and cache on separate
// databases) and builds the shared limiter, cache tier, lease, budget and
// the purge bus that carries purges to every instance's local tier
// (localTier). Redis being down at start is not fatal: every piece falls
// back locally.
func (g *Gateway) buildCluster(cfg *config.Config, local *limits.Local, localTier *cache.Local, lm *limits.Metrics, cm *cache.Metrics, um *upstream.Metrics) (*cluster, error) {
	rc := cfg.Redis
	// One client per role, a *redis.Client or, on a Redis Cluster, a
	// *redis.ClusterClient (the limiter then hash-tags its keys).
	tune := redisconn.Tuning{Timeout: rc.Timeout, NoRetries: true}
	counters, err := redisconn.New(rc.URL, rc.Mode, tune)
	if err != nil {
		return nil, fmt.Errorf("redis.url: %w", err)
	}
	cacheURL, cacheMode := rc.CacheTier()
	cacheClient, err := redisconn.New(cacheURL, cacheMode, tune)
	if err != nil {
		_ = counters.Close()
		return nil, fmt.Errorf("redis.cache_url: %w", err)
	}
	g.closers = append(g.closers, counters.Close, cacheClient.Close)

	// One breaker per Redis client, shared by every use of it: once one
	// use has seen Redis fail, no request waits on it again until a probe
	// finds it back.
	bm := breaker.NewMetrics(g.reg)
	bo := breaker.Options{Clock: g.clk, Logger: g.log, Metrics: bm}
	counterBreaker := breaker.New("redis", redisBreaker, bo)
	cacheBreaker := breaker.New("redis-cache", redisBreaker, bo)

	// Counters: fall back to this instance's share of each limit.
	rl, err := limits.NewRedis(counters, limits.RedisOptions{
		Prefix: rc.Prefix, Timeout: rc.Timeout, LocalShare: rc.LocalShare, Breaker: counterBreaker,
		AdmissionWindow: rc.AdmissionWindow,
	}, local, g.clk, g.log, lm)
	if err != nil {
		return nil, err
	}
	g.closers = append(g.closers, rl.Close)

	shared, err := cache.NewRedisStore(cacheClient, cache.RedisStoreOptions{
		Prefix:        rc.Prefix + "c:",
		Timeout:       rc.Timeout,
		MaxEntryBytes: int(cfg.Upstream.MaxBodyBytes),
		// Entries' FreshUntil is on the gateway clock, so their PX must be too.
		Clock:   g.clk,
		Breaker: cacheBreaker,
	}, cm)
	if err != nil {
		return nil, err
	}
	lease := cache.NewRedisLease(counters, rc.Prefix+"lease:", rc.Timeout, counterBreaker)

	// Purges reach the other instances' local tiers through the counters'
	// Redis (a generation key that must not be evicted, and a channel).
	bus, err := cache.NewPurgeBus(counters, localTier, cache.PurgeBusOptions{
		Prefix: rc.Prefix, Timeout: rc.Timeout, Logger: g.log, Metrics: cm,
	})
	if err != nil {
		return nil, err
	}
	bus.Start()
	g.purgeBus = bus
	g.closers = append(g.closers, bus.Close) // before the clients: closers run in reverse

	fallbackBudget, err := upstream.NewLocalBudget(shareBudget(cfg.Upstream.Budget, rc.LocalShare), g.clk)
	if err != nil {
		return nil, err
	}
	budget, err := upstream.NewRedisBudget(counters, cfg.Upstream.Budget, rc.Prefix, rc.Timeout, fallbackBudget, g.log, um, counterBreaker)
	if err != nil {
		return nil, err
	}
	return &cluster{limiter: rl, shared: shared, lease: lease, budget: budget, counters: counters}, nil
}

// shareBudget scales an account budget to one instance's share, at least 1
// per bucket that is limited.
func shareBudget(b upstream.BudgetConfig, share float64) upstream.BudgetConfig {
	b = b.Resolved() // apply the plan preset before scaling it
	scale := func(n int) int {
		if n == 0 {
			return 0
		}
		return max(1, int(float64(n)*share))
	}
	b.PerMinute, b.PerDay = scale(b.PerMinute), scale(b.PerDay)
	return b
}
