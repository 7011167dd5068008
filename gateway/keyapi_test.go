package gateway_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"trendgate/admin"
	"trendgate/auth"
	"trendgate/config"
	"trendgate/gateway/gatewaytest"
)

const listPath = "/api4/public/topics/list/v1"

// aliceToken is a named admin token (admin.tokens: id alice).
const aliceToken = "alice-admin-token-for-tests"

// withAccount gives the harness's full key an account "acme" of the full
// plan with a daily quota, and the admin listener a token.
func withAccount(keysFile string) func(*config.Config) {
	return func(cfg *config.Config) {
		daily := int64(1000)
		cfg.Accounts = []config.Account{{ID: "acme", Plan: "full", Daily: &daily}}
		cfg.Keys[0].Account, cfg.Keys[0].Plan = "acme", ""
		cfg.Admin.Token = adminToken
		cfg.Admin.Tokens = []config.AdminToken{{ID: "alice", SHA256: auth.Digest(aliceToken)}}
		cfg.KeysFile = keysFile
	}
}

// adminSend sends method path with a JSON body to base's admin listener,
// with the admin token, and decodes a JSON answer into out (if not nil).
func adminSend(t *testing.T, base, method, path, body string, out any) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var e struct{ Code string }
	_ = json.Unmarshal(b, &e)
	if resp.StatusCode >= 300 {
		t.Logf("%s %s: %s", method, path, b)
	}
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %v in %s", method, path, err, b)
		}
	}
	return resp.StatusCode, e.Code
}

func status(h *gatewaytest.Harness, key string) int {
	resp, _ := h.Get(listPath, key)
	return resp.StatusCode
}

// TestKeyAPIEndToEnd creates, rotates and revokes keys and changes an
// account through the admin listener of one instance, checks each change
// on the public listener at once, and that a restart keeps them all.
func TestKeyAPIEndToEnd(t *testing.T) {
	keysFile := filepath.Join(t.TempDir(), "keys.yaml")
	h := gatewaytest.New(t, withAccount(keysFile))

	var ci admin.CreatedKey
	if code, ec := adminSend(t, h.Admin, http.MethodPost, "/keys", `{"id":"acme-ci","account":"acme"}`, &ci); code != http.StatusCreated {
		t.Fatalf("POST /keys: %d %s", code, ec)
	}
	if ci.Secret == "" || ci.Account != "acme" || ci.Plan != "full" || !ci.Created.Equal(h.Clock.Now().Truncate(time.Second)) {
		t.Fatalf("created = %+v", ci)
	}
	if got := status(h, ci.Secret); got != http.StatusOK {
		t.Fatalf("the new key's first request: %d", got)
	}
	if strings.Contains(h.Logs.String(), ci.Secret) {
		t.Fatal("a log holds the new key's secret")
	}
	audit := h.Logs.String()
	if !strings.Contains(audit, `"msg":"key api","action":"create","admin":"admin.token","key":"acme-ci"`) {
		t.Fatalf("no audit line for the create in the log:\n%s", audit)
	}
	// A named admin token is let in, and named in the audit line; a
	// token that is neither is refused.
	req, _ := http.NewRequest(http.MethodPost, h.Admin+"/keys", strings.NewReader(`{"id":"acme-alice","account":"acme"}`))
	req.Header.Set("Authorization", "Bearer "+aliceToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST /keys with a named admin token: %v %v", resp.StatusCode, err)
	}
	resp.Body.Close()
	if !strings.Contains(h.Logs.String(), `"action":"create","admin":"alice","key":"acme-alice"`) {
		t.Fatalf("the audit line does not name the token alice:\n%s", h.Logs.String())
	}
	req, _ = http.NewRequest(http.MethodDelete, h.Admin+"/keys/acme-alice", nil)
	req.Header.Set("Authorization", "Bearer "+aliceToken+"x")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a token that is no admin token: %v %v", resp.StatusCode, err)
	}

	// Rotation: both keys valid during the overlap, sharing the account's
	// quota; the old one refused after it.
	var next admin.CreatedKey
	if code, ec := adminSend(t, h.Admin, http.MethodPost, "/keys/acme-ci/rotate", `{"overlap":"1h"}`, &next); code != http.StatusCreated {
		t.Fatalf("rotate: %d %s", code, ec)
	}
	if next.ID != "acme-ci-r1" || next.Replaces == nil || !next.Replaces.Expires.Equal(h.Clock.Now().Add(time.Hour).Truncate(time.Second)) {
		t.Fatalf("rotation = %+v", next)
	}
	if status(h, ci.Secret) != http.StatusOK || status(h, next.Secret) != http.StatusOK {
		t.Fatal("a key of the rotation is refused during the overlap")
	}
	var old, cur, web admin.KeyUsage
	adminSend(t, h.Admin, http.MethodGet, "/keys/acme-ci", "", &old)
	adminSend(t, h.Admin, http.MethodGet, "/keys/acme-ci-r1", "", &cur)
	adminSend(t, h.Admin, http.MethodGet, "/keys/team-full", "", &web)
	if old.Daily.Used != 3 || cur.Daily.Used != 3 || web.Daily.Used != 3 || old.Daily.Limit != 1000 {
		t.Fatalf("daily used by acme's keys: %d, %d, %d (limit %d); want one account's 3 of 1000 for each",
			old.Daily.Used, cur.Daily.Used, web.Daily.Used, old.Daily.Limit)
	}
	h.Clock.Advance(time.Hour + time.Second)
	if got := status(h, ci.Secret); got != http.StatusUnauthorized {
		t.Fatalf("the old key after the overlap: %d, want 401", got)
	}

	// An account's quota, patched and reset.
	var acct admin.AccountSettings
	if code, ec := adminSend(t, h.Admin, http.MethodPatch, "/accounts/acme", `{"daily":5}`, &acct); code != http.StatusOK ||
		acct.Daily != 5 || acct.Plan != "full" || len(acct.Keys) != 4 || acct.Monthly == 0 {
		t.Fatalf("PATCH /accounts/acme: %d %s, %+v", code, ec, acct)
	}
	for i := 4; i <= 5; i++ {
		if got := status(h, next.Secret); got != http.StatusOK {
			t.Fatalf("unit %d of 5: %d", i, got)
		}
	}
	if got := status(h, next.Secret); got != http.StatusTooManyRequests {
		t.Fatalf("past the patched quota: %d, want 429", got)
	}
	var reset admin.AccountReset
	if code, ec := adminSend(t, h.Admin, http.MethodPost, "/accounts/acme/reset", `{"window":"day"}`, &reset); code != http.StatusOK || reset.Cleared != 5 {
		t.Fatalf("reset: %d %s %+v", code, ec, reset)
	}
	if got := status(h, next.Secret); got != http.StatusOK {
		t.Fatalf("after the reset: %d", got)
	}

	// Revocation of a key of the configuration file.
	var rev admin.RevokedKey
	if code, ec := adminSend(t, h.Admin, http.MethodDelete, "/keys/team-full", "", &rev); code != http.StatusOK || rev.ID != "team-full" {
		t.Fatalf("DELETE /keys/team-full: %d %s", code, ec)
	}
	if got := status(h, h.Full); got != http.StatusUnauthorized {
		t.Fatalf("a revoked key: %d, want 401", got)
	}

	// A restart on the same files keeps every change.
	cfg2 := *h.Config
	g2, _ := gatewaytest.Build(t, h.Clock, &cfg2)
	t.Cleanup(func() { _ = g2.Close() })
	for _, tc := range []struct {
		key  string
		want int
	}{{h.Full, 401}, {ci.Secret, 401}, {next.Secret, 200}} {
		r := httptest.NewRequest(http.MethodGet, listPath, nil)
		r.Header.Set("Authorization", "Bearer "+tc.key)
		w := httptest.NewRecorder()
		g2.ServeHTTP(w, r)
		if w.Code != tc.want {
			t.Errorf("after a restart: %d, want %d", w.Code, tc.want)
		}
	}
	if d := *g2.Config().Accounts[0].Daily; d != 5 {
		t.Errorf("after a restart acme's daily quota is %d, want the patched 5", d)
	}

	// A reload of the configuration file keeps them too.
	if err := h.Gateway.Reload(h.Config); err != nil {
		t.Fatal(err)
	}
	if status(h, next.Secret) != http.StatusOK || status(h, h.Full) != http.StatusUnauthorized {
		t.Fatal("a reload undid the key API's changes")
	}
}

// TestKeyAPIRefusesBadInput: each bad request gets its status and code,
// and changes nothing: the keys file stays as it was.
func TestKeyAPIRefusesBadInput(t *testing.T) {
	keysFile := filepath.Join(t.TempDir(), "keys.yaml")
	h := gatewaytest.New(t, withAccount(keysFile))
	if code, _ := adminSend(t, h.Admin, http.MethodPost, "/keys", `{"id":"acme-ci","account":"acme"}`, nil); code != http.StatusCreated {
		t.Fatal(code)
	}
	before, err := os.ReadFile(keysFile)
	if err != nil {
		t.Fatal(err)
	}
	past := h.Clock.Now().Add(-time.Hour).Format(time.RFC3339)
	for _, tc := range []struct {
		name, method, path, body string
		status                   int
		code                     string
	}{
		{"unknown field", "POST", "/keys", `{"id":"x","account":"acme","colour":"red"}`, 400, "invalid_body"},
		{"two values", "POST", "/keys", `{"id":"x","account":"acme"} {}`, 400, "invalid_body"},
		{"not JSON", "POST", "/keys", `id=x`, 400, "invalid_body"},
		{"no body", "POST", "/keys", ``, 400, "invalid_body"},
		{"unknown account", "POST", "/keys", `{"id":"x","account":"nobody"}`, 404, "unknown_account"},
		{"id taken", "POST", "/keys", `{"id":"acme-ci","account":"acme"}`, 409, "key_id_taken"},
		{"expiry in the past", "POST", "/keys", `{"id":"x","account":"acme","expires":"` + past + `"}`, 400, "invalid_key_change"},
		{"plans differ", "POST", "/keys", `{"id":"x","account":"acme","plan":"limited"}`, 400, "invalid_key_change"},
		{"revoke unknown", "DELETE", "/keys/nobody", ``, 404, "unknown_key"},
		{"rotate unknown", "POST", "/keys/nobody/rotate", ``, 404, "unknown_key"},
		{"bad overlap", "POST", "/keys/acme-ci/rotate", `{"overlap":"forever"}`, 400, "invalid_key_change"},
		{"patch unknown account", "PATCH", "/accounts/nobody", `{"daily":5}`, 404, "unknown_account"},
		{"patch unknown member", "PATCH", "/accounts/acme", `{"dayly":5}`, 400, "invalid_body"},
		{"patch wrong type", "PATCH", "/accounts/acme", `{"daily":"5"}`, 400, "invalid_body"},
		{"patch negative", "PATCH", "/accounts/acme", `{"daily":-5}`, 400, "invalid_key_change"},
		{"reset bad window", "POST", "/accounts/acme/reset", `{"window":"year"}`, 400, "invalid_body"},
		{"reset unknown account", "POST", "/accounts/nobody/reset", `{"window":"day"}`, 404, "unknown_account"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, ec := adminSend(t, h.Admin, tc.method, tc.path, tc.body, nil)
			if code != tc.status || ec != tc.code {
				t.Fatalf("%s %s %s: %d %s, want %d %s", tc.method, tc.path, tc.body, code, ec, tc.status, tc.code)
			}
		})
	}
	// The wrong media type, and no admin token.
	req, _ := http.NewRequest(http.MethodPost, h.Admin+"/keys", bytes.NewReader([]byte(`{"id":"x","account":"acme"}`)))
	req.Header.Set("Authorization", "Bearer "+adminToken)
	req.Header.Set("Content-Type", "text/plain")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusUnsupportedMediaType {
		t.Fatalf("text/plain body: %v %v", resp.StatusCode, err)
	}
	req, _ = http.NewRequest(http.MethodPost, h.Admin+"/keys", bytes.NewReader([]byte(`{"id":"x","account":"acme"}`)))
	req.Header.Set("Content-Type", "application/json")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("no admin token: %v %v", resp.StatusCode, err)
	}
	after, _ := os.ReadFile(keysFile)
	if !bytes.Equal(before, after) {
		t.Fatalf("refused requests changed the keys file:\n%s\n---\n%s", before, after)
	}
}

// TestKeyAPIReadOnlyWithoutKeysFile: with nowhere to keep a change, the
// key API says so instead of making a key a restart would lose.
func TestKeyAPIReadOnlyWithoutKeysFile(t *testing.T) {
	h := gatewaytest.New(t, withAccount(""))
	if code, ec := adminSend(t, h.Admin, http.MethodPost, "/keys", `{"id":"x","account":"acme"}`, nil); code != http.StatusConflict || ec != "key_api_read_only" {
		t.Fatalf("POST /keys without keys_file: %d %s", code, ec)
	}
}

// TestKeyAPIAcrossInstances: two instances sharing one Redis. A key made
// on one works on the other after its next poll (keystore.PollEvery, 500
// ms: SyncKeys runs that poll now), a revocation is refused there after
// the next poll, and concurrent creates on both lose nothing.
func TestKeyAPIAcrossInstances(t *testing.T) {
	c := gatewaytest.NewCluster(t, gatewaytest.ClusterOptions{Instances: 2, Mutate: func(cfg *config.Config) {
		withAccount(filepath.Join(t.TempDir(), "keys.yaml"))(cfg)
	}})
	a, b := c.Nodes[0], c.Nodes[1]
	var k admin.CreatedKey
	if code, ec := adminSend(t, a.Admin, http.MethodPost, "/keys", `{"id":"acme-ci","account":"acme"}`, &k); code != http.StatusCreated {
		t.Fatalf("POST /keys on A: %d %s", code, ec)
	}
	if err := b.Gateway.Keys().SyncKeys(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := status(b, k.Secret); got != http.StatusOK {
		t.Fatalf("the key made on A, on B after one poll: %d", got)
	}
	var next admin.CreatedKey
	if code, ec := adminSend(t, b.Admin, http.MethodPost, "/keys/acme-ci/rotate", `{"overlap":"0s"}`, &next); code != http.StatusCreated {
		t.Fatalf("rotate on B: %d %s", code, ec)
	}
	if err := a.Gateway.Keys().SyncKeys(t.Context()); err != nil {
		t.Fatal(err)
	}
	if status(a, k.Secret) != http.StatusUnauthorized || status(a, next.Secret) != http.StatusOK {
		t.Fatal("A does not see B's rotation after one poll")
	}
	if code, ec := adminSend(t, a.Admin, http.MethodDelete, "/keys/acme-ci-r1", "", nil); code != http.StatusOK {
		t.Fatalf("revoke on A: %d %s", code, ec)
	}
	if err := b.Gateway.Keys().SyncKeys(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := status(b, next.Secret); got != http.StatusUnauthorized {
		t.Fatalf("a key revoked on A, on B after one poll: %d, want 401", got)
	}

	// Concurrent creates on both instances.
	done := make(chan int, 20)
	for i := range 20 {
		go func() {
			code, _ := adminSend(t, c.Nodes[i%2].Admin, http.MethodPost, "/keys",
				`{"id":"bulk-`+string(rune('a'+i))+`","account":"acme"}`, nil)
			done <- code
		}()
	}
	for range 20 {
		if code := <-done; code != http.StatusCreated {
			t.Errorf("a concurrent create answered %d", code)
		}
	}
	for _, n := range c.Nodes {
		if err := n.Gateway.Keys().SyncKeys(t.Context()); err != nil {
			t.Fatal(err)
		}
		bulk := 0
		for _, key := range n.Gateway.Config().Keys {
			if strings.HasPrefix(key.ID, "bulk-") {
				bulk++
			}
		}
		if bulk != 20 {
			t.Errorf("an instance holds %d of the 20 keys created concurrently", bulk)
		}
	}

	// The background poll, not only SyncKeys, carries a change.
	if code, _ := adminSend(t, a.Admin, http.MethodDelete, "/keys/bulk-a", "", nil); code != http.StatusOK {
		t.Fatal(code)
	}
	if !gatewaytest.PollUntil(func() bool {
		for _, key := range b.Gateway.Config().Keys {
			if key.ID == "bulk-a" {
				return false
			}
		}
		return true
	}) {
		t.Fatal("B's own poll never took in the revocation")
	}
}
