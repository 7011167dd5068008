package proxy

import (
	"context"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"trendgate/activity"
	"trendgate/api"
	"trendgate/auth"
	"trendgate/limits"
)

// A client at high volume sends the same request on a connection again
// and again: the same target with the same key. What route and
// authenticate resolve for it (the canonical request and its cache key;
// the key's principal, plan, policy and counters) depends only on those
// bytes, the configuration snapshot and, for a key with a validity
// window, the time. connMemo keeps what the last request on a connection
// resolved, so that the next one asking the same thing under the same
// snapshot skips the parse, the hash of the key and the map lookups.
// Nothing else is skipped: the limiter, the cache's freshness, the
// projection, metering and the access log run for every request.
//
// A memo belongs to one connection of a lane that serves its requests one
// at a time (the HTTP/1.1 lane's ConnContext), so it needs no lock. It
// only ever holds what that connection itself sent: comparing a request's
// Authorization value with it tells a client nothing about another's key.

// connMemo is what the last request on one connection resolved (see
// above). The zero value holds nothing.
type connMemo struct {
	// The request's route: a request with this method, raw target, path
	// and query and no body parsed to req under snapshot routeGen. Only a
	// parse that does not depend on the time is kept (a series window
	// with a start and no end does).
	routeGen                           uint64
	method, target, path, rawPath, raw string
	req                                api.Request
	key                                string // req.Key()

	// The request's key: this Authorization value authenticated under
	// snapshot keyGen as p, accepted in span, with its plan, policy and
	// 24 h counters from that snapshot.
	keyGen uint64
	authz  string
	p      auth.Principal
	span   auth.Span
	plan   *plan
	policy limits.Policy
	usage  *activity.Key
}

// memoKey is the context key of a connection's *connMemo.
type memoKey struct{}

// ConnContext is the context a transport lane gives each connection whose
// requests it serves one at a time (the HTTP/1.1 lane's ConnContext): ctx
// with a memo that lets a request reuse what the connection's previous
// request resolved (see connMemo).
func (c *Chain) ConnContext(ctx context.Context, _ net.Conn) context.Context {
	return context.WithValue(ctx, memoKey{}, &connMemo{})
}

// snapshotGens numbers the snapshots the chain serves (Swap): a memo is
// only good for the snapshot it was made under, and a number is never
// given twice, whereas an address may be once the snapshot is collected.
var snapshotGens atomic.Uint64

// route returns the canonical request and its cache key that r parsed to
// when the connection last asked the same, under snapshot gen.
func (m *connMemo) route(r *http.Request, gen uint64) (api.Request, string, bool) {
	if m.routeGen != gen || r.RequestURI != m.target || r.Method != m.method || !sameTarget(m, r) ||
		r.ContentLength != 0 || len(r.TransferEncoding) > 0 {
		return api.Request{}, "", false
	}
	return m.req, m.key, true
}

// sameTarget reports whether r's URL is the one m's route was parsed from.
func sameTarget(m *connMemo, r *http.Request) bool {
	u := r.URL
	return u != nil && u.Path == m.path && u.RawPath == m.rawPath && u.RawQuery == m.raw
}

// keepRoute remembers that r parsed to req under snapshot gen, when the
// parse did not depend on the time, and returns req's cache key. r parsed,
// so it has a URL and no body.
func (m *connMemo) keepRoute(r *http.Request, gen uint64, req api.Request) string {
	key := req.Key()
	if req.Start != 0 && req.End == 0 {
		return key
	}
	// Copies, so that the memo does not hold the request's head.
	m.routeGen, m.method, m.target = gen, strings.Clone(r.Method), strings.Clone(r.RequestURI)
	m.path, m.rawPath, m.raw = strings.Clone(r.URL.Path), strings.Clone(r.URL.RawPath), strings.Clone(r.URL.RawQuery)
	m.req, m.key = req, key
	return key
}

// authenticated reports whether r carries the Authorization value that
// last authenticated on the connection under snapshot gen, and the key is
// still accepted at now.
func (m *connMemo) authenticated(r *http.Request, gen uint64, now time.Time) bool {
	v := r.Header["Authorization"]
	return m.keyGen == gen && m.authz != "" && len(v) == 1 && v[0] == m.authz && m.span.Contains(now)
}

// keepKey remembers that r's key authenticated as p, accepted in span,
// under snapshot gen, with the plan, policy and counters in took from it.
func (m *connMemo) keepKey(r *http.Request, gen uint64, p auth.Principal, span auth.Span, in *info) {
	v := r.Header["Authorization"]
	if len(v) != 1 {
		return
	}
	m.keyGen, m.authz, m.span, m.p = gen, strings.Clone(v[0]), span, p
	m.plan, m.policy, m.usage = in.plan, in.policy, in.usage
}
