package gateway_test

import (
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"trendgate/api"
	"trendgate/cache"
	"trendgate/config"
	"trendgate/gateway/gatewaytest"
	"trendgate/internal/clock"
)

// TestSnapshotEditsRefused reproduces issue 30's three edits of a cache
// snapshot whose checksums were recomputed (here: a sound file written by
// the cache package itself, with crafted entries) and shows each refused
// on load: the gateway re-derives freshness from the fetch time and
// today's config, validates each body again and checks it against its
// key.
func TestSnapshotEditsRefused(t *testing.T) {
	clk := clock.NewFake(gatewaytest.Now)
	up, upSrv := gatewaytest.StartUpstream(t, clk, nil)
	topics := up.Topics()
	victim, other := topics[0], topics[1]
	body := func(topic string) []byte {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, upSrv.URL+"/api4/public/topic/"+api.EncodeTopic(topic)+"/whatsup/v1", nil)
		req.Header.Set("Authorization", "Bearer "+gatewaytest.UpstreamKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("upstream whatsup %s: %d", topic, resp.StatusCode)
		}
		return b
	}
	whatsup := func(topic string) string { return api.Request{Endpoint: api.EndpointWhatsup, Topic: topic}.Key() }
	pinned := time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)
	now := clk.Now()

	tests := []struct {
		name   string
		edited *cache.Entry
		check  func(t *testing.T, resp *http.Response, body []byte, upstreamCalls int)
	}{
		{
			name: "another topic's summary under the victim's key",
			edited: &cache.Entry{Key: whatsup(victim), Topic: victim, Status: 200, ContentType: "application/json",
				Body: body(other), Fetched: now.Add(-time.Minute), FreshUntil: now.Add(time.Hour)},
			check: func(t *testing.T, resp *http.Response, got []byte, calls int) {
				if strings.Contains(string(got), `"topic":"`+other+`"`) || calls != 1 {
					t.Errorf("served %s with %d upstream calls; want the victim's own summary, fetched", got, calls)
				}
			},
		},
		{
			name: "a 404 pinned until 2100",
			edited: &cache.Entry{Key: whatsup(victim), Topic: victim, Status: 404, ContentType: "application/json",
				Fetched: now.Add(-2 * time.Hour), FreshUntil: pinned},
			check: func(t *testing.T, resp *http.Response, got []byte, calls int) {
				if resp.StatusCode != http.StatusOK || calls != 1 {
					t.Errorf("status %d with %d upstream calls; want the upstream's 200, fetched (a negative entry lives 60s from its fetch)", resp.StatusCode, calls)
				}
			},
		},
		{
			name: "a huge max-age",
			edited: &cache.Entry{Key: whatsup(victim), Topic: victim, Status: 200, ContentType: "application/json",
				Body: body(victim), Fetched: now.Add(-time.Minute), FreshUntil: now.Add(2306775120 * time.Second)},
			check: func(t *testing.T, resp *http.Response, got []byte, calls int) {
				if cc := resp.Header.Get("Cache-Control"); cc != "private, max-age=3540" {
					t.Errorf("Cache-Control %q; want private, max-age=3540 (today's 1h whatsup lifetime from the fetch a minute ago)", cc)
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "cache.snap")
			forged, err := cache.NewLocal(1<<20, nil)
			if err != nil {
				t.Fatal(err)
			}
			forged.Set(t.Context(), tc.edited)
			if _, err := forged.SaveSnapshot(path, cache.SnapshotOptions{MaxBytes: 1 << 20, MaxStale: 100 * 365 * 24 * time.Hour, Now: now, Origin: upSrv.URL}); err != nil {
				t.Fatal(err)
			}
			forged.Close()

			before := up.Count()
			s := gatewaytest.StartGateway(t, upSrv.URL, clk, func(c *config.Config) { c.Cache.PersistPath = path })
			c := &http.Client{Timeout: 20 * time.Second}
			defer c.CloseIdleConnections()
			resp, got, err := gatewaytest.GetWithKey(t, c, "http://"+s.Public+"/api4/public/topic/"+api.EncodeTopic(victim)+"/whatsup/v1", s.Key)
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, resp, got, up.Count()-before)
		})
	}
}
