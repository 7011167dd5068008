package proxy

import (
	"errors"
	"strconv"
	"sync"
	"time"

	"trendgate/internal/tenantlabel"
	"trendgate/upstream"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the chain's own collectors; the process (package gateway),
// the cache, upstream, limits and rangecut packages register theirs on the
// same registry.
type metrics struct {
	requests     *prometheus.CounterVec
	duration     *prometheus.HistogramVec
	authFailures *prometheus.CounterVec
	limited      *prometheus.CounterVec
	quotaCharged *prometheus.CounterVec
	upByAccount  *prometheus.CounterVec
	// upAbandoned counts upstream calls whose requesting client had left
	// before the answer came, by account.
	upAbandoned *prometheus.CounterVec
	// labels bounds the account and key_id labels of the three counters
	// by tenant (nil: every account its own, no key id).
	labels *tenantlabel.Labels

	// The children every request touches, by their labels: a sync.Map
	// read costs no allocation and a fraction of WithLabelValues, which
	// validates, hashes and locks on each call. The label sets are bounded
	// (routes, statuses, plans; accounts and detail keys by labels) and no
	// child is ever deleted.
	served  sync.Map // servedLabels → *servedChildren
	charged sync.Map // account label → prometheus.Counter of quotaCharged
	// chargedKeys holds the children of detail keys (tenantLabels →
	// prometheus.Counter), apart so that the common case looks up a
	// string.
	chargedKeys sync.Map
}

// tenantLabels are the account and key_id labels of a detail key's
// series.
type tenantLabels struct{ account, key string }

// servedLabels are the labels of a finished request's counter and
// histogram.
type servedLabels struct {
	route, plan string
	status      int
}

type servedChildren struct {
	requests prometheus.Counter
	duration prometheus.Observer
}

func newMetrics(reg prometheus.Registerer, labels *tenantlabel.Labels) *metrics {
	m := &metrics{
		labels: labels,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trendgate_requests_total",
			Help: "Public API requests by route, status and plan.",
		}, []string{"route", "status", "plan"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "trendgate_request_duration_seconds",
			Help:    "Public API request latency by route.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 20},
		}, []string{"route"}),
		authFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trendgate_auth_failures_total",
			Help: "Refused authentication attempts by reason.",
		}, []string{"reason"}),
		limited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trendgate_rate_limited_total",
			Help: "Requests refused with 429 by limit (rate_limited, daily_quota_exceeded, monthly_quota_exceeded).",
		}, []string{"reason"}),
		quotaCharged: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trendgate_quota_charged_units_total",
			Help: "Quota units charged for delivered responses, by account (the first metrics.max_accounts accounts counted, and metrics.detail_accounts; the rest under \"(other)\") and key_id (only for metrics.detail_keys, else empty).",
		}, []string{"account", "key_id"}),
		upByAccount: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trendgate_upstream_calls_by_account_total",
			Help: "Cold misses that needed the upstream, by the account whose request caused them (labelled as trendgate_quota_charged_units_total), key_id (metrics.detail_keys only) and result: sent (the upstream was called), share_refused (the account's fair share was used up), budget_refused (the upstream budget was), breaker_open, busy (no connection slot free in time).",
		}, []string{"account", "key_id", "result"}),
		upAbandoned: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trendgate_upstream_calls_abandoned_total",
			Help: "Upstream calls made for a request whose client had gone (499) before the answer came, by account and key_id (labelled as trendgate_quota_charged_units_total): quota is refunded for such requests, the upstream call is not.",
		}, []string{"account", "key_id"}),
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.duration, m.authFailures, m.limited, m.quotaCharged,
			m.upByAccount, m.upAbandoned)
	}
	return m
}

// observe counts one request and its duration; traceID, when not "",
// becomes the duration's exemplar (shown by /metrics in the OpenMetrics
// format).
func (m *metrics) observe(route string, status int, plan string, d time.Duration, traceID string) {
	ch := m.servedChildren(servedLabels{route: route, plan: plan, status: status})
	ch.requests.Inc()
	if traceID != "" {
		if eo, ok := ch.duration.(prometheus.ExemplarObserver); ok {
			eo.ObserveWithExemplar(d.Seconds(), prometheus.Labels{"trace_id": traceID})
			return
		}
	}
	ch.duration.Observe(d.Seconds())
}

// servedChildren returns the children of requests and duration for l.
func (m *metrics) servedChildren(l servedLabels) *servedChildren {
	if ch, ok := m.served.Load(l); ok {
		return ch.(*servedChildren)
	}
	ch, _ := m.served.LoadOrStore(l, &servedChildren{
		requests: m.requests.WithLabelValues(l.route, strconv.Itoa(l.status), l.plan),
		duration: m.duration.WithLabelValues(l.route),
	})
	return ch.(*servedChildren)
}

// charge counts units of quota charged to keyID of account.
func (m *metrics) charge(keyID, account string, units int) {
	acct, key := m.labels.Of(keyID, account)
	var c any
	var ok bool
	if key == "" {
		if c, ok = m.charged.Load(acct); !ok {
			c, _ = m.charged.LoadOrStore(acct, m.quotaCharged.WithLabelValues(acct, ""))
		}
	} else {
		l := tenantLabels{account: acct, key: key}
		if c, ok = m.chargedKeys.Load(l); !ok {
			c, _ = m.chargedKeys.LoadOrStore(l, m.quotaCharged.WithLabelValues(acct, key))
		}
	}
	c.(prometheus.Counter).Add(float64(units))
}

// countUpstream records the result of a cold fetch caused by keyID of
// account.
func (m *metrics) countUpstream(keyID, account string, err error) {
	result := "sent"
	switch {
	case errors.Is(err, upstream.ErrShareExhausted):
		result = "share_refused"
	case errors.Is(err, upstream.ErrBudgetExhausted):
		result = "budget_refused"
	case errors.Is(err, upstream.ErrBreakerOpen):
		result = "breaker_open"
	case errors.Is(err, upstream.ErrBusy):
		result = "busy"
	}
	acct, key := m.labels.Of(keyID, account)
	m.upByAccount.WithLabelValues(acct, key, result).Inc()
}

// abandoned counts n upstream calls made for a request of keyID of
// account whose client had gone.
func (m *metrics) abandoned(keyID, account string, n int) {
	acct, key := m.labels.Of(keyID, account)
	m.upAbandoned.WithLabelValues(acct, key).Add(float64(n))
}
