package main

import (
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"trendgate/auth"
	"trendgate/config"
	"trendgate/gateway"
	"trendgate/gateway/gatewaytest"
	"trendgate/internal/clock"
)

// cliGateway starts a gateway on a demo upstream for the CLI's admin
// commands: account "acme" (plan full) with key "acme-web", a keys_file,
// and admin token "cli-admin-token", which the CLI reads from
// adminTokenEnv. It returns the gateway and its admin listener; both stop
// when the test ends.
func cliGateway(t *testing.T) (*gateway.Gateway, *httptest.Server) {
	t.Helper()
	clk := clock.NewFake(time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC))
	_, upSrv := gatewaytest.StartUpstream(t, clk, nil)
	cfg := config.Default()
	cfg.Upstream.BaseURL, cfg.Upstream.APIKey = upSrv.URL, gatewaytest.UpstreamKey
	cfg.Admin.Token = "cli-admin-token"
	cfg.KeysFile = filepath.Join(t.TempDir(), "keys.yaml")
	cfg.Accounts = []config.Account{{ID: "acme", Plan: "full"}}
	cfg.Keys = []config.Key{{ID: "acme-web", SHA256: auth.Digest(newSecret(t)), Account: "acme"}}
	g, err := gateway.New(cfg, gateway.Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	adm := httptest.NewServer(g.AdminHandler())
	t.Cleanup(adm.Close)
	t.Setenv(adminTokenEnv, "cli-admin-token")
	return g, adm
}
