package gateway

import (
	"context"
	"net/http"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"trendgate/admin"
	"trendgate/api"
	"trendgate/cache"
	"trendgate/certs"
	"trendgate/config"
	"trendgate/internal/breaker"
	"trendgate/proxy"
)

var _ admin.Purger = (*Gateway)(nil)

// AdminHandler serves the operator routes (see package admin) for this
// gateway. Serve uses the same routes, with /readyz also waiting for ACME
// certificates.
func (g *Gateway) AdminHandler() http.Handler { return g.adminHandler(nil) }

// adminHandler is AdminHandler whose readiness also covers sec (nil: TLS
// off, nothing to wait for).
func (g *Gateway) adminHandler(sec *certs.Manager) http.Handler {
	return admin.New(admin.Options{
		Token:        func() string { return g.Config().Admin.Token },
		Tokens:       func() map[string]admin.Token { return namedTokens(g.Config().Admin.Tokens) },
		Log:          g.log.Named("admin"),
		Refusals:     g.adminRefusals,
		Failures:     g.adminFailures,
		Ready:        func() (bool, string) { return g.ready(sec) },
		ReadyDetails: g.kept.readyDetails,
		Metrics:      promhttp.HandlerFor(g.reg, promhttp.HandlerOpts{EnableOpenMetrics: true}), // OpenMetrics on request: exemplars
		Purger:       g,
		NewID:        proxy.NewRequestID,
		Usage:        g.console,
		Keys:         g.keys,
		Dashboard:    g.console,
		Clock:        g.clk,
		History:      g.history,
		Pprof:        func() bool { return g.Config().Admin.Pprof },
		Routes:       func() *api.Routes { return g.chain.Settings().Routes() },
	})
}

// maxAdminIPs bounds the addresses whose failed admin tokens are tracked
// (the least recently failing is forgotten first).
const maxAdminIPs = 10_000

// namedTokens maps each named admin token's id to its digest and scopes.
func namedTokens(ts []config.AdminToken) map[string]admin.Token {
	m := make(map[string]admin.Token, len(ts))
	for _, t := range ts {
		m[t.ID] = admin.Token{SHA256: t.SHA256, Scopes: t.Scopes}
	}
	return m
}

// Purge removes what sel selects from this instance's cache tiers (the
// local one, and in cluster mode the shared one) and, in cluster mode,
// tells every other instance to drop it from its local tier (see
// cache.PurgeBus). It returns how many entries this instance removed. A
// purge the other instances could not be told of (Redis unreachable) is
// logged and counted in trendgate_cache_cluster_purges_total{event=
// "publish_error"}: their local copies then live out their freshness.
func (g *Gateway) Purge(ctx context.Context, sel cache.Selector) int {
	n := g.cache.Purge(ctx, sel)
	if g.purgeBus != nil {
		_ = g.purgeBus.Publish(ctx, sel) // logged and counted by the bus
	}
	return n
}

// Ready reports whether the gateway should receive traffic: not draining,
// and the upstream breaker not open unless the cache has served data. (A
// Gateway only exists with a validated configuration, so "config loaded"
// always holds.) The second result says why in a few words.
func (g *Gateway) Ready() (bool, string) { return g.ready(nil) }

// ready is Ready that, in ACME mode, also needs every domain's certificate.
func (g *Gateway) ready(sec *certs.Manager) (bool, string) {
	if g.draining.Load() {
		return false, "shutting down"
	}
	if g.up.State() == breaker.Open && !g.chain.ServedFromCache() {
		return false, "upstream unavailable and cache cold"
	}
	return sec.Ready()
}
