package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"trendgate/auth"
	"trendgate/config"
	"trendgate/gateway/gatewaytest"
)

// TestKeysCreateRotateRevoke drives the key API through the CLI against a
// running gateway's admin listener, and checks each key on the public API.
func TestKeysCreateRotateRevoke(t *testing.T) {
	g, adm := cliGateway(t)

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

// TestKeysCLIAcrossInstances: two instances sharing one Redis. The CLI
// creates a key on A, rotates it on B and revokes the new one on A; after
// each instance's next poll (SyncKeys runs it now) the other answers
// accordingly, and the client reads its own usage on either.
func TestKeysCLIAcrossInstances(t *testing.T) {
	c := gatewaytest.NewCluster(t, gatewaytest.ClusterOptions{Instances: 2, Mutate: func(cfg *config.Config) {
		cfg.Admin.Token = "cli-admin-token"
		cfg.KeysFile = filepath.Join(t.TempDir(), "keys.yaml")
		cfg.Accounts = []config.Account{{ID: "acme", Plan: "full"}}
		cfg.Keys[0].Account, cfg.Keys[0].Plan = "acme", ""
	}})
	a, b := c.Nodes[0], c.Nodes[1]
	t.Setenv(adminTokenEnv, "cli-admin-token")
	cli := func(args ...string) string {
		t.Helper()
		var out bytes.Buffer
		if err := run(append([]string{"keys"}, args...), strings.NewReader(""), &out, &out); err != nil {
			t.Fatalf("keys %v: %v", args, err)
		}
		return out.String()
	}
	sync := func(h *gatewaytest.Harness) {
		t.Helper()
		if err := h.Gateway.Keys().SyncKeys(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	get := func(h *gatewaytest.Harness, path, key string) int {
		t.Helper()
		resp, _ := h.Get(path, key)
		return resp.StatusCode
	}
	secretRE := regexp.MustCompile(`(?m)^secret: (tg_\S+)$`)

	first := secretRE.FindStringSubmatch(cli("create", "-admin", a.Admin, "-id", "acme-ci", "-account", "acme"))[1]
	sync(b)
	if got := get(b, "/api4/public/topics/list/v1", first); got != http.StatusOK {
		t.Fatalf("the key created on A, on B: %d", got)
	}
	resp, body := b.Get("/trendgate/v1/usage", first)
	var u struct{ Key, Account, Plan string }
	if err := json.Unmarshal(body, &u); err != nil || resp.StatusCode != http.StatusOK || u.Key != "acme-ci" || u.Account != "acme" || u.Plan != "full" {
		t.Fatalf("usage on B: %d %s", resp.StatusCode, body)
	}

	second := secretRE.FindStringSubmatch(cli("rotate", "-admin", b.Admin, "-id", "acme-ci", "-overlap", "0s"))[1]
	sync(a)
	if get(a, "/api4/public/topics/list/v1", first) != http.StatusUnauthorized || get(a, "/api4/public/topics/list/v1", second) != http.StatusOK {
		t.Fatal("A does not answer B's rotation after one poll")
	}

	cli("revoke", "-admin", a.Admin, "-id", "acme-ci-r1")
	sync(b)
	if got := get(b, "/trendgate/v1/usage", second); got != http.StatusUnauthorized {
		t.Fatalf("a key revoked on A, reading its usage on B: %d, want 401", got)
	}
}

// TestConfigCheckReadsKeysFile: config check lays the key API's changes
// over the file, as a start would, and refuses a file they no longer fit.
func TestConfigCheckReadsKeysFile(t *testing.T) {
	dir := t.TempDir()
	keysFile := filepath.Join(dir, "keys.yaml")
	cfgFile := filepath.Join(dir, "trendgate.yaml")
	digest := auth.Digest(newSecret(t))
	writeFile := func(p, text string) {
		t.Helper()
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(keysFile, "version: 1\nkeys:\n  - {id: acme-ci, sha256: \""+digest+"\", account: acme, created: 2026-11-26T12:00:00Z}\n")
	writeFile(cfgFile, "upstream: {base_url: \"http://127.0.0.1:1\"}\nkeys_file: "+keysFile+"\naccounts:\n  - {id: acme, plan: full}\n")
	var out bytes.Buffer
	if err := run([]string{"config", "check", cfgFile}, strings.NewReader(""), &out, &out); err != nil || !strings.Contains(out.String(), "ok (2 plans, 1 keys") {
		t.Fatalf("config check: %v\n%s", err, out.String())
	}
	// The account the API's key joins is gone from the file.
	writeFile(cfgFile, "upstream: {base_url: \"http://127.0.0.1:1\"}\nkeys_file: "+keysFile+"\n")
	out.Reset()
	err := run([]string{"config", "check", cfgFile}, strings.NewReader(""), &out, &out)
	if err == nil || !strings.Contains(err.Error(), `do not fit this file`) || !strings.Contains(err.Error(), `unknown account "acme"`) {
		t.Fatalf("config check with a keys_file that no longer fits: %v", err)
	}
}
