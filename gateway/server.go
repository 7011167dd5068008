package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"go.uber.org/zap"

	"trendgate/certs"
	"trendgate/config"
	"trendgate/internal/buildinfo"
	"trendgate/internal/transport/batchconn"
	"trendgate/internal/transport/h1"
	"trendgate/internal/transport/h2"
)

// server is what Serve runs on the public listener: an *http.Server, or
// the HTTP/1.1 lane in front of one.
type server interface {
	Serve(net.Listener) error
	Shutdown(context.Context) error
}

var (
	_ server = (*http.Server)(nil)
	_ server = (*h1.Server)(nil)
)

// Listeners are the sockets Serve uses; Serve closes every one it is given.
// Public is required. HTTP is the plain-HTTP listener used with TLS on
// (ACME HTTP-01 challenges, 403 https_required for everything else); nil
// means none, and with TLS off it is closed unused. Admin nil means no
// admin listener.
type Listeners struct {
	Public net.Listener
	HTTP   net.Listener
	Admin  net.Listener
}

// close closes every listener in ls.
func (ls Listeners) close() {
	for _, l := range []net.Listener{ls.Public, ls.HTTP, ls.Admin} {
		if l != nil {
			_ = l.Close()
		}
	}
}

// Listen opens the listeners named in the configuration: server.listen,
// tls.http_listen when TLS is on, and admin.listen unless it is "off".
func (g *Gateway) Listen() (Listeners, error) {
	cfg := g.Config()
	var ls Listeners
	var err error
	if ls.Public, err = net.Listen("tcp", cfg.Server.Listen); err != nil {
		return Listeners{}, fmt.Errorf("gateway: listen: %w", err)
	}
	if tlsOn(cfg) {
		if ls.HTTP, err = net.Listen("tcp", cfg.TLS.HTTPListen); err != nil {
			ls.close()
			return Listeners{}, fmt.Errorf("gateway: http listen: %w", err)
		}
	}
	if cfg.Admin.Listen != "" && cfg.Admin.Listen != "off" {
		if ls.Admin, err = net.Listen("tcp", cfg.Admin.Listen); err != nil {
			ls.close()
			return Listeners{}, fmt.Errorf("gateway: admin listen: %w", err)
		}
	}
	return ls, nil
}

// tlsOn reports whether cfg serves the public API over HTTPS.
func tlsOn(cfg *config.Config) bool {
	return cfg.TLS.Mode == config.TLSModeFiles || cfg.TLS.Mode == config.TLSModeACME
}

// Run opens the configured listeners and serves until ctx is done.
func (g *Gateway) Run(ctx context.Context) error {
	ls, err := g.Listen()
	if err != nil {
		return err
	}
	return g.Serve(ctx, ls)
}

// Serve serves the public API (over HTTPS when tls.mode is files or acme),
// the plain-HTTP listener and the admin routes on ls until ctx is done or a
// server fails. In ACME mode certificates are obtained in the background
// (startup never waits for the CA): /readyz stays false and handshakes fail
// until every domain has a certificate.
//
// Then it drains: readiness turns false at once, every listener keeps
// serving for server.shutdown_delay (see SkipShutdownDelay), the public
// and plain-HTTP servers stop accepting and wait for in-flight requests up to
// server.shutdown_timeout, background refreshes stop, the local cache is
// written to cache.persist_path (when set), certificate management stops,
// and the admin server closes last. Serve closes the listeners.
func (g *Gateway) Serve(ctx context.Context, ls Listeners) error {
	run, err := g.start(ctx, ls)
	if err != nil {
		return err
	}
	return g.drain(ctx, run, run.wait(ctx))
}

// running is what one Serve call runs.
type running struct {
	cfg   *config.Config
	sec   *certs.Manager // nil with TLS off
	front server         // the public listener's server
	// public is Go's server behind front (front itself without a lane).
	public *http.Server
	plain  *http.Server // the plain-HTTP listener's server; nil for none
	admin  *http.Server // nil for no admin listener
	errc   chan error   // each server's exit
	// startErr is why certificate management did not start; nil normally.
	startErr error
	// readyMu orders readiness-gauge writes so a late "certificate ready"
	// cannot set the gauge back to 1 once draining began.
	readyMu sync.Mutex
}

// start sets up the certificates and the servers, starts serving every
// listener in ls and starts certificate management. An error means
// nothing runs (ls is closed).
func (g *Gateway) start(ctx context.Context, ls Listeners) (*running, error) {
	cfg := g.Config()
	sec, err := certs.New(cfg.CertSettings(), g.clk, g.log, certs.Options{
		CheckInterval: g.certCheck,
		OnReload:      func(result string) { g.metrics.certReloads.WithLabelValues(result).Inc() },
		Metrics:       g.certs,
	})
	if err != nil {
		ls.close()
		return nil, err
	}
	g.sec.Store(sec)
	run := &running{cfg: cfg, sec: sec, errc: make(chan error, 3)}
	run.front, run.public = g.publicServers(cfg, sec)
	if sec != nil {
		if ls.HTTP != nil {
			run.plain = g.newServer(sec.ChallengeHandler(httpsRequired()), "http")
		}
	} else if ls.HTTP != nil {
		_ = ls.HTTP.Close()
	}
	if ls.Admin != nil {
		run.admin = g.newServer(g.adminHandler(sec), "admin")
	}
	run.serve(ls)
	run.startErr = sec.Start(context.WithoutCancel(ctx), func() { g.setReady(run) })
	g.setReady(run)
	build := buildinfo.Read()
	g.log.Info("serving", zap.String("listen", ls.Public.Addr().String()),
		zap.Bool("tls", sec != nil), zap.Int("event_loops", cfg.LoopCount()), zap.Bool("http", run.plain != nil), zap.Bool("admin", run.admin != nil),
		zap.String("version", build.Version), zap.String("commit", build.Commit), zap.String("go", build.GoVersion))
	return run, nil
}

// publicServers builds the public listener's server: Go's (public),
// behind the HTTP/1.1 lane and the HTTP/2 lane when they are on (front).
func (g *Gateway) publicServers(cfg *config.Config, sec *certs.Manager) (front server, public *http.Server) {
	var handler http.Handler = g.chain
	if sec != nil {
		handler = hsts(cfg.TLS.HSTSMaxAge)(handler)
	}
	public = g.newServer(g.resetBudgetCheck(handler), "public")
	// Go's HTTP/2 (fast_http2: false) keeps a reset budget per connection
	// (resetbudget.go) and runs as many handlers per connection as the lane.
	public.ConnContext = withResetBudget
	public.HTTP2.MaxConcurrentStreams = h2MaxStreams
	if sec != nil {
		public.TLSConfig = sec.TLSConfig()
	}
	// The HTTP/1.1 lane serves HTTP/1.1, over TLS too, and then hands h2
	// connections to the HTTP/2 lane, or to public's HTTP/2 without it.
	// With only the HTTP/2 lane on, h1 does the TLS handshake and hands
	// every HTTP/1.1 connection to public. Without either, net/http
	// serves all.
	fast1, fast2 := cfg.Server.FastHTTP1Enabled(), cfg.Server.FastHTTP2Enabled() && sec != nil
	if !fast1 && !fast2 {
		return public, public
	}
	// The lanes build each request with the chain's context, so that the
	// chain fills its per-request state in place (proxy.Chain.RequestContext),
	// and give each connection the chain's memo of its last request
	// (proxy.Chain.ConnContext).
	lane := &h1.Server{Handler: handler, Fallback: public, TLSConfig: public.TLSConfig, HTTP1ToFallback: !fast1,
		RequestContext: g.chain.RequestContext, ConnContext: g.chain.ConnContext}
	if n := cfg.LoopCount(); n > 0 {
		lane.Loops = n
		g.metrics.loops.Store(lane)
	}
	if fast2 {
		lane.H2 = &h2.Server{Handler: handler, Base: public, RequestContext: g.chain.RequestContext, ConnContext: g.chain.ConnContext}
	}
	return lane, public
}

// serve runs each server on its listener until it stops; each one's exit
// goes to run.errc.
func (run *running) serve(ls Listeners) {
	go func() {
		if run.sec != nil && run.front == server(run.public) {
			// Not ServeTLS: it would serve a clone of the tls.Config, and
			// the certificate manager keeps rotating the session ticket
			// keys of this one. Under each tls.Conn, a batchconn.Conn: a
			// connection whose write failed closes at once, as in the
			// lanes, without a close_notify that could hold the drain.
			run.errc <- serveErr(run.public.Serve(tls.NewListener(batchconn.Listener{Listener: ls.Public}, run.public.TLSConfig)))
			return
		}
		run.errc <- serveErr(run.front.Serve(ls.Public))
	}()
	if run.plain != nil {
		go func() { run.errc <- serveErr(run.plain.Serve(ls.HTTP)) }()
	}
	if run.admin != nil {
		go func() { run.errc <- serveErr(run.admin.Serve(ls.Admin)) }()
	}
}

// setReady sets trendgate_ready once the gateway is ready, unless draining
// began.
func (g *Gateway) setReady(run *running) {
	run.readyMu.Lock()
	defer run.readyMu.Unlock()
	if ok, _ := g.ready(run.sec); ok && !g.draining.Load() {
		g.metrics.ready.Set(1)
	}
}

// wait returns when ctx is done (nil) or a server fails (its error), at
// once when certificate management did not start.
func (run *running) wait(ctx context.Context) error {
	if run.startErr != nil {
		return run.startErr
	}
	select {
	case <-ctx.Done():
		return nil
	case err := <-run.errc:
		return err
	}
}

// drain stops what start started, in order (see Serve), and returns every
// error met, runErr (why serving ended) included.
func (g *Gateway) drain(ctx context.Context, run *running, runErr error) error {
	defer g.sec.CompareAndSwap(run.sec, nil)
	run.readyMu.Lock()
	g.draining.Store(true)
	g.metrics.ready.Set(0)
	run.readyMu.Unlock()
	runErr = g.shutdownDelay(run, runErr)
	g.log.Info("shutting down: draining in-flight requests", zap.Duration("timeout", run.cfg.Server.ShutdownTimeout))

	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), run.cfg.Server.ShutdownTimeout)
	defer cancel()
	errs := g.drainPublic(sctx, run)
	if err := g.cache.Close(sctx); err != nil {
		errs = append(errs, err)
	}
	// The spans of the drained requests and stopped refreshes: a collector
	// that is down loses them, and holds the shutdown 5 s at most.
	fctx, fcancel := context.WithTimeout(sctx, tracingFlushTimeout)
	if err := g.FlushTraces(fctx); err != nil {
		g.log.Warn("tracing: spans not exported while draining", zap.Error(err))
	}
	fcancel()
	g.snap.save()
	g.kept.close()
	if err := run.sec.Close(); err != nil {
		errs = append(errs, err)
	}
	if run.admin != nil {
		if err := run.admin.Shutdown(sctx); err != nil {
			errs = append(errs, err)
		}
	}
	if runErr != nil {
		errs = append(errs, runErr)
	}
	return errors.Join(errs...)
}

// shutdownDelay keeps every listener serving for server.shutdown_delay
// once readiness is false, so that whatever routes traffic by /readyz (a
// load balancer, a Kubernetes Service's endpoints) stops sending new
// connections before the public listeners close. It ends early when a
// server fails (it returns that server's error) or when SkipShutdownDelay
// is called, and is skipped when serving ended on an error (runErr, which
// it returns).
func (g *Gateway) shutdownDelay(run *running, runErr error) error {
	d := run.cfg.Server.ShutdownDelay
	if d <= 0 || runErr != nil {
		return runErr
	}
	g.log.Info("shutting down: not ready, still serving for server.shutdown_delay", zap.Duration("delay", d))
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-g.skipDelay.done():
		g.log.Info("shutting down: the rest of server.shutdown_delay skipped")
	case err := <-run.errc:
		return err
	}
	return nil
}

// SkipShutdownDelay ends server.shutdown_delay at once if Serve is in it,
// or makes the next one end at once: the drain begins. trendgate serve
// calls it on a second SIGINT or SIGTERM. Safe to call more than once.
func (g *Gateway) SkipShutdownDelay() { g.skipDelay.skip() }

// skipSignal is closed once, by skip. The zero value is open.
type skipSignal struct {
	made   sync.Once // makes ch
	closed sync.Once // closes ch
	ch     chan struct{}
}

func (s *skipSignal) done() <-chan struct{} { return s.channel() }

func (s *skipSignal) skip() {
	ch := s.channel()
	s.closed.Do(func() { close(ch) })
}

func (s *skipSignal) channel() chan struct{} {
	s.made.Do(func() { s.ch = make(chan struct{}) })
	return s.ch
}

// drainPublic shuts the public and plain-HTTP servers down at the same
// time, waiting for their in-flight requests until sctx ends.
func (g *Gateway) drainPublic(sctx context.Context, run *running) []error {
	var errs []error
	var wg sync.WaitGroup
	var plainErr error
	if run.plain != nil {
		wg.Go(func() { plainErr = run.plain.Shutdown(sctx) })
	}
	if err := run.front.Shutdown(sctx); err != nil {
		errs = append(errs, fmt.Errorf("gateway: drain: %w", err))
	}
	wg.Wait()
	if plainErr != nil {
		errs = append(errs, fmt.Errorf("gateway: drain http: %w", plainErr))
	}
	return errs
}

// serveErr turns a server's exit into Serve's error: a normal shutdown is
// not an error.
func serveErr(err error) error {
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("gateway: serve: %w", err)
	}
	return nil
}

// newServer returns an http.Server with the configured timeouts and
// header limit.
func (g *Gateway) newServer(h http.Handler, name string) *http.Server {
	sc := g.Config().Server
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: sc.ReadHeaderTimeout,
		ReadTimeout:       sc.ReadTimeout,
		WriteTimeout:      sc.WriteTimeout,
		IdleTimeout:       sc.IdleTimeout,
		MaxHeaderBytes:    sc.MaxHeaderBytes,
		// Go's HTTP/2 (fast_http2: false) bounds a write to a client that
		// stops reading by write_timeout too; without it a stuck response
		// outlives write_timeout and holds the drain (golang/go#49741).
		HTTP2:    &http.HTTP2Config{WriteByteTimeout: sc.WriteTimeout},
		ErrorLog: zap.NewStdLog(g.log.Named("http").With(zap.String("server", name))),
		// "OPTIONS *" reaches the handler like any other request (405 with
		// a JSON body and X-Request-Id), not net/http's bare 200.
		DisableGeneralOptionsHandler: true,
	}
}
