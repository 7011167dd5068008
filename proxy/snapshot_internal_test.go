package proxy

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"trendgate/auth"
	"trendgate/config"
	"trendgate/internal/testing/promtest"
)

// TestOneSnapshotPerRequest reloads the configuration between the stages
// of one request (after authentication, before the limiter and the cache)
// and checks that the request finished on the snapshot it entered with:
// the old plan's data shape and the old cost, never a mix.
func TestOneSnapshotPerRequest(t *testing.T) {
	clk, _, upURL := startDemo(t)

	key, err := auth.Generate()
	if err != nil {
		t.Fatal(err)
	}
	before := config.Default()
	before.Upstream.BaseURL = upURL
	before.Keys = []config.Key{{ID: "team", SHA256: auth.Digest(key), Plan: config.PlanFull}}
	after := *before
	after.Keys = []config.Key{{ID: "team", SHA256: auth.Digest(key), Plan: config.PlanLimited}}
	after.Limits.Costs.List = 7

	g := newTestChain(t, before, clk)
	reloadBetween := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			set, err := Compile(&after)
			if err != nil {
				t.Errorf("Compile: %v", err)
			}
			g.Swap(set)
			next.ServeHTTP(w, r)
		})
	}
	h := compose(http.HandlerFunc(g.serveAPI), g.observe, g.route, g.authenticate, reloadBetween, g.limit)

	r := httptest.NewRequest(http.MethodGet, "/api4/public/topics/list/v1", nil)
	r.Header.Set("Authorization", "Bearer "+key)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusOK {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	if mode := w.Header().Get("X-Data-Mode"); mode != "" {
		t.Errorf("X-Data-Mode %q: the request was authenticated on the full plan", mode)
	}
	if got, _ := promtest.Sum(t, g.reg, "trendgate_quota_charged_units_total", "account", "team"); got != 1 {
		t.Errorf("charged %v units; want 1, the list cost of the snapshot the request entered with", got)
	}
	if g.Settings().Config() != &after {
		t.Error("the reload did not take effect for later requests")
	}
}
