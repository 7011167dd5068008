package proxy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"trendgate/activity"
	"trendgate/api"
	"trendgate/internal/httperr"
	"trendgate/limits"
)

// info is what one request learns on its way through the chain; the
// access log line and the metrics are written from it at the end.
// It is owned by the request's goroutine.
//
// It is also the context the chain passes on: the request's own context
// with the info as a value (see Value), which spares each request the
// allocation of a context.WithValue.
type info struct {
	context.Context // the request's context as it arrived

	id    string
	start time.Time
	// set is the configuration snapshot the request entered with; every
	// stage reads keys, plans, costs and TTLs from it, never c.settings again.
	set    *Settings
	req    api.Request // zero until route succeeds
	routed bool
	// usageRead marks a request for api.UsagePath (usage.go): never routed.
	usageRead bool
	keyID     string
	// account is keyID's account (keyID itself for a key configured
	// without one): its quotas and its fair share of the upstream budget.
	account string
	plan    *plan
	policy  limits.Policy
	usage   *activity.Key // the key's 24 h counters; nil until authenticated
	cost    int
	cache   string // Cache-Status summary for the log: hit, miss, stale, ...
	code    string // the error code the client received; "" for none
	// memo is the connection's memo of its last request (connmemo.go);
	// nil on a lane without one.
	memo *connMemo
	// key is req's cache key when route made it; "" to make in serveAPI.
	key string
	// clientID is the client's X-Request-ID, sanitized, when it was not
	// adopted as id.
	clientID string
	// upstreamNanos is how long this request's own upstream call took
	// (c.up.Do, refusals included). The fetch may outlive the request (it
	// is detached), hence an atomic; a waiter on another's fetch has 0.
	upstreamNanos atomic.Int64
	// upstreamReason is why this request's own fetch called the upstream
	// (reasonMiss, reasonWiden, ...); nil when it did not.
	upstreamReason atomic.Pointer[string]
	// span is the request's SERVER span, nil with tracing off; traced
	// says it records (its trace is sampled), and only then are child
	// spans made (see trace.go).
	span   trace.Span
	traced bool

	// charged is set once the quota units of cost were charged (the
	// response was delivered), and chargedDay is the UTC day the limiter
	// charged them in: the usage history counts them there.
	charged    bool
	chargedDay int

	// Allocated with the info, so a request costs one allocation for all
	// three: the status-recording writer and the X-Request-Id value.
	sw    statusWriter
	idHdr [1]string
}

type infoKey struct{}

// infoFrom returns the request's info; observe always installs one.
func infoFrom(ctx context.Context) *info {
	in, _ := ctx.Value(infoKey{}).(*info)
	if in == nil {
		in = &info{}
	}
	return in
}

// RequestContext is the context a transport lane gives each request it
// builds (the lanes' RequestContext field): ctx with a fresh info, which
// observe then fills in place instead of copying the request to attach
// one.
func (c *Chain) RequestContext(ctx context.Context) context.Context {
	in := &info{Context: ctx}
	in.memo, _ = ctx.Value(memoKey{}).(*connMemo)
	return in
}

// infoOf returns the info observe fills for r: the one RequestContext put
// in r's context, or a new one in a copy of r for a request that did not
// come that way (net/http's lanes, a wrapper that changed the context, a
// chain inside a chain).
func infoOf(r *http.Request) (*info, *http.Request) {
	if in, ok := r.Context().(*info); ok && in.set == nil {
		return in, r
	}
	in := &info{Context: r.Context()}
	return in, r.WithContext(in)
}

// Value answers infoKey with the info itself, any other key from the
// request's context.
func (in *info) Value(key any) any {
	if key == (infoKey{}) {
		return in
	}
	return in.Context.Value(key)
}

// statusWriter records the status and the body bytes written.
type statusWriter struct {
	http.ResponseWriter
	status int
	bytes  int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += n
	return n, err
}

// fieldsWriter is a ResponseWriter that takes part of a response's head
// serialized (the HTTP/1.1 and HTTP/2 lanes'; see h1's and h2's
// WriteHeaderFields): a hit written that way skips most of the header map.
type fieldsWriter interface {
	WriteHeaderFields(code int, fields []byte, contentLength int64)
}

// writeHeaderFields writes the head with fields serialized as
// fieldsWriter does, and reports false, writing nothing, when the writer
// below cannot.
func (w *statusWriter) writeHeaderFields(code int, fields []byte, contentLength int64) bool {
	fw, ok := w.ResponseWriter.(fieldsWriter)
	if !ok {
		return false
	}
	if w.status == 0 {
		w.status = code
	}
	fw.WriteHeaderFields(code, fields, contentLength)
	return true
}

// Unwrap lets http.ResponseController reach the real writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// requestIDs makes process-unique request ids: a random prefix and a counter.
type requestIDs struct {
	prefix string
	n      atomic.Uint64
}

func newRequestIDs() *requestIDs {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return &requestIDs{prefix: hex.EncodeToString(b[:])}
}

func (ids *requestIDs) next() string {
	var b [40]byte // 12 hex digits, '-', at most 13 base-36 digits
	id := append(append(b[:0], ids.prefix...), '-')
	return string(strconv.AppendUint(id, ids.n.Add(1), 36))
}

var ids = newRequestIDs()

// NewRequestID returns a fresh request id from the generator the chain
// uses, for the process's own answers (admin routes, plain HTTP).
func NewRequestID() string { return ids.next() }

// maxClientRequestID bounds an incoming X-Request-ID kept for the log.
const maxClientRequestID = 128

// requestID returns the id of request r and, when r carries an
// X-Request-ID that is not adopted, that value sanitized for the log.
//
// The rule: an X-Request-ID from a peer in server.trusted_proxies (the
// load balancer) becomes the request id itself, echoed in X-Request-ID and
// error bodies, when it is 1 to 128 bytes of letters, digits and
// "-_.:/+=@". Any other incoming X-Request-ID is only logged as
// client_request_id, with other bytes replaced by '_' and cut to 128
// bytes, and the request gets trendgate's own id.
func requestID(r *http.Request, trusted []netip.Prefix) (id, client string) {
	v := r.Header["X-Request-Id"]
	if len(v) == 0 || v[0] == "" {
		return ids.next(), ""
	}
	clean, changed := sanitizeRequestID(v[0])
	if !changed && len(trusted) > 0 && fromTrusted(r, trusted) {
		return clean, ""
	}
	return ids.next(), clean
}

// sanitizeRequestID keeps the first maxClientRequestID bytes of v with
// every byte outside the allowed set replaced by '_'; changed reports
// whether anything was replaced or cut.
func sanitizeRequestID(v string) (clean string, changed bool) {
	if len(v) > maxClientRequestID {
		v, changed = v[:maxClientRequestID], true
	}
	if !changed && !strings.ContainsFunc(v, func(c rune) bool { return c > 0x7f || !requestIDByte(byte(c)) }) {
		return v, false
	}
	b := []byte(v)
	for i, c := range b {
		if !requestIDByte(c) {
			b[i], changed = '_', true
		}
	}
	if !changed {
		return v, false
	}
	return string(b), true
}

func requestIDByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-_.:/+=@", c) >= 0
}

// fromTrusted reports whether r's peer is one of the trusted proxies.
func fromTrusted(r *http.Request, trusted []netip.Prefix) bool {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	peer, err := netip.ParseAddr(host)
	return err == nil && isTrusted(peer, trusted)
}

// observe is the outermost middleware: it assigns the request id, recovers
// panics into a JSON 500, and writes the access log line and metrics.
func (c *Chain) observe(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		in, r := infoOf(r)
		in.start, in.set = c.clk.Now(), c.settings.Load()
		in.id, in.clientID = requestID(r, in.set.trusted)
		in.idHdr[0] = in.id
		w.Header()["X-Request-Id"] = in.idHdr[:]
		in.sw.ResponseWriter = w
		sw := &in.sw
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				c.log.Error("panic serving request", zap.String("request_id", in.id), zap.Any("panic", p), zap.Stack("stack"))
				if sw.status == 0 {
					in.code = api.ErrInternal.Code
					httperr.Write(sw, in.id, api.ErrInternal)
				}
			}
			c.finish(r, sw, in)
		}()
		if c.tracer != nil {
			r = r.WithContext(c.startRequestSpan(r.Context(), r, in))
		}
		next.ServeHTTP(sw, r)
	})
}

// finish records metrics and the access log line for one request.
func (c *Chain) finish(r *http.Request, sw *statusWriter, in *info) {
	status := sw.status
	if status == 0 {
		status = http.StatusOK
	}
	elapsed := c.clk.Now().Sub(in.start)
	route := "unknown"
	switch {
	case in.routed:
		route = in.req.Label() // a built-in's name or a configured route's: bounded
	case in.usageRead:
		route = "usage"
	}
	planName := ""
	if in.plan != nil {
		planName = in.plan.name
	}
	var traceID, spanID string
	if in.span != nil {
		traceID, spanID = traceIDs(in)
		endRequestSpan(in, r.Method, route, planName, status)
	}
	c.metrics.observe(route, status, planName, elapsed, traceID)
	c.record(in, status, elapsed)

	if ce := c.access.Check(zapcore.InfoLevel, "request"); ce != nil {
		var buf [21]zap.Field // the most one line has (series with start/end, code, client id, trace)
		f := append(buf[:0],
			zap.String("request_id", in.id),
			zap.String("method", r.Method),
			zap.String("route", route),
			zap.String("topic", in.req.Topic),
		)
		f = appendCanonical(f, in.req)
		f = append(f,
			zap.String("key_id", in.keyID),
			zap.String("account", in.account),
			zap.String("plan", planName),
			zap.Int("status", status),
		)
		if status >= 300 && status != http.StatusNotModified {
			f = append(f, zap.String("code", in.code))
		}
		f = append(f,
			zap.String("cache", in.cache),
			zap.Duration("upstream", time.Duration(in.upstreamNanos.Load())),
			zap.Int("cost", in.cost),
			zap.Int("bytes", sw.bytes),
			zap.Duration("duration", elapsed),
			zap.String("remote", r.RemoteAddr),
		)
		if r := in.upstreamReason.Load(); r != nil {
			f = append(f, zap.String("upstream_reason", *r))
		}
		if in.clientID != "" {
			f = append(f, zap.String("client_request_id", in.clientID))
		}
		if traceID != "" {
			f = append(f, zap.String("trace_id", traceID), zap.String("span_id", spanID))
		}
		ce.Write(f...)
	}
}

// appendCanonical appends the normalized parameters of q that its
// endpoint has (route and topic are logged already); never a key.
func appendCanonical(f []zap.Field, q api.Request) []zap.Field {
	switch q.Endpoint {
	case api.EndpointSeries:
		f = append(f, zap.String("bucket", q.Bucket))
		if q.Interval != "" {
			f = append(f, zap.String("interval", q.Interval))
		} else {
			f = append(f, zap.Int64("start", q.Start), zap.Int64("end", q.End))
		}
	case api.EndpointTSV:
		f = append(f, zap.String("metric", q.Metric))
	case api.EndpointRoute:
		if q.Query != "" {
			f = append(f, zap.String("query", q.Query)) // canonical: only the route's own parameters
		}
	}
	return f
}
