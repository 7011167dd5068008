// Package rtmetrics serves the Go runtime's own figures (runtime/metrics)
// that explain a latency tail: collections, the collector's CPU and its
// assists, stop-the-world pauses and how long runnable goroutines waited
// for a thread. Histograms keep every bucket the runtime has (the
// Prometheus Go collector folds them into a few), so that the difference
// of two readings gives a step's p99 to within a few percent.
package rtmetrics

import (
	"encoding/json"
	"math"
	"net/http"
	"runtime/metrics"
)

// Names are the metrics served.
var Names = []string{
	"/gc/cycles/total:gc-cycles",
	"/gc/heap/allocs:bytes",
	"/gc/heap/live:bytes",
	"/gc/heap/goal:bytes",
	"/gc/gomemlimit:bytes",
	"/cpu/classes/total:cpu-seconds",
	"/cpu/classes/gc/total:cpu-seconds",
	"/cpu/classes/gc/mark/assist:cpu-seconds",
	"/sched/latencies:seconds",
	"/sched/pauses/total/gc:seconds",
	"/sched/pauses/stopping/gc:seconds",
}

// Sample is one metric's value: Value for a counter or gauge; for a
// histogram, Counts[i] observations fell in [Buckets[i], Buckets[i+1]).
// An infinite bound is written as ±math.MaxFloat64 (JSON has no infinity).
type Sample struct {
	Value   *float64  `json:"value,omitempty"`
	Buckets []float64 `json:"buckets,omitempty"`
	Counts  []uint64  `json:"counts,omitempty"`
}

// Read returns the current value of every metric in Names this runtime
// knows.
func Read() map[string]Sample {
	s := make([]metrics.Sample, len(Names))
	for i, n := range Names {
		s[i].Name = n
	}
	metrics.Read(s)
	out := make(map[string]Sample, len(s))
	for _, m := range s {
		switch m.Value.Kind() {
		case metrics.KindUint64:
			v := float64(m.Value.Uint64())
			out[m.Name] = Sample{Value: &v}
		case metrics.KindFloat64:
			v := m.Value.Float64()
			out[m.Name] = Sample{Value: &v}
		case metrics.KindFloat64Histogram:
			h := m.Value.Float64Histogram()
			b := make([]float64, len(h.Buckets))
			for i, x := range h.Buckets {
				b[i] = finite(x)
			}
			out[m.Name] = Sample{Buckets: b, Counts: append([]uint64(nil), h.Counts...)}
		}
	}
	return out
}

func finite(x float64) float64 {
	switch {
	case math.IsInf(x, 1):
		return math.MaxFloat64
	case math.IsInf(x, -1):
		return -math.MaxFloat64
	}
	return x
}

// Handler writes Read's result as a JSON object keyed by metric name.
func Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_ = json.NewEncoder(w).Encode(Read())
	})
}
