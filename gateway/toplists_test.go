package gateway_test

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"trendgate/admin"
	"trendgate/auth"
	"trendgate/config"
	"trendgate/gateway"
	"trendgate/gateway/gatewaytest"
	"trendgate/internal/clock"
)

// TestSummaryTopListsMatchEveryKey: /summary's top lists, kept from a
// bounded heap of what admissions saw, name the same keys and accounts in
// the same order as ranking every key and account read through the paged
// views, with more charged accounts than the heap holds, unused accounts
// with quotas, and accounts without any.
func TestSummaryTopListsMatchEveryKey(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC))
	_, upSrv := gatewaytest.StartUpstream(t, clk, nil)
	cfg := config.Default()
	cfg.Upstream.BaseURL, cfg.Upstream.APIKey = upSrv.URL, gatewaytest.UpstreamKey
	cfg.Upstream.AllowPlainHTTP = true
	cfg.Plans["open"] = config.Plan{Endpoints: cfg.Plans["full"].Endpoints, DataMode: cfg.Plans["full"].DataMode}
	const charged, quiet, free = 70, 15, 15
	var secrets []string
	for i := range charged + quiet + free {
		a := config.Account{ID: fmt.Sprintf("acct-%03d", i), Plan: "full"}
		if i < charged+quiet {
			daily := int64(50 + 3*i) // a different share for each
			a.Daily = &daily
		} else {
			a.Plan = "open" // no quota
		}
		cfg.Accounts = append(cfg.Accounts, a)
		for k := range 2 {
			s, err := auth.Generate()
			if err != nil {
				t.Fatal(err)
			}
			if i < charged && k == 0 {
				secrets = append(secrets, s)
			}
			cfg.Keys = append(cfg.Keys, config.Key{ID: fmt.Sprintf("key-%03d-%d", i, k), Account: a.ID, SHA256: auth.Digest(s)})
		}
	}
	g, err := gateway.New(cfg, gateway.Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	h := g.AdminHandler()
	get := func(path string, v any) {
		t.Helper()
		r := httptest.NewRequest(http.MethodGet, path, nil)
		r.Host = "127.0.0.1:9090"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusOK || json.Unmarshal(w.Body.Bytes(), v) != nil {
			t.Fatalf("GET %s: %d %s", path, w.Code, w.Body)
		}
	}
	check := func(stage string) {
		var keys admin.KeyList
		get("/keys?limit=1000", &keys)
		var accounts admin.AccountList
		get("/accounts?limit=1000", &accounts)
		var sum admin.Summary
		get("/summary", &sum)

		// The ranking of every entry: the largest share of a quota first, then
		// units used, then id; entries without a quota last.
		type ranked struct {
			id    string
			quota bool
			pct   float64
			used  int64
		}
		rank := func(id string, d admin.QuotaUsage) ranked {
			r := ranked{id: id, used: d.Used}
			if d.Limit > 0 {
				r.quota, r.pct = true, float64(d.Used)/float64(d.Limit)
			}
			return r
		}
		order2 := func(a, b ranked) int {
			if a.quota != b.quota {
				if a.quota {
					return -1
				}
				return 1
			}
			return cmp.Or(cmp.Compare(b.pct, a.pct), cmp.Compare(b.used, a.used), cmp.Compare(a.id, b.id))
		}
		var allKeys, allAccounts []ranked
		for _, k := range keys.Keys {
			allKeys = append(allKeys, rank(k.ID, k.Daily))
		}
		for _, a := range accounts.Accounts {
			allAccounts = append(allAccounts, rank(a.ID, a.Daily))
		}
		slices.SortFunc(allKeys, order2)
		slices.SortFunc(allAccounts, order2)
		var wantKeys, gotKeys, wantAccounts, gotAccounts []string
		for _, r := range allKeys[:10] {
			wantKeys = append(wantKeys, r.id)
		}
		for _, r := range allAccounts[:10] {
			wantAccounts = append(wantAccounts, r.id)
		}
		for _, k := range sum.TopKeys {
			gotKeys = append(gotKeys, k.ID)
		}
		for _, a := range sum.TopAccounts {
			gotAccounts = append(gotAccounts, a.ID)
		}
		if !slices.Equal(gotKeys, wantKeys) {
			t.Errorf("%s: top keys: got %v; want %v", stage, gotKeys, wantKeys)
		}
		if !slices.Equal(gotAccounts, wantAccounts) {
			t.Errorf("%s: top accounts: got %v; want %v", stage, gotAccounts, wantAccounts)
		}
	}
	check("before any request")
	// Every account has used a different share, in a shuffled order, so
	// the heap's floor moves and accounts are pushed out of it.
	var order []int
	for i := range secrets {
		for range 1 + (i*7)%11 {
			order = append(order, i)
		}
	}
	rng := rand.New(rand.NewPCG(4, 5))
	rng.Shuffle(len(order), func(a, b int) { order[a], order[b] = order[b], order[a] })
	for _, i := range order {
		r := httptest.NewRequest(http.MethodGet, "/api4/public/topics/list/v1", nil)
		r.Header.Set("Authorization", "Bearer "+secrets[i])
		w := httptest.NewRecorder()
		g.ServeHTTP(w, r)
		if w.Code != http.StatusOK {
			t.Fatalf("request: %d %s", w.Code, w.Body)
		}
	}
	check("after the requests")
}
