package console

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"trendgate/admin"
	"trendgate/config"
	"trendgate/internal/clock"
	"trendgate/internal/tenantlabel"
	"trendgate/limits"
	"trendgate/proxy"
)

// gaugeFixture is a console over a local limiter, observed as the gateway
// observes it, with n accounts of one key each: the first quotaless of
// them without a quota, the others with daily quotas that differ.
type gaugeFixture struct {
	con    *Console
	lim    limits.Limiter
	local  *limits.Local
	set    *proxy.Settings
	labels *tenantlabel.Labels
	reads  *countingReader
}

// countingReader counts the keys and accounts read through it.
type countingReader struct {
	limits.UsageReader
	n int
}

func (r *countingReader) Usage(ctx context.Context, kps []limits.KeyPolicy) ([]limits.Usage, error) {
	r.n += len(kps)
	return r.UsageReader.Usage(ctx, kps)
}

func newGaugeFixture(t testing.TB, n, quotaless int, metrics tenantlabel.Config) *gaugeFixture {
	t.Helper()
	cfg := config.Default()
	free := cfg.Plans[config.PlanFull]
	free.Policy.Daily, free.Policy.Monthly = 0, 0
	cfg.Plans["free"] = free
	for i := range n {
		a := config.Account{ID: fmt.Sprintf("acct-%05d", i), Plan: "free"}
		if i >= quotaless {
			daily := int64(100 + i%50)
			a.Plan, a.Daily = config.PlanFull, &daily
		}
		cfg.Accounts = append(cfg.Accounts, a)
		cfg.Keys = append(cfg.Keys, config.Key{ID: fmt.Sprintf("key-%05d", i), Account: a.ID, SHA256: fmt.Sprintf("%064x", i+1)})
	}
	set, err := proxy.Compile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC))
	local, err := limits.NewLocal(limits.DefaultConfig(), clk, nil)
	if err != nil {
		t.Fatal(err)
	}
	f := &gaugeFixture{set: set, local: local, labels: tenantlabel.New(metrics)}
	f.reads = &countingReader{UsageReader: local}
	f.con = New(Options{Settings: func() *proxy.Settings { return set }, Clock: clk, Log: zap.NewNop(), Usage: f.reads, Labels: f.labels})
	f.lim = f.con.Observe(local)
	return f
}

// admit charges account i's key cost units.
func (f *gaugeFixture) admit(t testing.TB, i, cost int) {
	t.Helper()
	rk, _ := f.con.keyIdx.of(f.set).key(fmt.Sprintf("key-%05d", i))
	if _, err := f.lim.Admit(context.Background(), limits.Subject{Key: rk.Key.ID, Account: rk.Account}, rk.Policy, cost); err != nil {
		t.Fatal(err)
	}
}

// gauged returns the accounts with a daily used gauge, sorted.
func gauged(t testing.TB, c prometheus.Collector) []string {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, mf := range mfs {
		if mf.GetName() != "trendgate_account_quota_used_units" {
			continue
		}
		for _, m := range mf.Metric {
			labels := map[string]string{}
			for _, l := range m.Label {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["window"] == "day" {
				out = append(out, labels["account"])
			}
		}
	}
	slices.Sort(out)
	return out
}

// everyAccount is what the collector exported when it read every account:
// gaugedAccounts over all of them.
func (f *gaugeFixture) everyAccount(t testing.TB) []string {
	t.Helper()
	idx := f.con.keyIdx.of(f.set)
	picks := newAccountPicks(idx)
	for i := range idx.accounts {
		picks.add(i)
	}
	kps := picks.quotaPolicies()
	us, err := f.local.Usage(context.Background(), kps)
	if err != nil {
		t.Fatal(err)
	}
	all := make([]int, len(kps))
	for i := range all {
		all[i] = i
	}
	var out []string
	for _, i := range gaugedAccounts(kps, all, func(i int) (admin.QuotaUsage, admin.QuotaUsage) {
		u := us[i]
		return quotaUsage(u.DayUsed, u.Policy.Daily, u.DayEnd), quotaUsage(u.MonthUsed, u.Policy.Monthly, u.MonthEnd)
	}, f.labels) {
		out = append(out, kps[i].Account)
	}
	slices.Sort(out)
	return out
}

// TestQuotaGaugesReadTheCandidates: past metrics.max_accounts, a scrape
// exports the same accounts as when it read every account (the limit's
// accounts nearest a quota, the quiet ones by id while fewer have used
// any, and the detail accounts), idle, with a few accounts used and with
// all of them used, and reads a small part of the accounts to do so.
func TestQuotaGaugesReadTheCandidates(t *testing.T) {
	const n, quotaless, limit = 2000, 10, 60 // limit: more than topQuota holds unasked
	f := newGaugeFixture(t, n, quotaless, tenantlabel.Config{MaxAccounts: limit, DetailAccounts: []string{"acct-00003", "acct-01999"}})
	col := f.con.Collector()
	check := func(when string) {
		t.Helper()
		f.reads.n = 0
		got := gauged(t, col)
		if read := f.reads.n; read > 5*limit {
			t.Errorf("%s: a scrape read %d of %d accounts; want at most %d", when, read, n, 5*limit)
		}
		if want := f.everyAccount(t); !slices.Equal(got, want) {
			t.Errorf("%s: gauges of %v; reading every account gives %v", when, got, want)
		}
		if len(got) != limit+2 {
			t.Errorf("%s: %d accounts gauged; want %d and the 2 detail accounts", when, len(got), limit)
		}
	}
	check("idle")
	for _, i := range []int{1500, 700, 12, 1999, 44, 5} { // 5: without a quota
		f.admit(t, i, 3)
	}
	check("6 accounts used")
	rng := rand.New(rand.NewPCG(3, 4))
	for range 10 * n {
		f.admit(t, rng.IntN(n), 1+rng.IntN(3))
	}
	check("every account used")
}

// TestQuotaGaugesSmallInstallation: with no more accounts than
// metrics.max_accounts, every account has gauges.
func TestQuotaGaugesSmallInstallation(t *testing.T) {
	f := newGaugeFixture(t, 15, 3, tenantlabel.DefaultConfig())
	f.admit(t, 7, 2)
	got := gauged(t, f.con.Collector())
	if want := f.everyAccount(t); len(got) != 15 || !slices.Equal(got, want) {
		t.Errorf("gauges of %v; want all 15 accounts (%v)", got, want)
	}
}

// BenchmarkQuotaGaugesScrape is the quota collector's part of a scrape at
// 100,000 accounts of one key each, 2,000 of them used, with the default
// metrics.max_accounts.
func BenchmarkQuotaGaugesScrape(b *testing.B) {
	const n = 100_000
	f := newGaugeFixture(b, n, 0, tenantlabel.DefaultConfig())
	for i := range 2000 {
		f.admit(b, (i*7919)%n, 1+i%5)
	}
	col := f.con.Collector()
	ch := make(chan prometheus.Metric, 1024)
	done := make(chan int)
	go func() {
		got := 0
		for range ch {
			got++
		}
		done <- got
	}()
	b.ReportAllocs()
	for b.Loop() {
		col.Collect(ch)
	}
	close(ch)
	if got := <-done; got == 0 {
		b.Fatal("no gauges collected")
	}
}
