package tracing

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

const (
	clientTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	clientSpan  = "00f067aa0ba902b7"
)

func TestIncoming(t *testing.T) {
	members := func(n int) string {
		m := make([]string, n)
		for i := range m {
			m[i] = fmt.Sprintf("v%d=x", i)
		}
		return strings.Join(m, ",")
	}
	// long is two members (a value holds at most 256 characters) of
	// 258 + n bytes.
	long := func(n int) string { return "a=" + strings.Repeat("x", 254) + ",b=" + strings.Repeat("y", n) }
	tp := "00-" + clientTrace + "-" + clientSpan + "-01"
	tests := []struct {
		name      string
		header    http.Header
		wantValid bool
		wantState string
	}{
		{"none", http.Header{}, false, ""},
		{"malformed", http.Header{"Traceparent": {"garbage"}}, false, ""},
		{"traceparent alone", http.Header{"Traceparent": {tp}}, true, ""},
		{"with a tracestate", http.Header{"Traceparent": {tp}, "Tracestate": {"vendor=abc"}}, true, "vendor=abc"},
		{"32 members", http.Header{"Traceparent": {tp}, "Tracestate": {members(32)}}, true, members(32)},
		{"33 members: dropped", http.Header{"Traceparent": {tp}, "Tracestate": {members(33)}}, true, ""},
		{"33 members over two lines: dropped", http.Header{"Traceparent": {tp}, "Tracestate": {members(20), members(13)}}, true, ""},
		{"512 bytes", http.Header{"Traceparent": {tp}, "Tracestate": {long(253)}}, true, long(253)},
		{"513 bytes: dropped", http.Header{"Traceparent": {tp}, "Tracestate": {long(254)}}, true, ""},
		{"16 KB: dropped", http.Header{"Traceparent": {tp}, "Tracestate": {"v=" + strings.Repeat("a", 16<<10)}}, true, ""},
		{"a second line past 512 bytes: dropped", http.Header{"Traceparent": {tp}, "Tracestate": {"a=1", "v=" + strings.Repeat("a", 508)}}, true, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sc := Incoming(tc.header)
			if sc.IsValid() != tc.wantValid {
				t.Fatalf("valid: got %v; want %v", sc.IsValid(), tc.wantValid)
			}
			if !tc.wantValid {
				return
			}
			if sc.TraceID().String() != clientTrace || sc.SpanID().String() != clientSpan || !sc.IsSampled() || !sc.IsRemote() {
				t.Errorf("got %v; want the client's sampled remote span", sc)
			}
			if got := sc.TraceState().String(); got != tc.wantState {
				t.Errorf("tracestate: got %q; want %q", got, tc.wantState)
			}
		})
	}
}

// TestOutgoing: the upstream gets a traceparent naming the span, never a
// tracestate or baggage, whatever the span context carries.
func TestOutgoing(t *testing.T) {
	ts, err := trace.ParseTraceState("vendor=abc")
	if err != nil {
		t.Fatal(err)
	}
	tid, _ := trace.TraceIDFromHex(clientTrace)
	sid, _ := trace.SpanIDFromHex(clientSpan)
	for _, tc := range []struct {
		name  string
		flags trace.TraceFlags
		want  string
	}{
		{"sampled", trace.FlagsSampled, "00-" + clientTrace + "-" + clientSpan + "-01"},
		{"not sampled", 0, "00-" + clientTrace + "-" + clientSpan + "-00"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: tc.flags, TraceState: ts})
			h := http.Header{}
			Outgoing.Inject(trace.ContextWithSpanContext(context.Background(), sc), propagation.HeaderCarrier(h))
			if got := h.Get("Traceparent"); got != tc.want {
				t.Errorf("traceparent: got %q; want %q", got, tc.want)
			}
			if len(h) != 1 {
				t.Errorf("got headers %v; want traceparent only", h)
			}
			back := trace.SpanContextFromContext(Outgoing.Extract(context.Background(), propagation.HeaderCarrier(h)))
			if back.TraceID() != tid || back.SpanID() != sid || back.IsSampled() != sc.IsSampled() {
				t.Errorf("Extract: got %v; want the injected span", back)
			}
		})
	}
	h := http.Header{}
	Outgoing.Inject(context.Background(), propagation.HeaderCarrier(h))
	if len(h) != 0 {
		t.Errorf("no span: got headers %v; want none", h)
	}
}

// FuzzIncoming: any header values give a valid context only with the
// client's ids, and never a tracestate over the limits.
func FuzzIncoming(f *testing.F) {
	f.Add("00-"+clientTrace+"-"+clientSpan+"-01", "vendor=abc")                  // well formed
	f.Add("00-"+clientTrace+"-"+clientSpan+"-01", strings.Repeat("a=b,", 40))    // too many members
	f.Add("00-"+clientTrace+"-"+clientSpan+"-00", "v="+strings.Repeat("x", 600)) // too long
	f.Add("garbage", "")                                                         // malformed traceparent
	f.Fuzz(func(t *testing.T, tp, ts string) {
		sc := Incoming(http.Header{"Traceparent": {tp}, "Tracestate": {ts}})
		if !sc.IsValid() {
			return
		}
		if !strings.Contains(tp, sc.TraceID().String()) {
			t.Errorf("trace id %s not from %q", sc.TraceID(), tp)
		}
		if s := sc.TraceState().String(); len(s) > MaxTracestateBytes || sc.TraceState().Len() > MaxTracestateMembers {
			t.Errorf("tracestate of %d bytes, %d members kept", len(s), sc.TraceState().Len())
		}
	})
}
