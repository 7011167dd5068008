package tracing

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

// received is what a loopback OTLP receiver got: span names and the
// value of the test header.
type received struct {
	mu     sync.Mutex
	names  []string
	header string
}

func (r *received) add(req *coltracepb.ExportTraceServiceRequest, header string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.header = header
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				r.names = append(r.names, s.Name)
			}
		}
	}
}

type grpcReceiver struct {
	coltracepb.UnimplementedTraceServiceServer
	got *received
}

func (g grpcReceiver) Export(ctx context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	h := ""
	if v := md.Get("x-test"); len(v) > 0 {
		h = v[0]
	}
	g.got.add(req, h)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// TestExporters sends one span through each exporter to a receiver on a
// loopback port, with the configured header, and flushes it at Shutdown.
func TestExporters(t *testing.T) {
	t.Run("otlp-http", func(t *testing.T) {
		got := &received{}
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/base/v1/traces" {
				t.Errorf("posted to %s; want /base/v1/traces", r.URL.Path)
			}
			body, _ := io.ReadAll(r.Body)
			var req coltracepb.ExportTraceServiceRequest
			if err := proto.Unmarshal(body, &req); err != nil {
				t.Errorf("decode: %v", err)
			}
			got.add(&req, r.Header.Get("X-Test"))
			w.Header().Set("Content-Type", "application/x-protobuf")
		}))
		defer srv.Close()
		export(t, Config{Exporter: ExporterOTLPHTTP, Endpoint: srv.URL + "/base/", Headers: map[string]string{"X-Test": "yes"}, Ratio: 1}, got)
	})
	t.Run("otlp-grpc", func(t *testing.T) {
		got := &received{}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		s := grpc.NewServer()
		coltracepb.RegisterTraceServiceServer(s, grpcReceiver{got: got})
		go func() { _ = s.Serve(ln) }() // ends with Stop
		defer s.Stop()
		export(t, Config{Exporter: ExporterOTLPGRPC, Endpoint: "http://" + ln.Addr().String(), Headers: map[string]string{"x-test": "yes"}, Ratio: 1}, got)
	})
}

func export(t *testing.T, cfg Config, got *received) {
	t.Helper()
	ctx := context.Background()
	p, err := New(ctx, cfg, Options{Version: "test", Getenv: func(string) string { return "" }})
	if err != nil || p == nil {
		t.Fatalf("New: %v, %v", p, err)
	}
	_, sp := p.Tracer("test").Start(ctx, "one")
	sp.End()
	if err := p.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	got.mu.Lock()
	defer got.mu.Unlock()
	if len(got.names) != 1 || got.names[0] != "one" || got.header != "yes" {
		t.Errorf("received %v with header %q; want [one] with yes", got.names, got.header)
	}
}
