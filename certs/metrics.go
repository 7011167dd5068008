package certs

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The operation label values of the certificate metrics: a first issuance
// (or one after the stored certificate was lost) and a renewal.
const (
	opObtain = "obtain"
	opRenew  = "renew"
)

// Metrics are the certificate manager's Prometheus collectors, fed by
// certmagic's events. A nil *Metrics records nothing.
//
//   - trendgate_certs_obtained_total{operation}: certificates obtained or
//     renewed (operation obtain or renew);
//   - trendgate_certs_failures_total{operation}: failed obtain or renew
//     attempts (certmagic retries with backoff, so one outage counts
//     several times);
//   - trendgate_certs_failing{domain}: 1 while the latest obtain or renew
//     attempt for a configured domain failed, 0 once one succeeded. Domains
//     come from tls.acme.domains only (on-demand issuance is off), so the
//     label is bounded;
//   - trendgate_certs_expiry_timestamp_seconds{cert_file}: in tls.mode
//     files, the NotAfter (unix seconds) of the certificate serving from
//     cert_file, set at start and on every reload that loads a pair; a
//     refused reload leaves the previous pair's. No series in other modes;
//   - trendgate_certs_ticket_keys_failing: 1 while the latest load of the
//     cluster's shared session ticket keys from Redis failed, 0 once one
//     succeeded (always 0 outside cluster mode).
type Metrics struct {
	obtained       *prometheus.CounterVec
	failures       *prometheus.CounterVec
	failing        *prometheus.GaugeVec
	ticketsFailing prometheus.Gauge
	expiry         *prometheus.GaugeVec
}

// NewMetrics builds the collectors and registers them with reg, or returns
// the ones already registered there (a gateway serves more than once in
// tests); a nil reg leaves them unregistered. Both operations of the
// counters read 0 from the start, so rate() and increase() see the first
// failure.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		obtained: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "trendgate", Subsystem: "certs", Name: "obtained_total",
			Help: "Certificates obtained (operation obtain) or renewed (renew) from the ACME CA.",
		}, []string{"operation"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "trendgate", Subsystem: "certs", Name: "failures_total",
			Help: "Failed attempts to obtain (operation obtain) or renew (renew) a certificate; certmagic retries with backoff.",
		}, []string{"operation"}),
		failing: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "trendgate", Subsystem: "certs", Name: "failing",
			Help: "1 while the latest attempt to obtain or renew the certificate of a configured domain failed, 0 once one succeeded.",
		}, []string{"domain"}),
		ticketsFailing: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "trendgate", Subsystem: "certs", Name: "ticket_keys_failing",
			Help: "1 while the latest load of the cluster's shared TLS session ticket keys from Redis failed, 0 once one succeeded.",
		}),
		expiry: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "trendgate", Subsystem: "certs", Name: "expiry_timestamp_seconds",
			Help: "tls.mode files: when the certificate serving from cert_file expires (its NotAfter, unix seconds).",
		}, []string{"cert_file"}),
	}
	if reg != nil {
		m.obtained = register(reg, m.obtained)
		m.expiry = register(reg, m.expiry)
		m.failures = register(reg, m.failures)
		m.failing = register(reg, m.failing)
		m.ticketsFailing = register(reg, m.ticketsFailing)
	}
	for _, op := range []string{opObtain, opRenew} {
		m.obtained.WithLabelValues(op)
		m.failures.WithLabelValues(op)
	}
	return m
}

// register registers c with reg, or returns the collector already there.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	var are prometheus.AlreadyRegisteredError
	if err := reg.Register(c); errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing
		}
	}
	return c
}

// event records one certmagic event: cert_obtained and cert_failed carry
// "renewal" (bool) and "identifier" (the domain). Other events, and events
// whose data lacks those keys, are ignored.
func (m *Metrics) event(_ context.Context, name string, data map[string]any) {
	if m == nil || (name != "cert_obtained" && name != "cert_failed") {
		return
	}
	op := opObtain
	if renewal, _ := data["renewal"].(bool); renewal {
		op = opRenew
	}
	domain, _ := data["identifier"].(string)
	if name == "cert_failed" {
		m.failures.WithLabelValues(op).Inc()
		if domain != "" {
			m.failing.WithLabelValues(domain).Set(1)
		}
		return
	}
	m.obtained.WithLabelValues(op).Inc()
	if domain != "" {
		m.failing.WithLabelValues(domain).Set(0)
	}
}

// notAfter records when the certificate serving from certFile expires.
func (m *Metrics) notAfter(certFile string, t time.Time) {
	if m == nil {
		return
	}
	m.expiry.WithLabelValues(certFile).Set(float64(t.Unix()))
}

// ticketKeys records whether the latest load of the shared session ticket
// keys failed.
func (m *Metrics) ticketKeys(failing bool) {
	if m == nil {
		return
	}
	v := 0.0
	if failing {
		v = 1
	}
	m.ticketsFailing.Set(v)
}
