package admin

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"trendgate/api"
	"trendgate/auth"
	"trendgate/internal/httperr"
)

// The scopes a named admin token can hold (admin.tokens[].scopes).
const (
	// ScopeRead reads: /metrics, /summary, per-key and per-account usage
	// (GET /keys, GET /keys/{id}, GET /accounts) and /openapi.yaml.
	ScopeRead = "read"
	// ScopeKeys is the key and account API: its changes, and the same
	// reads of keys and accounts as ScopeRead.
	ScopeKeys = "keys"
	// ScopePurge is POST /purge.
	ScopePurge = "purge"
	// ScopeAdmin is everything, /debug/pprof/ included: what admin.token
	// has, and what a named token without scopes has.
	ScopeAdmin = "admin"
)

// Scopes are the scopes a token can hold, in the order the docs list them.
var Scopes = []string{ScopeRead, ScopeKeys, ScopePurge, ScopeAdmin}

// Token is a named admin token: the lower-case hex SHA-256 of the token
// itself and the scopes it grants. Empty Scopes grants ScopeAdmin.
type Token struct {
	SHA256 string
	Scopes []string
}

// FailureLimiter slows repeated failed admin authentication from one
// address: Blocked says whether the address has used up its failures and
// how long until it may try again, Record takes one failure.
// limits.AuthFailures implements it.
type FailureLimiter interface {
	Blocked(ip string) (bool, time.Duration)
	Record(ip string)
}

// Metrics counts refused admin requests.
type Metrics struct {
	refused *prometheus.CounterVec
}

// NewMetrics registers trendgate_admin_refused_total{status} with reg: the
// admin requests answered 400, 401, 403, 409 or 429 (a failed token, a
// token without the route's scope, a slowed address, a key API request
// refused).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{refused: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "trendgate_admin_refused_total",
		Help: "Admin requests refused, by status: 401 failed token, 403 token without the route's scope, 429 address slowed after failed tokens, 400 and 409 requests refused by the route.",
	}, []string{"status"})}
	for _, s := range []string{"400", "401", "403", "409", "429"} {
		m.refused.WithLabelValues(s)
	}
	reg.MustRegister(m.refused)
	return m
}

// routeScopes are the scopes that may use each admin route, by its
// ServeMux pattern (any one of them will do; ScopeAdmin always does). A
// route not listed is the key and account API's when its path starts with
// /keys or /accounts, and needs ScopeAdmin otherwise.
var routeScopes = map[string][]string{
	"GET /metrics":       {ScopeRead},
	"GET /summary":       {ScopeRead},
	"GET /openapi.yaml":  {ScopeRead},
	"GET /keys":          {ScopeRead, ScopeKeys},
	"GET /keys/{id}":     {ScopeRead, ScopeKeys},
	"GET /accounts":      {ScopeRead, ScopeKeys},
	"GET /accounts/{id}": {ScopeRead, ScopeKeys},
	// The usage history (usage.go): billing reads, like /summary.
	"GET /usage":               {ScopeRead, ScopeKeys},
	"GET /accounts/{id}/usage": {ScopeRead, ScopeKeys},
	"GET /keys/{id}/usage":     {ScopeRead, ScopeKeys},
	"POST /purge":              {ScopePurge},
}

// scopesFor returns the scopes that may use the route of pattern.
func scopesFor(pattern string) []string {
	if s, ok := routeScopes[pattern]; ok {
		return s
	}
	_, path, _ := strings.Cut(pattern, " ")
	if path == "/keys" || strings.HasPrefix(path, "/keys/") || path == "/accounts" || strings.HasPrefix(path, "/accounts/") {
		return []string{ScopeKeys}
	}
	return nil
}

var errInvalidToken = httperr.New(http.StatusUnauthorized, api.CodeInvalidAdminToken, "the admin token is missing or wrong")

var errTooManyFailures = httperr.New(http.StatusTooManyRequests, api.CodeTooManyAuthFailures,
	"too many failed admin tokens from this address; try again after Retry-After seconds")

// auth guards next: with a token configured, the request must carry one
// (admin.token, or a named token) whose scopes admit the route (see
// routeScopes); without one, only same-host requests pass. An address
// whose failed tokens used up its budget (Options.Failures) is answered
// 429 before its token is even compared, so guessing is slowed. Every
// refusal (401, 403, 429, and the route's own 400 and 409) is logged,
// without the token, naming at most the token's id, and counted.
func (s *server) auth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token := ""
		if s.o.Token != nil {
			token = s.o.Token()
		}
		var named map[string]Token
		if s.o.Tokens != nil {
			named = s.o.Tokens()
		}
		if token == "" && len(named) == 0 {
			if _, cross := r.Header["Origin"]; cross || !loopbackHost(r.Host) {
				s.refuse(w, r, "", errNotLocal)
				return
			}
			s.serveAs(w, r, next, "local")
			return
		}
		ip := remoteIP(r)
		if s.o.Failures != nil {
			if blocked, retry := s.o.Failures.Blocked(ip); blocked {
				e := *errTooManyFailures
				e.RetryAfter = retry
				s.refuse(w, r, "", &e)
				return
			}
		}
		got, ok := auth.CutBearer(r.Header.Get("Authorization"))
		id, scopes := "", []string(nil)
		if ok {
			id, scopes = whose(got, token, named)
		}
		if id == "" {
			if s.o.Failures != nil {
				s.o.Failures.Record(ip)
			}
			w.Header().Set("WWW-Authenticate", "Bearer")
			s.refuse(w, r, "", errInvalidToken)
			return
		}
		if missing := missingScope(scopes, scopesFor(r.Pattern)); missing != "" {
			s.refuse(w, r, id, httperr.New(http.StatusForbidden, api.CodeMissingScope,
				fmt.Sprintf("this admin token (%s) lacks the %q scope this route needs", id, missing)))
			return
		}
		s.serveAs(w, r, next, id)
	})
}

// missingScope returns the scope a token holding has lacks for a route
// that any of need admits ("" when it has one, or ScopeAdmin); for a route
// no scope but ScopeAdmin admits, that is ScopeAdmin.
func missingScope(has, need []string) string {
	if slices.Contains(has, ScopeAdmin) {
		return ""
	}
	for _, n := range need {
		if slices.Contains(has, n) {
			return ""
		}
	}
	if len(need) == 0 {
		return ScopeAdmin
	}
	return need[0]
}

// serveAs serves r with next as the admin id, logging and counting the
// route's own refusals (400 and 409).
func (s *server) serveAs(w http.ResponseWriter, r *http.Request, next http.Handler, id string) {
	sw := &statusWriter{ResponseWriter: w}
	next.ServeHTTP(sw, r.WithContext(context.WithValue(r.Context(), actorKey{}, id)))
	if sw.status == http.StatusBadRequest || sw.status == http.StatusConflict {
		s.noteRefusal(r, id, sw.status, zap.InfoLevel)
	}
}

// refuse answers e and logs and counts it; id is the token's id when known.
func (s *server) refuse(w http.ResponseWriter, r *http.Request, id string, e *httperr.Error) {
	httperr.Write(w, requestID(w), e)
	s.noteRefusal(r, id, e.Status, zap.WarnLevel)
}

// noteRefusal logs and counts a refused admin request. The log names the
// token only by its id (admin.token, a named token's id, or none when the
// token was not recognised), never the token itself.
func (s *server) noteRefusal(r *http.Request, id string, status int, level zapcore.Level) {
	if s.o.Refusals != nil {
		s.o.Refusals.refused.WithLabelValues(strconv.Itoa(status)).Inc()
	}
	if ce := s.o.Log.Check(level, "admin request refused"); ce != nil {
		fields := []zap.Field{zap.Int("status", status), zap.String("method", r.Method),
			zap.String("path", r.URL.Path), zap.String("ip", remoteIP(r))}
		if id != "" {
			fields = append(fields, zap.String("token_id", id))
		}
		ce.Write(fields...)
	}
}

// statusWriter remembers the status a handler answered.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// remoteIP is the address of the admin request's peer (the admin listener
// trusts no forwarding header).
func remoteIP(r *http.Request) string {
	if h, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return h
	}
	return r.RemoteAddr
}

// actorKey carries, in a request's context, who the admin routes let in:
// "admin.token", a named token's id, or "local" (no token configured).
type actorKey struct{}

// whose returns the name of the admin token got is and its scopes:
// "admin.token" (every scope) for token, the id of a named token whose
// digest it has, or "" for none. Every comparison runs in constant time,
// and every one runs.
func whose(got, token string, named map[string]Token) (string, []string) {
	id, scopes := "", []string(nil)
	if token != "" && subtle.ConstantTimeCompare([]byte(got), []byte(token)) == 1 {
		id, scopes = "admin.token", []string{ScopeAdmin}
	}
	if len(named) == 0 {
		return id, scopes
	}
	sum := sha256.Sum256([]byte(got))
	digest := []byte(hex.EncodeToString(sum[:]))
	for name, t := range named {
		if subtle.ConstantTimeCompare(digest, []byte(t.SHA256)) == 1 {
			id, scopes = name, t.Scopes
			if len(scopes) == 0 {
				scopes = []string{ScopeAdmin}
			}
		}
	}
	return id, scopes
}
