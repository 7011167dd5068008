package admin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"trendgate/internal/clock"
	"trendgate/internal/testing/promtest"
	"trendgate/keystore"
	"trendgate/limits"
)

// stubKeys is a KeyAdmin whose create succeeds unless the id is "taken",
// which it refuses as keystore does (409).
type stubKeys struct{}

func (stubKeys) CreateKey(_ context.Context, by string, nk keystore.NewKey) (CreatedKey, error) {
	if nk.ID == "taken" {
		return CreatedKey{}, &keystore.Error{Kind: keystore.Taken, Msg: "id taken"}
	}
	return CreatedKey{ID: nk.ID, Secret: "s", Account: by}, nil
}
func (stubKeys) RevokeKey(context.Context, string, string) (RevokedKey, error) {
	return RevokedKey{}, nil
}
func (stubKeys) RotateKey(context.Context, string, string, RotateRequest) (CreatedKey, error) {
	return CreatedKey{}, nil
}
func (stubKeys) PatchAccount(context.Context, string, string, keystore.AccountPatch) (AccountSettings, error) {
	return AccountSettings{}, nil
}
func (stubKeys) CreateAccount(context.Context, string, keystore.NewAccount) (AccountSettings, error) {
	return AccountSettings{}, nil
}
func (stubKeys) DeleteAccount(context.Context, string, string) (DeletedAccount, error) {
	return DeletedAccount{}, nil
}
func (stubKeys) ResetAccount(context.Context, string, string, ResetRequest) (AccountReset, error) {
	return AccountReset{}, nil
}

func digest(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// scopedHandler has every route, admin.token "root-token" and named tokens
// whose secret is "<id>-token", one per scope set.
func scopedHandler(o Options) http.Handler {
	o.Token = func() string { return "root-token" }
	o.Tokens = func() map[string]Token {
		return map[string]Token{
			"scraper":  {SHA256: digest("scraper-token"), Scopes: []string{ScopeRead}},
			"keyer":    {SHA256: digest("keyer-token"), Scopes: []string{ScopeKeys}},
			"purger":   {SHA256: digest("purger-token"), Scopes: []string{ScopePurge, ScopeRead}},
			"operator": {SHA256: digest("operator-token")}, // no scopes: admin
		}
	}
	o.NewID = func() string { return "rid-1" }
	o.Metrics = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("metrics")) })
	o.Purger = &recordingPurger{}
	o.Usage = fixedUsage{}
	o.Keys = stubKeys{}
	o.Dashboard = fixedSummary{}
	o.Pprof = func() bool { return true }
	return New(o)
}

func call(h http.Handler, method, target, token, body string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, target, strings.NewReader(body))
	r.RemoteAddr = "192.0.2.7:4242"
	if body != "" {
		r.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// TestScopes: each named token reaches the routes its scopes admit and gets
// 403 missing_scope, naming the scope, on the others; admin.token and a
// token configured without scopes reach everything.
func TestScopes(t *testing.T) {
	h := scopedHandler(Options{})
	tests := []struct {
		token, method, path, body string
		wantStatus                int
		wantScope                 string // named in the 403
	}{
		{"scraper-token", "GET", "/metrics", "", 200, ""},
		{"scraper-token", "GET", "/summary", "", 200, ""},
		{"scraper-token", "GET", "/keys", "", 200, ""},
		{"scraper-token", "GET", "/accounts", "", 200, ""},
		{"scraper-token", "GET", "/openapi.yaml", "", 200, ""},
		{"scraper-token", "POST", "/keys", `{"id":"new","plan":"full"}`, 403, "keys"},
		{"scraper-token", "DELETE", "/keys/a", "", 403, "keys"},
		{"scraper-token", "POST", "/accounts/a/reset", `{"window":"day"}`, 403, "keys"},
		{"scraper-token", "POST", "/purge?all=true", "", 403, "purge"},
		{"scraper-token", "GET", "/debug/pprof/", "", 403, "admin"},
		{"keyer-token", "POST", "/keys", `{"id":"new","plan":"full"}`, 201, ""},
		{"keyer-token", "GET", "/keys", "", 200, ""},
		{"keyer-token", "GET", "/metrics", "", 403, "read"},
		{"keyer-token", "POST", "/purge?all=true", "", 403, "purge"},
		{"purger-token", "POST", "/purge?all=true", "", 200, ""},
		{"purger-token", "GET", "/metrics", "", 200, ""},
		{"purger-token", "PATCH", "/accounts/a", `{"daily":5}`, 403, "keys"},
		{"operator-token", "POST", "/keys", `{"id":"new","plan":"full"}`, 201, ""},
		{"operator-token", "GET", "/debug/pprof/", "", 200, ""},
		{"root-token", "GET", "/debug/pprof/", "", 200, ""},
		{"root-token", "POST", "/purge?all=true", "", 200, ""},
	}
	for _, tc := range tests {
		t.Run(tc.token+" "+tc.method+" "+tc.path, func(t *testing.T) {
			w := call(h, tc.method, tc.path, tc.token, tc.body)
			if w.Code != tc.wantStatus {
				t.Fatalf("got %d %s; want %d", w.Code, w.Body, tc.wantStatus)
			}
			if tc.wantStatus != http.StatusForbidden {
				return
			}
			var body map[string]string
			if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
				t.Fatalf("body %q: %v", w.Body, err)
			}
			if body["code"] != "missing_scope" || !strings.Contains(body["error"], `"`+tc.wantScope+`"`) {
				t.Errorf("got %v; want code missing_scope naming %q", body, tc.wantScope)
			}
			if strings.Contains(w.Body.String(), tc.token) {
				t.Errorf("the answer repeats the token: %s", w.Body)
			}
		})
	}
}

// TestRefusalsLoggedCountedAndSlowed: wrong tokens are answered 401 until
// the address's failure budget is spent, then 429 with Retry-After even for
// the right token (the guess is not compared), until the budget refills.
// Every refusal, a scope's 403 and the key API's 409 included, is logged
// without the token and counted by status.
func TestRefusalsLoggedCountedAndSlowed(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC))
	core, logs := observer.New(zap.InfoLevel)
	reg := prometheus.NewRegistry()
	h := scopedHandler(Options{
		Log:      zap.New(core),
		Refusals: NewMetrics(reg),
		Failures: limits.NewAuthFailures(limits.AuthFailureConfig{PerMinute: 60, Burst: 2}, clk, 10),
		Clock:    clk,
	})
	steps := []struct {
		token, method, path, body string
		wantStatus                int
	}{
		{"guess-1", "GET", "/metrics", "", 401},
		{"guess-2", "GET", "/metrics", "", 401},
		{"guess-3", "GET", "/metrics", "", 429},
		{"root-token", "GET", "/metrics", "", 429},
	}
	for i, s := range steps {
		w := call(h, s.method, s.path, s.token, s.body)
		if w.Code != s.wantStatus {
			t.Fatalf("step %d: got %d %s; want %d", i, w.Code, w.Body, s.wantStatus)
		}
		if s.wantStatus == 429 && w.Header().Get("Retry-After") == "" {
			t.Errorf("step %d: 429 without Retry-After", i)
		}
	}
	clk.Advance(time.Second) // one failure's worth refills
	for i, s := range []struct {
		token, method, path, body string
		wantStatus                int
	}{
		{"root-token", "GET", "/metrics", "", 200},
		{"scraper-token", "POST", "/purge?all=true", "", 403},
		{"keyer-token", "POST", "/keys", `{"id":"taken","plan":"full"}`, 409},
		{"keyer-token", "POST", "/keys", `{"id":`, 400},
	} {
		if w := call(h, s.method, s.path, s.token, s.body); w.Code != s.wantStatus {
			t.Fatalf("after the refill, step %d: got %d %s; want %d", i, w.Code, w.Body, s.wantStatus)
		}
	}
	for status, want := range map[string]float64{"401": 2, "429": 2, "403": 1, "409": 1, "400": 1} {
		if got, _ := promtest.Sum(t, reg, "trendgate_admin_refused_total", "status", status); got != want {
			t.Errorf("trendgate_admin_refused_total{status=%q}: got %v; want %v", status, got, want)
		}
	}
	entries := logs.FilterMessage("admin request refused").All()
	if len(entries) != 7 {
		t.Fatalf("got %d refusal log lines; want 7", len(entries))
	}
	for _, e := range entries {
		for k, v := range e.ContextMap() {
			if s, ok := v.(string); ok && strings.Contains(s, "-token") || strings.Contains(k, "authorization") {
				t.Errorf("log line %v carries a token", e.ContextMap())
			}
		}
		if e.ContextMap()["ip"] != "192.0.2.7" {
			t.Errorf("log line %v: want ip 192.0.2.7", e.ContextMap())
		}
	}
	if got := entries[4].ContextMap()["token_id"]; got != "scraper" {
		t.Errorf("the 403's log line names token %v; want its id scraper", got)
	}
}
