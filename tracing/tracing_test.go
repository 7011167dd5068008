package tracing

import (
	"context"
	"errors"
	"strings"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want string // a substring of the error; "" for valid
	}{
		{"default", DefaultConfig(), ""},
		{"zero value", Config{}, ""},
		{"http", Config{Exporter: ExporterOTLPHTTP, Endpoint: "http://127.0.0.1:4318/", Ratio: 0.01}, ""},
		{"grpc", Config{Exporter: ExporterOTLPGRPC, Endpoint: "https://tempo:4317", Ratio: 1}, ""},
		{"env endpoint", Config{Exporter: ExporterOTLPHTTP, Ratio: 1}, ""},
		{"unknown exporter", Config{Exporter: "jaeger"}, `exporter: must be none, otlp-http or otlp-grpc, got "jaeger"`},
		{"host:port", Config{Exporter: ExporterOTLPHTTP, Endpoint: "tempo:4318"}, "endpoint: must be an http:// or https:// URL"},
		{"credentials", Config{Exporter: ExporterOTLPHTTP, Endpoint: "http://u:hunter2@tempo:4318"}, "must not carry a query, a fragment or credentials"},
		{"grpc path", Config{Exporter: ExporterOTLPGRPC, Endpoint: "http://tempo:4317/v1/traces"}, "otlp-grpc endpoint has no path"},
		{"header value", Config{Headers: map[string]string{"Authorization": "a\r\nb"}}, "headers.Authorization: the value must be one line"},
		{"ratio", Config{Ratio: 2}, "ratio: must be between 0 and 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("got %v; want valid", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("got %v; want %q", err, tc.want)
			case err != nil && strings.Contains(err.Error(), "hunter2"):
				t.Fatalf("the error echoes a credential: %v", err)
			}
		})
	}
}

// TestNewOff: no provider (and no exporter goroutine) unless an exporter
// is configured and the SDK is not disabled by the environment.
func TestNewOff(t *testing.T) {
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == "OTEL_SDK_DISABLED" {
				return v
			}
			return ""
		}
	}
	for _, tc := range []struct {
		name string
		cfg  Config
		env  string
	}{
		{"none", DefaultConfig(), ""},
		{"empty", Config{}, ""},
		{"disabled by env", Config{Exporter: ExporterOTLPHTTP, Endpoint: "http://127.0.0.1:1", Ratio: 1}, "true"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := New(context.Background(), tc.cfg, Options{Getenv: env(tc.env)})
			if err != nil || p != nil {
				t.Fatalf("got %v, %v; want nil, nil", p, err)
			}
			if p.Tracer("x") != nil || p.Shutdown(context.Background()) != nil {
				t.Fatal("a nil provider is not a no-op")
			}
		})
	}
}

func TestSampler(t *testing.T) {
	tid := trace.TraceID{0xff, 1}
	parent := func(sampled bool) context.Context {
		sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: trace.SpanID{1}, Remote: true})
		if sampled {
			sc = sc.WithTraceFlags(trace.FlagsSampled)
		}
		return trace.ContextWithRemoteSpanContext(context.Background(), sc)
	}
	sampledSpan := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled})
	linked := trace.Link{SpanContext: sampledSpan, Attributes: []attribute.KeyValue{LinkTriggeredBy}}
	client := trace.Link{SpanContext: sampledSpan, Attributes: []attribute.KeyValue{LinkClient}}
	s := NewSampler(0)
	for _, tc := range []struct {
		name  string
		ratio float64
		p     sdktrace.SamplingParameters
		want  sdktrace.SamplingDecision
	}{
		{"root, ratio 0", 0, sdktrace.SamplingParameters{ParentContext: context.Background(), TraceID: tid}, sdktrace.Drop},
		{"root, ratio 1", 1, sdktrace.SamplingParameters{ParentContext: context.Background(), TraceID: tid}, sdktrace.RecordAndSample},
		{"sampled parent, ratio 0", 0, sdktrace.SamplingParameters{ParentContext: parent(true), TraceID: tid}, sdktrace.RecordAndSample},
		{"unsampled parent, ratio 1", 1, sdktrace.SamplingParameters{ParentContext: parent(false), TraceID: tid}, sdktrace.Drop},
		{"root linked to a sampled span, ratio 0", 0, sdktrace.SamplingParameters{ParentContext: context.Background(), TraceID: tid, Links: []trace.Link{linked}}, sdktrace.RecordAndSample},
		// A client that is not trusted cannot force sampling.
		{"root linked to a client's sampled span, ratio 0", 0, sdktrace.SamplingParameters{ParentContext: context.Background(), TraceID: tid, Links: []trace.Link{client}}, sdktrace.Drop},
		{"root linked to a sampled span without a reason, ratio 0", 0, sdktrace.SamplingParameters{ParentContext: context.Background(), TraceID: tid, Links: []trace.Link{{SpanContext: sampledSpan}}}, sdktrace.Drop},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s.SetRatio(tc.ratio)
			if got := s.ShouldSample(tc.p).Decision; got != tc.want {
				t.Fatalf("got %v; want %v", got, tc.want)
			}
		})
	}
}

// TestLogErrors: the SDK's errors reach the zap logger, not stderr.
func TestLogErrors(t *testing.T) {
	core, logs := observer.New(zap.WarnLevel)
	LogErrors(zap.New(core))
	defer otel.SetErrorHandler(otel.ErrorHandlerFunc(func(error) {}))
	otel.Handle(errors.New("traces export: connection refused"))
	got := logs.All()
	if len(got) != 1 || got[0].LoggerName != "tracing" || got[0].ContextMap()["error"] != "traces export: connection refused" {
		t.Fatalf("logged %+v; want one tracing warning with the error", got)
	}
}
