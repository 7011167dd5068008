package limits

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"trendgate/internal/clock"
	"trendgate/internal/tenantlabel"
)

// TestMetricsLabels checks that quota counters are by account, past the
// limit under tenantlabel.Other, and by key id only for a detail key.
func TestMetricsLabels(t *testing.T) {
	m := NewMetrics(nil)
	m.Labels = tenantlabel.New(tenantlabel.Config{MaxAccounts: 1, DetailKeys: []string{"watched"}})
	l, err := NewLocal(DefaultConfig(), clock.NewFake(t0), m)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	p := Policy{PerSecond: 100, Burst: 100, Daily: 100}
	for _, s := range []Subject{
		{Key: "a1", Account: "acme"}, {Key: "a2", Account: "acme"},
		{Key: "b1", Account: "beta"}, {Key: "solo"}, {Key: "watched", Account: "beta"},
	} {
		if _, err := l.Admit(ctx, s, p, 2); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		account, key string
		want         float64
	}{
		{"acme", "", 4},
		{tenantlabel.Other, "", 4}, // beta's b1 and solo
		{"beta", "watched", 2},
	} {
		if got := testutil.ToFloat64(m.QuotaReserved.WithLabelValues(c.account, c.key)); got != c.want {
			t.Errorf("reserved{account=%q,key_id=%q}: got %v; want %v", c.account, c.key, got, c.want)
		}
	}
	if n := testutil.CollectAndCount(m.QuotaReserved); n != 3 {
		t.Errorf("got %d reserved series; want 3", n)
	}
}
