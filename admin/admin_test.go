package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"trendgate/api"
	"trendgate/cache"
	"trendgate/internal/clock"
)

type recordingPurger struct{ got []cache.Selector }

func (p *recordingPurger) Purge(_ context.Context, sel cache.Selector) int {
	p.got = append(p.got, sel)
	return 3
}

func serve(h http.Handler, method, target, token string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, target, nil)
	r.Host = "127.0.0.1:9090"
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func TestTokenGuardsAllButHealthz(t *testing.T) {
	p := &recordingPurger{}
	h := New(Options{
		Token:   func() string { return "admin-test-token" },
		Metrics: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("m 1\n")) }),
		Purger:  p,
		NewID:   func() string { return "rid-1" },
	})
	if w := serve(h, "GET", "/healthz", ""); w.Code != http.StatusOK {
		t.Errorf("/healthz without token: %d; want 200", w.Code)
	}
	for _, c := range []struct{ method, path string }{{"GET", "/readyz"}, {"GET", "/metrics"}, {"POST", "/purge?all=true"}} {
		for _, tok := range []string{"", "wrong"} {
			w := serve(h, c.method, c.path, tok)
			var body struct {
				RequestID string `json:"request_id"`
			}
			_ = json.Unmarshal(w.Body.Bytes(), &body)
			if w.Code != http.StatusUnauthorized || w.Header().Get("WWW-Authenticate") != "Bearer" || body.RequestID != "rid-1" {
				t.Errorf("%s %s token %q: %d %q %+v; want 401 with a Bearer challenge and the request id", c.method, c.path, tok, w.Code, w.Header().Get("WWW-Authenticate"), body)
			}
		}
		if w := serve(h, c.method, c.path, "admin-test-token"); w.Code != http.StatusOK {
			t.Errorf("%s %s with the token: %d; want 200", c.method, c.path, w.Code)
		}
	}
	if len(p.got) != 1 || !p.got[0].All {
		t.Errorf("purges: %+v; want exactly the authorized all=true", p.got)
	}
}

func TestPurgeSelectors(t *testing.T) {
	p := &recordingPurger{}
	h := New(Options{Purger: p})
	for _, c := range []struct {
		query string
		want  cache.Selector
	}{
		{"all=true", cache.Selector{All: true}},
		{"key=v1%7Clist", cache.Selector{Key: "v2|list"}},
		{"topic=Bitcoin", cache.Selector{Topic: "bitcoin"}},
		{"topic=%23AI", cache.Selector{Topic: "#ai"}},
		{"topic=AI+Agents", cache.Selector{Topic: "ai agents"}},
	} {
		p.got = nil
		w := serve(h, "POST", "/purge?"+c.query, "")
		var out struct{ Purged int }
		if err := json.Unmarshal(w.Body.Bytes(), &out); w.Code != http.StatusOK || err != nil || out.Purged != 3 {
			t.Errorf("%s: %d %q; want 200 {\"purged\":3}", c.query, w.Code, w.Body)
		}
		if len(p.got) != 1 || p.got[0] != c.want {
			t.Errorf("%s: purged %+v; want %+v", c.query, p.got, c.want)
		}
	}
	for _, query := range []string{"all=yes", "topic=a%2Fb", "topic=%20btc", "topic=" + strings.Repeat("x", 65)} {
		p.got = nil
		if w := serve(h, "POST", "/purge?"+query, ""); w.Code != http.StatusBadRequest || len(p.got) != 0 {
			t.Errorf("purge?%s: %d, purged %+v; want 400 and nothing purged", query, w.Code, p.got)
		}
	}
}

func TestReadyz(t *testing.T) {
	ready := false
	h := New(Options{Ready: func() (bool, string) { return ready, "warming up" }})
	if w := serve(h, "GET", "/readyz", ""); w.Code != http.StatusServiceUnavailable {
		t.Errorf("not ready: %d; want 503", w.Code)
	}
	ready = true
	if w := serve(h, "GET", "/readyz", ""); w.Code != http.StatusOK {
		t.Errorf("ready: %d; want 200", w.Code)
	}
	if w := serve(New(Options{}), "GET", "/metrics", ""); w.Code != http.StatusNotFound {
		t.Errorf("/metrics without a Metrics hook: %d; want 404", w.Code)
	}
}

// TestNoTokenRefusesCrossSite: without a token, a browser-borne request (an
// Origin header, or a rebound DNS name in Host) cannot purge or read.
func TestNoTokenRefusesCrossSite(t *testing.T) {
	p := &recordingPurger{}
	h := New(Options{Purger: p, Metrics: http.NotFoundHandler()})
	for _, c := range []struct {
		host, origin string
		want         int
	}{
		{"127.0.0.1:9090", "", http.StatusOK},
		{"localhost:9090", "", http.StatusOK},
		{"[::1]:9090", "", http.StatusOK},
		{"127.0.0.1:9090", "https://evil.example", http.StatusForbidden},
		{"127.0.0.1:9090", "null", http.StatusForbidden},
		{"evil.example:9090", "", http.StatusForbidden},
		{"192.0.2.10:9090", "", http.StatusForbidden},
	} {
		p.got = nil
		r := httptest.NewRequest("POST", "/purge?all=true", nil)
		r.Host = c.host
		if c.origin != "" {
			r.Header.Set("Origin", c.origin)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != c.want {
			t.Errorf("Host %q Origin %q: %d %s; want %d", c.host, c.origin, w.Code, w.Body, c.want)
		}
		if c.want != http.StatusOK && len(p.got) != 0 {
			t.Errorf("Host %q Origin %q: purged %+v", c.host, c.origin, p.got)
		}
	}
	r := httptest.NewRequest("GET", "/healthz", nil)
	r.Host = "evil.example"
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusOK {
		t.Errorf("/healthz from any Host: %d; want 200", w.Code)
	}
}

// TestOpenAPIDocument: /openapi.yaml serves the embedded document, behind
// the admin token like every route but /healthz.
func TestOpenAPIDocument(t *testing.T) {
	tests := []struct {
		name       string
		token      string // admin.token in force
		send       string // token the request presents
		origin     bool   // the request carries an Origin header
		wantStatus int
	}{
		{name: "token", token: "admin-test-token", send: "admin-test-token", wantStatus: http.StatusOK},
		{name: "missing token", token: "admin-test-token", wantStatus: http.StatusUnauthorized},
		{name: "no token configured, same host", wantStatus: http.StatusOK},
		{name: "no token configured, cross-site", origin: true, wantStatus: http.StatusForbidden},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := New(Options{Token: func() string { return tc.token }})
			r := httptest.NewRequest("GET", "/openapi.yaml", nil)
			r.Host = "127.0.0.1:9090"
			if tc.send != "" {
				r.Header.Set("Authorization", "Bearer "+tc.send)
			}
			if tc.origin {
				r.Header.Set("Origin", "https://example.com")
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != tc.wantStatus {
				t.Fatalf("got %d; want %d", w.Code, tc.wantStatus)
			}
			if tc.wantStatus != http.StatusOK {
				return
			}
			if got := w.Header().Get("Content-Type"); got != "application/yaml" {
				t.Errorf("Content-Type %q; want application/yaml", got)
			}
			if !bytes.Equal(w.Body.Bytes(), api.OpenAPI) || !bytes.HasPrefix(api.OpenAPI, []byte("openapi: 3.1")) {
				t.Errorf("body is not the embedded OpenAPI 3.1 document (%d bytes; want %d)", w.Body.Len(), len(api.OpenAPI))
			}
		})
	}
}

// countingPurger purges n entries for the keys in hit, none otherwise.
type countingPurger struct {
	hit map[string]int
	got []cache.Selector
}

func (p *countingPurger) Purge(_ context.Context, sel cache.Selector) int {
	p.got = append(p.got, sel)
	return p.hit[sel.Key]
}

// TestPurgeByURL is a regression test: purging one entry needed the
// internal cache key, which nothing displays, and key=list silently purged
// 0. url= takes the public request URL and canonicalizes it as the request
// would be; a key or URL with nothing cached says so.
func TestPurgeByURL(t *testing.T) {
	now := time.Date(2026, 11, 19, 10, 30, 0, 0, time.UTC)
	p := &countingPurger{hit: map[string]int{
		"v2|whatsup|#ai":             1,
		"v2|series|bitcoin|day|1m||": 1,
		"v2|list":                    1,
	}}
	h := New(Options{Purger: p, Clock: clock.NewFake(now)})
	tests := []struct {
		query   string
		status  int
		code    string // error code, for non-200
		wantKey string // the key purged (or looked for)
	}{
		{"url=/api4/public/topic/%23AI/whatsup/v1", 200, "", "v2|whatsup|#ai"},
		{"url=/api4/public/topic/BitCoin/time-series/v1?interval=1m&bucket=days", 200, "", "v2|series|bitcoin|day|1m||"},
		{"url=https://gw.example.com/api4/public/topics/list/v1", 200, "", "v2|list"},
		{"url=%2Fapi4%2Fpublic%2Ftopics%2Flist%2Fv1", 200, "", "v2|list"},
		{"url=/api4/public/topic/ethereum/whatsup/v1", 404, "not_cached", "v2|whatsup|ethereum"},
		{"url=/api4/public/topic/bitcoin/time-series/v1?bucket=weeks", 400, "invalid_bucket", ""},
		{"url=/api4/public/topic/a%2Fb/whatsup/v1", 400, "invalid_topic", ""},
		{"url=/api4/public/nope", 400, "invalid_purge", ""},
		{"url=bitcoin", 400, "invalid_purge", ""},
		{"key=list", 404, "not_cached", "list"},
		{"key=" + url.QueryEscape("v2|list"), 200, "", "v2|list"},
	}
	for _, tc := range tests {
		t.Run(tc.query, func(t *testing.T) {
			p.got = nil
			w := serve(h, "POST", "/purge?"+tc.query, "")
			if w.Code != tc.status {
				t.Fatalf("status %d %s; want %d", w.Code, w.Body, tc.status)
			}
			if tc.code != "" {
				var e struct{ Error, Code string }
				if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Code != tc.code || e.Error == "" {
					t.Errorf("body %s; want JSON error with code %s", w.Body, tc.code)
				}
			}
			if tc.wantKey == "" {
				if len(p.got) != 0 {
					t.Errorf("purged %+v for a refused request", p.got)
				}
				return
			}
			if len(p.got) != 1 || p.got[0] != (cache.Selector{Key: tc.wantKey}) {
				t.Errorf("purged %+v; want key %q", p.got, tc.wantKey)
			}
		})
	}
}

// TestUnknownRoutesAreJSON is a regression test: the admin mux answered
// unknown routes and methods in plain text. Every route, including ones
// added later, gets JSON 404 and 405 (with Allow).
func TestUnknownRoutesAreJSON(t *testing.T) {
	h := New(Options{Purger: &recordingPurger{}, Metrics: http.NotFoundHandler(), NewID: func() string { return "rid-1" }})
	tests := []struct {
		method, path string
		status       int
		code, allow  string
	}{
		{"GET", "/nope", 404, "not_found", ""},
		{"GET", "/healthz/extra", 404, "not_found", ""},
		{"GET", "/purge", 405, "method_not_allowed", "POST"},
		{"DELETE", "/healthz", 405, "method_not_allowed", "GET, HEAD"},
		{"POST", "/metrics", 405, "method_not_allowed", "GET, HEAD"},
	}
	for _, tc := range tests {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			w := serve(h, tc.method, tc.path, "")
			var e struct {
				Error, Code string
				RequestID   string `json:"request_id"`
			}
			if w.Code != tc.status || !strings.HasPrefix(w.Header().Get("Content-Type"), "application/json") {
				t.Fatalf("%d %s %q; want %d JSON", w.Code, w.Header().Get("Content-Type"), w.Body, tc.status)
			}
			if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Code != tc.code || e.RequestID != "rid-1" {
				t.Errorf("body %s; want code %s and request_id rid-1", w.Body, tc.code)
			}
			if got := w.Header().Get("Allow"); got != tc.allow {
				t.Errorf("Allow %q; want %q", got, tc.allow)
			}
		})
	}
	if w := serve(h, "GET", "/healthz", ""); w.Code != 200 {
		t.Errorf("GET /healthz: %d; want 200", w.Code)
	}
}
