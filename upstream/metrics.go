package upstream

import (
	"errors"
	"trendgate/internal/breaker"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the upstream client's Prometheus collectors. A nil *Metrics
// passed to a constructor is replaced by an unregistered set.
type Metrics struct {
	// Requests counts Do calls by shape and result (ok, empty, not_found,
	// rejected (the upstream's 400), budget, rate_limited, breaker_open, timeout, unavailable,
	// bad_response, canceled).
	Requests *prometheus.CounterVec
	// Refusals counts calls that sent nothing, by reason: breaker_open,
	// busy (no connection slot within SlotWait), abandoned (every client
	// of the call left while it waited for a slot), budget, share (the account's fair share), cap (the account's per-minute
	// cap), rate_limited (the upstream's own block until its reset),
	// demand (the calls left held for requests asked more, see demandGate).
	Refusals *prometheus.CounterVec
	// SlotWait observes how long calls waited for a connection slot
	// (refused ones included: see slots).
	SlotWait prometheus.Histogram
	// Latency observes the duration of upstream HTTP attempts by shape.
	Latency *prometheus.HistogramVec
	// Errors counts failed Do calls by error kind.
	Errors *prometheus.CounterVec
	// BudgetTokens is the outbound budget's tokens left by window (minute,
	// day); -1 means unlimited.
	BudgetTokens *prometheus.GaugeVec
	// BudgetLimit is the outbound budget's size by window (minute, day), as
	// configured (upstream.budget, its plan preset applied); -1 means
	// unlimited. Calls used = limit - tokens left.
	BudgetLimit *prometheus.GaugeVec
	// Breakers exports the circuit breaker's state and transitions
	// (dependency "upstream").
	Breakers *breaker.Metrics
	// RateLimited counts upstream 429 answers.
	RateLimited prometheus.Counter
	// Retries counts retried attempts after connection errors.
	Retries prometheus.Counter
	// BudgetFallbacks counts shared-budget operations that fell back to the
	// local budget because Redis failed.
	BudgetFallbacks prometheus.Counter
}

// NewMetrics builds the collectors and registers them with reg; a nil reg
// leaves them unregistered. Calling it twice with one registry returns
// collectors that share the already registered series.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	const ns, sub = "trendgate", "upstream"
	m := &Metrics{
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "requests_total",
			Help: "HTTP requests sent to the upstream (each attempt, retries included) by shape, result and reason (miss, refresh, widen, lease_timeout, retry).",
		}, []string{"shape", "result", "reason"}),
		Refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "refusals_total",
			Help: "Upstream client calls that sent nothing, by reason (breaker_open, busy, abandoned, budget, share, cap, rate_limited, demand, budget_error).",
		}, []string{"shape", "reason"}),
		Latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ns, Subsystem: sub, Name: "request_duration_seconds",
			Help:    "Duration of upstream HTTP attempts.",
			Buckets: []float64{.05, .1, .25, .5, 1, 2, 4, 8, 15},
		}, []string{"shape"}),
		SlotWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: ns, Subsystem: sub, Name: "slot_wait_seconds",
			Help:    "Time upstream calls waited for a connection slot (upstream.max_conns, shared by account), refused waits included.",
			Buckets: []float64{.001, .01, .05, .1, .25, .5, 1, 2, 5},
		}),
		Errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "errors_total",
			Help: "Failed upstream client calls by error kind.",
		}, []string{"kind"}),
		BudgetTokens: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: sub, Name: "budget_tokens",
			Help: "Outbound budget tokens left by window; -1 means unlimited.",
		}, []string{"window"}),
		BudgetLimit: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: sub, Name: "budget_limit",
			Help: "Outbound budget size by window (calls per minute, per UTC day); -1 means unlimited.",
		}, []string{"window"}),
		Breakers: breaker.NewMetrics(reg),
		RateLimited: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "rate_limited_total",
			Help: "Upstream 429 answers.",
		}),
		Retries: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "retries_total",
			Help: "Attempts retried after a connection error.",
		}),
		BudgetFallbacks: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "budget_fallbacks_total",
			Help: "Shared budget operations served by the local fallback because Redis failed.",
		}),
	}
	if reg != nil {
		m.Requests = register(reg, m.Requests)
		m.Refusals = register(reg, m.Refusals)
		m.Latency = register(reg, m.Latency)
		m.SlotWait = register(reg, m.SlotWait)
		m.Errors = register(reg, m.Errors)
		m.BudgetTokens = register(reg, m.BudgetTokens)
		m.BudgetLimit = register(reg, m.BudgetLimit)
		m.RateLimited = register(reg, m.RateLimited)
		m.Retries = register(reg, m.Retries)
		m.BudgetFallbacks = register(reg, m.BudgetFallbacks)
	}
	return m
}

// register registers c with reg. If an identical collector is already
// registered it returns that one, so two Metrics on one registry share
// their series; other registration errors leave c unregistered.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	err := reg.Register(c)
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing
		}
	}
	return c
}
