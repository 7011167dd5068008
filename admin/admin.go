// Package admin serves the operator routes of the admin listener: liveness,
// readiness, Prometheus metrics, cache purge, per-key usage, the key API
// (create, revoke and rotate keys; change and reset accounts), the live
// dashboard page and the public API's OpenAPI document, behind the admin
// tokens and their scopes (all but the two probes, which carry no secret;
// see auth.go).
//
// It holds no state of its own: everything it reports or changes comes
// through the hooks of Options. It never sees an API key, other than the
// secret of one the key API has just made, which it passes on to the
// operator once, and never serves the public API.
package admin

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"go.uber.org/zap"

	"trendgate/api"
	"trendgate/cache"
	"trendgate/internal/clock"
	"trendgate/internal/httperr"
)

// Purger removes cache entries; cache.Cache implements it.
type Purger interface {
	Purge(ctx context.Context, sel cache.Selector) int
}

// Options are the hooks the admin routes work through.
type Options struct {
	// Token returns the admin token in force (it changes on reload); it
	// has every scope. Tokens returns the named admin tokens in force, by
	// id. With neither (nil, or empty) every route is open to same-host
	// requests.
	Token  func() string
	Tokens func() map[string]Token
	// Log receives a line for every refused admin request (see auth.go);
	// nil means zap.NewNop().
	Log *zap.Logger
	// Refusals counts refused admin requests; nil counts nothing.
	Refusals *Metrics
	// Failures slows repeated failed authentication from one address; nil
	// never slows anyone.
	Failures FailureLimiter
	// Ready reports readiness and why, for /readyz. If nil, the process is
	// always ready.
	Ready func() (bool, string)
	// ReadyDetails adds a "details" object to /readyz: facts an operator
	// should know that do not change readiness (what the quota counters
	// depend on). If nil, there is none.
	ReadyDetails func() map[string]string
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
	// Usage serves GET /keys, GET /keys/{id} and GET /accounts (keys.go).
	// If nil, there are no such routes.
	Usage UsageSource
	// Keys serves the key API's changes: POST /keys, DELETE /keys/{id},
	// POST /keys/{id}/rotate, PATCH /accounts/{id} and POST
	// /accounts/{id}/reset (keyapi.go). If nil, there are none.
	Keys KeyAdmin
	// Dashboard serves GET /summary, and enables the dashboard page at /
	// (dashboard.go). If nil, there is no page and no /summary route.
	Dashboard SummarySource
	// Routes returns the configured routes in force (they change on
	// reload): a purge by url= resolves their paths, and /openapi.yaml
	// describes them (api.OpenAPIFor). If nil, only the built-in endpoints
	// are known.
	Routes func() *api.Routes
	// Clock stamps generated_at in /keys and resolves the relative windows
	// of a purge by url= exactly as a request at that moment would; nil
	// means clock.Real{}.
	Clock clock.Clock
	// History serves GET /usage, GET /accounts/{id}/usage and GET
	// /keys/{id}/usage (usage.go). If nil, there are no such routes.
	History HistorySource
}

var errNotLocal = httperr.New(http.StatusForbidden, api.CodeAdminNotLocal,
	"without admin.token the admin routes answer only same-host requests: no Origin header, and a loopback Host")

var errInvalidPurge = httperr.New(http.StatusBadRequest, api.CodeInvalidPurge,
	"give one of url=<public request URL, e.g. /api4/public/topic/bitcoin/whatsup/v1>, topic=<topic>, key=<canonical cache key> or all=true")

var errPurgeNotRoute = httperr.New(http.StatusBadRequest, api.CodeInvalidPurge,
	"url= must be a public API request such as /api4/public/topic/bitcoin/time-series/v1?bucket=day")

var errNotFound = httperr.New(http.StatusNotFound, api.CodeNotFound, "no such admin route")

var errMethod = httperr.New(http.StatusMethodNotAllowed, api.CodeMethodNotAllowed, "this admin route does not take that method; see the Allow header")

// New returns the admin handler: /healthz (process alive), /readyz (ready
// to take traffic), /metrics (Prometheus), /purge (POST with url=,
// topic=, key= or all=true), /openapi.yaml (the public API's description)
// and, with their hooks, /keys, /summary and the dashboard page at /. With
// a token set, every route but the probes (/healthz, /readyz) and the
// dashboard's static files requires "Authorization: Bearer <token>" (the
// scheme in any case, as RFC 9110 has it). Without one, those routes
// refuse requests that carry an Origin header or name a Host that is not
// a loopback name or address, so a web page cannot reach them through the
// operator's browser (cross-site requests, DNS rebinding). A named token
// reaches only the routes its scopes cover (routeScopes). Every response
// carries X-Request-Id, and every error is the usual JSON body, an unknown
// route (404) or method (405, with Allow) included, whichever routes the
// mux has.
func New(o Options) http.Handler {
	if o.Ready == nil {
		o.Ready = func() (bool, string) { return true, "ok" }
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	s := &server{o: o}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	// Liveness and readiness carry no secret and answer any caller, token
	// or not, from any Host: a Kubernetes or load-balancer probe sends no
	// token, and names the pod's address, not loopback.
	mux.HandleFunc("GET /readyz", s.serveReady)
	if o.Metrics != nil {
		mux.Handle("GET /metrics", s.auth(o.Metrics))
	}
	if o.Purger != nil {
		mux.Handle("POST /purge", s.auth(http.HandlerFunc(s.servePurge)))
	}
	if o.Usage != nil {
		s.registerKeys(mux)
	}
	if o.Keys != nil {
		s.registerKeyAPI(mux)
	}
	if o.Dashboard != nil {
		s.registerDashboard(mux)
	}
	if o.History != nil {
		s.registerUsage(mux)
	}
	mux.Handle("GET /openapi.yaml", s.auth(http.HandlerFunc(s.serveOpenAPI)))
	if o.Pprof != nil {
		mux.Handle("/debug/pprof/", s.auth(pprofHandler(o.Pprof)))
	}
	h := jsonErrors(mux)
	if o.NewID == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Request-Id", o.NewID())
		h.ServeHTTP(w, r)
	})
}

// probeMethods are the methods tried to fill Allow on a 405.
var probeMethods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions}

// jsonErrors answers what mux has no route for with the JSON error body
// (ServeMux's own 404 and 405 are plain text), so every route registered
// on mux, now or later, shares the behaviour.
func jsonErrors(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, pattern := mux.Handler(r); pattern != "" {
			mux.ServeHTTP(w, r)
			return
		}
		var allow []string
		for _, m := range probeMethods {
			probe := r.WithContext(r.Context()) // a shallow copy
			probe.Method = m
			if _, pattern := mux.Handler(probe); pattern != "" {
				allow = append(allow, m)
			}
		}
		if len(allow) == 0 {
			httperr.Write(w, requestID(w), errNotFound)
			return
		}
		w.Header().Set("Allow", strings.Join(allow, ", "))
		httperr.Write(w, requestID(w), errMethod)
	})
}

type server struct{ o Options }

func (s *server) now() time.Time { return s.o.Clock.Now().UTC() }

// requestID is the id New gave the response.
func requestID(w http.ResponseWriter) string { return w.Header().Get("X-Request-Id") }

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
	body := map[string]any{"ready": ok, "status": why}
	if s.o.ReadyDetails != nil {
		body["details"] = s.o.ReadyDetails()
	}
	writeJSON(w, status, body)
}

// servePurge drops cache entries. url= is the one an operator has at
// hand: a public request URL (path and query, or a whole URL), taken
// verbatim from the rest of the query string and canonicalized exactly as
// that request would be. key= and url= that match no entry answer 404
// not_cached rather than a silent {"purged": 0}.
func (s *server) servePurge(w http.ResponseWriter, r *http.Request) {
	if target, ok := strings.CutPrefix(r.URL.RawQuery, "url="); ok {
		key, he := s.canonicalKey(target)
		if he != nil {
			httperr.Write(w, requestID(w), he)
			return
		}
		s.purgeKey(w, r, key)
		return
	}
	q := r.URL.Query()
	var sel cache.Selector
	switch {
	case q.Get("all") == "true":
		sel.All = true
	case q.Get("key") != "":
		s.purgeKey(w, r, q.Get("key"))
		return
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

// purgeKey purges the entry with the canonical key, or says there is none.
func (s *server) purgeKey(w http.ResponseWriter, r *http.Request, key string) {
	if n := s.o.Purger.Purge(r.Context(), cache.Selector{Key: key}); n > 0 {
		writeJSON(w, http.StatusOK, map[string]any{"purged": n, "key": key})
		return
	}
	msg := "nothing is cached under this key"
	if !strings.HasPrefix(key, "v2|") {
		msg += "; key= takes a canonical cache key (v2|...): give the public request URL as url= instead"
	} else {
		msg += " (" + key + ")"
	}
	httperr.Write(w, requestID(w), httperr.New(http.StatusNotFound, api.CodeNotCached, msg))
}

// canonicalKey returns the cache key of the public request target: a path
// with its query ("/api4/public/topic/%23ai/time-series/v1?bucket=day"),
// or a whole http(s) URL; a target percent-encoded as a whole is decoded
// once first. Errors are the ones the request itself would get.
func (s *server) canonicalKey(target string) (string, *httperr.Error) {
	if lower := strings.ToLower(target); strings.HasPrefix(lower, "%2f") || strings.HasPrefix(lower, "http%3a") || strings.HasPrefix(lower, "https%3a") {
		dec, err := url.QueryUnescape(target)
		if err != nil {
			return "", errPurgeNotRoute
		}
		target = dec
	}
	if i := strings.Index(target, "://"); i > 0 {
		rest := target[i+3:]
		slash := strings.IndexByte(rest, '/')
		if slash < 0 {
			return "", errPurgeNotRoute
		}
		target = rest[slash:]
	}
	u, err := url.ParseRequestURI(target)
	if err != nil || !strings.HasPrefix(target, "/") {
		return "", errPurgeNotRoute
	}
	req, err := s.routes().Parse(&http.Request{Method: http.MethodGet, URL: u, RequestURI: target}, s.o.Clock.Now())
	var he *httperr.Error
	switch {
	case err == nil:
		return req.Key(), nil
	case errors.As(err, &he) && he.Status == http.StatusBadRequest:
		return "", he
	}
	return "", errPurgeNotRoute
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// routes returns the configured routes in force; nil without the hook.
func (s *server) routes() *api.Routes {
	if s.o.Routes == nil {
		return nil
	}
	return s.o.Routes()
}

// serveOpenAPI serves the public API's OpenAPI 3.1 document with the
// configured routes in force (api.OpenAPIFor).
func (s *server) serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	doc, err := api.OpenAPIFor(s.routes())
	if err != nil {
		httperr.Write(w, requestID(w), api.ErrInternal)
		return
	}
	w.Header().Set("Content-Type", "application/yaml")
	w.Header().Set("Cache-Control", "no-cache")
	_, _ = w.Write(doc)
}
