package admin

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
)

func TestPprofBehindTokenAndSwitch(t *testing.T) {
	var on atomic.Bool
	h := New(Options{
		Token: func() string { return "admin-test-token" },
		Pprof: on.Load,
		NewID: func() string { return "rid-1" },
	})
	for _, tc := range []struct {
		name     string
		on       bool
		path     string
		token    string
		want     int
		wantCode string // error code of a JSON error body
		wantBody string // a substring of a 200 body
	}{
		{"off", false, "/debug/pprof/", "admin-test-token", http.StatusNotFound, "not_found", ""},
		{"on without token", true, "/debug/pprof/", "", http.StatusUnauthorized, "invalid_admin_token", ""},
		{"on wrong token", true, "/debug/pprof/heap", "wrong", http.StatusUnauthorized, "invalid_admin_token", ""},
		{"index", true, "/debug/pprof/", "admin-test-token", http.StatusOK, "", "heap"},
		{"heap", true, "/debug/pprof/heap?debug=1", "admin-test-token", http.StatusOK, "", "heap profile"},
		{"runtime metrics", true, "/debug/pprof/runtime-metrics", "admin-test-token", http.StatusOK, "", "/sched/latencies:seconds"},
		{"runtime metrics without token", true, "/debug/pprof/runtime-metrics", "", http.StatusUnauthorized, "invalid_admin_token", ""},
		{"runtime metrics off", false, "/debug/pprof/runtime-metrics", "admin-test-token", http.StatusNotFound, "not_found", ""},
		{"off again", false, "/debug/pprof/heap?debug=1", "admin-test-token", http.StatusNotFound, "not_found", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			on.Store(tc.on)
			w := serve(h, http.MethodGet, tc.path, tc.token)
			if w.Code != tc.want {
				t.Fatalf("got %d %s; want %d", w.Code, w.Body, tc.want)
			}
			if tc.wantCode != "" {
				var body struct{ Code, RequestID string }
				if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || body.Code != tc.wantCode {
					t.Errorf("body %s; want JSON error code %q", w.Body, tc.wantCode)
				}
			}
			if !strings.Contains(w.Body.String(), tc.wantBody) {
				t.Errorf("body lacks %q", tc.wantBody)
			}
		})
	}
}

func TestNoPprofRouteWithoutHook(t *testing.T) {
	h := New(Options{})
	if w := serve(h, http.MethodGet, "/debug/pprof/", ""); w.Code != http.StatusNotFound {
		t.Errorf("got %d; want 404 (no route)", w.Code)
	}
}
