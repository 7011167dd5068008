package limits

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"trendgate/internal/tenantlabel"
)

// Result label values of Metrics.Decisions.
const (
	resultAllowed = "allowed"
	resultRate    = "rate_limited"
	resultDaily   = "daily"
	resultMonthly = "monthly"
)

// Metrics are the Prometheus collectors of this package. Build them with
// NewMetrics (the zero value is not usable); a nil *Metrics passed to a
// constructor is replaced by an unregistered set. Pass the same Metrics to a
// Redis limiter and its fallback Local so each event is counted once.
type Metrics struct {
	// Decisions counts Admit outcomes by result (allowed, rate_limited,
	// daily, monthly).
	Decisions *prometheus.CounterVec
	// QuotaReserved and QuotaRefunded count quota units by account and
	// key_id, as Labels decides: the key id only for a detail key.
	// Units charged = reserved - refunded.
	QuotaReserved *prometheus.CounterVec
	QuotaRefunded *prometheus.CounterVec
	// Labels bounds the account and key_id labels of QuotaReserved and
	// QuotaRefunded; nil labels each event with its account and no key id.
	// Set it before the first Admit.
	Labels *tenantlabel.Labels
	// BucketsEvicted counts per-key buckets dropped by Sweep or MaxKeys.
	BucketsEvicted prometheus.Counter
	// RedisFallbacks counts Admit and Refund calls served by the local
	// fallback because Redis was unavailable.
	RedisFallbacks prometheus.Counter
	// RedisAvailable is 1 while Redis answers, 0 while the breaker is open.
	// It is registered by NewRedis, not NewMetrics: without cluster mode
	// it is not exported at all, so a "Redis down" alert cannot fire on a
	// single instance that has no Redis.
	RedisAvailable prometheus.Gauge
	// JournalSize is the number of quota changes waiting to be replayed
	// into Redis.
	JournalSize prometheus.Gauge

	// byResult caches the Decisions children, indexed like resultNames.
	byResult [4]prometheus.Counter
	// reg is where NewMetrics registered the collectors; nil for none.
	reg prometheus.Registerer
	// redisOnce registers RedisAvailable once (registerRedis).
	redisOnce sync.Once
}

// resultNames are the Decisions result labels; Metrics.decision indexes them.
var resultNames = [4]string{resultAllowed, resultRate, resultDaily, resultMonthly}

// NewMetrics builds the collectors and registers them with reg; a nil reg
// leaves them unregistered.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "trendgate", Subsystem: "limits", Name: "decisions_total",
			Help: "Admission decisions by result (allowed, rate_limited, daily, monthly).",
		}, []string{"result"}),
		QuotaReserved: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "trendgate", Subsystem: "limits", Name: "quota_units_reserved_total",
			Help: "Quota units reserved at admission, by account (the first metrics.max_accounts accounts counted, and metrics.detail_accounts; the rest under \"(other)\") and key_id (only for metrics.detail_keys, else empty).",
		}, []string{"account", "key_id"}),
		QuotaRefunded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "trendgate", Subsystem: "limits", Name: "quota_units_refunded_total",
			Help: "Quota units given back for undelivered responses, by account and key_id (labelled as trendgate_limits_quota_units_reserved_total).",
		}, []string{"account", "key_id"}),
		BucketsEvicted: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "trendgate", Subsystem: "limits", Name: "buckets_evicted_total",
			Help: "Per-key token buckets evicted (idle or over max_keys).",
		}),
		RedisFallbacks: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "trendgate", Subsystem: "limits", Name: "redis_fallbacks_total",
			Help: "Limiter calls served by the local fallback while Redis was unavailable.",
		}),
		RedisAvailable: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "trendgate", Subsystem: "limits", Name: "redis_available",
			Help: "1 while the limits Redis answers, 0 while its breaker is open.",
		}),
		JournalSize: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "trendgate", Subsystem: "limits", Name: "journal_entries",
			Help: "Quota changes journaled during a Redis outage, waiting for replay.",
		}),
	}
	// Pre-create the result series so they read 0 before the first event.
	for i, r := range resultNames {
		m.byResult[i] = m.Decisions.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(m.Decisions, m.QuotaReserved, m.QuotaRefunded, m.BucketsEvicted,
			m.RedisFallbacks, m.JournalSize)
	}
	m.reg = reg
	return m
}

// registerRedis registers the collectors that only mean something in
// cluster mode (RedisAvailable) on the registry NewMetrics was given.
func (m *Metrics) registerRedis() {
	m.redisOnce.Do(func() {
		if m.reg != nil {
			_ = m.reg.Register(m.RedisAvailable) // a second registry use is harmless
		}
	})
}

// orNew returns m, or a fresh unregistered set when m is nil.
func (m *Metrics) orNew() *Metrics {
	if m == nil {
		return NewMetrics(nil)
	}
	return m
}

// decision records the outcome of one Admit.
func (m *Metrics) decision(d Decision) {
	i := 0
	switch d.Reason {
	case ReasonRate:
		i = 1
	case ReasonDaily:
		i = 2
	case ReasonMonthly:
		i = 3
	}
	m.byResult[i].Inc()
}

// reserved records quota units reserved through s's key.
func (m *Metrics) reserved(s Subject, d Decision) {
	if n := max(d.DayReserved, d.MonthReserved); n > 0 {
		m.QuotaReserved.WithLabelValues(m.Labels.Of(s.Key, s.account())).Add(float64(n))
	}
}

// refunded records quota units given back through s's key.
func (m *Metrics) refunded(s Subject, d Decision) {
	if n := max(d.DayReserved, d.MonthReserved); n > 0 {
		m.QuotaRefunded.WithLabelValues(m.Labels.Of(s.Key, s.account())).Add(float64(n))
	}
}
