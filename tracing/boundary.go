package tracing

import (
	"context"
	"net/http"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// The trace context a client sends is its own claim: by default the
// gateway starts a trace of its own and links the client's span
// (Config.TrustIncoming makes it the parent instead), and what the
// gateway sends the upstream is only its own traceparent. These are the
// pieces of that boundary.

// The W3C Trace Context limits of a tracestate value: an incoming one
// past either is dropped whole (Incoming).
const (
	MaxTracestateBytes   = 512
	MaxTracestateMembers = 32
)

// Link attributes: why a span links to another. Only a link to the
// gateway's own span (LinkTriggeredBy) can make the Sampler sample a root.
var (
	// LinkClient marks the link to the span a client named in its
	// traceparent, when the gateway does not trust it as the parent.
	LinkClient = attribute.String("trendgate.link", "client")
	// LinkTriggeredBy marks the link from a background refresh to the
	// request that started it.
	LinkTriggeredBy = attribute.String("trendgate.link", "triggered_by")
)

// Incoming returns the trace context of a request's traceparent, with its
// tracestate unless that is over the W3C limits (MaxTracestateBytes over
// every tracestate line, MaxTracestateMembers); an invalid context when
// the traceparent is missing or malformed. Of the trace flags only
// "sampled" is kept.
func Incoming(h http.Header) trace.SpanContext {
	carrier := propagation.HeaderCarrier(h)
	if ts := h.Values("Tracestate"); len(ts) > 0 && !tracestateWithinLimits(ts) {
		carrier = propagation.HeaderCarrier{"Traceparent": h.Values("Traceparent")}
	}
	return trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), carrier))
}

// tracestateWithinLimits reports whether the tracestate lines, taken as
// one list, are within the W3C limits. Empty members (",,") are allowed
// by the format and not counted.
func tracestateWithinLimits(lines []string) bool {
	size, members := 0, 0
	for i, l := range lines {
		if i > 0 {
			size++ // the comma that joins two lines
		}
		size += len(l)
		if size > MaxTracestateBytes {
			return false
		}
		for m := range strings.SplitSeq(l, ",") {
			if strings.TrimSpace(m) != "" {
				members++
			}
		}
	}
	return members <= MaxTracestateMembers
}

// Outgoing is the propagator of the upstream's requests: it writes the
// traceparent of the gateway's span and nothing else, never tracestate
// nor baggage, whatever the client sent. Extract reads traceparent only.
var Outgoing propagation.TextMapPropagator = outgoing{}

type outgoing struct{}

// Inject implements propagation.TextMapPropagator.
func (outgoing) Inject(ctx context.Context, carrier propagation.TextMapCarrier) {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return
	}
	flags := "00"
	if sc.IsSampled() {
		flags = "01"
	}
	carrier.Set("traceparent", "00-"+sc.TraceID().String()+"-"+sc.SpanID().String()+"-"+flags)
}

// Extract implements propagation.TextMapPropagator.
func (outgoing) Extract(ctx context.Context, carrier propagation.TextMapCarrier) context.Context {
	tp := carrier.Get("traceparent")
	if tp == "" {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{"traceparent": tp})
}

// Fields implements propagation.TextMapPropagator.
func (outgoing) Fields() []string { return []string{"traceparent"} }
