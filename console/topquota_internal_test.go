package console

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"trendgate/config"
	"trendgate/internal/clock"
	"trendgate/limits"
	"trendgate/proxy"
)

// TestTopQuotaHoldsTheLargestShares: with many more accounts than the heap
// holds, charged in a random order, the accounts it holds include the
// topN with the largest share of their quota (as the limiter reads them
// afterwards); after the day changes, the day's shares are forgotten and a
// newly charged account gets in.
func TestTopQuotaHoldsTheLargestShares(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC))
	local, err := limits.NewLocal(limits.DefaultConfig(), clk, nil)
	if err != nil {
		t.Fatal(err)
	}
	var top topQuota
	lim := top.observe(local)
	ctx := context.Background()
	const accounts = 5 * topQuotaSize
	policy := func(i int) limits.Policy { return limits.Policy{Daily: int64(100 + i)} } // shares differ by account
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20 * accounts {
		i := rng.IntN(accounts)
		s := limits.Subject{Key: fmt.Sprintf("k%03d", i), Account: fmt.Sprintf("a%03d", i)}
		if _, err := lim.Admit(ctx, s, policy(i), 1+rng.IntN(3)); err != nil {
			t.Fatal(err)
		}
	}
	kps := make([]limits.KeyPolicy, accounts)
	for i := range kps {
		kps[i] = limits.KeyPolicy{Key: fmt.Sprintf("k%03d", i), Account: fmt.Sprintf("a%03d", i), Policy: policy(i)}
	}
	us, err := local.Usage(ctx, kps)
	if err != nil {
		t.Fatal(err)
	}
	type share struct {
		account string
		pct     float64
	}
	all := make([]share, accounts)
	for i, u := range us {
		all[i] = share{kps[i].Account, float64(u.DayUsed) / float64(u.Policy.Daily)}
	}
	slices.SortFunc(all, func(a, b share) int { return cmp.Compare(b.pct, a.pct) })
	held := top.candidates()
	if len(held) != topQuotaSize {
		t.Fatalf("holds %d accounts; want %d", len(held), topQuotaSize)
	}
	for _, s := range all[:topN] {
		if _, ok := held[s.account]; !ok {
			t.Errorf("%s (%.3f of its quota, among the top %d) is not held", s.account, s.pct, topN)
		}
	}

	clk.Advance(24 * time.Hour)
	newcomer := limits.Subject{Key: "fresh", Account: "fresh"}
	if _, err := lim.Admit(ctx, newcomer, limits.Policy{Daily: 1000}, 1); err != nil {
		t.Fatal(err)
	}
	if _, ok := top.candidates()["fresh"]; !ok {
		t.Errorf("a new day's first account is not held: yesterday's shares still rank above it")
	}
}

// BenchmarkTopQuotaNote is the cost an admission pays to keep the top
// lists: the common case is one atomic load and a compare.
func BenchmarkTopQuotaNote(b *testing.B) {
	var top topQuota
	d := limits.Decision{Allowed: true, Policy: limits.Policy{Daily: 1000}, DailyRemaining: 900, Day: 20261127, Month: 202611}
	for i := range topQuotaSize {
		top.note(limits.Subject{Key: fmt.Sprint(i)}, d)
	}
	d.DailyRemaining = 950 // below every share held
	s := limits.Subject{Key: "quiet"}
	b.ReportAllocs()
	for b.Loop() {
		top.note(s, d)
	}
}

// BenchmarkKeyIndex is what the first admin view read after a reload pays
// at 100,000 keys in 10,000 accounts: indexing the snapshot's keys and
// accounts by id.
func BenchmarkKeyIndex(b *testing.B) {
	cfg := config.Default()
	daily := int64(1000)
	for a := range 10_000 {
		cfg.Accounts = append(cfg.Accounts, config.Account{ID: fmt.Sprintf("acct-%06d", a), Plan: "full", Daily: &daily})
	}
	for i := range 100_000 {
		cfg.Keys = append(cfg.Keys, config.Key{ID: fmt.Sprintf("key-%06d", (i*7919)%100_000), Account: fmt.Sprintf("acct-%06d", i/10), SHA256: fmt.Sprintf("%064x", i+1)})
	}
	set, err := proxy.Compile(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if idx := newKeyIndex(set); len(idx.keys) != 100_000 || len(idx.accounts) != 10_000 {
			b.Fatalf("indexed %d keys, %d accounts", len(idx.keys), len(idx.accounts))
		}
	}
}
