package gateway

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"trendgate/internal/buildinfo"
	"trendgate/internal/inflight"
	"trendgate/internal/transport/h1"
)

// metrics are the process's own collectors; the request chain (package
// proxy), the cache, upstream and limits packages register theirs on the
// same registry.
type metrics struct {
	reloads     *prometheus.CounterVec
	certReloads *prometheus.CounterVec
	restart     prometheus.Gauge
	ready       prometheus.Gauge
	// h2ResetGoaways counts connections of Go's HTTP/2 server told to go
	// away past their reset budget (resetbudget.go).
	h2ResetGoaways prometheus.Counter
	// keysApplied counts the key API's changes put in force (package
	// keyservice).
	keysApplied *prometheus.CounterVec
	// loops is the public lane when it runs event loops
	// (server.event_loops), for trendgate_event_loop_handovers_total.
	loops atomic.Pointer[h1.Server]
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trendgate_config_reloads_total",
			Help: "Configuration reloads by result (ok, refused).",
		}, []string{"result"}),
		certReloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trendgate_tls_certificate_reloads_total",
			Help: "Loads of changed or re-read TLS certificate files (tls.mode files) by result (ok, refused: the previous pair keeps serving).",
		}, []string{"result"}),
		restart: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "trendgate_config_restart_pending",
			Help: "1 while the loaded configuration changes a setting that takes effect only after a restart (server.*, tls.*, upstream.*, redis.*, admin.listen, ...).",
		}),
		h2ResetGoaways: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "trendgate_http2_reset_budget_goaways_total",
			Help: "HTTP/2 connections served by Go's HTTP/2 server (server.fast_http2: false) sent GOAWAY because more of their streams ended before their response (reset by either side) than the budget allows (200, refilled at 50 a second).",
		}),
		keysApplied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trendgate_keys_changes_applied_total",
			Help: "Versions of the key API's changes (made here or, in cluster mode, by another instance) put in force by result (ok, refused: they do not fit this instance's configuration file and the keys in force stay).",
		}, []string{"result"}),
		ready: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "trendgate_ready",
			Help: "1 while the gateway reports ready.",
		}),
	}
	handovers := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "trendgate_event_loop_handovers_total",
		Help: "Requests served on an event loop (server.event_loops) that left it to wait: for the upstream, for Redis, or for room in a socket that did not take the whole answer at once; and HTTP/2 connections that left a loop between frames (a client that kept sending past 64 frames in one go, a protocol error). A cached answer never leaves.",
	}, func() float64 {
		if s := m.loops.Load(); s != nil {
			return float64(s.LoopHandovers())
		}
		return 0
	})
	reg.MustRegister(m.reloads, m.keysApplied, m.certReloads, m.restart, m.ready, m.h2ResetGoaways, handovers, buildinfo.Read().Collector(),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// watchInflight registers the gauges of the in-flight byte bound b.
func watchInflight(reg prometheus.Registerer, b *inflight.Bound) {
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "trendgate_inflight_bytes",
			Help: "Bytes taken from the in-flight bound: upstream bodies being read and checked, variants (projections, gzip copies) being derived, and derived values served but not stored.",
		}, func() float64 { return float64(b.Held()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "trendgate_inflight_limit_bytes",
			Help: "The in-flight bound: cache.max_bytes/4, at least upstream.max_body_bytes.",
		}, func() float64 { return float64(b.Capacity()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "trendgate_inflight_waits_total",
			Help: "Upstream body reads and variant derivations that waited for in-flight bytes.",
		}, func() float64 { return float64(b.Waits()) }),
	)
}
