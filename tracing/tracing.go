package tracing

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Options are New's optional inputs. The zero value is fine.
type Options struct {
	// Version is the service.version resource attribute; "" leaves it out.
	Version string
	// Getenv reads the environment (OTEL_SDK_DISABLED); nil means os.Getenv.
	// The exporters and the resource read the other OTEL_* variables
	// themselves.
	Getenv func(string) string
}

// Provider is the process's tracer provider: the batch span processor in
// front of the configured exporter, and the sampler. A nil *Provider
// means tracing is off; its methods are then no-ops and Tracer returns
// nil. Safe for concurrent use.
type Provider struct {
	tp      *sdktrace.TracerProvider
	sampler *Sampler
}

// New builds the Provider for cfg (which must pass Validate): nil, with
// no goroutine started, when cfg.Exporter is none or the environment sets
// OTEL_SDK_DISABLED=true. Nothing is dialled here: the exporter connects
// on its first export, and a collector that is down only loses spans.
func New(ctx context.Context, cfg Config, opts Options) (*Provider, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	getenv := opts.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	if !cfg.Enabled() {
		return nil, nil
	}
	if off, _ := strconv.ParseBool(strings.TrimSpace(getenv("OTEL_SDK_DISABLED"))); off {
		return nil, nil
	}
	exp, err := newExporter(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("tracing: exporter: %w", err)
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", "trendgate")}
	if opts.Version != "" {
		attrs = append(attrs, attribute.String("service.version", opts.Version))
	}
	// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES override ours.
	res, err := resource.New(ctx, resource.WithAttributes(attrs...), resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil && res == nil {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	s := NewSampler(cfg.Ratio)
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp), // OTEL_BSP_* tune it
		sdktrace.WithResource(res),
		sdktrace.WithSampler(s),
	)
	return &Provider{tp: tp, sampler: s}, nil
}

// newExporter builds cfg's OTLP exporter. Settings left empty in cfg fall
// back to the OTEL_EXPORTER_OTLP_* environment variables, which the
// exporters read.
func newExporter(ctx context.Context, cfg Config) (sdktrace.SpanExporter, error) {
	switch cfg.Exporter {
	case ExporterOTLPHTTP:
		var o []otlptracehttp.Option
		if cfg.Endpoint != "" {
			o = append(o, otlptracehttp.WithEndpointURL(strings.TrimRight(cfg.Endpoint, "/")+"/v1/traces"))
		}
		if len(cfg.Headers) > 0 {
			o = append(o, otlptracehttp.WithHeaders(cfg.Headers))
		}
		return otlptracehttp.New(ctx, o...)
	case ExporterOTLPGRPC:
		var o []otlptracegrpc.Option
		if cfg.Endpoint != "" {
			o = append(o, otlptracegrpc.WithEndpointURL(cfg.Endpoint))
		}
		if len(cfg.Headers) > 0 {
			o = append(o, otlptracegrpc.WithHeaders(cfg.Headers))
		}
		return otlptracegrpc.New(ctx, o...)
	}
	return nil, errors.New("no exporter")
}

// Tracer returns the tracer named name (the instrumenting package), or nil
// when p is nil.
func (p *Provider) Tracer(name string) trace.Tracer {
	if p == nil {
		return nil
	}
	return p.tp.Tracer(name)
}

// TracerProvider returns the SDK provider, or nil when p is nil.
func (p *Provider) TracerProvider() trace.TracerProvider {
	if p == nil {
		return nil
	}
	return p.tp
}

// SetRatio changes the sampling ratio of requests without a parent trace
// (on reload); r must be in 0..1.
func (p *Provider) SetRatio(r float64) {
	if p != nil {
		p.sampler.SetRatio(r)
	}
}

// ForceFlush exports every span ended so far, bounded by ctx.
func (p *Provider) ForceFlush(ctx context.Context) error {
	if p == nil {
		return nil
	}
	return p.tp.ForceFlush(ctx)
}

// Shutdown flushes the spans ended so far and stops the exporter, bounded
// by ctx. Spans ended later are dropped. A second call does nothing.
func (p *Provider) Shutdown(ctx context.Context) error {
	if p == nil {
		return nil
	}
	return p.tp.Shutdown(ctx)
}

// Sampler is parent-based: a span with a parent (a span of the gateway's
// own, or a client's traceparent when tracing.trust_incoming is on)
// follows the parent's sampled flag; a root span is sampled with the
// configured ratio, except that a root linked to a sampled span of the
// gateway's own (LinkTriggeredBy: a background refresh started by a
// sampled request) is sampled too, so the link leads somewhere. A link to
// a client's span (LinkClient) never decides: a client that is not
// trusted cannot force sampling. The ratio can be changed while in use.
// Build it with NewSampler.
type Sampler struct {
	cur atomic.Pointer[ratioSampler]
}

type ratioSampler struct {
	ratio float64
	s     sdktrace.Sampler
}

var _ sdktrace.Sampler = (*Sampler)(nil)

// NewSampler returns a Sampler with ratio r (clamped to 0..1).
func NewSampler(r float64) *Sampler {
	s := &Sampler{}
	s.SetRatio(r)
	return s
}

// SetRatio swaps the ratio for spans started from now on.
func (s *Sampler) SetRatio(r float64) {
	r = min(max(r, 0), 1)
	s.cur.Store(&ratioSampler{ratio: r, s: sdktrace.ParentBased(sdktrace.TraceIDRatioBased(r))})
}

// Ratio returns the ratio in force.
func (s *Sampler) Ratio() float64 { return s.cur.Load().ratio }

// ShouldSample implements sdktrace.Sampler.
func (s *Sampler) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	if !trace.SpanContextFromContext(p.ParentContext).IsValid() {
		for _, l := range p.Links {
			if l.SpanContext.IsSampled() && slices.Contains(l.Attributes, LinkTriggeredBy) {
				return sdktrace.SamplingResult{Decision: sdktrace.RecordAndSample}
			}
		}
	}
	return s.cur.Load().s.ShouldSample(p)
}

// Description implements sdktrace.Sampler.
func (s *Sampler) Description() string {
	return "trendgate{" + s.cur.Load().s.Description() + "}"
}
