package proxy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"trendgate/activity"
	"trendgate/admin"
	"trendgate/api"
	"trendgate/auth"
	"trendgate/cache"
	"trendgate/certs"
	"trendgate/config"
	"trendgate/internal/breaker"
	"trendgate/internal/buildinfo"
	"trendgate/internal/clock"
	"trendgate/internal/cors"
	"trendgate/internal/inflight"
	"trendgate/limits"
	"trendgate/projection"
	"trendgate/series"
	"trendgate/state"
	"trendgate/tracing"
	"trendgate/upstream"
)

// upstreamClient is what the gateway needs from the upstream client.
type upstreamClient interface {
	Do(ctx context.Context, req upstream.Request) (*upstream.Response, error)
	State() breaker.State
}

// responseCache is what the gateway needs from the response cache.
type responseCache interface {
	Get(ctx context.Context, key string, fetch cache.Fetcher) (cache.Result, error)
	GetWithin(ctx context.Context, key string, stale time.Duration, fetch cache.Fetcher) (cache.Result, error)
	Peek(ctx context.Context, key string) (*cache.Entry, bool)
	Put(ctx context.Context, e *cache.Entry) error
	Purge(ctx context.Context, sel cache.Selector) int
	Reconfigure(cfg cache.Config) error
	Close(ctx context.Context) error
}

var (
	_ upstreamClient = (*upstream.Client)(nil)
	_ responseCache  = (*cache.Cache)(nil)
	_ limits.Limiter = (*limits.Local)(nil)
	_ http.Handler   = (*Gateway)(nil)
)

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

// Gateway is the trendgate API gateway: an http.Handler for the public API
// plus the pieces the servers and the admin listener need. Build it with New.
type Gateway struct {
	clk      clock.Clock
	log      *zap.Logger
	access   *zap.Logger // the access log; zap.NewNop() when log.access is off
	reg      *prometheus.Registry
	metrics  *metrics
	certs    *certs.Metrics // certificate outcomes, registered even with TLS off
	up       upstreamClient
	cache    responseCache
	limiter  limits.Limiter
	usage    limits.UsageReader // the limiter's counters, read by the console
	authFail *limits.AuthFailures
	act      *activity.Recorder // recent traffic for the dashboard
	keyStats activity.Keys      // per-key 24 h counters, kept across reloads
	closers  []func() error     // cluster resources, closed by Close
	// purgeBus tells the other instances of a cluster about purges; nil
	// without cluster mode.
	purgeBus *cache.PurgeBus
	// certCheck is Options.CertCheckInterval.
	certCheck time.Duration
	// local is the in-process cache tier, which persistence saves and
	// loads; persist is the cache configuration at start, whose
	// persist_path and persist_max_bytes a reload does not change.
	local   *cache.Local
	persist cache.Config
	// inflight bounds the bytes that upstream reads and freshly derived
	// variants hold outside the cache (see inflightBytes).
	inflight *inflight.Bound
	// persistOrigin ties the snapshot to upstream.base_url (at start);
	// persistKey authenticates it (cache.persist_key_env; nil: off).
	persistOrigin string
	persistKey    []byte
	// state keeps quota counters and usage across restarts; nil with
	// state.path empty (see state.go). localLimits is the in-memory
	// limiter whose counters it keeps: the limiter itself, or in cluster
	// mode Redis's fallback (not kept). redisKeeps is what the counters'
	// Redis keeps on disk, read once at start in cluster mode.
	localLimits *limits.Local
	state       *state.Store
	stateUnlock func() error // the state file's lock (see state.Lock)
	stateOnce   sync.Once    // lets go of it once
	redisKeeps  string
	// statedReading is upstream.window_reading (at start); readings is
	// what the upstream's answers taught (see ranges.go).
	statedReading series.Reading
	readings      *readings
	// widenPausedUntil is when widening may resume (unix nanoseconds),
	// after a widened answer did not cover its window.
	widenPausedUntil atomic.Int64
	// upstreamSkew is how far the upstream's clock ran ahead of ours (in
	// seconds, negative when behind) by the generated time of its latest
	// list or series answer (see observeClock).
	upstreamSkew atomic.Int64
	// sec is the certificates of the running Serve call; nil while none
	// runs or with TLS off. Reload re-reads its files.
	sec atomic.Pointer[certs.Manager]

	boot     *config.Config          // the configuration the process started with
	rt       atomic.Pointer[runtime] // the reloadable configuration snapshot
	draining atomic.Bool             // set when shutdown begins; readiness turns false
	// servedFromCache is set once any response was served from the cache;
	// readiness then survives an open upstream breaker.
	servedFromCache atomic.Bool
	// lastReload is the latest reload's outcome, for the dashboard; nil
	// before any.
	lastReload atomic.Pointer[admin.ReloadStatus]
	handler    http.Handler
	// tracing exports spans; tracer makes them. Both nil with tracing
	// off, which is all the hot path checks (see trace.go).
	tracing *tracing.Provider
	tracer  trace.Tracer
}

// runtime is one immutable snapshot of everything a reload swaps: keys,
// plans, costs and TTLs. A request loads it once, in observe, and every
// stage reads that copy (info.rt), so a reload can never pair a key with
// another snapshot's plan or costs.
type runtime struct {
	cfg      *config.Config
	keyring  *auth.Keyring
	plans    map[string]*plan         // plan name → compiled plan
	policies map[string]limits.Policy // key id → resolved rate and quotas
	costs    limits.Costs
	routes   *api.Routes // the configured routes; nil: none
	ttl      cache.Config
	trusted  []netip.Prefix
	cors     *cors.Policy             // nil: CORS off
	usage    map[string]*activity.Key // key id → its 24 h counters (console.go)
}

// plan is a compiled plan: allowed endpoints and projection.
type plan struct {
	name      string
	endpoints [api.EndpointTSV + 1]bool
	routes    map[string]bool        // names of the configured routes the plan includes
	proj      *projection.Projection // nil: full data
	memoKey   any                    // the entry memo key of this plan's variant (see variantOf)
	upWeight  float64                // upstream fair-share weight; 0 means 1
	upPerMin  int                    // upstream calls per key per minute; 0 no cap
}

// New builds a gateway from cfg: the upstream client, the cache, the
// limiter and, when cfg.Redis.URL is set, their cluster (Redis) backends.
func New(cfg *config.Config, opts Options) (*Gateway, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("proxy: %w", err)
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
	g.act = activity.New(g.clk.Now())
	g.certs = certs.NewMetrics(g.reg)
	g.access = zap.NewNop()
	if cfg.Log.Access == nil || *cfg.Log.Access {
		g.access = g.log.Named("access")
	}

	rt, err := compile(cfg)
	if err != nil {
		return nil, fmt.Errorf("proxy: %w", err)
	}
	g.rt.Store(g.withUsage(rt))
	g.boot = cfg

	if g.tracing, err = tracing.New(context.Background(), cfg.Tracing, tracing.Options{Version: buildinfo.Read().Version}); err != nil {
		return nil, fmt.Errorf("proxy: %w", err)
	}
	g.tracer = g.tracing.Tracer("trendgate/proxy")
	if err := g.build(cfg, opts); err != nil {
		_ = g.Close()
		return nil, fmt.Errorf("proxy: %w", err)
	}
	g.persist, g.persistOrigin = cfg.Cache, cfg.Upstream.BaseURL
	if g.persistKey, err = persistKeyFrom(cfg.Cache, os.Getenv); err != nil {
		_ = g.Close()
		return nil, fmt.Errorf("proxy: %w", err)
	}
	g.loadSnapshot(cfg.Cache)
	if err := g.openState(cfg, g.localLimits); err != nil {
		_ = g.Close()
		return nil, fmt.Errorf("proxy: %w", err)
	}
	g.reg.MustRegister(newQuotaCollector(g))
	g.handler = g.chain()
	return g, nil
}

// compile turns a validated config into a runtime snapshot.
func compile(cfg *config.Config) (*runtime, error) {
	rt := &runtime{
		cfg:      cfg,
		policies: make(map[string]limits.Policy, len(cfg.Keys)),
		plans:    make(map[string]*plan, len(cfg.Plans)),
		costs:    cfg.Limits.Costs,
		ttl:      cfg.Cache,
	}
	routes, err := api.NewRoutes(cfg.Routes)
	if err != nil {
		return nil, err
	}
	rt.routes = routes
	for name, p := range cfg.Plans {
		proj, err := projection.Compile(p)
		if err != nil {
			return nil, fmt.Errorf("plans.%s: %w", name, err)
		}
		cp := &plan{name: name, proj: proj, upWeight: p.UpstreamWeight, upPerMin: p.UpstreamPerMinute, memoKey: variantKey(name, proj)}
		cp.routes = make(map[string]bool)
		for _, e := range p.Endpoints {
			if ep, ok := api.EndpointNamed(e); ok {
				cp.endpoints[ep] = true
			} else {
				cp.routes[e] = true
			}
		}
		rt.plans[name] = cp
	}
	specs := make([]auth.KeySpec, 0, len(cfg.Keys))
	for _, rk := range cfg.ResolvedKeys() {
		spec := auth.KeySpec{ID: rk.Key.ID, Digest: rk.Key.SHA256, Plan: rk.Plan, Disabled: rk.Key.Disabled}
		if rk.Key.Expires != nil {
			spec.Expires = *rk.Key.Expires
		}
		specs = append(specs, spec)
		rt.policies[rk.Key.ID] = rk.Policy
	}
	kr, err := auth.NewKeyring(specs)
	if err != nil {
		return nil, err
	}
	rt.keyring = kr
	for _, c := range cfg.Server.TrustedProxies {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return nil, fmt.Errorf("server.trusted_proxies: %w", err)
		}
		rt.trusted = append(rt.trusted, p.Masked())
	}
	rt.cors = cors.New(cfg.Server.CORS)
	return rt, nil
}

// tracingFlushTimeout bounds the export of the last spans by Close.
const tracingFlushTimeout = 5 * time.Second

// Reload swaps keys, plans, costs, cache lifetimes, trusted proxies, the
// CORS origins, the admin token and the tracing sampler's ratio atomically. Counters and cached entries survive; a
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
		return g.refuseReload(fmt.Errorf("proxy: reload: %w", err))
	}
	rt, err := compile(cfg)
	if err == nil {
		err = g.cache.Reconfigure(cfg.Cache)
	}
	if err != nil {
		return g.refuseReload(fmt.Errorf("proxy: reload: %w", err))
	}
	old := g.rt.Swap(g.withUsage(rt))
	g.tracing.SetRatio(cfg.Tracing.Ratio)
	g.metrics.reloads.WithLabelValues("ok").Inc()
	pending := g.reportReload(old.cfg, cfg)
	at := g.clk.Now().UTC()
	g.lastReload.Store(&admin.ReloadStatus{At: &at, Result: "ok", RestartPending: pending})
	return nil
}

// RefuseReload records a reload that produced no configuration at all (the
// file could not be read or parsed): counted as refused and logged once.
func (g *Gateway) RefuseReload(err error) { _ = g.refuseReload(err) }

func (g *Gateway) refuseReload(err error) error {
	g.metrics.reloads.WithLabelValues("refused").Inc()
	g.log.Error("config reload refused; the previous configuration keeps serving", zap.Error(err))
	at := g.clk.Now().UTC()
	var pending []string // what the last reload that loaded left pending still is
	if prev := g.lastReload.Load(); prev != nil {
		pending = prev.RestartPending
	}
	g.lastReload.Store(&admin.ReloadStatus{At: &at, Result: "refused", Error: err.Error(), RestartPending: pending})
	return err
}

// FlushTraces exports every span ended so far, bounded by ctx; it does
// nothing with tracing off. Serve calls it while draining.
func (g *Gateway) FlushTraces(ctx context.Context) error { return g.tracing.ForceFlush(ctx) }

// Config returns the configuration currently in force.
func (g *Gateway) Config() *config.Config { return g.rt.Load().cfg }

// Registry returns the Prometheus registry holding the gateway's metrics.
func (g *Gateway) Registry() *prometheus.Registry { return g.reg }

// ServeHTTP serves the public API.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) { g.handler.ServeHTTP(w, r) }

// Close stops background work (cache refreshes) and releases cluster
// resources. It does not stop servers; see Run.
func (g *Gateway) Close() error {
	g.closeState()
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
