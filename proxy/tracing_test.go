package proxy_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"trendgate/config"
	"trendgate/demo"
	"trendgate/gateway"
	"trendgate/gateway/gatewaytest"
	"trendgate/internal/clock"
	"trendgate/tracing"
	"trendgate/upstream"
)

// span is one span as an OTLP receiver got it, ids in hex.
type span struct {
	traceID, spanID, parentID string
	traceState                string
	name                      string
	kind                      tracepb.Span_SpanKind
	attrs                     map[string]string
	links                     []spanLink
	events                    []string
	statusErr                 bool
}

type spanLink struct{ traceID, spanID, traceState, reason string }

// otlpReceiver is an OTLP/HTTP trace receiver on a loopback httptest
// server: it decodes each export with the official OTLP protobuf types
// and keeps the spans.
type otlpReceiver struct {
	srv     *httptest.Server
	exports atomic.Int64
	mu      sync.Mutex // guards spans
	spans   []span
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	rcv := &otlpReceiver{}
	rcv.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
			t.Errorf("receiver: %s %s (%s); want POST /v1/traces protobuf", r.Method, r.URL.Path, r.Header.Get("Content-Type"))
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		var req coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &req); err != nil {
			t.Errorf("receiver: %v", err)
			http.Error(w, "bad protobuf", http.StatusBadRequest)
			return
		}
		rcv.add(&req)
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(rcv.srv.Close)
	return rcv
}

func (rcv *otlpReceiver) add(req *coltracepb.ExportTraceServiceRequest) {
	rcv.exports.Add(1)
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				sp := span{
					traceID:    hex.EncodeToString(s.TraceId),
					spanID:     hex.EncodeToString(s.SpanId),
					parentID:   hex.EncodeToString(s.ParentSpanId),
					traceState: s.TraceState,
					name:       s.Name,
					kind:       s.Kind,
					attrs:      attrMap(s.Attributes),
					statusErr:  s.Status.GetCode() == tracepb.Status_STATUS_CODE_ERROR,
				}
				for _, l := range s.Links {
					sp.links = append(sp.links, spanLink{hex.EncodeToString(l.TraceId), hex.EncodeToString(l.SpanId),
						l.TraceState, attrMap(l.Attributes)["trendgate.link"]})
				}
				for _, e := range s.Events {
					sp.events = append(sp.events, e.Name)
				}
				rcv.spans = append(rcv.spans, sp)
			}
		}
	}
}

func attrMap(kvs []*commonpb.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		switch v := kv.Value.GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			m[kv.Key] = v.StringValue
		case *commonpb.AnyValue_IntValue:
			m[kv.Key] = fmt.Sprint(v.IntValue)
		case *commonpb.AnyValue_BoolValue:
			m[kv.Key] = fmt.Sprint(v.BoolValue)
		case *commonpb.AnyValue_DoubleValue:
			m[kv.Key] = fmt.Sprint(v.DoubleValue)
		}
	}
	return m
}

// all returns a copy of the spans received.
func (rcv *otlpReceiver) all() []span {
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	return slices.Clone(rcv.spans)
}

// tracingHarness is the gateway exporting to an in-process OTLP/HTTP
// receiver, in front of a gate that can hold upstream answers.
type tracingHarness struct {
	*gatewaytest.Harness
	rcv  *otlpReceiver
	gate *upGate
}

// upGate forwards to the demo upstream; while held, each request waits
// until release (or its own end) and counts as arrived first.
type upGate struct {
	next    http.Handler
	held    atomic.Bool
	arrived atomic.Int64
	mu      sync.Mutex    // guards release
	release chan struct{} // closed to let held requests through
}

func (g *upGate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if g.held.Load() {
		g.mu.Lock()
		ch := g.release
		g.mu.Unlock()
		g.arrived.Add(1)
		select {
		case <-ch:
		case <-r.Context().Done():
			return
		}
	}
	g.next.ServeHTTP(w, r)
}

func (g *upGate) hold() {
	g.mu.Lock()
	g.release = make(chan struct{})
	g.mu.Unlock()
	g.arrived.Store(0)
	g.held.Store(true)
}

func (g *upGate) open() {
	g.held.Store(false)
	g.mu.Lock()
	close(g.release)
	g.mu.Unlock()
}

func newTracingHarness(t *testing.T, mutate func(*config.Config)) *tracingHarness {
	t.Helper()
	rcv := newOTLPReceiver(t)
	gate := &upGate{}
	gateSrv := httptest.NewServer(gate)
	t.Cleanup(gateSrv.Close)
	h := gatewaytest.New(t, func(c *config.Config) {
		statedReading(c)
		c.Upstream.BaseURL = gateSrv.URL
		c.Tracing = tracing.Config{Exporter: tracing.ExporterOTLPHTTP, Endpoint: rcv.srv.URL, Ratio: 1}
		if mutate != nil {
			mutate(c)
		}
	})
	gate.next = h.Up
	t.Cleanup(func() { gate.held.Store(false) })
	return &tracingHarness{Harness: h, rcv: rcv, gate: gate}
}

// request returns the SERVER span of the request with id reqID and the
// spans of its trace, waiting (flushing the gateway's spans) until the
// SERVER span arrived: it ends after the response is written.
func (h *tracingHarness) request(reqID string) (root span, trace []span) {
	h.T.Helper()
	var ok bool
	if !gatewaytest.WaitFor(func() bool {
		if err := h.Gateway.FlushTraces(context.Background()); err != nil {
			h.T.Logf("flush: %v", err)
		}
		root, ok = findSpan(h.rcv.all(), func(s span) bool {
			return s.kind == tracepb.Span_SPAN_KIND_SERVER && s.attrs["trendgate.request_id"] == reqID
		})
		return ok
	}) {
		h.T.Fatalf("no SERVER span for request %s; got %d spans", reqID, len(h.rcv.all()))
	}
	for _, s := range h.rcv.all() {
		if s.traceID == root.traceID {
			trace = append(trace, s)
		}
	}
	return root, trace
}

func findSpan(spans []span, pred func(span) bool) (span, bool) {
	for _, s := range spans {
		if pred(s) {
			return s, true
		}
	}
	return span{}, false
}

// tree renders the trace below root as "name(children...)" with children
// sorted by name, for comparing shapes.
func tree(spans []span, root span) string {
	var kids []string
	for _, s := range spans {
		if s.parentID == root.spanID && s.traceID == root.traceID {
			kids = append(kids, tree(spans, s))
		}
	}
	slices.Sort(kids)
	name := root.name
	if root.kind == tracepb.Span_SPAN_KIND_SERVER {
		name = "SERVER"
	}
	if len(kids) == 0 {
		return name
	}
	return name + "(" + strings.Join(kids, " ") + ")"
}

// child returns the only span named name in trace.
func child(t *testing.T, trace []span, name string) span {
	t.Helper()
	var found []span
	for _, s := range trace {
		if s.name == name {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d spans named %q; want 1", len(found), name)
	}
	return found[0]
}

// accessLine returns the access log line of the request with id reqID.
func (h *tracingHarness) accessLine(reqID string) map[string]any {
	h.T.Helper()
	var line map[string]any
	if !gatewaytest.WaitFor(func() bool {
		sc := bufio.NewScanner(strings.NewReader(h.Logs.String()))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil && m["msg"] == "request" && m["request_id"] == reqID {
				line = m
				return true
			}
		}
		return false
	}) {
		h.T.Fatalf("no access log line for %s", reqID)
	}
	return line
}

// TestTracingSpanTrees holds the span tree of each kind of request, as an
// OTLP receiver decodes it, and the joins: the upstream's traceparent, the
// access log's trace_id and span_id, and the duration exemplars.
func TestTracingSpanTrees(t *testing.T) {
	h := newTracingHarness(t, nil)
	topic := h.Up.Topics()[0]
	week := "/api4/public/topic/" + url.PathEscape(topic) + "/time-series/v1"

	// A cold miss: SERVER > cache lookup > fetch > upstream budget and
	// the CLIENT span, whose id the upstream received as parent.
	resp, _ := h.Get(week, h.Full)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Cache-Status") != csMiss {
		t.Fatalf("cold miss: %d %q", resp.StatusCode, resp.Header.Get("Cache-Status"))
	}
	missID := resp.Header.Get("X-Request-Id")
	root, trace := h.request(missID)
	if got, want := tree(trace, root), "SERVER(auth cache lookup(fetch(GET upstream upstream budget)) limits admit)"; got != want {
		t.Errorf("cold miss tree:\n got %s\nwant %s", got, want)
	}
	for k, want := range map[string]string{
		"http.route": "series", "http.response.status_code": "200", "trendgate.key_id": "team-full",
		"trendgate.plan": "full", "trendgate.cache_status": "miss", "trendgate.topic": topic,
	} {
		if got := root.attrs[k]; got != want {
			t.Errorf("SERVER %s = %q; want %q", k, got, want)
		}
	}
	for k, v := range root.attrs {
		if strings.Contains(v, "tg_") || strings.Contains(v, h.Full) {
			t.Errorf("SERVER attribute %s carries a key: %q", k, v)
		}
	}
	fetch := child(t, trace, "fetch")
	if fetch.attrs["upstream.status_code"] != "200" || fetch.attrs["upstream.rate_limit.minute_remaining"] == "" {
		t.Errorf("fetch span attributes %v; want the upstream's status and rate-limit headers", fetch.attrs)
	}
	client := child(t, trace, "GET upstream")
	if client.kind != tracepb.Span_SPAN_KIND_CLIENT {
		t.Errorf("upstream span kind %v; want CLIENT", client.kind)
	}
	reqs := h.Up.Requests()
	if len(reqs) != 1 {
		t.Fatalf("the upstream got %d requests; want 1", len(reqs))
	}
	if got, want := reqs[0].Header.Get("Traceparent"), "00-"+root.traceID+"-"+client.spanID+"-01"; got != want {
		t.Errorf("upstream traceparent %q; want %q (the gateway's CLIENT span under its fetch span)", got, want)
	}
	line := h.accessLine(missID)
	if line["trace_id"] != root.traceID || line["span_id"] != root.spanID {
		t.Errorf("access log trace_id %v span_id %v; want %s %s", line["trace_id"], line["span_id"], root.traceID, root.spanID)
	}

	// A hit: no fetch, no upstream call.
	resp, _ = h.Get(week, h.Full)
	if resp.Header.Get("Cache-Status") != csHit {
		t.Fatalf("hit: %q", resp.Header.Get("Cache-Status"))
	}
	root, trace = h.request(resp.Header.Get("X-Request-Id"))
	if got, want := tree(trace, root), "SERVER(auth cache lookup limits admit)"; got != want {
		t.Errorf("hit tree:\n got %s\nwant %s", got, want)
	}
	if root.attrs["trendgate.cache_status"] != "hit" {
		t.Errorf("hit cache_status %q", root.attrs["trendgate.cache_status"])
	}

	// A range cut from the cached week: no fetch span, a range cut span.
	// First a forwarded window of another topic shows how the upstream
	// reads an end on an hour boundary (a stated reading is used once an
	// answer agrees).
	now := h.Clock.Now().Unix()
	cur := now / 3600 * 3600
	if resp, _ := h.Get(fmt.Sprintf("/api4/public/topic/ethereum/time-series/v1?start=%d&end=%d", cur-10*3600, cur-3*3600), h.Full); resp.StatusCode != http.StatusOK {
		t.Fatalf("teaching the reading: %d", resp.StatusCode)
	}
	calls := len(h.Up.Requests())
	resp, _ = h.Get(fmt.Sprintf("%s?start=%d&end=%d", week, cur-3*24*3600, cur-3600), h.Full)
	if resp.Header.Get("Cache-Status") != csRange {
		t.Fatalf("range: %q", resp.Header.Get("Cache-Status"))
	}
	root, trace = h.request(resp.Header.Get("X-Request-Id"))
	if got, want := tree(trace, root), "SERVER(auth cache lookup(range cut) limits admit)"; got != want {
		t.Errorf("range cut tree:\n got %s\nwant %s", got, want)
	}
	if cut := child(t, trace, "range cut"); cut.attrs["trendgate.cut"] != "true" {
		t.Errorf("range cut span %v; want trendgate.cut true", cut.attrs)
	}
	if len(h.Up.Requests()) != calls {
		t.Errorf("the range cut called the upstream")
	}

	// A 401: the auth span says why; nothing after it.
	resp, _ = h.Get(week, "tg_not-a-key")
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("bad key: %d", resp.StatusCode)
	}
	root, trace = h.request(resp.Header.Get("X-Request-Id"))
	if got, want := tree(trace, root), "SERVER(auth)"; got != want {
		t.Errorf("401 tree:\n got %s\nwant %s", got, want)
	}
	if auth := child(t, trace, "auth"); !auth.statusErr || auth.attrs["trendgate.error_code"] != "invalid_api_key" {
		t.Errorf("auth span %v (error %v); want invalid_api_key", auth.attrs, auth.statusErr)
	}
	if root.attrs["http.response.status_code"] != "401" || root.attrs["trendgate.error_code"] != "invalid_api_key" {
		t.Errorf("401 SERVER attributes %v", root.attrs)
	}

	// Exemplars: the OpenMetrics exposition carries the sampled requests'
	// trace ids on the duration histogram.
	req, _ := http.NewRequest(http.MethodGet, h.Admin+"/metrics", nil)
	req.Header.Set("Accept", "application/openmetrics-text; version=1.0.0")
	mresp, err := h.Client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(mresp.Body)
	mresp.Body.Close()
	if !strings.HasPrefix(mresp.Header.Get("Content-Type"), "application/openmetrics-text") {
		t.Errorf("/metrics Content-Type %q; want OpenMetrics", mresp.Header.Get("Content-Type"))
	}
	if !bytes.Contains(metrics, []byte(`trace_id="`+root.traceID+`"`)) {
		t.Errorf("/metrics has no exemplar with trace_id %s", root.traceID)
	}
}

// TestTracingCoalescedFollower: a request that waited for another's fetch
// starts no fetch span; its cache lookup links to the leader's, whether
// the fetch brought an answer or failed.
func TestTracingCoalescedFollower(t *testing.T) {
	for _, tc := range []struct {
		name   string
		fault  demo.Fault
		status int
	}{
		{"answer", demo.FaultNone, http.StatusOK},
		{"failed fetch", demo.FaultServerError, http.StatusBadGateway},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newTracingHarness(t, func(c *config.Config) { c.Upstream.Breaker.Failures = 100 })
			h.Up.SetFault(tc.fault)
			for attempt, topic := range h.Up.Topics()[:5] {
				if coalesced(t, h, "/api4/public/topic/"+url.PathEscape(topic)+"/whatsup/v1", tc.status) {
					return
				}
				t.Logf("attempt %d: no follower joined in time, again", attempt)
			}
			t.Fatal("no coalesced follower in 5 attempts")
		})
	}
}

// coalesced sends three concurrent requests for path while the upstream
// holds the first fetch, and checks the traces of those that waited for
// it; false when none did (they came too late: try again).
func coalesced(t *testing.T, h *tracingHarness, path string, status int) bool {
	t.Helper()
	h.gate.hold()
	type answer struct {
		status    int
		cs, reqID string
	}
	answers := make(chan answer, 3)
	send := func() {
		resp, _ := h.Get(path, h.Full)
		answers <- answer{resp.StatusCode, resp.Header.Get("Cache-Status"), resp.Header.Get("X-Request-Id")}
	}
	go send()
	if !gatewaytest.WaitFor(func() bool { return h.gate.arrived.Load() == 1 }) {
		t.Fatal("the leader's fetch did not reach the upstream")
	}
	decisions := gatewaytest.Metric(t, h.Gateway.Registry(), "trendgate_limits_decisions_total")
	go send()
	go send()
	// Both followers admitted: they are on their way into the cache.
	gatewaytest.WaitFor(func() bool {
		return gatewaytest.Metric(t, h.Gateway.Registry(), "trendgate_limits_decisions_total") >= decisions+2
	})
	h.gate.open()
	var fetches []span
	var waiters []answer
	for range 3 {
		a := <-answers
		if a.status != status {
			t.Fatalf("status %d; want %d", a.status, status)
		}
		_, trace := h.request(a.reqID)
		if f, ok := findSpan(trace, func(s span) bool { return s.name == "fetch" }); ok {
			fetches = append(fetches, f)
		} else {
			waiters = append(waiters, a)
		}
	}
	if len(waiters) == 0 {
		return false
	}
	for _, w := range waiters {
		if status == http.StatusOK && w.cs != csCollapsed {
			t.Errorf("a request without a fetch span has Cache-Status %q; want %q", w.cs, csCollapsed)
		}
		root, trace := h.request(w.reqID)
		if got, want := tree(trace, root), "SERVER(auth cache lookup limits admit)"; got != want {
			t.Errorf("follower tree:\n got %s\nwant %s", got, want)
		}
		lookup := child(t, trace, "cache lookup")
		if len(lookup.links) != 1 || !slices.ContainsFunc(fetches, func(f span) bool { return lookup.links[0].traceID == f.traceID && lookup.links[0].spanID == f.spanID }) {
			t.Errorf("follower's cache lookup links %v; want one leader's fetch of %v", lookup.links, fetches)
		}
		for _, f := range fetches {
			if f.traceID == root.traceID {
				t.Errorf("the follower joined the leader's trace")
			}
		}
	}
	return true
}

// TestTracingBudgetRefusal: a fetch the outbound budget refuses shows the
// refused budget span and no CLIENT span.
func TestTracingBudgetRefusal(t *testing.T) {
	h := newTracingHarness(t, func(c *config.Config) {
		c.Upstream.Budget = upstream.BudgetConfig{PerMinute: 1, PerDay: 100, RefreshReserve: 0.25}
	})
	topics := h.Up.Topics()
	if resp, _ := h.Get("/api4/public/topic/"+url.PathEscape(topics[0])+"/whatsup/v1", h.Full); resp.StatusCode != http.StatusOK {
		t.Fatalf("first call: %d", resp.StatusCode)
	}
	resp, body := h.Get("/api4/public/topic/"+url.PathEscape(topics[1])+"/whatsup/v1", h.Full)
	if resp.StatusCode != http.StatusServiceUnavailable && resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("second call: %d %s; want a budget refusal", resp.StatusCode, body)
	}
	root, trace := h.request(resp.Header.Get("X-Request-Id"))
	if got, want := tree(trace, root), "SERVER(auth cache lookup(fetch(upstream budget)) limits admit)"; got != want {
		t.Errorf("refusal tree:\n got %s\nwant %s", got, want)
	}
	b := child(t, trace, "upstream budget")
	if !b.statusErr || b.attrs["upstream.budget"] == "granted" || b.attrs["upstream.retry_after_seconds"] == "" {
		t.Errorf("budget span %v (error %v); want a refusal with its wait", b.attrs, b.statusErr)
	}
	if !child(t, trace, "fetch").statusErr {
		t.Error("the refused fetch span is not an error")
	}
	if code := root.attrs["trendgate.error_code"]; !strings.HasPrefix(code, "upstream_") {
		t.Errorf("SERVER error_code %q", code)
	}
}

// TestTracingPropagation: with tracing.trust_incoming, a client's sampled
// traceparent is the parent of the SERVER span and reaches the upstream's
// traceparent (its tracestate does not, and one over the W3C limits is
// dropped); an unsampled one is honoured (no spans, flag 00 upstream); a
// malformed one is ignored; a reload to ratio 0 stops unparented traces.
func TestTracingPropagation(t *testing.T) {
	h := newTracingHarness(t, func(c *config.Config) { c.Tracing.TrustIncoming = true })
	topics := h.Up.Topics()
	path := func(i int) string { return "/api4/public/topic/" + url.PathEscape(topics[i]) + "/whatsup/v1" }
	const clientTrace, clientSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"

	resp, _ := h.Get(path(0), h.Full, "Traceparent", "00-"+clientTrace+"-"+clientSpan+"-01", "Tracestate", "vendor=abc")
	root, trace := h.request(resp.Header.Get("X-Request-Id"))
	if root.traceID != clientTrace || root.parentID != clientSpan {
		t.Errorf("SERVER span %s parent %s; want trace %s parent %s", root.traceID, root.parentID, clientTrace, clientSpan)
	}
	client := child(t, trace, "GET upstream")
	if got, want := h.Up.Requests()[0].Header.Get("Traceparent"), "00-"+clientTrace+"-"+client.spanID+"-01"; got != want {
		t.Errorf("upstream traceparent %q; want %q", got, want)
	}
	if got := h.Up.Requests()[0].Header.Values("Tracestate"); got != nil {
		t.Errorf("upstream tracestate %q; want none", got)
	}
	if root.traceState != "vendor=abc" {
		t.Errorf("SERVER span tracestate %q; want the client's vendor=abc", root.traceState)
	}

	// A tracestate over the W3C limits is dropped, not copied into spans.
	const otherTrace = "5bf92f3577b34da6a3ce929d0e0e4736" // this request's spans alone
	resp, _ = h.Get(path(7), h.Full, "Traceparent", "00-"+otherTrace+"-"+clientSpan+"-01", "Tracestate", "v="+strings.Repeat("a", 16<<10))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("with a 16 KB tracestate: status %d; want 200", resp.StatusCode)
	}
	root, trace = h.request(resp.Header.Get("X-Request-Id"))
	for _, s := range trace {
		if s.traceState != "" {
			t.Errorf("span %s carries a tracestate of %d bytes; want it dropped", s.name, len(s.traceState))
		}
	}
	if root.traceID != otherTrace {
		t.Errorf("with a 16 KB tracestate, SERVER span trace %s; want the client's %s", root.traceID, otherTrace)
	}

	// Unsampled: honoured, and said so to the upstream; nothing exported.
	before := len(h.rcv.all())
	resp, _ = h.Get(path(1), h.Full, "Traceparent", "00-"+clientTrace+"-"+clientSpan+"-00")
	unsampledID := resp.Header.Get("X-Request-Id")
	reqs := h.Up.Requests()
	tp := reqs[len(reqs)-1].Header.Get("Traceparent")
	if !strings.HasPrefix(tp, "00-"+clientTrace+"-") || !strings.HasSuffix(tp, "-00") {
		t.Errorf("upstream traceparent %q; want trace %s not sampled", tp, clientTrace)
	}
	if line := h.accessLine(unsampledID); line["trace_id"] != nil {
		t.Errorf("unsampled request logged trace_id %v", line["trace_id"])
	}

	// Malformed: ignored, a trace of the gateway's own, never an error.
	for i, bad := range []string{"garbage", "00-" + clientTrace + "-0000000000000000-01", "ff-" + clientTrace + "-" + clientSpan + "-01", "00-" + strings.ToUpper(clientTrace) + "-" + clientSpan + "-01"} {
		resp, _ = h.Get(path(2+i), h.Full, "Traceparent", bad)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("traceparent %q: status %d", bad, resp.StatusCode)
		}
		root, _ := h.request(resp.Header.Get("X-Request-Id"))
		if root.traceID == clientTrace || root.parentID != "" {
			t.Errorf("traceparent %q was trusted: trace %s parent %q", bad, root.traceID, root.parentID)
		}
	}
	h.Gateway.FlushTraces(context.Background())
	for _, s := range h.rcv.all()[before:] {
		if s.attrs["trendgate.request_id"] == unsampledID {
			t.Errorf("the unsampled request was exported")
		}
	}

	// Reload to ratio 0: requests without a traceparent are not sampled.
	cfg := *h.Config
	cfg.Tracing.Ratio = 0
	if err := h.Gateway.Reload(&cfg); err != nil {
		t.Fatal(err)
	}
	resp, _ = h.Get(path(0), h.Full)
	if line := h.accessLine(resp.Header.Get("X-Request-Id")); line["trace_id"] != nil {
		t.Errorf("after reload to ratio 0, a request was sampled: %v", line["trace_id"])
	}
	// A sampled parent is still followed.
	resp, _ = h.Get(path(0), h.Full, "Traceparent", "00-"+clientTrace+"-"+clientSpan+"-01")
	if line := h.accessLine(resp.Header.Get("X-Request-Id")); line["trace_id"] != clientTrace {
		t.Errorf("after reload, the sampled parent's request logged trace_id %v", line["trace_id"])
	}
}

// TestTracingBoundary: by default (tracing.trust_incoming off) a client's
// traceparent is a link: the SERVER span starts a trace of the gateway's
// own, the upstream receives that trace's traceparent and never the
// client's trace id, tracestate or baggage, and a client's sampled flag
// does not force sampling at ratio 0.
func TestTracingBoundary(t *testing.T) {
	h := newTracingHarness(t, nil)
	topics := h.Up.Topics()
	path := func(i int) string { return "/api4/public/topic/" + url.PathEscape(topics[i]) + "/whatsup/v1" }
	const clientTrace, clientSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	clientHeaders := []string{"Traceparent", "00-" + clientTrace + "-" + clientSpan + "-01",
		"Tracestate", "vendor=abc", "Baggage", "user=alice"}

	resp, _ := h.Get(path(0), h.Full, clientHeaders...)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d; want 200", resp.StatusCode)
	}
	root, trace := h.request(resp.Header.Get("X-Request-Id"))
	if root.traceID == clientTrace || root.parentID != "" {
		t.Errorf("SERVER span trace %s parent %q; want a trace of the gateway's own, no parent", root.traceID, root.parentID)
	}
	if !slices.ContainsFunc(root.links, func(l spanLink) bool {
		return l.traceID == clientTrace && l.spanID == clientSpan && l.reason == "client"
	}) {
		t.Errorf("SERVER span links %+v; want one to the client's span %s/%s", root.links, clientTrace, clientSpan)
	}
	up := h.Up.Requests()[0].Header
	if got, want := up.Get("Traceparent"), "00-"+root.traceID+"-"+child(t, trace, "GET upstream").spanID+"-01"; got != want {
		t.Errorf("upstream traceparent %q; want the gateway's %q", got, want)
	}
	for _, name := range []string{"Tracestate", "Baggage"} {
		if got := up.Values(name); got != nil {
			t.Errorf("upstream %s %q; want none", name, got)
		}
	}
	for _, s := range trace {
		if s.traceState != "" {
			t.Errorf("span %s carries tracestate %q; want none", s.name, s.traceState)
		}
	}

	// At ratio 0 the client's sampled flag samples nothing, and the
	// upstream is told "not sampled" under the gateway's own trace.
	cfg := *h.Config
	cfg.Tracing.Ratio = 0
	if err := h.Gateway.Reload(&cfg); err != nil {
		t.Fatal(err)
	}
	before := len(h.rcv.all())
	resp, _ = h.Get(path(1), h.Full, clientHeaders...)
	if line := h.accessLine(resp.Header.Get("X-Request-Id")); line["trace_id"] != nil {
		t.Errorf("at ratio 0 a client's sampled flag was followed: trace_id %v", line["trace_id"])
	}
	reqs := h.Up.Requests()
	tp := reqs[len(reqs)-1].Header.Get("Traceparent")
	if strings.Contains(tp, clientTrace) || !strings.HasSuffix(tp, "-00") {
		t.Errorf("upstream traceparent %q at ratio 0; want the gateway's own trace, not sampled", tp)
	}
	if err := h.Gateway.FlushTraces(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := h.rcv.all()[before:]; len(got) != 0 {
		t.Errorf("at ratio 0, %d spans exported; want none", len(got))
	}

	// A reload that trusts incoming context makes it the parent.
	cfg.Tracing.Ratio, cfg.Tracing.TrustIncoming = 1, true
	if err := h.Gateway.Reload(&cfg); err != nil {
		t.Fatal(err)
	}
	resp, _ = h.Get(path(2), h.Full, clientHeaders...)
	root, _ = h.request(resp.Header.Get("X-Request-Id"))
	if root.traceID != clientTrace || root.parentID != clientSpan {
		t.Errorf("trusted: SERVER span trace %s parent %s; want %s, %s", root.traceID, root.parentID, clientTrace, clientSpan)
	}
	reqs = h.Up.Requests()
	if tp := reqs[len(reqs)-1].Header.Get("Traceparent"); !strings.HasPrefix(tp, "00-"+clientTrace+"-") {
		t.Errorf("trusted: upstream traceparent %q; want the client's trace %s", tp, clientTrace)
	}
}

// TestTracingBackgroundRefresh: a refresh of a stale entry is a trace of
// its own, sampled with the request that started it and linked to it.
func TestTracingBackgroundRefresh(t *testing.T) {
	h := newTracingHarness(t, nil)
	list := "/api4/public/topics/list/v1"
	if resp, _ := h.Get(list, h.Full); resp.StatusCode != http.StatusOK {
		t.Fatalf("list: %d", resp.StatusCode)
	}
	h.Clock.Advance(h.Config.Cache.TTL.List + time.Second)
	resp, _ := h.Get(list, h.Full)
	if resp.Header.Get("Cache-Status") != csStale {
		t.Fatalf("Cache-Status %q; want stale", resp.Header.Get("Cache-Status"))
	}
	root, trace := h.request(resp.Header.Get("X-Request-Id"))
	lookup := child(t, trace, "cache lookup")
	var refresh span
	if !gatewaytest.WaitFor(func() bool {
		_ = h.Gateway.FlushTraces(context.Background())
		var ok bool
		refresh, ok = findSpan(h.rcv.all(), func(s span) bool { return s.name == "background refresh" })
		return ok
	}) {
		t.Fatal("no background refresh span")
	}
	if refresh.traceID == root.traceID || refresh.parentID != "" {
		t.Errorf("the refresh is in the request's trace (parent %q)", refresh.parentID)
	}
	if !slices.Contains(refresh.links, spanLink{lookup.traceID, lookup.spanID, "", "triggered_by"}) {
		t.Errorf("refresh links %v; want the request's cache lookup %s/%s", refresh.links, lookup.traceID, lookup.spanID)
	}
	if refresh.attrs["upstream.status_code"] != "200" {
		t.Errorf("refresh attributes %v", refresh.attrs)
	}
}

// TestTracingDrainFlushes: spans of the requests served before a shutdown
// reach the collector when Serve returns, without waiting for the batch
// processor's next export.
func TestTracingDrainFlushes(t *testing.T) {
	rcv := newOTLPReceiver(t)
	clk := clock.NewFake(gatewaytest.Now)
	up, err := demo.New(demo.Options{Clock: clk, APIKey: gatewaytest.UpstreamKey})
	if err != nil {
		t.Fatal(err)
	}
	upSrv := httptest.NewServer(up)
	defer func() { up.Close(); upSrv.Close() }()
	full := gatewaytest.NewKey(t)
	cfg := gatewaytest.BaseConfig(upSrv.URL, full, "")
	cfg.Tracing = tracing.Config{Exporter: tracing.ExporterOTLPHTTP, Endpoint: rcv.srv.URL, Ratio: 1}
	gw, _ := gatewaytest.Build(t, clk, cfg)
	defer gw.Close()
	pub, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- gw.Serve(ctx, gateway.Listeners{Public: pub}) }()
	req, _ := http.NewRequest(http.MethodGet, "http://"+pub.Addr().String()+"/api4/public/topics/list/v1", nil)
	req.Header.Set("Authorization", "Bearer "+full)
	client := &http.Client{Transport: &http.Transport{}}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	client.CloseIdleConnections()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("serve: %v", err)
	}
	if _, ok := findSpan(rcv.all(), func(s span) bool {
		return s.attrs["trendgate.request_id"] == resp.Header.Get("X-Request-Id")
	}); !ok {
		t.Fatalf("after the drain the collector has %d spans, not the request's", len(rcv.all()))
	}
}
