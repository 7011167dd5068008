package proxy

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"testing"

	"trendgate/auth"
	"trendgate/cache"
	"trendgate/config"
	"trendgate/upstream"
)

// sizedToContent reports whether b holds no more than one allocation of
// its length would: the cache charges a body by its capacity, and the
// allocator rounds every allocation up to its size class anyway.
func sizedToContent(b []byte) bool {
	return cap(b) <= cap(append([]byte(nil), b...))
}

// TestStoredBodiesSizedToContent (issue 31, part 1): every body the cache
// keeps is sized to its content, so that what it is charged is what it
// holds. It walks every path that stores one: upstream answers (list,
// whatsup, an interval series, a window forwarded as it is), a window cut
// from a cached week, a cold window widened to the week and cut from it,
// the limited plan's projection and the gzip copies memoized on entries,
// and the same entries loaded from a snapshot by a second gateway. (The
// upstream client's unsized and gzip bodies are held to the same rule in
// upstream's TestReadBodyHoldsWhatItReads, the Redis tier's decoded
// entries in cache's TestDecodedBodiesSizedToContent.)
func TestStoredBodiesSizedToContent(t *testing.T) {
	clk, up, upURL := startDemo(t)
	full, err := auth.Generate()
	if err != nil {
		t.Fatal(err)
	}
	limited, err := auth.Generate()
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.Upstream.BaseURL = upURL
	cfg.Upstream.WindowReading = upstream.WindowReading{Start: "floor", End: "inclusive"} // the demo's, so cuts are made
	cfg.Cache.PersistPath = filepath.Join(t.TempDir(), "cache.snap")
	cfg.Keys = []config.Key{
		{ID: "full", SHA256: auth.Digest(full), Plan: config.PlanFull},
		{ID: "limited", SHA256: auth.Digest(limited), Plan: config.PlanLimited},
	}
	g := newTestChain(t, cfg, clk)
	get := func(target, key string, gzip bool) {
		t.Helper()
		r := httptest.NewRequest(http.MethodGet, target, nil)
		r.Header.Set("Authorization", "Bearer "+key)
		if gzip {
			r.Header.Set("Accept-Encoding", "gzip")
		}
		w := httptest.NewRecorder()
		g.ServeHTTP(w, r)
		if w.Code != http.StatusOK {
			t.Fatalf("%s: %d %s", target, w.Code, w.Body)
		}
	}
	topics := up.Topics()
	esc := func(i int) string { return url.PathEscape(topics[i]) }
	now := clk.Now().Unix()
	week := "/api4/public/topic/" + esc(0) + "/time-series/v1"
	get("/api4/public/topics/list/v1", full, true)
	get("/api4/public/topic/"+esc(0)+"/whatsup/v1", limited, true)
	// A forwarded window of a fourth topic whose edges fall inside hours
	// shows how the upstream reads them (a stated reading is used once an
	// answer agrees), so that the next windows can be cut.
	get(fmt.Sprintf("/api4/public/topic/%s/time-series/v1?start=%d&end=%d", esc(3), now-3*24*3600, now-2*24*3600), full, false)
	get(week, full, false)                                                                                                                   // an upstream answer
	get(week, limited, true)                                                                                                                 // its projection and gzip copies
	get(fmt.Sprintf("%s?start=%d&end=%d", week, now-3*24*3600, now-2*24*3600), full, true)                                                   // cut from the week
	get(fmt.Sprintf("/api4/public/topic/%s/time-series/v1?start=%d&end=%d", esc(1), now-7*24*3600, now), limited, true)                      // widened
	get(fmt.Sprintf("/api4/public/topic/%s/time-series/v1?bucket=day&start=%d&end=%d", esc(2), now-40*24*3600, now-30*24*3600), full, false) // forwarded

	check := func(g *testChain, when string, memo bool) (entries int) {
		t.Helper()
		ctx := context.Background()
		derived := false
		for _, topic := range append([]string{""}, topics[:3]...) {
			for _, key := range g.local.TopicKeys(ctx, topic) {
				e, ok := g.cache.Peek(ctx, key)
				if !ok {
					continue
				}
				entries++
				derived = derived || e.Derived
				if !sizedToContent(e.Body) {
					t.Errorf("%s: %s: body of %d bytes has capacity %d", when, key, len(e.Body), cap(e.Body))
				}
				if !memo {
					continue
				}
				for _, mk := range []any{fullVariant{}, planVariant(config.PlanLimited)} {
					m, ok := e.Memo(mk)
					if !ok {
						continue
					}
					v := m.(*variant)
					if !sizedToContent(v.body) {
						t.Errorf("%s: %s: %T variant of %d bytes has capacity %d", when, key, mk, len(v.body), cap(v.body))
					}
					if z := v.gz.Load(); z != nil && !sizedToContent(z.body) {
						t.Errorf("%s: %s: %T gzip copy of %d bytes has capacity %d", when, key, mk, len(z.body), cap(z.body))
					}
				}
			}
		}
		if memo && !derived { // (a snapshot does not keep Derived)
			t.Errorf("%s: no cut among the entries; the test no longer covers cuts", when)
		}
		return entries
	}
	held := check(g, "served", true)
	if held < 6 {
		t.Fatalf("%d entries held; want the 7 requests' answers (the cuts, the week and the widened week)", held)
	}
	if err := g.store.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	opts := cache.SnapshotOptions{MaxBytes: cfg.Cache.PersistBound(), MaxStale: cfg.Cache.MaxStale, Now: clk.Now()}
	if _, err := g.local.SaveSnapshot(cfg.Cache.PersistPath, opts); err != nil {
		t.Fatal(err)
	}

	g2 := newTestChain(t, cfg, clk)
	if _, err := g2.local.LoadSnapshot(cfg.Cache.PersistPath, opts); err != nil {
		t.Fatal(err)
	}
	if loaded := check(g2, "loaded from the snapshot", false); loaded != held {
		t.Errorf("%d entries loaded from the snapshot; want the %d saved", loaded, held)
	}
}
