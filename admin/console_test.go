package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"trendgate/internal/clock"
)

// fixedUsage is a UsageSource holding fixed lists, each in id order.
type fixedUsage struct {
	keys     []KeyUsage
	accounts []AccountUsage
	err      error
}

func (f fixedUsage) KeysPage(_ context.Context, q KeyQuery) (KeyPage, error) {
	if f.err != nil {
		return KeyPage{}, f.err
	}
	if q.Account == "nobody" {
		return KeyPage{}, ErrUnknownAccount
	}
	var page KeyPage
	for _, k := range f.keys {
		if k.ID <= q.After || (q.Account != "" && k.Account != q.Account) || (q.State != "" && k.State != q.State) {
			continue
		}
		if len(page.Keys) == q.Limit {
			page.More = true
			break
		}
		page.Keys = append(page.Keys, k)
	}
	return page, nil
}

func (f fixedUsage) AccountsPage(_ context.Context, q PageQuery) (AccountPage, error) {
	if f.err != nil {
		return AccountPage{}, f.err
	}
	var page AccountPage
	for _, a := range f.accounts {
		if a.ID <= q.After {
			continue
		}
		if len(page.Accounts) == q.Limit {
			page.More = true
			break
		}
		page.Accounts = append(page.Accounts, a)
	}
	return page, nil
}

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
	keys := []KeyUsage{{ID: "team b", Plan: "limited", State: "disabled"}, {ID: "team-a", Plan: "full", State: "active", Source: "local"}}
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
		{name: "list", usage: fixedUsage{keys: keys}, path: "/keys", wantStatus: 200, wantIn: `"generated_at":"2026-11-19T10:30:00Z","keys":[{"id":"team b"`},
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
		{name: "last page has no cursor", usage: fixedUsage{keys: keys}, path: "/keys?limit=2", wantStatus: 200, wantIn: `"next_cursor":null`},
		{name: "filter by state", usage: fixedUsage{keys: keys}, path: "/keys?state=active", wantStatus: 200, wantIn: `"keys":[{"id":"team-a"`},
		{name: "limit 0", usage: fixedUsage{keys: keys}, path: "/keys?limit=0", wantStatus: 400, wantCode: "invalid_parameter"},
		{name: "limit over the maximum", usage: fixedUsage{keys: keys}, path: "/keys?limit=1001", wantStatus: 400, wantCode: "invalid_parameter"},
		{name: "limit not a number", usage: fixedUsage{keys: keys}, path: "/keys?limit=ten", wantStatus: 400, wantCode: "invalid_parameter"},
		{name: "limit twice", usage: fixedUsage{keys: keys}, path: "/keys?limit=1&limit=2", wantStatus: 400, wantCode: "duplicate_parameter"},
		{name: "unknown state", usage: fixedUsage{keys: keys}, path: "/keys?state=gone", wantStatus: 400, wantCode: "invalid_parameter"},
		{name: "empty account", usage: fixedUsage{keys: keys}, path: "/keys?account=", wantStatus: 400, wantCode: "invalid_parameter"},
		{name: "unknown account", usage: fixedUsage{keys: keys}, path: "/keys?account=nobody", wantStatus: 404, wantCode: "unknown_account"},
		{name: "unknown parameter", usage: fixedUsage{keys: keys}, path: "/keys?page=2", wantStatus: 400, wantCode: "unknown_parameter"},
		{name: "made-up cursor", usage: fixedUsage{keys: keys}, path: "/keys?cursor=team-a", wantStatus: 400, wantCode: "invalid_cursor"},
		{name: "accounts' cursor on keys", usage: fixedUsage{keys: keys}, path: "/keys?cursor=" + accountsCursor.encode("x"), wantStatus: 400, wantCode: "invalid_cursor"},
		{name: "accounts take no state", usage: fixedUsage{keys: keys}, path: "/accounts?state=active", wantStatus: 400, wantCode: "unknown_parameter"},
		{name: "accounts", usage: fixedUsage{accounts: []AccountUsage{{ID: "acme", Keys: []string{"team-a"}}}}, path: "/accounts", wantStatus: 200,
			wantIn: `"accounts":[{"id":"acme","plan":"","keys":["team-a"]`},
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

// TestKeyPages walks GET /keys and GET /accounts page by page with the
// cursor each page answers: every entry once, in order, and the last page
// without a cursor.
func TestKeyPages(t *testing.T) {
	var src fixedUsage
	for i := range 7 {
		id := fmt.Sprintf("k%02d", i)
		src.keys = append(src.keys, KeyUsage{ID: id, Account: "a"})
		src.accounts = append(src.accounts, AccountUsage{ID: id})
	}
	h := consoleHandler("", src)
	for _, list := range []string{"keys", "accounts"} {
		var got []string
		next := ""
		for pages := 0; ; pages++ {
			if pages > 10 {
				t.Fatalf("%s: more than 10 pages", list)
			}
			path := "/" + list + "?limit=3"
			if next != "" {
				path += "&cursor=" + next
			}
			w := serve(h, "GET", path, "")
			if w.Code != 200 {
				t.Fatalf("GET %s: got %d %s", path, w.Code, w.Body)
			}
			var page struct {
				Keys       []struct{ ID string }
				Accounts   []struct{ ID string }
				NextCursor *string `json:"next_cursor"`
			}
			if err := json.Unmarshal(w.Body.Bytes(), &page); err != nil {
				t.Fatal(err)
			}
			for _, e := range append(page.Keys, page.Accounts...) {
				got = append(got, e.ID)
			}
			if page.NextCursor == nil {
				break
			}
			next = *page.NextCursor
		}
		if want := "k00 k01 k02 k03 k04 k05 k06"; strings.Join(got, " ") != want {
			t.Errorf("%s: got %v; want %s", list, got, want)
		}
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
