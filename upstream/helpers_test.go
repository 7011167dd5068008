package upstream

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"trendgate/api"
	"trendgate/internal/clock"
	"trendgate/internal/testing/promtest"
)

// t0 is a fake-clock start 10 s into a UTC minute.
var t0 = time.Date(2026, 3, 14, 12, 30, 10, 0, time.UTC)

const testKey = "tgtest-upstream-key-7f3a"

// upstreamStub is a test server that counts and records the requests it gets.
type upstreamStub struct {
	srv   *httptest.Server
	calls atomic.Int64

	mu      sync.Mutex // guards handler and last
	handler http.HandlerFunc
	last    *http.Request
}

func newStub(t testing.TB, h http.HandlerFunc) *upstreamStub {
	t.Helper()
	s := &upstreamStub{handler: h}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.calls.Add(1)
		s.mu.Lock()
		s.last = r.Clone(context.Background())
		h := s.handler
		s.mu.Unlock()
		h(w, r)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *upstreamStub) set(h http.HandlerFunc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.handler = h
}

func (s *upstreamStub) lastRequest() *http.Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}

// respond returns a handler answering status with body and headers.
func respond(status int, body string, hdr ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		for i := 0; i+1 < len(hdr); i += 2 {
			w.Header().Set(hdr[i], hdr[i+1])
		}
		if w.Header().Get("Content-Type") == "" {
			w.Header().Set("Content-Type", "application/json")
		}
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}
}

const (
	seriesBody  = `{"config":{"topic":"#ai","generated":1760647718},"data":[{"time":1759968000,"interactions":148220}]}`
	listBody    = `{"data":[{"topic":"bitcoin","topic_rank":27}]}`
	whatsupBody = `{"config":{"topic":"bitcoin","generated":1760641738},"summary":"Bitcoin talk centres on ETF inflows."}`
)

// testConfig returns a valid config for base with an unlimited budget.
func testConfig(base string) Config {
	cfg := DefaultConfig()
	cfg.BaseURL = base
	cfg.APIKey = testKey
	cfg.Budget = BudgetConfig{}
	return cfg
}

// newTestClient builds a client with fresh metrics on a private registry.
func newTestClient(t *testing.T, cfg Config, clk clock.Clock, opts ...Option) (*Client, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	c, err := New(cfg, clk, nil, NewMetrics(reg), opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(c.Close)
	return c, reg
}

// metricValue returns the summed counter or gauge samples of name whose labels
// include all of labels (name/value pairs), or -1 when absent.
func metricValue(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	v, found := promtest.Sum(t, reg, name, labels...)
	if !found {
		return -1
	}
	return v
}

var seriesReq = Request{Endpoint: api.EndpointSeries, Path: "/api4/public/topic/%23ai/time-series/v1", RawQuery: "bucket=hour&interval=1w"}

// readCounter returns a counter's value.
func readCounter(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatalf("register: %v", err)
	}
	mfs, err := reg.Gather()
	if err != nil || len(mfs) != 1 || len(mfs[0].GetMetric()) != 1 {
		t.Fatalf("gather: %v", err)
	}
	return mfs[0].GetMetric()[0].GetCounter().GetValue()
}
