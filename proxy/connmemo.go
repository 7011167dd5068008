package proxy

import (
	"context"
	"hash/maphash"
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
// A memo belongs to one connection. Its two halves are records that are
// never changed once kept, each replaced whole, so the concurrent streams
// of an HTTP/2 connection may share it: a request reads one record of
// each, and a record is only ever all of one request's resolution. A memo
// only ever holds what that connection itself sent: comparing a request's
// Authorization value with it tells a client nothing about another's key.

// connMemo is what the last request on one connection resolved (see
// above). The zero value holds nothing.
type connMemo struct {
	lastRoute atomic.Pointer[routeMemo]
	lastKey   atomic.Pointer[keyMemo]
	// seenRoute hashes the raw target of the connection's last routed
	// request, seenKey the Authorization value of its last authenticated
	// one. A record is made only for one asked twice in a row (a GET and
	// a HEAD of one target count as the same), so a connection whose
	// requests each differ (a client spreading many keys or targets over
	// a pool of connections, or alternating two) allocates nothing for
	// its memo: with many keys, that is collector work on a large heap.
	seenRoute, seenKey atomic.Uint64
}

// memoSeed seeds the hashes of seenRoute and seenKey. They only decide
// whether to make a record; what a record matches is compared in full.
var memoSeed = maphash.MakeSeed()

// repeated reports whether s is what the connection's last request had
// (seen), and remembers s; h is s's hash.
func repeated(seen *atomic.Uint64, s string) (h uint64, again bool) {
	h = maphash.String(memoSeed, s)
	return h, seen.Swap(h) == h
}

// served notes that the last request had what the record of hash h
// holds, without hashing it again.
func served(seen *atomic.Uint64, h uint64) {
	if seen.Load() != h {
		seen.Store(h)
	}
}

// routeMemo is a request's route: a request with this method, raw target,
// path and query and no body parsed to req under snapshot gen. Only a
// parse that does not depend on the time is kept (a series window with a
// start and no end does).
type routeMemo struct {
	gen, hash                          uint64 // hash: of target, as in seenRoute
	method, target, path, rawPath, raw string
	req                                api.Request
	key                                string // req.Key()
}

// keyMemo is a request's key: this Authorization value authenticated
// under snapshot gen as p, accepted in span, with its plan, policy and
// 24 h counters from that snapshot.
type keyMemo struct {
	gen    uint64
	hash   uint64 // of authz, as in seenKey
	authz  string
	p      auth.Principal
	span   auth.Span
	plan   *plan
	policy limits.Policy
	usage  *activity.Key
}

// memoKey is the context key of a connection's *connMemo.
type memoKey struct{}

// ConnContext is the context a transport lane gives each connection (the
// HTTP/1.1 and HTTP/2 lanes' ConnContext): ctx with a memo that lets a
// request reuse what the connection's previous request resolved (see
// connMemo).
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
	rm := m.lastRoute.Load()
	if rm == nil || rm.gen != gen || r.RequestURI != rm.target || r.Method != rm.method || !sameTarget(rm, r) ||
		r.ContentLength != 0 || len(r.TransferEncoding) > 0 {
		return api.Request{}, "", false
	}
	served(&m.seenRoute, rm.hash)
	return rm.req, rm.key, true
}

// sameTarget reports whether r's URL is the one rm was parsed from.
func sameTarget(rm *routeMemo, r *http.Request) bool {
	u := r.URL
	return u != nil && u.Path == rm.path && u.RawPath == rm.rawPath && u.RawQuery == rm.raw
}

// keepRoute remembers that r parsed to req under snapshot gen, when the
// parse did not depend on the time and the connection's last request had
// the same target, and returns req's cache key. r parsed,
// so it has a URL and no body.
func (m *connMemo) keepRoute(r *http.Request, gen uint64, req api.Request) string {
	key := req.Key()
	if req.Start != 0 && req.End == 0 {
		return key
	}
	h, again := repeated(&m.seenRoute, r.RequestURI)
	if !again {
		return key
	}
	// One copy of the five strings, so that the memo does not hold the
	// request's head.
	u := r.URL
	var b strings.Builder
	b.Grow(len(r.Method) + len(r.RequestURI) + len(u.Path) + len(u.RawPath) + len(u.RawQuery))
	for _, s := range [...]string{r.Method, r.RequestURI, u.Path, u.RawPath, u.RawQuery} {
		b.WriteString(s)
	}
	all := b.String()
	cut := func(s string) string {
		part := all[:len(s)]
		all = all[len(s):]
		return part
	}
	m.lastRoute.Store(&routeMemo{
		gen: gen, hash: h, method: cut(r.Method), target: cut(r.RequestURI),
		path: cut(u.Path), rawPath: cut(u.RawPath), raw: cut(u.RawQuery),
		req: req, key: key,
	})
	return key
}

// authenticated returns what the connection's last key resolved to when r
// carries the same Authorization value, authenticated under snapshot gen,
// and the key is still accepted at now; else nil, as it does for a nil m
// (a lane without memos).
func (m *connMemo) authenticated(r *http.Request, gen uint64, now time.Time) *keyMemo {
	if m == nil {
		return nil
	}
	km := m.lastKey.Load()
	v := r.Header["Authorization"]
	if km == nil || km.gen != gen || len(v) != 1 || v[0] != km.authz || !km.span.Contains(now) {
		return nil
	}
	served(&m.seenKey, km.hash)
	return km
}

// keepKey remembers that r's key authenticated as p, accepted in span,
// under snapshot gen, with the plan, policy and counters in took from it,
// when the connection's last request carried the same Authorization value.
func (m *connMemo) keepKey(r *http.Request, gen uint64, p auth.Principal, span auth.Span, in *info) {
	v := r.Header["Authorization"]
	if len(v) != 1 || v[0] == "" {
		return
	}
	h, again := repeated(&m.seenKey, v[0])
	if !again {
		return
	}
	m.lastKey.Store(&keyMemo{
		gen: gen, hash: h, authz: strings.Clone(v[0]), span: span, p: p,
		plan: in.plan, policy: in.policy, usage: in.usage,
	})
}
