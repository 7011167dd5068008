package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestStateChangeWord(t *testing.T) {
	for _, tc := range []struct {
		path, want string
	}{
		{"/api4/public/searches/{slug}/delete", "delete"},
		{"/api4/public/searches/{slug}/delete/v1", "delete"},
		{"/api4/public/searches/deleteSearch/v1", "delete"},
		{"/api4/public/search-create/v1", "create"},
		{"/api4/public/watchlist/add_coin/v1", "add"},
		{"/api4/public/alerts/{id}/UPDATE", "update"},
		{"/api4/public/settings/set", "set"},
		// Reads: no word names a change, and parameters are not words.
		{"/api4/public/coins/list/v1", ""},
		{"/api4/public/creators/list/v1", ""},
		{"/api4/public/address/assets/settings/v1", ""},
		{"/api4/public/topic/{delete}/posts/v1", ""},
		{"/api4/public/updates/v1", ""},
	} {
		if got := stateChangeWord(tc.path); got != tc.want {
			t.Errorf("stateChangeWord(%q) = %q; want %q", tc.path, got, tc.want)
		}
	}
}

// TestStateChangingRouteWarned: config check warns about a cached route
// whose path names a change of state, and not once it is cache: false
// (issue 41: such a route was cached silently).
func TestStateChangingRouteWarned(t *testing.T) {
	const text = `routes:
  - name: delete_search
    path: /api4/public/searches/{slug}/delete
    params: {slug: slug}
    cost: 1
    %s
`
	for _, tc := range []struct {
		name, setting string
		warned        bool
	}{
		{"cached", "fresh: 1m", true},
		{"pass-through", "cache: false", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "trendgate.yaml")
			if err := os.WriteFile(path, []byte(strings.Replace(text, "%s", tc.setting, 1)), 0o600); err != nil {
				t.Fatal(err)
			}
			cfg, err := Load(path)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, w := range cfg.Warnings() {
				if strings.HasPrefix(w, "routes[0].path") {
					got = append(got, w)
				}
			}
			want := `routes[0].path: "/api4/public/searches/{slug}/delete" names a change of state (delete), yet the route is cached`
			switch {
			case tc.warned && (len(got) != 1 || !strings.HasPrefix(got[0], want)):
				t.Errorf("warnings %q; want one starting %q", got, want)
			case !tc.warned && len(got) != 0:
				t.Errorf("warnings %q; want none about the path", got)
			}
			if !tc.warned && !cfg.Routes[0].PassThrough() {
				t.Errorf("cache: false read as %v; want a pass-through route", cfg.Routes[0].Cache)
			}
		})
	}
}

// TestPassThroughRouteRefusesLifetimes: fresh and stale mean nothing on a
// route never cached, so setting them is a mistake named by its path.
func TestPassThroughRouteRefusesLifetimes(t *testing.T) {
	_, err := Parse([]byte("routes:\n  - name: r\n    path: /api4/public/r/v1\n    cost: 1\n    cache: false\n    fresh: 1m\n"), nil)
	if err == nil || !strings.Contains(err.Error(), "routes[0].fresh: must be left out with cache: false") {
		t.Errorf("Parse = %v; want routes[0].fresh refused", err)
	}
}
