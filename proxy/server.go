package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"

	"go.uber.org/zap"
)

// Listeners are the sockets Serve uses. Admin may be nil (no admin
// listener).
type Listeners struct {
	Public net.Listener
	Admin  net.Listener
}

// Listen opens the listeners named in the configuration.
func (g *Gateway) Listen() (Listeners, error) {
	cfg := g.Config()
	var ls Listeners
	var err error
	if ls.Public, err = net.Listen("tcp", cfg.Server.Listen); err != nil {
		return ls, fmt.Errorf("proxy: listen: %w", err)
	}
	if cfg.Admin.Listen != "" && cfg.Admin.Listen != "off" {
		if ls.Admin, err = net.Listen("tcp", cfg.Admin.Listen); err != nil {
			_ = ls.Public.Close()
			return ls, fmt.Errorf("proxy: admin listen: %w", err)
		}
	}
	return ls, nil
}

// Run opens the configured listeners and serves until ctx is done.
func (g *Gateway) Run(ctx context.Context) error {
	ls, err := g.Listen()
	if err != nil {
		return err
	}
	return g.Serve(ctx, ls)
}

// Serve serves the public API and the admin routes on ls until ctx is done
// or a server fails. Then it drains: readiness turns false at once, the
// public server stops accepting and waits for in-flight requests up to
// server.shutdown_timeout, background refreshes stop, and the admin server
// closes last. Serve closes the listeners.
func (g *Gateway) Serve(ctx context.Context, ls Listeners) error {
	cfg := g.Config()
	public := g.newServer(g, cfg.Server.Listen)
	errc := make(chan error, 2)
	go func() { errc <- serveOn(public, ls.Public) }()
	var admin *http.Server
	if ls.Admin != nil {
		admin = g.newServer(g.AdminHandler(), "admin")
		go func() { errc <- serveOn(admin, ls.Admin) }()
	}
	g.metrics.ready.Set(1)
	g.log.Info("serving", zap.String("listen", ls.Public.Addr().String()), zap.Bool("admin", ls.Admin != nil))

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errc:
	}
	g.draining.Store(true)
	g.metrics.ready.Set(0)
	g.log.Info("shutting down: draining in-flight requests", zap.Duration("timeout", cfg.Server.ShutdownTimeout))

	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.Server.ShutdownTimeout)
	defer cancel()
	var errs []error
	if err := public.Shutdown(sctx); err != nil {
		errs = append(errs, fmt.Errorf("proxy: drain: %w", err))
	}
	if err := g.cache.Close(sctx); err != nil {
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

// serveOn runs srv on ln; a normal shutdown is not an error.
func serveOn(srv *http.Server, ln net.Listener) error {
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
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
		ErrorLog:          zap.NewStdLog(g.log.Named("http").With(zap.String("server", name))),
	}
}
