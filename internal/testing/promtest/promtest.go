// Package promtest reads metric values back from a Prometheus gatherer in
// tests. Production code never imports it.
package promtest

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Sum adds up the counter and gauge samples of the metric family name whose
// labels include every name/value pair in labels (given as name, value,
// name, value...). found is false when no sample matched.
func Sum(t testing.TB, g prometheus.Gatherer, name string, labels ...string) (sum float64, found bool) {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatalf("promtest: gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if !hasLabels(m.GetLabel(), labels) {
				continue
			}
			found = true
			switch {
			case m.GetCounter() != nil:
				sum += m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				sum += m.GetGauge().GetValue()
			}
		}
	}
	return sum, found
}

func hasLabels(have []*dto.LabelPair, want []string) bool {
	for i := 0; i+1 < len(want); i += 2 {
		ok := false
		for _, lp := range have {
			if lp.GetName() == want[i] && lp.GetValue() == want[i+1] {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	return true
}
