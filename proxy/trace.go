package proxy

import (
	"context"
	"errors"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"trendgate/auth"
	"trendgate/cache"
	"trendgate/internal/httperr"
	"trendgate/limits"
	"trendgate/tracing"
)

// Tracing (tracing: in the config). With an exporter, every request is a
// SERVER span started in observe: the root of a trace of the gateway's
// own, linked to the client's traceparent if any, or with
// tracing.trust_incoming its child (parent-based sampling; a malformed
// header starts a new trace; a tracestate over the W3C limits is
// dropped), with children
// for what takes time: auth, the limiter's admit, the cache lookup, a
// range cut, and under the lookup the gateway's fetch span, which holds the
// upstream client's budget wait and its CLIENT span per attempt (whose id
// the upstream receives in traceparent, its only trace header: never
// tracestate nor baggage). A coalesced follower starts no
// fetch: its cache lookup links to the leader's fetch span. A background
// refresh is a trace of its own whose root links to the request that
// started it.
//
// Off (exporter none), c.tracer is nil and in.traced false: the hot path
// checks one of them and does no tracing work at all. A request whose
// trace is not sampled has its SERVER span only (not recording, so its
// traceparent still reaches the upstream with the sampled flag off), and
// no children.

// fetchSpanMemo is the cache.Entry memo key under which a fetch keeps its
// span's context, for the followers that received the same entry.
type fetchSpanMemo struct{}

// fetchSpanMemoBytes is what the memo charges the cache for it.
const fetchSpanMemoBytes = 96

// startRequestSpan starts r's SERVER span and returns the context
// carrying it. A client's traceparent is the span's parent only with
// tracing.trust_incoming; otherwise the span starts a trace of the
// gateway's own, sampled by the ratio alone, and links to the client's.
func (c *Chain) startRequestSpan(ctx context.Context, r *http.Request, in *info) context.Context {
	opts := serverSpan
	if _, ok := r.Header["Traceparent"]; ok { // (Header.Get would allocate the canonical name)
		if sc := tracing.Incoming(r.Header); sc.IsValid() {
			if in.set.cfg.Tracing.TrustIncoming {
				ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
			} else {
				opts = []trace.SpanStartOption{serverSpan[0], trace.WithNewRoot(),
					trace.WithLinks(trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{tracing.LinkClient}})}
			}
		}
	}
	ctx, in.span = c.tracer.Start(ctx, r.Method, opts...)
	if in.traced = in.span.IsRecording(); in.traced {
		// Only now: a request not sampled pays for no attributes.
		in.span.SetAttributes(
			attribute.String("http.request.method", r.Method),
			attribute.String("url.path", r.URL.EscapedPath()),
			attribute.String("trendgate.request_id", in.id),
		)
	}
	return ctx
}

// serverSpan are the start options of every request's span, one slice
// for all.
var serverSpan = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer)}

// endRequestSpan records what the request learned on its SERVER span and
// ends it. Never the key: its id only.
func endRequestSpan(in *info, method, route, planName string, status int) {
	sp := in.span
	if in.traced {
		sp.SetName(method + " " + route)
		attrs := make([]attribute.KeyValue, 0, 8)
		attrs = append(attrs,
			attribute.String("http.route", route),
			attribute.Int("http.response.status_code", status),
			attribute.String("trendgate.cache_status", in.cache),
		)
		if in.keyID != "" {
			attrs = append(attrs, attribute.String("trendgate.key_id", in.keyID), attribute.String("trendgate.plan", planName),
				attribute.Int("trendgate.cost", in.cost))
		}
		if in.req.Topic != "" {
			attrs = append(attrs, attribute.String("trendgate.topic", in.req.Topic))
		}
		if in.code != "" {
			attrs = append(attrs, attribute.String("trendgate.error_code", in.code))
		}
		sp.SetAttributes(attrs...)
		if status >= 500 {
			sp.SetStatus(codes.Error, in.code)
		}
	}
	sp.End()
}

// startSpan starts a child of ctx's span named name when the request is
// traced (in.traced); otherwise it returns ctx and a no-op span.
func (c *Chain) startSpan(ctx context.Context, in *info, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if !in.traced {
		return ctx, noSpan
	}
	return c.tracer.Start(ctx, name, trace.WithAttributes(attrs...))
}

// noSpan is the span of work that is not traced.
var noSpan = trace.SpanFromContext(context.Background())

// traceLookup records the cache's answer on the lookup span sp and links
// a coalesced follower to the fetch span of the leader that filled
// res.Entry (the follower makes no fetch span of its own).
func traceLookup(sp trace.Span, res cache.Result, err error) {
	sp.SetAttributes(attribute.String("trendgate.cache_outcome", res.Outcome.String()), attribute.Bool("trendgate.coalesced", res.Coalesced))
	if err != nil {
		sp.SetStatus(codes.Error, err.Error())
	}
	if !res.Coalesced {
		return
	}
	var leader trace.SpanContext
	fe := (*fetchError)(nil)
	switch {
	case errors.As(err, &fe), errors.As(res.Err, &fe): // the fetch failed (stale served, or nothing)
		leader = fe.span
	case res.Entry != nil:
		if v, ok := res.Entry.Memo(fetchSpanMemo{}); ok {
			leader = v.(trace.SpanContext)
		}
	}
	if leader.IsValid() {
		sp.AddLink(trace.Link{SpanContext: leader,
			Attributes: []attribute.KeyValue{attribute.String("trendgate.link", "leader_fetch")}})
	}
}

// startFetchSpan starts the span of one fetch for the cache: the gateway's
// fetch span, child of the request's cache lookup, or for a background
// refresh the root of a new trace linked to the request that started it.
// It returns ctx unchanged and a no-op span when the fetch is not traced.
func (c *Chain) startFetchSpan(ctx context.Context, background bool, reason string) (context.Context, trace.Span) {
	if c.tracer == nil {
		return ctx, noSpan
	}
	attrs := trace.WithAttributes(attribute.String("trendgate.upstream_reason", reason), attribute.Bool("trendgate.background", background))
	if background {
		from := trace.SpanContextFromContext(ctx)
		opts := []trace.SpanStartOption{trace.WithNewRoot(), attrs}
		if from.IsValid() {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: from,
				Attributes: []attribute.KeyValue{tracing.LinkTriggeredBy}}))
		}
		return c.tracer.Start(ctx, "background refresh", opts...)
	}
	if !trace.SpanFromContext(ctx).IsRecording() {
		return ctx, noSpan
	}
	return c.tracer.Start(ctx, "fetch", attrs)
}

// endFetchSpan ends a fetch span and returns err: coalesced followers
// receive what the fetch returned, so its span's context goes with it, on
// the fetched entry's memo or wrapped around the error (fetchError).
func endFetchSpan(sp trace.Span, e *cache.Entry, err error) error {
	if !sp.IsRecording() {
		return err
	}
	if err != nil {
		sp.SetStatus(codes.Error, err.Error())
		err = &fetchError{err: err, span: sp.SpanContext()}
	} else if e != nil {
		sp.SetAttributes(attribute.Int("upstream.body_bytes", len(e.Body)), attribute.Bool("trendgate.derived", e.Derived))
		e.StoreMemo(fetchSpanMemo{}, sp.SpanContext(), fetchSpanMemoBytes)
	}
	sp.End()
	return err
}

// fetchError is the error of a traced fetch, with the fetch's span; it
// unwraps to the error itself, so its mapping to a response is unchanged.
type fetchError struct {
	err  error
	span trace.SpanContext
}

func (e *fetchError) Error() string { return e.err.Error() }
func (e *fetchError) Unwrap() error { return e.err }

// traceIDs returns in's trace and span ids for the access log and the
// exemplars when its trace is sampled, else "".
func traceIDs(in *info) (traceID, spanID string) {
	if in.span == nil {
		return "", ""
	}
	sc := in.span.SpanContext()
	if !sc.IsSampled() {
		return "", ""
	}
	return sc.TraceID().String(), sc.SpanID().String()
}

// traceAuth records the outcome of authentication on its span: the key
// id, never the key.
func traceAuth(sp trace.Span, p auth.Principal, err error) {
	if err != nil {
		code := "invalid_api_key"
		if he := (*httperr.Error)(nil); errors.As(err, &he) {
			code = he.Code
		}
		sp.SetStatus(codes.Error, code)
		sp.SetAttributes(attribute.String("trendgate.error_code", code))
		return
	}
	sp.SetAttributes(attribute.String("trendgate.key_id", p.KeyID), attribute.String("trendgate.plan", p.Plan))
}

// traceAdmit records the limiter's decision on its span.
func traceAdmit(sp trace.Span, d limits.Decision, err error) {
	if err != nil {
		sp.SetStatus(codes.Error, err.Error())
		return
	}
	sp.SetAttributes(attribute.Bool("trendgate.allowed", d.Allowed))
	if !d.Allowed {
		sp.SetAttributes(attribute.String("trendgate.limit_reason", string(d.Reason)),
			attribute.Float64("trendgate.retry_after_seconds", d.RetryAfter.Seconds()))
	}
}
