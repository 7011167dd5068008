package upstream

import (
	"context"
	"slices"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"trendgate/api"
	"trendgate/internal/clock"
)

// TestTracing: with WithTracing, each attempt is a CLIENT span whose id the
// upstream receives in traceparent, the budget wait is a span, and the
// caller's span gets the upstream's status and rate-limit headers, and a
// retry as an event.
func TestTracing(t *testing.T) {
	for _, tc := range []struct {
		name        string
		closed      bool
		wantClients int
		wantEvents  []string
		wantAttrs   map[string]string
	}{
		{name: "answer", wantClients: 1, wantAttrs: map[string]string{
			"upstream.status_code": "200", "upstream.rate_limit.minute_remaining": "41", "upstream.rate_limit.day_remaining": "9000"}},
		{name: "refused, retried", closed: true, wantClients: 2, wantEvents: []string{"retry"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithSampler(sdktrace.AlwaysSample()))
			defer tp.Shutdown(context.Background())
			stub := newStub(t, respond(200, seriesBody, hdrMinuteRemaining, "41", hdrDayRemaining, "9000"))
			base := stub.srv.URL
			if tc.closed {
				base = "http://" + closedAddr(t)
			}
			cfg := testConfig(base)
			cfg.Retries = 1
			c, _ := newTestClient(t, cfg, clock.NewFake(t0), WithTracing(tp))
			ctx, parent := tp.Tracer("test").Start(context.Background(), "fetch")
			_, err := c.Do(ctx, Request{Endpoint: api.EndpointSeries, Path: "/api4/public/topic/ai/time-series/v1"})
			parent.End()
			if (err != nil) != tc.closed {
				t.Fatalf("Do: %v", err)
			}
			var clients, budgets []sdktrace.ReadOnlySpan
			var fetch sdktrace.ReadOnlySpan
			for _, s := range rec.Ended() {
				switch {
				case s.SpanKind() == trace.SpanKindClient:
					clients = append(clients, s)
				case s.Name() == "upstream budget":
					budgets = append(budgets, s)
				case s.Name() == "fetch":
					fetch = s
				}
			}
			if len(clients) != tc.wantClients || len(budgets) != tc.wantClients {
				t.Fatalf("%d CLIENT and %d budget spans; want %d of each", len(clients), len(budgets), tc.wantClients)
			}
			for _, s := range append(clients, budgets...) {
				if s.Parent().SpanID() != fetch.SpanContext().SpanID() {
					t.Errorf("%s is not a child of the caller's span", s.Name())
				}
			}
			var events []string
			for _, e := range fetch.Events() {
				events = append(events, e.Name)
			}
			if !slices.Equal(events, tc.wantEvents) {
				t.Errorf("events %v; want %v", events, tc.wantEvents)
			}
			attrs := map[string]string{}
			for _, kv := range fetch.Attributes() {
				attrs[string(kv.Key)] = kv.Value.String()
			}
			for k, want := range tc.wantAttrs {
				if attrs[k] != want {
					t.Errorf("%s = %q; want %q", k, attrs[k], want)
				}
			}
			if !tc.closed {
				want := "00-" + fetch.SpanContext().TraceID().String() + "-" + clients[0].SpanContext().SpanID().String() + "-01"
				if got := stub.lastRequest().Header.Get("Traceparent"); got != want {
					t.Errorf("upstream traceparent %q; want %q", got, want)
				}
			}
		})
	}
}
