package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

// TestAccountsCLI makes, changes and deletes an account through the CLI
// against a running gateway's admin listener, with a key in it checked on
// the public API, and the refusals a delete meets.
func TestAccountsCLI(t *testing.T) {
	g, adm := cliGateway(t)
	cli := func(args ...string) (string, error) {
		var out bytes.Buffer
		err := run(args, strings.NewReader(""), &out, &out)
		return out.String(), err
	}
	out, err := cli("accounts", "create", "-admin", adm.URL, "-id", "globex", "-plan", "limited", "-daily", "300")
	if err != nil || !strings.Contains(out, "account: globex\nplan: limited") || !strings.Contains(out, "daily: 300") {
		t.Fatalf("accounts create: %v\n%s", err, out)
	}
	if _, err := cli("accounts", "create", "-admin", adm.URL, "-id", "globex", "-plan", "full"); err == nil || !strings.Contains(err.Error(), "409") {
		t.Fatalf("creating globex twice: %v, want a 409", err)
	}
	out, err = cli("keys", "create", "-admin", adm.URL, "-id", "globex-ci", "-account", "globex")
	if err != nil {
		t.Fatalf("keys create in globex: %v\n%s", err, out)
	}
	secret := regexp.MustCompile(`(?m)^secret: (tg_\S+)$`).FindStringSubmatch(out)
	if secret == nil || !strings.Contains(out, "plan: limited") {
		t.Fatalf("keys create in globex:\n%s", out)
	}
	r := httptest.NewRequest(http.MethodGet, "/api4/public/topics/list/v1", nil)
	r.Header.Set("Authorization", "Bearer "+secret[1])
	w := httptest.NewRecorder()
	g.ServeHTTP(w, r)
	if w.Code != http.StatusOK {
		t.Fatalf("the key of the new account on the public API: %d", w.Code)
	}
	out, err = cli("accounts", "update", "-admin", adm.URL, "-id", "globex", "-daily", "default", "-monthly", "900")
	if err != nil || !strings.Contains(out, "daily: 5000") || !strings.Contains(out, "monthly: 900") || !strings.Contains(out, "keys: globex-ci") {
		t.Fatalf("accounts update: %v\n%s", err, out)
	}
	for _, tc := range []struct{ id, want string }{{"globex", "account_in_use"}, {"acme", "account_in_use"}, {"nobody", "unknown_account"}, {"..", "not a valid name"}} {
		if _, err := cli("accounts", "delete", "-admin", adm.URL, "-id", tc.id); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("accounts delete %s: %v, want %s", tc.id, err, tc.want)
		}
	}
	if _, err := cli("keys", "revoke", "-admin", adm.URL, "-id", "globex-ci"); err != nil {
		t.Fatal(err)
	}
	if out, err := cli("accounts", "delete", "-admin", adm.URL, "-id", "globex"); err != nil || !strings.HasPrefix(out, "deleted account globex at ") {
		t.Fatalf("accounts delete globex once its key is revoked: %v\n%s", err, out)
	}
	for _, a := range g.Config().Accounts {
		if a.ID == "globex" {
			t.Fatal("the deleted account is still in force")
		}
	}
}
