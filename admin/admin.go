// Package admin serves the operator routes of the admin listener: liveness,
// readiness, Prometheus metrics and cache purge, behind the admin token.
//
// It holds no state of its own: everything it reports or changes comes
// through the hooks of Options. It never sees an API key and never serves
// the public API.
package admin

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strings"

	"trendgate/api"
	"trendgate/cache"
	"trendgate/internal/httperr"
)

// Purger removes cache entries; cache.Cache implements it.
type Purger interface {
	Purge(ctx context.Context, sel cache.Selector) int
}

// Options are the hooks the admin routes work through.
type Options struct {
	// Token returns the admin token in force (it changes on reload). A nil
	// Token or an empty token leaves every route open.
	Token func() string
	// Ready reports readiness and why, for /readyz. If nil, the process is
	// always ready.
	Ready func() (bool, string)
	// Metrics serves /metrics. If nil, there is no /metrics route.
	Metrics http.Handler
	// Purger serves /purge. If nil, there is no /purge route.
	Purger Purger
	// Pprof reports whether net/http/pprof is served under /debug/pprof/
	// (admin.pprof; read per request, so reload applies). If nil, there is
	// no such route.
	Pprof func() bool
	// NewID returns a fresh request id for each admin request. If nil,
	// responses carry no X-Request-Id and error bodies an empty request_id.
	NewID func() string
}

var errNotLocal = httperr.New(http.StatusForbidden, "admin_not_local",
	"without admin.token the admin routes answer only same-host requests: no Origin header, and a loopback Host")

var errInvalidToken = httperr.New(http.StatusUnauthorized, "invalid_admin_token", "the admin token is missing or wrong")

var errInvalidPurge = httperr.New(http.StatusBadRequest, "invalid_purge", "give one of key=<canonical key>, topic=<topic> or all=true")

// New returns the admin handler: /healthz (process alive), /readyz (ready
// to take traffic), /metrics (Prometheus) and /purge (POST with key=,
// topic= or all=true). With a token set, every route but /healthz requires
// "Authorization: Bearer <token>". Without one, every route but /healthz
// refuses requests that carry an Origin header or name a Host that is not
// a loopback name or address, so a web page cannot reach them through the
// operator's browser (cross-site requests, DNS rebinding). Every response
// carries X-Request-Id.
func New(o Options) http.Handler {
	if o.Ready == nil {
		o.Ready = func() (bool, string) { return true, "ok" }
	}
	s := &server{o: o}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.Handle("GET /readyz", s.auth(http.HandlerFunc(s.serveReady)))
	if o.Metrics != nil {
		mux.Handle("GET /metrics", s.auth(o.Metrics))
	}
	if o.Purger != nil {
		mux.Handle("POST /purge", s.auth(http.HandlerFunc(s.servePurge)))
	}
	if o.Pprof != nil {
		mux.Handle("/debug/pprof/", s.auth(pprofHandler(o.Pprof)))
	}
	if o.NewID == nil {
		return mux
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Request-Id", o.NewID())
		mux.ServeHTTP(w, r)
	})
}

type server struct{ o Options }

// requestID is the id New gave the response.
func requestID(w http.ResponseWriter) string { return w.Header().Get("X-Request-Id") }

func (s *server) auth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token := ""
		if s.o.Token != nil {
			token = s.o.Token()
		}
		if token == "" {
			if _, cross := r.Header["Origin"]; cross || !loopbackHost(r.Host) {
				httperr.Write(w, requestID(w), errNotLocal)
				return
			}
			next.ServeHTTP(w, r)
			return
		}
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 {
			w.Header().Set("WWW-Authenticate", "Bearer")
			httperr.Write(w, requestID(w), errInvalidToken)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// loopbackHost reports whether a Host header names this machine's loopback:
// "localhost" or a loopback address, with or without a port.
func loopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

func (s *server) serveReady(w http.ResponseWriter, r *http.Request) {
	ok, why := s.o.Ready()
	status := http.StatusOK
	if !ok {
		status = http.StatusServiceUnavailable
	}
	writeJSON(w, status, map[string]any{"ready": ok, "status": why})
}

func (s *server) servePurge(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var sel cache.Selector
	switch {
	case q.Get("all") == "true":
		sel.All = true
	case q.Get("key") != "":
		sel.Key = q.Get("key")
	case q.Get("topic") != "":
		topic, err := api.CanonicalTopic(q.Get("topic"))
		var he *httperr.Error
		if errors.As(err, &he) {
			httperr.Write(w, requestID(w), he)
			return
		}
		sel.Topic = topic
	default:
		httperr.Write(w, requestID(w), errInvalidPurge)
		return
	}
	n := s.o.Purger.Purge(r.Context(), sel)
	writeJSON(w, http.StatusOK, map[string]int{"purged": n})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
