package proxy

import (
	"crypto/subtle"
	"encoding/json"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"trendgate/cache"
	"trendgate/certs"
	"trendgate/internal/httperr"
	"trendgate/upstream"
)

// AdminHandler serves the operator routes: /healthz (process alive),
// /readyz (ready to take traffic), /metrics (Prometheus) and /purge
// (POST with key=, topic= or all=true). With admin.token set, every route
// but /healthz requires "Authorization: Bearer <token>". Serve uses the
// same routes, with /readyz also waiting for ACME certificates.
func (g *Gateway) AdminHandler() http.Handler { return g.adminHandler(nil) }

// adminHandler is AdminHandler whose readiness also covers sec (nil: TLS
// off or files, nothing to wait for).
func (g *Gateway) adminHandler(sec *certs.Manager) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.Handle("GET /readyz", g.adminAuth(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ok, why := g.ready(sec)
		status := http.StatusOK
		if !ok {
			status = http.StatusServiceUnavailable
		}
		writeJSON(w, status, map[string]any{"ready": ok, "status": why})
	})))
	mux.Handle("GET /metrics", g.adminAuth(promhttp.HandlerFor(g.reg, promhttp.HandlerOpts{})))
	mux.Handle("POST /purge", g.adminAuth(http.HandlerFunc(g.servePurge)))
	return compose(mux, g.observeAdmin)
}

// observeAdmin gives admin requests a request id for their error bodies.
func (g *Gateway) observeAdmin(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := ids.next()
		w.Header().Set("X-Request-Id", id)
		next.ServeHTTP(w, r.WithContext(contextWithInfo(r.Context(), &info{id: id})))
	})
}

func (g *Gateway) adminAuth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token := g.Config().Admin.Token
		if token != "" {
			got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 {
				w.Header().Set("WWW-Authenticate", "Bearer")
				httperr.Write(w, infoFrom(r.Context()).id, httperr.New(http.StatusUnauthorized, "invalid_admin_token", "the admin token is missing or wrong"))
				return
			}
		}
		next.ServeHTTP(w, r)
	})
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
	if g.up.State() == upstream.BreakerOpen && !g.servedFromCache.Load() {
		return false, "upstream unavailable and cache cold"
	}
	return sec.Ready()
}

func (g *Gateway) servePurge(w http.ResponseWriter, r *http.Request) {
	id := infoFrom(r.Context()).id
	q := r.URL.Query()
	var sel cache.Selector
	switch {
	case q.Get("all") == "true":
		sel.All = true
	case q.Get("key") != "":
		sel.Key = q.Get("key")
	case q.Get("topic") != "":
		sel.Topic = strings.ToLower(q.Get("topic"))
	default:
		httperr.Write(w, id, httperr.New(http.StatusBadRequest, "invalid_purge", "give one of key=<canonical key>, topic=<topic> or all=true"))
		return
	}
	n := g.cache.Purge(r.Context(), sel)
	writeJSON(w, http.StatusOK, map[string]int{"purged": n})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
