package gateway_test

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"trendgate/auth"
	"trendgate/config"
	"trendgate/gateway"
	"trendgate/gateway/gatewaytest"
	"trendgate/internal/clock"
	"trendgate/internal/testing/promtest"
	"trendgate/state"
)

// quotaKeys are issue 30's two customers: a team with a daily quota of
// 30 and a production key with 20000 a day and 400000 a month.
type quotaKeys struct{ team, prod string }

func newQuotaKeys(t *testing.T) quotaKeys {
	return quotaKeys{gatewaytest.NewKey(t), gatewaytest.NewKey(t)}
}

func (k quotaKeys) configure(c *config.Config, path string) {
	c.State.Path = path
	daily30, daily20k, monthly400k := int64(30), int64(20000), int64(400000)
	perSecond, burst := float64(1000), 1000 // the fake clock stands still: only quotas may refuse
	c.Keys = []config.Key{
		{ID: "analytics-team", SHA256: auth.Digest(k.team), Plan: "full", Daily: &daily30, PerSecond: &perSecond, Burst: &burst},
		{ID: "acme-prod", SHA256: auth.Digest(k.prod), Plan: "full", Daily: &daily20k, Monthly: &monthly400k, PerSecond: &perSecond, Burst: &burst},
	}
}

// getStatuses sends n requests with key and returns the statuses and the
// last response's RateLimit field.
func getStatuses(t *testing.T, s *gatewaytest.Served, key string, n int) (map[int]int, string) {
	t.Helper()
	c := &http.Client{Timeout: 20 * time.Second}
	defer c.CloseIdleConnections()
	got := map[int]int{}
	var rl string
	for range n {
		resp, body, err := gatewaytest.GetWithKey(t, c, "http://"+s.Public+"/api4/public/topics/list/v1", key)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		got[resp.StatusCode]++
		rl = resp.Header.Get("Ratelimit")
	}
	return got, rl
}

// TestRestartKeepsQuotas is issue 30's reproduction: after a drain and a
// restart on the same state file, the team that spent its 30 is still
// refused and the production key goes on from 212.
func TestRestartKeepsQuotas(t *testing.T) {
	if p := config.Default().State.Path; p != "" {
		t.Fatalf("default (and demo mode) state.path: got %q; want off", p)
	}
	clk := clock.NewFake(gatewaytest.Now)
	_, upSrv := gatewaytest.StartUpstream(t, clk, nil)
	path := filepath.Join(t.TempDir(), "state")
	keys := newQuotaKeys(t)
	configure := func(c *config.Config) { keys.configure(c, path) }

	first := gatewaytest.StartGateway(t, upSrv.URL, clk, configure)
	if got, _ := getStatuses(t, first, keys.team, 31); got[200] != 30 || got[429] != 1 {
		t.Fatalf("analytics-team before the restart: %v; want 30 × 200 and 1 × 429", got)
	}
	if got, _ := getStatuses(t, first, keys.prod, 212); got[200] != 212 {
		t.Fatalf("acme-prod before the restart: %v; want 212 × 200", got)
	}
	if err := first.Stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}

	second := gatewaytest.StartGateway(t, upSrv.URL, clk, configure)
	if !strings.Contains(second.Logs.String(), `"state loaded"`) {
		t.Fatalf("no state loaded at start; logs:\n%s", second.Logs)
	}
	if got, _ := getStatuses(t, second, keys.team, 1); got[429] != 1 {
		t.Errorf("analytics-team after the restart: %v; want still refused (30/30)", got)
	}
	_, rl := getStatuses(t, second, keys.prod, 1)
	if !strings.Contains(rl, `"daily";r=19787;`) || !strings.Contains(rl, `"monthly";r=399787;`) {
		t.Errorf("acme-prod after the restart: RateLimit %q; want 213 used of 20000 and 400000", rl)
	}
}

// TestDamagedStateRefused: a corrupted state file stops the start with a
// message naming the reset command, and is left where it is.
func TestDamagedStateRefused(t *testing.T) {
	clk := clock.NewFake(gatewaytest.Now)
	_, upSrv := gatewaytest.StartUpstream(t, clk, nil)
	path := filepath.Join(t.TempDir(), "state")
	if err := os.WriteFile(path, []byte("tgstate\x01 half a file"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := gatewaytest.BaseConfig(upSrv.URL, gatewaytest.NewKey(t), "")
	newQuotaKeys(t).configure(cfg, path)
	gw, err := gateway.New(cfg, gateway.Options{Clock: clk})
	if err == nil {
		_ = gw.Close()
		t.Fatal("a gateway started on a damaged state file")
	}
	for _, want := range []string{path, "damaged", "trendgate state reset", "state.on_damage: spent"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if b, _ := os.ReadFile(path); string(b) != "tgstate\x01 half a file" {
		t.Errorf("the damaged file was changed: %q", b)
	}
}

// TestDamagedStateSpent: with state.on_damage spent, a damaged file is
// moved aside, counted, and every key starts with its quota used up.
func TestDamagedStateSpent(t *testing.T) {
	clk := clock.NewFake(gatewaytest.Now)
	_, upSrv := gatewaytest.StartUpstream(t, clk, nil)
	path := filepath.Join(t.TempDir(), "state")
	if err := os.WriteFile(path, []byte("not a state file"), 0o600); err != nil {
		t.Fatal(err)
	}
	keys := newQuotaKeys(t)
	s := gatewaytest.StartGateway(t, upSrv.URL, clk, func(c *config.Config) {
		keys.configure(c, path)
		c.State.OnDamage = state.OnDamageSpent
	})
	if got, _ := getStatuses(t, s, keys.prod, 1); got[429] != 1 {
		t.Errorf("acme-prod after a damaged state file: %v; want refused (quota presumed spent)", got)
	}
	if got, _ := promtest.Sum(t, s.Gateway.Registry(), "trendgate_state_loads_total", "result", "damaged"); got != 1 {
		t.Errorf("trendgate_state_loads_total = %v; want 1 (damaged)", got)
	}
	aside, _ := filepath.Glob(path + ".damaged-*")
	if len(aside) != 1 {
		t.Errorf("damaged file moved to %v; want one %s.damaged-* file", aside, path)
	}
	if _, err := state.Load(path); err != nil {
		t.Errorf("state file after the start: %v; want a new, whole one", err)
	}
}

// TestStateFileInUse: a second gateway on the same state file does not
// start (it would overwrite the first one's counters).
func TestStateFileInUse(t *testing.T) {
	clk := clock.NewFake(gatewaytest.Now)
	_, upSrv := gatewaytest.StartUpstream(t, clk, nil)
	path := filepath.Join(t.TempDir(), "state")
	keys := newQuotaKeys(t)
	gatewaytest.StartGateway(t, upSrv.URL, clk, func(c *config.Config) { keys.configure(c, path) })
	cfg := gatewaytest.BaseConfig(upSrv.URL, gatewaytest.NewKey(t), "")
	keys.configure(cfg, path)
	gw, err := gateway.New(cfg, gateway.Options{Clock: clk})
	if err == nil {
		_ = gw.Close()
		t.Fatal("a second gateway started on a state file in use")
	}
	if !errors.Is(err, state.ErrLocked) {
		t.Errorf("error %v; want state.ErrLocked", err)
	}
}

// TestRestartKeepsAccountQuota: the state file keeps an account's one
// quota, whichever of its keys spent it: after a restart, a key of the
// account that never sent a request is refused too.
func TestRestartKeepsAccountQuota(t *testing.T) {
	clk := clock.NewFake(gatewaytest.Now)
	_, upSrv := gatewaytest.StartUpstream(t, clk, nil)
	path := filepath.Join(t.TempDir(), "state")
	web, batch := gatewaytest.NewKey(t), gatewaytest.NewKey(t)
	configure := func(c *config.Config) {
		c.State.Path = path
		daily, perSecond, burst := int64(5), float64(1000), 1000 // 5: the least the whatsup cost allows
		c.Accounts = []config.Account{{ID: "acme", Plan: "full", Daily: &daily, PerSecond: &perSecond, Burst: &burst}}
		c.Keys = []config.Key{
			{ID: "acme-web", SHA256: auth.Digest(web), Account: "acme"},
			{ID: "acme-batch", SHA256: auth.Digest(batch), Account: "acme"},
		}
	}
	first := gatewaytest.StartGateway(t, upSrv.URL, clk, configure)
	if got, _ := getStatuses(t, first, web, 6); got[200] != 5 || got[429] != 1 {
		t.Fatalf("acme-web before the restart: %v; want 5 × 200 and 1 × 429 (the account's 5)", got)
	}
	if err := first.Stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	second := gatewaytest.StartGateway(t, upSrv.URL, clk, configure)
	if got, _ := getStatuses(t, second, batch, 1); got[429] != 1 {
		t.Errorf("acme-batch after the restart: %v; want refused (the account spent its 5)", got)
	}
}
