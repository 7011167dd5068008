package gateway_test

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"trendgate/api"
	"trendgate/config"
	"trendgate/gateway/gatewaytest"
	"trendgate/internal/clock"
)

// TestRestartKeepsCache is issue 15's restart test: a gateway with
// cache.persist_path warms N keys and drains; a new gateway on the same
// file, in front of the same recording upstream, answers the same N
// requests without one upstream call, with the same bytes and ETags,
// Cache-Status hit and an Age counted from the original fetch.
func TestRestartKeepsCache(t *testing.T) {
	if p := config.Default().Cache.PersistPath; p != "" {
		t.Fatalf("default (and demo mode) cache.persist_path: got %q; want off", p)
	}
	clk := clock.NewFake(gatewaytest.Now)
	up, upSrv := gatewaytest.StartUpstream(t, clk, nil)
	path := filepath.Join(t.TempDir(), "cache.snap")
	persist := func(c *config.Config) {
		c.Cache.PersistPath = path
		gatewaytest.WithRoutes(c) // configured routes' entries are kept too
	}

	hour := gatewaytest.Now.Unix() / 3600 * 3600
	topics := up.Topics()
	targets := []string{
		"/api4/public/topics/list/v1",
		"/api4/public/topic/bitcoin/whatsup/v1",
		"/api4/public/topic/%23ai/time-series/v1?bucket=day&interval=1m",
		fmt.Sprintf("/api4/public/topic/bitcoin/time-series/v1?start=%d&end=%d", hour-48*3600, hour-24*3600),
		"/topic/bitcoin/time-series/interactions.tsv",
		"/api4/public/coins/list/v1?limit=3&sort=alt_rank",
		"/api4/public/topic/%23ai/posts/v1",
	}
	for _, tp := range topics[:7] {
		targets = append(targets, "/api4/public/topic/"+api.EncodeTopic(tp)+"/time-series/v1")
	}

	type answer struct {
		body                []byte
		etag, contentType   string
		cacheStatus, ageHdr string
	}
	fetchAll := func(s *gatewaytest.Served) []answer {
		t.Helper()
		c := &http.Client{Timeout: 20 * time.Second}
		defer c.CloseIdleConnections()
		out := make([]answer, len(targets))
		for i, target := range targets {
			resp, body, err := gatewaytest.GetWithKey(t, c, "http://"+s.Public+target, s.Key)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("%s: status %d (%s)", target, resp.StatusCode, body)
			}
			out[i] = answer{body, resp.Header.Get("Etag"), resp.Header.Get("Content-Type"),
				resp.Header.Get("Cache-Status"), resp.Header.Get("Age")}
		}
		return out
	}

	first := gatewaytest.StartGateway(t, upSrv.URL, clk, persist)
	warm := fetchAll(first)
	for i, a := range warm {
		if a.cacheStatus != "trendgate; fwd=miss; stored" {
			t.Fatalf("%s on the first gateway: Cache-Status %q; want a stored miss", targets[i], a.cacheStatus)
		}
	}
	if got := up.Count(); got != len(targets) {
		t.Fatalf("upstream calls while warming: got %d; want %d", got, len(targets))
	}
	if err := first.Stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(first.Logs.String(), `"cache snapshot written"`) {
		t.Fatalf("no snapshot written at drain; logs:\n%s", first.Logs)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("snapshot file: %v, %v; want it with mode 0600", fi, err)
	}

	const later = 45 * time.Second
	clk.Advance(later)
	second := gatewaytest.StartGateway(t, upSrv.URL, clk, persist)
	again := fetchAll(second)
	if got := up.Count(); got != len(targets) {
		t.Errorf("upstream calls after the restart: got %d; want 0 more than the %d of warming", got-len(targets), len(targets))
	}
	for i, a := range again {
		w := warm[i]
		if !bytes.Equal(a.body, w.body) || a.etag != w.etag || a.contentType != w.contentType {
			t.Errorf("%s after the restart: body/ETag/Content-Type differ (%q %q; before %q %q)", targets[i], a.etag, a.contentType, w.etag, w.contentType)
		}
		if a.cacheStatus != "trendgate; hit" {
			t.Errorf("%s after the restart: Cache-Status %q; want %q", targets[i], a.cacheStatus, "trendgate; hit")
		}
		if want := strconv.Itoa(int(later / time.Second)); a.ageHdr != want {
			t.Errorf("%s after the restart: Age %q; want %q (since the original fetch)", targets[i], a.ageHdr, want)
		}
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("snapshot after loading: %v; want it removed until the next drain", err)
	}

	// A restored entry goes stale by its original fetch: the list (fresh
	// for 10 minutes) is served stale while one refresh runs.
	clk.Advance(10 * time.Minute)
	c := &http.Client{Timeout: 20 * time.Second}
	defer c.CloseIdleConnections()
	resp, body, err := gatewaytest.GetWithKey(t, c, "http://"+second.Public+targets[0], second.Key)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("list after its freshness: %v %v %s", err, resp, body)
	}
	if got, want := resp.Header.Get("Cache-Status"), "trendgate; hit; stale"; got != want {
		t.Errorf("list after its freshness: Cache-Status %q; want %q", got, want)
	}
	if got, want := resp.Header.Get("Age"), strconv.Itoa(int((later+10*time.Minute)/time.Second)); got != want {
		t.Errorf("list after its freshness: Age %q; want %q", got, want)
	}
	if !bytes.Equal(body, warm[0].body) {
		t.Error("list after its freshness: body differs from the one restored")
	}
	if !strings.Contains(second.Logs.String(), `"cache snapshot loaded"`) {
		t.Errorf("no load logged; logs:\n%s", second.Logs)
	}
}

// TestRestartIgnoresBadSnapshot: a file at cache.persist_path that is not
// a snapshot is logged and ignored; the gateway starts cold and serves.
func TestRestartIgnoresBadSnapshot(t *testing.T) {
	clk := clock.NewFake(gatewaytest.Now)
	up, upSrv := gatewaytest.StartUpstream(t, clk, nil)
	path := filepath.Join(t.TempDir(), "cache.snap")
	if err := os.WriteFile(path, []byte("tgsnap\x01\x01 definitely not a snapshot"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := gatewaytest.StartGateway(t, upSrv.URL, clk, func(c *config.Config) { c.Cache.PersistPath = path })
	c := &http.Client{Timeout: 20 * time.Second}
	defer c.CloseIdleConnections()
	resp, body, err := gatewaytest.GetWithKey(t, c, "http://"+s.Public+gatewaytest.ListPath, s.Key)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("request on a cold start: %v %v %s", err, resp, body)
	}
	if got := resp.Header.Get("Cache-Status"); got != "trendgate; fwd=miss; stored" || up.Count() != 1 {
		t.Errorf("Cache-Status %q with %d upstream calls; want a stored miss from the upstream", got, up.Count())
	}
	if !strings.Contains(s.Logs.String(), "cache snapshot ignored") {
		t.Errorf("the bad snapshot was not logged; logs:\n%s", s.Logs)
	}
}
