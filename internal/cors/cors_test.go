package cors

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestServe(t *testing.T) {
	p := New(Config{AllowedOrigins: []string{"https://app.example.com", "http://localhost:3000"}, MaxAge: 90 * time.Second})
	tests := []struct {
		name                 string
		method               string
		header               map[string][]string
		wantAnswered         bool
		wantStatus           int
		wantAllowOrigin      string
		wantMaxAge, wantVary string
		wantExpose           bool
	}{
		{name: "no origin", method: "GET", wantVary: "Origin"},
		{name: "allowed origin, GET", method: "GET", header: map[string][]string{"Origin": {"https://app.example.com"}},
			wantAllowOrigin: "https://app.example.com", wantExpose: true, wantVary: "Origin"},
		{name: "other origin", method: "GET", header: map[string][]string{"Origin": {"https://evil.example"}}, wantVary: "Origin"},
		{name: "origin differs by port", method: "GET", header: map[string][]string{"Origin": {"http://localhost:3001"}}, wantVary: "Origin"},
		{name: "two Origin headers", method: "GET", header: map[string][]string{"Origin": {"https://app.example.com", "https://app.example.com"}}, wantVary: "Origin"},
		{name: "preflight", method: "OPTIONS", header: map[string][]string{"Origin": {"http://localhost:3000"},
			"Access-Control-Request-Method": {"GET"}, "Access-Control-Request-Headers": {"authorization"}},
			wantAnswered: true, wantStatus: 204, wantAllowOrigin: "http://localhost:3000", wantMaxAge: "90",
			wantVary: "Origin, Access-Control-Request-Method, Access-Control-Request-Headers"},
		{name: "preflight for POST", method: "OPTIONS", header: map[string][]string{"Origin": {"http://localhost:3000"},
			"Access-Control-Request-Method": {"POST"}}, wantVary: "Origin"},
		{name: "preflight from another origin", method: "OPTIONS", header: map[string][]string{"Origin": {"https://evil.example"},
			"Access-Control-Request-Method": {"GET"}}, wantVary: "Origin"},
		{name: "OPTIONS that is not a preflight", method: "OPTIONS", header: map[string][]string{"Origin": {"https://app.example.com"}},
			wantAllowOrigin: "https://app.example.com", wantExpose: true, wantVary: "Origin"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(tc.method, "/api4/public/topics/list/v1", nil)
			for k, v := range tc.header {
				r.Header[k] = v
			}
			w := httptest.NewRecorder()
			if got := p.Serve(w, r); got != tc.wantAnswered {
				t.Fatalf("answered: got %v; want %v", got, tc.wantAnswered)
			}
			if tc.wantAnswered && w.Code != tc.wantStatus {
				t.Errorf("status: got %d; want %d", w.Code, tc.wantStatus)
			}
			h := w.Header()
			if got := h.Get("Access-Control-Allow-Origin"); got != tc.wantAllowOrigin {
				t.Errorf("Allow-Origin: got %q; want %q", got, tc.wantAllowOrigin)
			}
			if got := h.Get("Access-Control-Max-Age"); got != tc.wantMaxAge {
				t.Errorf("Max-Age: got %q; want %q", got, tc.wantMaxAge)
			}
			if got := strings.Join(h.Values("Vary"), ", "); got != tc.wantVary {
				t.Errorf("Vary: got %q; want %q", got, tc.wantVary)
			}
			if got := h.Get("Access-Control-Expose-Headers"); (got != "") != tc.wantExpose || tc.wantExpose && !strings.Contains(got, "RateLimit") {
				t.Errorf("Expose-Headers: got %q; want RateLimit and the others: %v", got, tc.wantExpose)
			}
			if tc.wantAnswered {
				if got := h.Get("Access-Control-Allow-Headers"); !strings.Contains(got, "Authorization") {
					t.Errorf("Allow-Headers %q: want Authorization", got)
				}
				if got := h.Get("Access-Control-Allow-Methods"); got != "GET, HEAD" {
					t.Errorf("Allow-Methods %q; want GET, HEAD", got)
				}
			}
		})
	}
}

func TestOff(t *testing.T) {
	p := New(Config{MaxAge: time.Minute})
	if p != nil {
		t.Fatalf("New without origins: got %+v; want nil (off)", p)
	}
	r := httptest.NewRequest(http.MethodOptions, "/", nil)
	r.Header.Set("Origin", "https://app.example.com")
	r.Header.Set("Access-Control-Request-Method", "GET")
	w := httptest.NewRecorder()
	if p.Serve(w, r) || len(w.Header()) != 0 {
		t.Errorf("off: answered or set headers %v", w.Header())
	}
}

func TestDefaultMaxAge(t *testing.T) {
	p := New(Config{AllowedOrigins: []string{"https://a.example"}})
	if p.maxAge != "600" {
		t.Errorf("max age: got %s; want 600 (DefaultMaxAge)", p.maxAge)
	}
}
