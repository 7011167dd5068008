package admin

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"trendgate/internal/clock"
)

// fixedUsage is a UsageSource holding a fixed list.
type fixedUsage struct {
	keys []KeyUsage
	err  error
}

func (f fixedUsage) KeysUsage(context.Context) ([]KeyUsage, error) { return f.keys, f.err }

func (f fixedUsage) KeyUsage(_ context.Context, id string) (KeyUsage, error) {
	if f.err != nil {
		return KeyUsage{}, f.err
	}
	for _, k := range f.keys {
		if k.ID == id {
			return k, nil
		}
	}
	return KeyUsage{}, ErrUnknownKey
}

type fixedSummary struct{ s Summary }

func (f fixedSummary) Summary(context.Context) (Summary, error) { return f.s, nil }

var consoleNow = time.Date(2026, 11, 19, 10, 30, 0, 0, time.UTC)

func consoleHandler(token string, usage UsageSource) http.Handler {
	return New(Options{
		Token:     func() string { return token },
		NewID:     func() string { return "rid-7" },
		Usage:     usage,
		Dashboard: fixedSummary{Summary{Outcomes: []OutcomeRate{{Outcome: "hit", PerSecond: 1.5, Total: 9}}}},
		Clock:     clock.NewFake(consoleNow),
	})
}

func TestConsoleRoutes(t *testing.T) {
	keys := []KeyUsage{{ID: "team-a", Plan: "full", State: "active", Source: "local"}, {ID: "team b", Plan: "limited", State: "disabled"}}
	tests := []struct {
		name       string
		token      string // configured
		usage      UsageSource
		path       string
		send       string // token sent
		origin     string
		wantStatus int
		wantCode   string // error code, or "" for success
		wantIn     string // substring of the body on success
	}{
		{name: "list", usage: fixedUsage{keys: keys}, path: "/keys", wantStatus: 200, wantIn: `"generated_at":"2026-11-19T10:30:00Z","keys":[{"id":"team-a"`},
		{name: "one", usage: fixedUsage{keys: keys}, path: "/keys/team-a", wantStatus: 200, wantIn: `"id":"team-a","plan":"full","state":"active"`},
		{name: "escaped id", usage: fixedUsage{keys: keys}, path: "/keys/team%20b", wantStatus: 200, wantIn: `"state":"disabled"`},
		{name: "unknown id", usage: fixedUsage{keys: keys}, path: "/keys/nobody", wantStatus: 404, wantCode: "unknown_key"},
		{name: "empty list is an array", usage: fixedUsage{}, path: "/keys", wantStatus: 200, wantIn: `"keys":[]`},
		{name: "source fails", usage: fixedUsage{err: errors.New("boom")}, path: "/keys", wantStatus: 500, wantCode: "internal_error"},
		{name: "token required", token: "tok", usage: fixedUsage{keys: keys}, path: "/keys", wantStatus: 401, wantCode: "invalid_admin_token"},
		{name: "wrong token", token: "tok", usage: fixedUsage{keys: keys}, path: "/keys/team-a", send: "nope", wantStatus: 401, wantCode: "invalid_admin_token"},
		{name: "right token", token: "tok", usage: fixedUsage{keys: keys}, path: "/keys/team-a", send: "tok", wantStatus: 200, wantIn: `"id":"team-a"`},
		{name: "no token, cross-site", usage: fixedUsage{keys: keys}, path: "/keys", origin: "https://evil.example", wantStatus: 403, wantCode: "admin_not_local"},
		{name: "summary", path: "/summary", wantStatus: 200, wantIn: `"outcomes":[{"outcome":"hit","per_second":1.5,"total":9}]`},
		{name: "summary needs the token", token: "tok", path: "/summary", wantStatus: 401, wantCode: "invalid_admin_token"},
		{name: "summary, no token, cross-site", path: "/summary", origin: "null", wantStatus: 403, wantCode: "admin_not_local"},
		{name: "no usage source: no route", path: "/keys", wantStatus: 404},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var usage UsageSource
			if tc.usage != nil {
				usage = tc.usage
			}
			r := httptest.NewRequest("GET", tc.path, nil)
			r.Host = "127.0.0.1:9090"
			if tc.send != "" {
				r.Header.Set("Authorization", "Bearer "+tc.send)
			}
			if tc.origin != "" {
				r.Header.Set("Origin", tc.origin)
			}
			w := httptest.NewRecorder()
			consoleHandler(tc.token, usage).ServeHTTP(w, r)
			if w.Code != tc.wantStatus {
				t.Fatalf("got %d %s; want %d", w.Code, w.Body, tc.wantStatus)
			}
			if tc.wantCode != "" {
				var body map[string]string
				if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
					t.Fatalf("error body %q: %v", w.Body, err)
				}
				if body["code"] != tc.wantCode || body["request_id"] != "rid-7" || body["error"] == "" || len(body) != 3 {
					t.Errorf("got %v; want exactly error, code %q and request_id rid-7", body, tc.wantCode)
				}
				return
			}
			if !strings.Contains(w.Body.String(), tc.wantIn) {
				t.Errorf("got body %s; want it to contain %s", w.Body, tc.wantIn)
			}
			if ct := w.Header().Get("Content-Type"); tc.wantStatus == 200 && !strings.HasPrefix(ct, "application/json") {
				t.Errorf("got Content-Type %q; want JSON", ct)
			}
		})
	}
}

// TestDashboardPage: the page and its files are served without the token
// (they hold no data), locked down by CSP, and never mention a token in a
// URL; without a Dashboard source there is no page.
func TestDashboardPage(t *testing.T) {
	h := consoleHandler("tok", nil)
	for _, tc := range []struct {
		path, wantType, wantIn string
	}{
		{"/", "text/html", `<script src="/dashboard/app.js" defer></script>`},
		{"/dashboard/app.js", "text/javascript", `headers["Authorization"] = "Bearer " + token`},
		{"/dashboard/app.css", "text/css", "--fg"},
	} {
		t.Run(tc.path, func(t *testing.T) {
			w := serve(h, "GET", tc.path, "")
			if w.Code != 200 || !strings.HasPrefix(w.Header().Get("Content-Type"), tc.wantType) {
				t.Fatalf("got %d %q; want 200 %s", w.Code, w.Header().Get("Content-Type"), tc.wantType)
			}
			if !strings.Contains(w.Body.String(), tc.wantIn) {
				t.Errorf("body lacks %q", tc.wantIn)
			}
			if csp := w.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "frame-ancestors 'none'") {
				t.Errorf("got CSP %q; want default-src 'none' and frame-ancestors 'none'", csp)
			}
			if strings.Contains(w.Body.String(), "?token") || strings.Contains(w.Body.String(), "&token") {
				t.Errorf("%s builds a URL with the token", tc.path)
			}
		})
	}
	for _, path := range []string{"/dashboard/", "/dashboard/nope.js", "/index.html"} {
		if w := serve(h, "GET", path, ""); w.Code == 200 {
			t.Errorf("GET %s: got 200; want no such file", path)
		}
	}
	if w := serve(New(Options{}), "GET", "/", ""); w.Code != 404 {
		t.Errorf("without a Dashboard source GET / got %d; want 404", w.Code)
	}
}
