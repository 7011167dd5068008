package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"trendgate/auth"
	"trendgate/config"
	"trendgate/demo"
	"trendgate/gateway"
	"trendgate/internal/clock"
)

// TestKeysCreateRotateRevoke drives the key API through the CLI against a
// running gateway's admin listener, and checks each key on the public API.
func TestKeysCreateRotateRevoke(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC))
	up, err := demo.New(demo.Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	upSrv := httptest.NewServer(up)
	t.Cleanup(func() { up.Close(); upSrv.Close() })
	cfg := config.Default()
	cfg.Upstream.BaseURL = upSrv.URL
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

	cli := func(args ...string) (string, error) {
		var out bytes.Buffer
		err := run(append([]string{"keys"}, args...), strings.NewReader(""), &out, &out)
		return out.String(), err
	}
	public := func(secret string) int {
		r := httptest.NewRequest(http.MethodGet, "/api4/public/topics/list/v1", nil)
		r.Header.Set("Authorization", "Bearer "+secret)
		w := httptest.NewRecorder()
		g.ServeHTTP(w, r)
		return w.Code
	}
	secretRE := regexp.MustCompile(`(?m)^secret: (tg_\S+)$`)

	out, err := cli("create", "-admin", adm.URL, "-id", "acme-ci", "-account", "acme", "-expires", "2027-01-01T00:00:00Z")
	if err != nil {
		t.Fatal(err)
	}
	m := secretRE.FindStringSubmatch(out)
	if m == nil || !strings.Contains(out, "account: acme\nplan: full\n") || !strings.Contains(out, "expires: 2027-01-01T00:00:00Z") {
		t.Fatalf("keys create printed:\n%s", out)
	}
	ci := m[1]
	if got := public(ci); got != http.StatusOK {
		t.Fatalf("the created key: %d", got)
	}

	out, err = cli("rotate", "-admin", adm.URL, "-id", "acme-ci", "-overlap", "2h")
	if err != nil {
		t.Fatal(err)
	}
	m = secretRE.FindStringSubmatch(out)
	if m == nil || !strings.Contains(out, "id: acme-ci-r1\n") || !strings.Contains(out, "replaces: acme-ci (valid until 2026-11-26T14:00:00Z)") {
		t.Fatalf("keys rotate printed:\n%s", out)
	}
	if public(ci) != http.StatusOK || public(m[1]) != http.StatusOK {
		t.Fatal("a key of the rotation is refused during the overlap")
	}

	out, err = cli("revoke", "-admin", adm.URL, "-id", "acme-ci")
	if err != nil || out != "revoked acme-ci at 2026-11-26T12:00:00Z\n" {
		t.Fatalf("keys revoke: %v\n%s", err, out)
	}
	if got := public(ci); got != http.StatusUnauthorized {
		t.Fatalf("the revoked key: %d", got)
	}

	// Refusals come back as errors quoting the API's code and message.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"create", "-admin", adm.URL, "-id", "x", "-account", "nobody"}, `404 unknown_account: no account has id "nobody"`},
		{[]string{"create", "-admin", adm.URL, "-id", "x"}, "-id and one of -account or -plan are required"},
		{[]string{"create", "-admin", adm.URL, "-id", "x", "-plan", "full", "-expires", "tomorrow"}, "not an RFC 3339 time"},
		{[]string{"revoke", "-admin", adm.URL, "-id", "acme-ci"}, "404 unknown_key"},
		{[]string{"rotate", "-admin", adm.URL}, "-id is required"},
	} {
		if _, err := cli(tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("keys %v: %v, want an error with %q", tc.args, err, tc.want)
		}
	}
	t.Setenv(adminTokenEnv, "wrong")
	if _, err := cli("revoke", "-admin", adm.URL, "-id", "acme-web"); err == nil || !strings.Contains(err.Error(), "401 invalid_admin_token") {
		t.Errorf("a wrong admin token: %v", err)
	}
}
