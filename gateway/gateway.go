package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"trendgate/activity"
	"trendgate/admin"
	"trendgate/cache"
	"trendgate/certs"
	"trendgate/config"
	"trendgate/console"
	"trendgate/internal/buildinfo"
	"trendgate/internal/clock"
	"trendgate/internal/tenantlabel"
	"trendgate/keyservice"
	"trendgate/limits"
	"trendgate/proxy"
	"trendgate/tracing"
)

var _ http.Handler = (*Gateway)(nil)

// Options are the gateway's injectable dependencies. The zero value is
// production: real clock, no-op logger, a private Prometheus registry.
type Options struct {
	// Clock drives freshness, limits and budgets; nil means clock.Real{}.
	Clock clock.Clock
	// Logger receives the access log and errors; nil means zap.NewNop().
	Logger *zap.Logger
	// Registry receives every metric; nil means a new private registry
	// (see Gateway.Registry).
	Registry *prometheus.Registry
	// UpstreamTransport replaces the upstream HTTP transport (tests); nil
	// means the client's own transport built from config.
	UpstreamTransport http.RoundTripper
	// CertCheckInterval is how often, at most, a TLS handshake looks at
	// tls.cert_file and tls.key_file (tls.mode files) and reloads them when
	// they changed; 0 means certs.DefaultCheckInterval (2s), negative means
	// only Reload (SIGHUP, config change) re-reads them.
	CertCheckInterval time.Duration
}

// Gateway is the trendgate process: the request chain (package proxy)
// and what runs it: the servers and their lanes, TLS, reload, the cache
// snapshot, the admin routes with the console and the key API's service
// (packages console and keyservice). It is also an
// http.Handler for the public API. Build it with New.
type Gateway struct {
	clk     clock.Clock
	log     *zap.Logger
	reg     *prometheus.Registry
	metrics *metrics
	certs   *certs.Metrics // certificate outcomes, registered even with TLS off
	chain   *proxy.Chain
	up      proxy.Upstream
	cache   *cache.Cache
	usage   limits.UsageReader   // the limiter's counters, read by the console
	quotas  limits.QuotaResetter // the same limiter, whose quota counters ResetQuota clears
	act     *activity.Recorder   // recent traffic for the dashboard
	closers []func() error       // cluster resources, closed by Close
	// console serves the admin views (package console); adminRefusals
	// counts refused admin requests, and adminFailures slows failed admin
	// tokens per address (New).
	console       *console.Console
	adminRefusals *admin.Metrics
	adminFailures *limits.AuthFailures
	// lastUsed shares the keys' last use among instances; nil without
	// cluster mode (lastused.go).
	lastUsed *activity.LastUsed
	// purgeBus tells the other instances of a cluster about purges; nil
	// without cluster mode.
	purgeBus *cache.PurgeBus
	// certCheck is Options.CertCheckInterval.
	certCheck time.Duration
	// local is the in-process cache tier, which snap saves and loads
	// (persist.go).
	local *cache.Local
	snap  snapshots
	// kept keeps quota counters and usage across restarts (state.go).
	// localLimits is the in-memory limiter whose counters it keeps: the
	// limiter itself, or in cluster mode Redis's fallback (not kept).
	localLimits *limits.Local
	kept        keeper
	// sec is the certificates of the running Serve call; nil while none
	// runs or with TLS off. Reload re-reads its files.
	sec atomic.Pointer[certs.Manager]

	draining atomic.Bool // set when shutdown begins; readiness turns false
	// skipDelay ends server.shutdown_delay early (server.go).
	skipDelay skipSignal
	// reloads counts and logs the reloads and keeps the latest outcome
	// for the dashboard (reload.go).
	reloads reloads
	// tracing exports spans; nil with tracing off.
	tracing *tracing.Provider
	// labels bounds the tenant labels of the metrics (metrics: in the
	// config); Reload configures it.
	labels *tenantlabel.Labels

	// keys is the key API's service (package keyservice), which keeps
	// its changes and lays them over the configuration file's settings.
	keys      *keyservice.Service
	keysRedis redis.UniversalClient // the shared copy's Redis; nil without cluster mode
	// history is the usage history (usage.go).
	history *History
}

// New builds a gateway from cfg: the upstream client, the cache, the
// limiter and, when cfg.Redis.URL is set, their cluster (Redis) backends.
func New(cfg *config.Config, opts Options) (*Gateway, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	g := &Gateway{clk: opts.Clock, log: opts.Logger, reg: opts.Registry, certCheck: opts.CertCheckInterval}
	if g.clk == nil {
		g.clk = clock.Real{}
	}
	if g.log == nil {
		g.log = zap.NewNop()
	}
	if g.reg == nil {
		g.reg = prometheus.NewRegistry()
	}
	g.metrics = newMetrics(g.reg)
	g.labels = tenantlabel.New(cfg.Metrics)
	g.act = activity.New(g.clk.Now())
	g.certs = certs.NewMetrics(g.reg)
	// What the admin listener keeps beside the routes: the counter of
	// refused admin requests and the per-address budget of failed admin
	// tokens (limits.auth_failures, as on the public side; read at start).
	g.adminRefusals = admin.NewMetrics(g.reg)
	g.adminFailures = limits.NewAuthFailures(cfg.Limits.AuthFailures, g.clk, maxAdminIPs)
	g.kept = keeper{log: g.log, clk: g.clk, reg: g.reg, cluster: cfg.ClusterMode(),
		settings: func() *proxy.Settings { return g.chain.Settings() },
		usage:    func() *activity.Keys { return g.chain.KeyStats() }}

	if _, err := proxy.Compile(cfg); err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	g.reloads = reloads{log: g.log, clk: g.clk, metrics: g.metrics, boot: cfg}

	var err error
	if g.tracing, err = tracing.New(context.Background(), cfg.Tracing, tracing.Options{Version: buildinfo.Read().Version}); err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	deps, err := g.build(cfg, opts)
	if err != nil {
		_ = g.Close()
		return nil, fmt.Errorf("gateway: %w", err)
	}
	keys, eff, err := keyservice.Open(cfg, keyservice.Options{
		Redis: g.keysRedis, Clock: g.clk, Log: g.log,
		Applied: g.metrics.keysApplied, Quotas: g.quotas,
	})
	if keys != nil {
		g.keys = keys
		g.closers = append(g.closers, keys.Close)
	}
	if err != nil {
		_ = g.Close()
		return nil, fmt.Errorf("gateway: keys: %w", err)
	}
	set, err := proxy.Compile(eff)
	if err != nil {
		_ = g.Close()
		return nil, fmt.Errorf("gateway: %w", err)
	}
	deps.Clock, deps.Logger, deps.Registry, deps.Activity = g.clk, g.log, g.reg, g.act
	deps.Tracer = g.tracing.Tracer("trendgate/proxy")
	g.console = console.New(console.Options{
		Settings: func() *proxy.Settings { return g.chain.Settings() },
		Clock:    g.clk, Log: g.log, Usage: g.usage, Activity: g.act, Upstream: g.up, Local: g.local,
		Revoked: g.keys, LastUsed: g.lastUsed, Reload: g.reloads.status, Labels: g.labels,
	})
	deps.Limiter = g.console.Observe(deps.Limiter)
	deps.Labels = g.labels
	g.history.console = g.console // names checked against the console's index
	g.chain = proxy.New(set, deps)
	g.keys.Start(g.chain)
	g.snap = snapshots{log: g.log, clk: g.clk, local: g.local, persist: cfg.Cache, origin: cfg.Upstream.BaseURL,
		purgeBus: g.purgeBus, settings: g.chain.Settings}
	if g.snap.key, err = persistKeyFrom(cfg.Cache, os.Getenv); err != nil {
		_ = g.Close()
		return nil, fmt.Errorf("gateway: %w", err)
	}
	g.snap.load(cfg.Cache)
	if err := g.kept.open(cfg, g.localLimits); err != nil {
		_ = g.Close()
		return nil, fmt.Errorf("gateway: %w", err)
	}
	g.reg.MustRegister(g.console.Collector())
	return g, nil
}

// tracingFlushTimeout bounds the export of the last spans by Close.
const tracingFlushTimeout = 5 * time.Second

// Reload swaps keys, plans, costs, cache lifetimes, trusted proxies, the
// CORS origins, the admin token, the tracing sampler's ratio and whether
// an incoming trace is trusted, and the metrics' tenant labels atomically. Counters and cached entries survive; a
// removed key stops working with the next request. A config that does not
// validate is refused and the old one keeps serving. Other settings
// (listeners, TLS, Redis, upstream, ...) need a restart: each one changed
// is logged as such and trendgate_config_restart_pending turns 1, except
// that in tls.mode files the certificate and key files (at the paths the
// running Serve started with) are re-read first, whatever becomes of cfg:
// a pair that does not load is logged and counted in
// trendgate_tls_certificate_reloads_total and the old pair keeps serving.
// Reload logs its outcome once: what changed, or why it was refused.
func (g *Gateway) Reload(cfg *config.Config) error {
	_ = g.sec.Load().Reload() // logged and counted by certs
	if err := cfg.Validate(); err != nil {
		return g.reloads.refuse(fmt.Errorf("gateway: reload: %w", err))
	}
	var old *config.Config
	eff, err := g.keys.Reload(cfg, func(eff *config.Config) error {
		set, err := proxy.Recompile(g.chain.Settings(), eff)
		if err == nil {
			err = g.cache.Reconfigure(cfg.Cache)
		}
		if err != nil {
			return err
		}
		old = g.chain.Swap(set).Config()
		return nil
	})
	if err != nil {
		return g.reloads.refuse(fmt.Errorf("gateway: reload: %w", err))
	}
	g.tracing.SetRatio(cfg.Tracing.Ratio)
	g.labels.Configure(cfg.Metrics)
	g.metrics.reloads.WithLabelValues("ok").Inc()
	pending := g.reloads.report(old, eff)
	at := g.clk.Now().UTC()
	g.reloads.last.Store(&admin.ReloadStatus{At: &at, Result: "ok", RestartPending: pending})
	return nil
}

// RefuseReload records a reload that produced no configuration at all (the
// file could not be read or parsed): counted as refused and logged once.
func (g *Gateway) RefuseReload(err error) { _ = g.reloads.refuse(err) }

// FlushTraces exports every span ended so far, bounded by ctx; it does
// nothing with tracing off. Serve calls it while draining.
func (g *Gateway) FlushTraces(ctx context.Context) error { return g.tracing.ForceFlush(ctx) }

// Config returns the configuration currently in force.
func (g *Gateway) Config() *config.Config { return g.chain.Settings().Config() }

// Registry returns the Prometheus registry holding the gateway's metrics.
func (g *Gateway) Registry() *prometheus.Registry { return g.reg }

// ServeHTTP serves the public API.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) { g.chain.ServeHTTP(w, r) }

// Close stops background work (cache refreshes) and releases cluster
// resources. It does not stop servers; see Run.
func (g *Gateway) Close() error {
	g.kept.close()
	var errs []error
	if g.cache != nil {
		if err := g.cache.Close(context.Background()); err != nil {
			errs = append(errs, err)
		}
	}
	for i := len(g.closers) - 1; i >= 0; i-- {
		if err := g.closers[i](); err != nil {
			errs = append(errs, err)
		}
	}
	// Last, so that the spans of the fills just stopped are exported.
	ctx, cancel := context.WithTimeout(context.Background(), tracingFlushTimeout)
	defer cancel()
	if err := g.tracing.Shutdown(ctx); err != nil {
		g.log.Warn("tracing: spans not exported at shutdown", zap.Error(err))
	}
	return errors.Join(errs...)
}

// Keys returns the key API's service (the admin routes' admin.KeyAdmin).
func (g *Gateway) Keys() *keyservice.Service { return g.keys }
