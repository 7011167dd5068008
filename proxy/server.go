package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"

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
		return Listeners{}, fmt.Errorf("proxy: listen: %w", err)
	}
	if tlsOn(cfg) {
		if ls.HTTP, err = net.Listen("tcp", cfg.TLS.HTTPListen); err != nil {
			ls.close()
			return Listeners{}, fmt.Errorf("proxy: http listen: %w", err)
		}
	}
	if cfg.Admin.Listen != "" && cfg.Admin.Listen != "off" {
		if ls.Admin, err = net.Listen("tcp", cfg.Admin.Listen); err != nil {
			ls.close()
			return Listeners{}, fmt.Errorf("proxy: admin listen: %w", err)
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
// Then it drains: readiness turns false at once, the public and plain-HTTP
// servers stop accepting and wait for in-flight requests up to
// server.shutdown_timeout, background refreshes stop, the local cache is
// written to cache.persist_path (when set), certificate management stops,
// and the admin server closes last. Serve closes the listeners.
func (g *Gateway) Serve(ctx context.Context, ls Listeners) error {
	cfg := g.Config()
	sec, err := certs.New(cfg, g.clk, g.log, certs.Options{
		CheckInterval: g.certCheck,
		OnReload:      func(result string) { g.metrics.certReloads.WithLabelValues(result).Inc() },
		Metrics:       g.certs,
	})
	if err != nil {
		ls.close()
		return err
	}
	g.sec.Store(sec)
	defer g.sec.CompareAndSwap(sec, nil)
	var handler http.Handler = g
	if sec != nil {
		handler = hsts(cfg.TLS.HSTSMaxAge)(g)
	}
	public := g.newServer(g.resetBudgetCheck(handler), "public")
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
	var front server = public
	fast1, fast2 := cfg.Server.FastHTTP1Enabled(), cfg.Server.FastHTTP2Enabled() && sec != nil
	if fast1 || fast2 {
		lane := &h1.Server{Handler: handler, Fallback: public, TLSConfig: public.TLSConfig, HTTP1ToFallback: !fast1}
		if fast2 {
			lane.H2 = &h2.Server{Handler: handler, Base: public}
		}
		front = lane
	}
	var plain *http.Server
	if sec != nil {
		if ls.HTTP != nil {
			plain = g.newServer(sec.ChallengeHandler(httpsRequired()), "http")
		}
	} else if ls.HTTP != nil {
		_ = ls.HTTP.Close()
	}

	// readyMu orders readiness-gauge writes so a late "certificate ready"
	// cannot set the gauge back to 1 once draining began.
	var readyMu sync.Mutex
	setReady := func() {
		readyMu.Lock()
		defer readyMu.Unlock()
		if ok, _ := g.ready(sec); ok && !g.draining.Load() {
			g.metrics.ready.Set(1)
		}
	}

	errc := make(chan error, 3)
	go func() {
		if sec != nil && front == server(public) {
			// Not ServeTLS: it would serve a clone of the tls.Config, and
			// the certificate manager keeps rotating the session ticket
			// keys of this one. Under each tls.Conn, a batchconn.Conn: a
			// connection whose write failed closes at once, as in the
			// lanes, without a close_notify that could hold the drain.
			errc <- serveErr(public.Serve(tls.NewListener(batchconn.Listener{Listener: ls.Public}, public.TLSConfig)))
			return
		}
		errc <- serveErr(front.Serve(ls.Public))
	}()
	if plain != nil {
		go func() { errc <- serveErr(plain.Serve(ls.HTTP)) }()
	}
	var admin *http.Server
	if ls.Admin != nil {
		admin = g.newServer(g.adminHandler(sec), "admin")
		go func() { errc <- serveErr(admin.Serve(ls.Admin)) }()
	}
	startErr := sec.Start(context.WithoutCancel(ctx), setReady)
	setReady()
	build := buildinfo.Read()
	g.log.Info("serving", zap.String("listen", ls.Public.Addr().String()),
		zap.Bool("tls", sec != nil), zap.Bool("http", plain != nil), zap.Bool("admin", admin != nil),
		zap.String("version", build.Version), zap.String("commit", build.Commit), zap.String("go", build.GoVersion))

	runErr := startErr
	if runErr == nil {
		select {
		case <-ctx.Done():
		case runErr = <-errc:
		}
	}
	readyMu.Lock()
	g.draining.Store(true)
	g.metrics.ready.Set(0)
	readyMu.Unlock()
	g.log.Info("shutting down: draining in-flight requests", zap.Duration("timeout", cfg.Server.ShutdownTimeout))

	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.Server.ShutdownTimeout)
	defer cancel()
	var errs []error
	var wg sync.WaitGroup
	var plainErr error
	if plain != nil {
		wg.Go(func() { plainErr = plain.Shutdown(sctx) })
	}
	if err := front.Shutdown(sctx); err != nil {
		errs = append(errs, fmt.Errorf("proxy: drain: %w", err))
	}
	wg.Wait()
	if plainErr != nil {
		errs = append(errs, fmt.Errorf("proxy: drain http: %w", plainErr))
	}
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
	g.saveSnapshot()
	g.closeState()
	if err := sec.Close(); err != nil {
		errs = append(errs, err)
	}
	if admin != nil {
		if err := admin.Shutdown(sctx); err != nil {
			errs = append(errs, err)
		}
	}
	if runErr != nil {
		errs = append(errs, runErr)
	}
	return errors.Join(errs...)
}

// serveErr turns a server's exit into Serve's error: a normal shutdown is
// not an error.
func serveErr(err error) error {
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("proxy: serve: %w", err)
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
