package proxy_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"trendgate/api"
	"trendgate/auth"
	"trendgate/config"
	"trendgate/gateway/gatewaytest"
)

// usageAccount gives cfg account "acme" (full plan, daily quota 100) with
// the keys acme-web and acme-batch; acme-batch's own bucket is batchBurst
// tokens that refill once a minute, so the fake clock never refills it.
func usageAccount(cfg *config.Config, web, batch string) {
	gatewaytest.RoomyFullPlan(cfg)
	daily := int64(100)
	perSecond, burst := 1.0/60, batchBurst
	cfg.Accounts = append(cfg.Accounts, config.Account{ID: "acme", Plan: config.PlanFull, Daily: &daily})
	cfg.Keys = append(cfg.Keys,
		config.Key{ID: "acme-web", SHA256: auth.Digest(web), Account: "acme"},
		config.Key{ID: "acme-batch", SHA256: auth.Digest(batch), Account: "acme", PerSecond: &perSecond, Burst: &burst})
}

// batchBurst is acme-batch's bucket: room for one whatsup (cost 5) and
// two usage reads.
const batchBurst = 7

// readUsage reads key's usage from the gateway at base, requiring 200.
func readUsage(t *testing.T, client *http.Client, base, key string) api.Usage {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, base+api.UsagePath, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: status %d", api.UsagePath, resp.StatusCode)
	}
	if cc := resp.Header.Get("Cache-Control"); cc != "no-store" {
		t.Errorf("Cache-Control %q; want no-store", cc)
	}
	var u api.Usage
	dec := json.NewDecoder(resp.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&u); err != nil {
		t.Fatalf("decode usage: %v", err)
	}
	return u
}

func TestUsageReportsTheAccount(t *testing.T) {
	web, batch := gatewaytest.NewKey(t), gatewaytest.NewKey(t)
	h := gatewaytest.New(t, func(c *config.Config) { usageAccount(c, web, batch) })
	costs := h.Config.Limits.Costs
	upstreamBefore := len(h.Up.Requests())

	u := readUsage(t, h.Client, h.Base, web)
	if u.Key != "acme-web" || u.Account != "acme" || u.Plan != config.PlanFull {
		t.Fatalf("key %q account %q plan %q; want acme-web, acme, full", u.Key, u.Account, u.Plan)
	}
	midnight := time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC)
	if u.Daily.Limit != 100 || u.Daily.Used != 0 || u.Daily.Remaining == nil || *u.Daily.Remaining != 100 || !u.Daily.ResetsAt.Equal(midnight) {
		t.Errorf("daily %+v; want limit 100, used 0, remaining 100, reset %s", u.Daily, midnight)
	}
	if want := h.Config.Plans[config.PlanFull].Monthly; u.Monthly.Limit != want || !u.Monthly.ResetsAt.Equal(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("monthly %+v; want limit %d resetting on Dec 1", u.Monthly, want)
	}
	if u.Rate == nil || u.Rate.PerSecond != 10000 || u.Rate.Burst != 10000 {
		t.Errorf("rate %+v; want the plan's 10000/s, burst 10000", u.Rate)
	}
	if u.Last24h.Scope != "instance" || u.Last24h.Account != (api.UsageCounts{}) {
		t.Errorf("last_24h %+v; want an empty instance count", u.Last24h)
	}

	// Charged: a list with one key, a whatsup with the other (each a cold
	// miss: one upstream call). Not charged: an unknown topic (404), a
	// refused route, and the usage reads themselves.
	for _, r := range []struct {
		target, key string
		status      int
	}{
		{"/api4/public/topics/list/v1", web, 200},
		{"/api4/public/topic/bitcoin/whatsup/v1", batch, 200},
		{"/api4/public/coins/list/v1", web, 404},
	} {
		if resp, body := h.Get(r.target, r.key); resp.StatusCode != r.status {
			t.Fatalf("%s: status %d; want %d (%s)", r.target, resp.StatusCode, r.status, body)
		}
	}
	readUsage(t, h.Client, h.Base, batch)
	upstream := len(h.Up.Requests()) - upstreamBefore

	u = readUsage(t, h.Client, h.Base, web)
	used := int64(costs.List + costs.Whatsup)
	if u.Daily.Used != used || *u.Daily.Remaining != 100-used || u.Monthly.Used != used {
		t.Errorf("daily %+v monthly used %d; want used %d of 100 in both", u.Daily, u.Monthly.Used, used)
	}
	wantKey := api.UsageCounts{Requests: 1, Units: uint64(costs.List), UpstreamCalls: 1}
	wantAccount := api.UsageCounts{Requests: 2, Units: uint64(used), UpstreamCalls: uint64(upstream)}
	if u.Last24h.Key != wantKey || u.Last24h.Account != wantAccount {
		t.Errorf("last_24h key %+v account %+v; want %+v and %+v", u.Last24h.Key, u.Last24h.Account, wantKey, wantAccount)
	}
	if upstream != 2 {
		t.Errorf("%d upstream calls; want 2 (the two cold misses)", upstream)
	}
	if !u.Last24h.Since.Equal(time.Date(2026, 11, 18, 11, 0, 0, 0, time.UTC)) {
		t.Errorf("last_24h since %s; want the start of the hour 23 hours before now", u.Last24h.Since)
	}
	// The other key reports the same account quota, and its own traffic.
	if b := readUsage(t, h.Client, h.Base, batch); b.Daily.Used != used || b.Last24h.Key.Units != uint64(costs.Whatsup) || b.Last24h.Account != wantAccount {
		t.Errorf("acme-batch: daily %+v last_24h %+v", b.Daily, b.Last24h)
	}
	if n := len(h.Up.Requests()) - upstreamBefore; n != upstream {
		t.Errorf("the usage reads made %d upstream calls", n-upstream)
	}
	// A key without an account is an account of its own.
	if f := readUsage(t, h.Client, h.Base, h.Full); f.Account != "team-full" || f.Last24h.Account != (api.UsageCounts{}) {
		t.Errorf("team-full: account %q last_24h %+v", f.Account, f.Last24h)
	}
}

func TestUsageTakesATokenNotQuota(t *testing.T) {
	web, batch := gatewaytest.NewKey(t), gatewaytest.NewKey(t)
	h := gatewaytest.New(t, func(c *config.Config) { usageAccount(c, web, batch) })
	// The last read that fits sees the bucket empty after its own token;
	// the next is refused.
	for i := range batchBurst {
		u := readUsage(t, h.Client, h.Base, batch)
		if left := batchBurst - 1 - i; u.Rate == nil || u.Rate.Remaining != left {
			t.Fatalf("read %d: rate %+v; want %d tokens left", i, u.Rate, left)
		}
		if u.Daily.Used != 0 {
			t.Fatalf("read %d: daily used %d; usage reads charge no quota", i, u.Daily.Used)
		}
	}
	resp, body := h.Get(api.UsagePath, batch)
	if resp.StatusCode != http.StatusTooManyRequests || gatewaytest.DecodeError(t, body).Code != "rate_limited" || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("read past the burst: status %d, Retry-After %q, body %s; want 429 rate_limited", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	var e map[string]string
	if err := json.Unmarshal(body, &e); err != nil || e["request_id"] != resp.Header.Get("X-Request-ID") || e["error"] == "" {
		t.Errorf("error body %s: not the API's error shape (%v)", body, err)
	}
	// The account's other key has its own bucket and sees nothing charged.
	if u := readUsage(t, h.Client, h.Base, web); u.Daily.Used != 0 || u.Last24h.Account.Requests != 0 {
		t.Errorf("acme-web after the reads: daily %+v last_24h %+v", u.Daily, u.Last24h.Account)
	}
}

func TestUsageRefusals(t *testing.T) {
	h := gatewaytest.New(t, nil)
	for _, c := range []struct {
		name, method, target, key string
		status                    int
		code                      string
	}{
		{"no key", http.MethodGet, api.UsagePath, "", 401, "missing_api_key"},
		{"invalid key", http.MethodGet, api.UsagePath, "tg_not-a-key", 401, "invalid_api_key"},
		{"POST", http.MethodPost, api.UsagePath, h.Full, 405, "method_not_allowed"},
		{"parameter", http.MethodGet, api.UsagePath + "?window=day", h.Full, 400, "unknown_parameter"},
		{"key in query", http.MethodGet, api.UsagePath + "?api_key=x", h.Full, 400, "key_in_query"},
		{"trailing slash", http.MethodGet, api.UsagePath + "/", h.Full, 404, "not_found"},
	} {
		resp, body := h.Do(c.method, c.target, c.key)
		if resp.StatusCode != c.status || gatewaytest.DecodeError(t, body).Code != c.code {
			t.Errorf("%s: %d %s; want %d %s", c.name, resp.StatusCode, body, c.status, c.code)
		}
		if c.status == 405 && resp.Header.Get("Allow") != api.AllowedMethods {
			t.Errorf("%s: Allow %q", c.name, resp.Header.Get("Allow"))
		}
	}
	resp, body := h.Do(http.MethodHead, api.UsagePath, h.Full)
	if resp.StatusCode != 200 || len(body) != 0 || resp.Header.Get("Content-Length") == "" {
		t.Errorf("HEAD: %d, %d body bytes, Content-Length %q", resp.StatusCode, len(body), resp.Header.Get("Content-Length"))
	}
}

// TestUsageCluster: a request charged on one instance shows in the quota
// another instance reports (the counters are Redis's), and a usage read
// charges nothing on any instance.
func TestUsageCluster(t *testing.T) {
	web, batch := gatewaytest.NewKey(t), gatewaytest.NewKey(t)
	c := gatewaytest.NewCluster(t, gatewaytest.ClusterOptions{Instances: 2, Mutate: func(cfg *config.Config) { usageAccount(cfg, web, batch) }})
	n0, n1 := c.Nodes[0], c.Nodes[1]
	if r := c.Send(0, "/api4/public/topics/list/v1", web); r.Status != 200 {
		t.Fatalf("list on node 0: %+v", r)
	}
	list := int64(n0.Config.Limits.Costs.List)
	for range batchBurst {
		u := readUsage(t, n1.Client, n1.Base, batch)
		if u.Daily.Used != list || *u.Daily.Remaining != 100-list {
			t.Fatalf("node 1: daily %+v; want %d used (charged on node 0)", u.Daily, list)
		}
		if u.Last24h.Account.Requests != 0 {
			t.Errorf("node 1 counted %d requests; last_24h is the instance's own", u.Last24h.Account.Requests)
		}
	}
	// The bucket is shared too: node 1 emptied it.
	if r := c.Send(0, api.UsagePath, batch); r.Status != http.StatusTooManyRequests || r.Code != "rate_limited" {
		t.Errorf("read past the burst on node 0: %+v; want 429 rate_limited", r)
	}
	if u := readUsage(t, n0.Client, n0.Base, web); u.Daily.Used != list || u.Last24h.Key.Requests != 1 {
		t.Errorf("node 0: daily %+v last_24h %+v", u.Daily, u.Last24h)
	}
	if got := c.QuotaCounter("d", "acme"); got != list {
		t.Errorf("Redis day counter of acme: %d; want %d", got, list)
	}
}
