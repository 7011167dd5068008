package config

import (
	"strings"
	"testing"

	"trendgate/limits"
)

// TestResolvedAccounts: a key takes its account's plan and quotas; its own
// per_second or burst wins over the account's, which wins over the plan's;
// a key without an account is an account of its own.
func TestResolvedAccounts(t *testing.T) {
	c := Default()
	ten, burst, daily := 10.0, 7, int64(777)
	two := 2.0
	c.Accounts = []Account{{ID: "acme", Plan: PlanFull, PerSecond: &ten, Daily: &daily}}
	c.Keys = []Key{
		{ID: "web", SHA256: strings.Repeat("1", 64), Account: "acme"},
		{ID: "batch", SHA256: strings.Repeat("2", 64), Account: "acme", PerSecond: &two, Burst: &burst},
		{ID: "solo", SHA256: strings.Repeat("3", 64), Plan: PlanLimited},
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	full, limited := c.Plans[PlanFull].Policy, c.Plans[PlanLimited].Policy
	acme := full
	acme.PerSecond, acme.Daily = 10, 777
	batch := acme
	batch.PerSecond, batch.Burst = 2, 7
	keys := c.ResolvedKeys()
	want := []struct {
		id, account, plan string
		policy            limits.Policy
	}{
		{"web", "acme", PlanFull, acme},
		{"batch", "acme", PlanFull, batch},
		{"solo", "solo", PlanLimited, limited},
	}
	if len(keys) != len(want) {
		t.Fatalf("got %d resolved keys; want %d", len(keys), len(want))
	}
	for i, w := range want {
		if got := keys[i]; got.Key.ID != w.id || got.Account != w.account || got.Plan != w.plan || got.Policy != w.policy {
			t.Errorf("key %d: got %s in %s on %s with %+v; want %s in %s on %s with %+v",
				i, got.Key.ID, got.Account, got.Plan, got.Policy, w.id, w.account, w.plan, w.policy)
		}
	}
	accounts := c.ResolvedAccounts()
	if len(accounts) != 2 || accounts[0].ID != "acme" || strings.Join(accounts[0].Keys, ",") != "web,batch" ||
		accounts[0].Policy != acme || accounts[1].ID != "solo" || !accounts[1].Implicit {
		t.Errorf("accounts: got %+v; want acme (web, batch) and the implicit solo", accounts)
	}
}
