package gatewaytest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"trendgate/admin"
	"trendgate/auth"
	"trendgate/config"
	"trendgate/demo"
	"trendgate/gateway"
	"trendgate/internal/clock"
	"trendgate/internal/testing/promtest"
	"trendgate/internal/testing/syncbuf"
)

// Now is a Thursday mid-morning UTC, in the middle of an hour.
var Now = time.Date(2026, 11, 19, 10, 30, 15, 0, time.UTC)

// UpstreamKey is the gateway's own upstream credential in tests.
const UpstreamKey = "upstream-test-credential"

// Harness is the whole gateway in front of the recording demo upstream,
// each on its own loopback httptest server.
type Harness struct {
	T       *testing.T
	Clock   *clock.Fake
	Up      *demo.Server
	upSrv   *httptest.Server
	Gateway *gateway.Gateway
	Base    string // the gateway's public base URL
	Admin   string // the admin listener's base URL
	Client  *http.Client
	Config  *config.Config
	Full    string // a full-plan key
	Limited string // a limited-plan key
	Logs    *syncbuf.Buffer
}

func NewKey(t testing.TB) string {
	t.Helper()
	k, err := auth.Generate()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// New starts the demo upstream and a gateway configured from
// config.Default with a full and a limited key; mutate may change the
// config before the gateway is built.
func New(t *testing.T, mutate func(*config.Config), opts ...func(*demo.Options)) *Harness {
	t.Helper()
	clk := clock.NewFake(Now)
	dopts := demo.Options{Clock: clk, APIKey: UpstreamKey}
	for _, o := range opts {
		o(&dopts)
	}
	up, err := demo.New(dopts)
	if err != nil {
		t.Fatal(err)
	}
	upSrv := httptest.NewServer(up)
	t.Cleanup(func() { up.Close(); upSrv.Close() })

	full, limited := NewKey(t), NewKey(t)
	cfg := BaseConfig(upSrv.URL, full, limited)
	if mutate != nil {
		mutate(cfg)
	}
	return serveHarness(t, clk, up, upSrv, cfg, full, limited)
}

// BaseConfig is config.Default in front of the upstream at upURL, with
// debug logs and the keys full (id team-full) and, unless "", limited
// (team-limited).
func BaseConfig(upURL, full, limited string) *config.Config {
	cfg := config.Default()
	cfg.Upstream.BaseURL = upURL
	cfg.Upstream.APIKey = UpstreamKey
	cfg.Log.Level = "debug"
	cfg.Keys = []config.Key{{ID: "team-full", SHA256: auth.Digest(full), Plan: "full"}}
	if limited != "" {
		cfg.Keys = append(cfg.Keys, config.Key{ID: "team-limited", SHA256: auth.Digest(limited), Plan: "limited"})
	}
	return cfg
}

// serveHarness builds a gateway from cfg on clk and serves it until the
// test ends; the single-gateway harness and every cluster node are made
// here.
func serveHarness(t *testing.T, clk *clock.Fake, up *demo.Server, upSrv *httptest.Server, cfg *config.Config, full, limited string) *Harness {
	t.Helper()
	h := &Harness{T: t, Clock: clk, Up: up, upSrv: upSrv, Config: cfg, Full: full, Limited: limited}
	h.Gateway, h.Logs = Build(t, clk, cfg)
	h.Serve()
	return h
}

// Build is gateway.New on cfg and clk with a debug-level JSON logger
// writing to the returned buffer. Every test harness builds its gateways
// here.
func Build(t testing.TB, clk clock.Clock, cfg *config.Config) (*gateway.Gateway, *syncbuf.Buffer) {
	t.Helper()
	logs := &syncbuf.Buffer{}
	core := zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), logs, zapcore.DebugLevel)
	gw, err := gateway.New(cfg, gateway.Options{Clock: clk, Logger: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	return gw, logs
}

// Serve runs the gateway's real servers (timeouts, header limits, admin
// listener) on random loopback ports until the test ends.
func (h *Harness) Serve() {
	t := h.T
	pub, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	adm, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.Base, h.Admin = "http://"+pub.Addr().String(), "http://"+adm.Addr().String()
	h.Client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 512, DisableCompression: true}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Gateway.Serve(ctx, gateway.Listeners{Public: pub, Admin: adm}) }()
	t.Cleanup(func() {
		// Idle client connections go first: a connection the server has
		// accepted but seen no request on (a client transport dialed it
		// for a request another connection then took) keeps
		// http.Server.Shutdown waiting 5 s.
		h.Client.CloseIdleConnections()
		http.DefaultClient.CloseIdleConnections()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
		_ = h.Gateway.Close()
	})
}

// Do sends a request with a raw request-target (so escapes reach the
// gateway exactly as written) and returns the response with its body read.
func (h *Harness) Do(method, target, key string, header ...string) (*http.Response, []byte) {
	h.T.Helper()
	req, err := http.NewRequest(method, h.Base+"/", nil)
	if err != nil {
		h.T.Fatal(err)
	}
	// An opaque URL is sent as the request-target verbatim.
	path, query, _ := strings.Cut(target, "?")
	req.URL.Opaque = path
	req.URL.RawQuery = query
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	resp, err := h.Client.Do(req)
	if err != nil {
		h.T.Fatalf("%s %s: %v", method, target, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		h.T.Fatal(err)
	}
	return resp, body
}

func (h *Harness) Get(target, key string, header ...string) (*http.Response, []byte) {
	h.T.Helper()
	return h.Do(http.MethodGet, target, key, header...)
}

// AdminDo sends method path to the admin listener with token (none when
// empty) and returns the response with its body read.
func (h *Harness) AdminDo(method, path, token string) (*http.Response, []byte) {
	h.T.Helper()
	req, err := http.NewRequest(method, h.Admin+path, nil)
	if err != nil {
		h.T.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := h.Client.Do(req)
	if err != nil {
		h.T.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		h.T.Fatal(err)
	}
	return resp, body
}

// Scrape reads /metrics from the admin listener and parses the exposition.
func (h *Harness) Scrape(token string) map[string]*dto.MetricFamily {
	h.T.Helper()
	resp, body := h.AdminDo(http.MethodGet, "/metrics", token)
	if resp.StatusCode != http.StatusOK {
		h.T.Fatalf("/metrics: %d", resp.StatusCode)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		h.T.Fatalf("parse /metrics: %v", err)
	}
	return fams
}

// KeyUsage fetches GET /keys/{id} from the harness's admin listener.
func (h *Harness) KeyUsage(id string) (int, admin.KeyUsage, []byte) {
	h.T.Helper()
	resp, body := h.AdminDo(http.MethodGet, "/keys/"+id, "")
	var ku admin.KeyUsage
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(body, &ku); err != nil {
			h.T.Fatalf("GET /keys/%s: %v in %s", id, err, body)
		}
	}
	return resp.StatusCode, ku, body
}

// Summary fetches GET /summary from the harness's admin listener.
func (h *Harness) Summary() admin.Summary {
	h.T.Helper()
	resp, body := h.AdminDo(http.MethodGet, "/summary", "")
	var s admin.Summary
	if resp.StatusCode != http.StatusOK {
		h.T.Fatalf("GET /summary: %d %s", resp.StatusCode, body)
	}
	if err := json.Unmarshal(body, &s); err != nil {
		h.T.Fatalf("GET /summary: %v in %s", err, body)
	}
	return s
}

// LastUpstream returns the last request the demo upstream received.
func (h *Harness) LastUpstream() (path, query string, hdr http.Header) {
	h.T.Helper()
	reqs := h.Up.Requests()
	if len(reqs) == 0 {
		h.T.Fatal("the upstream received no request")
	}
	r := reqs[len(reqs)-1]
	return r.EscapedPath, r.RawQuery, r.Header
}

// Gauge reads one gateway metric.
func (h *Harness) Gauge(name string) float64 {
	h.T.Helper()
	v, _ := promtest.Sum(h.T, h.Gateway.Registry(), name)
	return v
}

type ErrorBody struct {
	Error     string `json:"error"`
	Code      string `json:"code"`
	RequestID string `json:"request_id"`
}

func DecodeError(t *testing.T, body []byte) ErrorBody {
	t.Helper()
	var e ErrorBody
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		t.Fatalf("error body %q is not the JSON error shape: %v", body, err)
	}
	if e.Error == "" || e.Code == "" || e.RequestID == "" {
		t.Fatalf("error body %q has an empty field", body)
	}
	return e
}

// LogLines returns the JSON log lines whose msg is msg.
func LogLines(t *testing.T, logs, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(logs, "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q is not JSON: %v", line, err)
		}
		if m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// AccessLine returns the access log line of the response resp. The line is
// written once the handler returns, which may be just after the client has
// read the response: it waits for that work to finish.
func (h *Harness) AccessLine(t *testing.T, resp *http.Response) map[string]any {
	t.Helper()
	id := resp.Header.Get("X-Request-Id")
	var line map[string]any
	PollUntil(func() bool {
		for _, m := range LogLines(t, h.Logs.String(), "request") {
			if m["request_id"] == id {
				line = m
				return true
			}
		}
		return false
	})
	if line == nil {
		t.Fatalf("no access line for request %s in:\n%s", id, h.Logs)
	}
	return line
}

// DiscardWriter is a minimal ResponseWriter that keeps nothing but the
// status and the byte count, so that a benchmark measures the gateway, not
// a recorder. Set Hdr before use.
type DiscardWriter struct {
	Hdr    http.Header
	Status int
	Bytes  int
}

func (w *DiscardWriter) Header() http.Header { return w.Hdr }
func (w *DiscardWriter) WriteHeader(s int)   { w.Status = s }
func (w *DiscardWriter) Write(b []byte) (int, error) {
	w.Bytes += len(b)
	return len(b), nil
}

// WithRoutes configures the example routes (config.ExampleRoutes) and adds
// them to the built-in plans as config.example.yaml does.
func WithRoutes(cfg *config.Config) {
	cfg.Routes = config.ExampleRoutes()
	for plan, routes := range config.ExamplePlanRoutes() {
		p := cfg.Plans[plan]
		p.Endpoints = append(p.Endpoints, routes...)
		cfg.Plans[plan] = p
	}
}
