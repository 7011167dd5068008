package proxy_test

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"testing"

	"trendgate/config"
	"trendgate/gateway/gatewaytest"
)

// Regression: variants were memoized per *Projection, so every reload added
// another limited variant (and its gzip copy) to each entry living through
// it, uncharged. Now the variant bytes are charged, and a plan's variant is
// replaced, not added to, after a reload.
func TestVariantsChargedAndReplacedOnReload(t *testing.T) {
	const series = "/api4/public/topic/bitcoin/time-series/v1"
	h := gatewaytest.New(t, func(c *config.Config) {
		for name, p := range c.Plans { // never the limit under test here
			p.PerSecond, p.Burst = 1000, 1000
			c.Plans[name] = p
		}
	})
	var gzBody []byte
	for _, c := range []struct{ key, enc string }{{h.Full, ""}, {h.Full, "gzip"}, {h.Limited, ""}, {h.Limited, "gzip"}} {
		resp, body := h.Get(series, c.key, "Accept-Encoding", c.enc)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("warm: %d %s", resp.StatusCode, body)
		}
		if c.key == h.Limited && c.enc == "gzip" {
			gzBody = body
		}
	}
	variants := h.Gauge("trendgate_cache_variant_bytes")
	if variants <= 0 {
		t.Fatalf("trendgate_cache_variant_bytes = %v after four variants; want > 0", variants)
	}
	if total := h.Gauge("trendgate_cache_bytes"); total <= variants || total > float64(h.Config.Cache.MaxBytes) {
		t.Errorf("trendgate_cache_bytes = %v; want above the variant bytes (%v) and at most max_bytes", total, variants)
	}
	for i := range 5 {
		next := *h.Config
		if err := h.Gateway.Reload(&next); err != nil {
			t.Fatalf("reload %d: %v", i, err)
		}
		for _, enc := range []string{"", "gzip"} {
			resp, body := h.Get(series, h.Limited, "Accept-Encoding", enc)
			if resp.StatusCode != http.StatusOK || resp.Header.Get("Cache-Status") != "trendgate; hit" {
				t.Fatalf("after reload %d: %d %q", i, resp.StatusCode, resp.Header.Get("Cache-Status"))
			}
			if enc == "gzip" && !bytes.Equal(body, gzBody) {
				t.Errorf("after reload %d: the gzip body changed", i)
			}
		}
	}
	if got := h.Gauge("trendgate_cache_variant_bytes"); got != variants {
		t.Errorf("trendgate_cache_variant_bytes after 5 reloads = %v; want %v (one variant per plan)", got, variants)
	}
}

// Regression: one large upstream body took a large share of the bound. An
// answer costing more than cache.max_bytes/8 is served unchanged but not
// stored, and Cache-Status says so.
func TestTooLargeNotStored(t *testing.T) {
	const series = "/api4/public/topic/bitcoin/time-series/v1"
	ref := gatewaytest.New(t, nil)
	_, want := ref.Get(series, ref.Full)

	h := gatewaytest.New(t, func(c *config.Config) { c.Cache.MaxBytes = 64 << 10 }) // share: 8 KiB
	for i := range 2 {
		before := h.Up.Count()
		resp, body := h.Get(series, h.Full)
		if resp.StatusCode != http.StatusOK || !bytes.Equal(body, want) {
			t.Fatalf("request %d: %d, %d bytes; want 200 with the %d bytes a roomy cache serves", i, resp.StatusCode, len(body), len(want))
		}
		if got := resp.Header.Get("Cache-Status"); got != `trendgate; fwd=miss; detail="too-large"` {
			t.Errorf("request %d: Cache-Status %q; want the too-large miss", i, got)
		}
		if h.Up.Count() != before+1 {
			t.Errorf("request %d: upstream calls %d; want one (nothing stored)", i, h.Up.Count()-before)
		}
	}
	resp, body := h.Get(series, h.Full, "Accept-Encoding", "gzip")
	if resp.Header.Get("Content-Encoding") != "gzip" {
		t.Fatalf("gzip request: Content-Encoding %q", resp.Header.Get("Content-Encoding"))
	}
	zr, err := gzip.NewReader(bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if plain, err := io.ReadAll(zr); err != nil || !bytes.Equal(plain, want) {
		t.Errorf("gzip body of an unstored answer does not decode to the body (%v)", err)
	}
	if got := h.Gauge("trendgate_cache_bytes"); got != 0 {
		t.Errorf("trendgate_cache_bytes = %v; want 0", got)
	}
}
