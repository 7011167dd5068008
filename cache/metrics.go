package cache

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics holds the cache's Prometheus collectors. Build it with NewMetrics;
// a nil *Metrics passed to a constructor is replaced by an unregistered one.
type Metrics struct {
	hits          prometheus.Counter
	misses        prometheus.Counter
	stale         prometheus.Counter
	staleIfError  prometheus.Counter
	coalesced     prometheus.Counter
	fetchErrors   prometheus.Counter
	refreshes     prometheus.Counter
	evictions     prometheus.Counter
	sharedHit     prometheus.Counter
	sharedMiss    prometheus.Counter
	sharedInvalid prometheus.Counter
	sharedError   prometheus.Counter
	leaseShared   prometheus.Counter
	leaseTimeout  prometheus.Counter
	// droppedAbandoned and droppedRefresh count fills dropped for want of
	// a detached slot: abandoned by every caller and cancelled, or
	// background refreshes not started.
	droppedAbandoned prometheus.Counter
	droppedRefresh   prometheus.Counter

	purgeReceived      prometheus.Counter // purges from other instances applied here
	purgeResyncs       prometheus.Counter // local tier cleared: purges may have been missed
	purgePublishErrors prometheus.Counter // purges other instances were not told of

	local atomic.Pointer[Local] // the local tier the bytes/entries gauges read
	cache atomic.Pointer[Cache] // the cache the fill gauges read
}

// NewMetrics creates the cache collectors and registers them with reg; with
// a nil reg they exist but are not registered. Registration conflicts are
// ignored so that a reload may build a second set.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{}
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Namespace: "trendgate", Subsystem: "cache", Name: name, Help: help})
	}
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "trendgate", Subsystem: "cache", Name: "requests_total",
		Help: "Cache lookups by outcome (hit, miss, stale, stale-if-error).",
	}, []string{"outcome"})
	m.hits = requests.WithLabelValues(Hit.String())
	m.misses = requests.WithLabelValues(Miss.String())
	m.stale = requests.WithLabelValues(Stale.String())
	m.staleIfError = requests.WithLabelValues(StaleIfError.String())
	m.coalesced = counter("coalesced_waiters_total", "Callers that waited on another caller's fetch instead of fetching.")
	m.fetchErrors = counter("fetch_errors_total", "Fetches that failed (never cached).")
	m.refreshes = counter("background_refreshes_total", "Background refreshes started for stale entries.")
	m.evictions = counter("evictions_total", "Entries evicted from the local tier (memory bound or backstop TTL).")
	shared := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "trendgate", Subsystem: "cache", Name: "shared_reads_total",
		Help: "Shared (Redis) tier reads by result (hit, miss, invalid, error).",
	}, []string{"result"})
	m.sharedHit = shared.WithLabelValues("hit")
	m.sharedMiss = shared.WithLabelValues("miss")
	m.sharedInvalid = shared.WithLabelValues("invalid")
	m.sharedError = shared.WithLabelValues("error")
	lease := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "trendgate", Subsystem: "cache", Name: "lease_waits_total",
		Help: "Fills that waited on another instance's lease, by result (shared, timeout).",
	}, []string{"result"})
	m.leaseShared = lease.WithLabelValues("shared")
	m.leaseTimeout = lease.WithLabelValues("timeout")
	purges := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "trendgate", Subsystem: "cache", Name: "cluster_purges_total",
		Help: "Cluster mode purge broadcast by event: received (another instance's purge applied to the local tier), resync (local tier cleared because purges may have been missed while away from Redis), publish_error (a purge the other instances were not told of).",
	}, []string{"event"})
	m.purgeReceived = purges.WithLabelValues("received")
	m.purgeResyncs = purges.WithLabelValues("resync")
	m.purgePublishErrors = purges.WithLabelValues("publish_error")
	dropped := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "trendgate", Subsystem: "cache", Name: "fills_dropped_total",
		Help: "Fills dropped because every detached slot (cache.max_detached_fills) was taken, by reason: abandoned (every caller left; the fill was cancelled), refresh (a background refresh was not started).",
	}, []string{"reason"})
	m.droppedAbandoned = dropped.WithLabelValues("abandoned")
	m.droppedRefresh = dropped.WithLabelValues("refresh")
	fills := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "trendgate", Subsystem: "cache", Name: "fills",
		Help: "Coalesced fills running (each one upstream fetch at most).",
	}, func() float64 {
		if c := m.cache.Load(); c != nil {
			return float64(c.Fills())
		}
		return 0
	})
	detached := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "trendgate", Subsystem: "cache", Name: "detached_fills",
		Help: "Fills running with no caller waiting on them (abandoned, or background refreshes); at most cache.max_detached_fills.",
	}, func() float64 {
		if c := m.cache.Load(); c != nil {
			return float64(c.DetachedFills())
		}
		return 0
	})
	bytes := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "trendgate", Subsystem: "cache", Name: "bytes",
		Help: "Cost (bytes) held by the local tier: entries and the values derived from them (trendgate_cache_variant_bytes); at most cache.max_bytes.",
	}, func() float64 {
		if l := m.local.Load(); l != nil {
			return float64(l.Bytes())
		}
		return 0
	})
	variants := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "trendgate", Subsystem: "cache", Name: "variant_bytes",
		Help: "Bytes of trendgate_cache_bytes held by values derived from entries: per-plan projected bodies, gzip copies, ETags.",
	}, func() float64 {
		if l := m.local.Load(); l != nil {
			return float64(l.VariantBytes())
		}
		return 0
	})
	pinned := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "trendgate", Subsystem: "cache", Name: "pinned_bytes",
		Help: "Bytes of entries (and their variants) that left the local tier while responses were still being written from them; they count against cache.max_bytes besides trendgate_cache_bytes until those responses are done.",
	}, func() float64 {
		if l := m.local.Load(); l != nil {
			return float64(l.PinnedBytes())
		}
		return 0
	})
	limit := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "trendgate", Subsystem: "cache", Name: "max_bytes",
		Help: "The local tier's bound, cache.max_bytes: trendgate_cache_bytes plus trendgate_cache_pinned_bytes stays within it.",
	}, func() float64 {
		if l := m.local.Load(); l != nil {
			return float64(l.MaxBytes())
		}
		return 0
	})
	entries := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "trendgate", Subsystem: "cache", Name: "entries",
		Help: "Entries held (or being admitted) by the local tier.",
	}, func() float64 {
		if l := m.local.Load(); l != nil {
			return float64(l.Len())
		}
		return 0
	})
	if reg != nil {
		for _, c := range []prometheus.Collector{requests, shared, lease, purges, dropped, fills, detached, bytes, variants, pinned, limit, entries,
			m.coalesced, m.fetchErrors, m.refreshes, m.evictions} {
			_ = reg.Register(c) // a duplicate after reload keeps the first set
		}
	}
	return m
}

func orNew(m *Metrics) *Metrics {
	if m == nil {
		return NewMetrics(nil)
	}
	return m
}
