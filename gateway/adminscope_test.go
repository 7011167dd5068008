package gateway_test

import (
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"trendgate/admin"
	"trendgate/auth"
	"trendgate/config"
	"trendgate/gateway/gatewaytest"
	"trendgate/internal/testing/promtest"
)

// TestScopesAgree: config validates the scopes the admin routes know.
func TestScopesAgree(t *testing.T) {
	if !slices.Equal(config.AdminScopes, admin.Scopes) {
		t.Errorf("config.AdminScopes %v; admin.Scopes %v: want the same", config.AdminScopes, admin.Scopes)
	}
}

// TestReadScopedToken (issue 41): a token configured with scopes: [read]
// reads /metrics, /summary, GET /keys, /accounts and the usage history, and gets 403 missing_scope on
// POST /keys, which changes nothing; the refusal is counted. The same key
// created with a keys-scoped token is 201.
func TestReadScopedToken(t *testing.T) {
	const scraper, keyer = "scraper-token-for-tests", "keyer-token-for-tests"
	h := gatewaytest.New(t, func(cfg *config.Config) {
		cfg.Admin.Tokens = []config.AdminToken{
			{ID: "scraper", SHA256: auth.Digest(scraper), Scopes: []string{"read"}},
			{ID: "keyer", SHA256: auth.Digest(keyer), Scopes: []string{"keys"}},
		}
		cfg.KeysFile = filepath.Join(t.TempDir(), "keys.yaml")
	})
	for _, path := range []string{"/metrics", "/summary", "/keys", "/accounts", "/usage"} {
		if resp, body := h.AdminDo(http.MethodGet, path, scraper); resp.StatusCode != 200 {
			t.Errorf("GET %s with the read token: %d %s; want 200", path, resp.StatusCode, body)
		}
	}
	create := func(token string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, h.Admin+"/keys", strings.NewReader(`{"id":"newcomer","plan":"limited"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := h.Client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := create(scraper); code != http.StatusForbidden || !strings.Contains(body, `"code":"missing_scope"`) || !strings.Contains(body, `\"keys\"`) {
		t.Fatalf("POST /keys with the read token: %d %s; want 403 missing_scope naming keys", code, body)
	}
	if resp, body := h.AdminDo(http.MethodGet, "/keys/newcomer", scraper); resp.StatusCode != http.StatusNotFound {
		t.Errorf("after the refused create GET /keys/newcomer is %d %s; want 404 (nothing changed)", resp.StatusCode, body)
	}
	if n, _ := promtest.Sum(t, h.Gateway.Registry(), "trendgate_admin_refused_total", "status", "403"); n != 1 {
		t.Errorf("trendgate_admin_refused_total{status=403}: got %v; want 1", n)
	}
	if code, body := create(keyer); code != http.StatusCreated {
		t.Errorf("POST /keys with the keys token: %d %s; want 201", code, body)
	}
	if resp, body := h.AdminDo(http.MethodGet, "/metrics", keyer); resp.StatusCode != http.StatusForbidden {
		t.Errorf("GET /metrics with the keys token: %d %s; want 403", resp.StatusCode, body)
	}
}
