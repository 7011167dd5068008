package proxy_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"trendgate/auth"
	"trendgate/config"
	"trendgate/demo"
	"trendgate/gateway/gatewaytest"
)

// fullOnly lists, per path, fields the limited plan must never see and the
// full plan always sees.
var fullOnly = map[string][]string{
	"/api4/public/topics/list/v1":               {`"interactions_24h"`},
	"/api4/public/topic/bitcoin/time-series/v1": {`"close"`, `"market_cap"`, `"galaxy_score"`, `"alt_rank"`},
	"/api4/public/topic/bitcoin/whatsup/v1":     {`"supportive"`, `"critical"`},
}

func checkPlanBody(t *testing.T, path string, limited bool, body []byte) {
	t.Helper()
	for _, f := range fullOnly[path] {
		has := strings.Contains(string(body), f)
		if limited && has {
			t.Errorf("%s: limited body carries %s", path, f)
		}
		if !limited && !has {
			t.Errorf("%s: full body lacks %s", path, f)
		}
	}
	if limited && path != "/api4/public/topics/list/v1" && !strings.Contains(string(body), `"data_mode":"limited"`) {
		t.Errorf("%s: limited body lacks config.data_mode", path)
	}
}

// TestCrossPlanOrder: whichever plan warms the cache, each plan gets its own
// shape from one upstream call.
func TestCrossPlanOrder(t *testing.T) {
	for _, order := range []string{"limited-first", "full-first"} {
		t.Run(order, func(t *testing.T) {
			h := gatewaytest.New(t, nil)
			keys := []string{h.Limited, h.Full}
			if order == "full-first" {
				keys = []string{h.Full, h.Limited}
			}
			for path := range fullOnly {
				for _, k := range keys {
					resp, body := h.Get(path, k)
					if resp.StatusCode != 200 {
						t.Fatalf("%s: %d %s", path, resp.StatusCode, body)
					}
					checkPlanBody(t, path, k == h.Limited, body)
					if got := resp.Header.Get("X-Data-Mode"); (got == "limited") != (k == h.Limited) {
						t.Errorf("%s: X-Data-Mode %q", path, got)
					}
				}
			}
			if got := h.Up.Count(); got != len(fullOnly) {
				t.Errorf("upstream requests: got %d; want %d (one per path)", got, len(fullOnly))
			}
		})
	}
}

// TestConcurrentMixedPlansColdKey: 200 concurrent mixed-plan requests on a
// cold key make one upstream call and never cross plans.
func TestConcurrentMixedPlansColdKey(t *testing.T) {
	h := gatewaytest.New(t, func(c *config.Config) {
		for name, p := range c.Plans {
			p.PerSecond, p.Burst = 1000, 1000
			c.Plans[name] = p
		}
	}, func(o *demo.Options) { o.Latency = 30 * time.Millisecond })
	const path = "/api4/public/topic/bitcoin/time-series/v1"
	var wg sync.WaitGroup
	var bad atomic.Int32
	for i := 0; i < 200; i++ {
		wg.Add(1)
		go func(limited bool) {
			defer wg.Done()
			key := h.Full
			if limited {
				key = h.Limited
			}
			req, _ := http.NewRequest("GET", h.Base+path, nil)
			req.Header.Set("Authorization", "Bearer "+key)
			resp, err := h.Client.Do(req)
			if err != nil {
				bad.Add(1)
				return
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if err != nil || resp.StatusCode != 200 {
				bad.Add(1)
				return
			}
			checkPlanBody(t, path, limited, body)
		}(i%2 == 0)
	}
	wg.Wait()
	if bad.Load() != 0 {
		t.Fatalf("%d requests failed", bad.Load())
	}
	if got := h.Up.Count(); got != 1 {
		t.Errorf("upstream requests: got %d; want 1", got)
	}
}

// TestRateLimitBurstThroughGateway: a burst over the plan's burst gets
// exactly the excess as 429s, with headers, and never reaches the upstream.
func TestRateLimitBurstThroughGateway(t *testing.T) {
	h := gatewaytest.New(t, nil) // limited plan: burst 10
	burst := h.Config.Plans["limited"].Burst
	var ok, limited int
	for i := 0; i < burst+7; i++ {
		resp, body := h.Get("/api4/public/topics/list/v1", h.Limited)
		switch resp.StatusCode {
		case 200:
			ok++
		case 429:
			limited++
			if e := gatewaytest.DecodeError(t, body); e.Code != "rate_limited" {
				t.Errorf("429 code %q", e.Code)
			}
			if resp.Header.Get("Retry-After") == "" || resp.Header.Get("RateLimit") == "" {
				t.Errorf("429 headers: %v", resp.Header)
			}
		default:
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	if ok != burst || limited != 7 {
		t.Errorf("got %d ok and %d limited; want %d and 7", ok, limited, burst)
	}
	// The full key's bucket is untouched by the limited key's burst.
	if resp, _ := h.Get("/api4/public/topics/list/v1", h.Full); resp.StatusCode != 200 {
		t.Errorf("full key after limited burst: %d", resp.StatusCode)
	}
	// Tokens come back with time.
	h.Clock.Advance(2 * time.Second)
	if resp, _ := h.Get("/api4/public/topics/list/v1", h.Limited); resp.StatusCode != 200 {
		t.Errorf("after refill: %d", resp.StatusCode)
	}
}

// TestQuotaChargesOnlyDelivered: upstream failures are not charged; the
// daily quota holds and rolls over at UTC midnight; whatsup costs 5.
func TestQuotaChargesOnlyDelivered(t *testing.T) {
	h := gatewaytest.New(t, func(c *config.Config) {
		p := c.Plans["full"]
		p.Daily = 7
		c.Plans["full"] = p
		c.Upstream.Breaker.Failures = 100 // keep the breaker out of this test
	})
	h.Up.SetFault(demo.FaultServerError)
	for i := 0; i < 5; i++ {
		if resp, _ := h.Get("/api4/public/topic/ethereum/time-series/v1", h.Full); resp.StatusCode != 502 {
			t.Fatalf("upstream 500: got %d; want 502", resp.StatusCode)
		}
	}
	h.Up.SetFault(demo.FaultNone)
	// 7 units: whatsup (5) + 2 list calls; the next list call is refused.
	if resp, b := h.Get("/api4/public/topic/ethereum/whatsup/v1", h.Full); resp.StatusCode != 200 {
		t.Fatalf("whatsup: %d %s", resp.StatusCode, b)
	}
	for i := 0; i < 2; i++ {
		if resp, _ := h.Get("/api4/public/topics/list/v1", h.Full); resp.StatusCode != 200 {
			t.Fatalf("list %d: %d", i, resp.StatusCode)
		}
	}
	resp, body := h.Get("/api4/public/topics/list/v1", h.Full)
	if resp.StatusCode != 429 || gatewaytest.DecodeError(t, body).Code != "daily_quota_exceeded" {
		t.Fatalf("over quota: %d %s", resp.StatusCode, body)
	}
	// 304s count as delivered; 4xx do not. Next UTC day: quota is back.
	h.Clock.Set(time.Date(gatewaytest.Now.Year(), gatewaytest.Now.Month(), gatewaytest.Now.Day()+1, 0, 0, 1, 0, time.UTC))
	if resp, _ := h.Get("/api4/public/topics/list/v1", h.Full); resp.StatusCode != 200 {
		t.Errorf("after midnight: %d", resp.StatusCode)
	}
}

// TestPlanGating: endpoints and TSV metrics outside a plan are 403.
func TestPlanGating(t *testing.T) {
	h := gatewaytest.New(t, func(c *config.Config) {
		p := c.Plans["limited"]
		p.Endpoints = []string{"list", "series", "tsv"}
		p.Fields.TSV = []string{"sentiment"}
		c.Plans["limited"] = p
	})
	tests := []struct {
		target, code string
	}{
		{"/api4/public/topic/bitcoin/whatsup/v1", "endpoint_not_in_plan"},
		{"/topic/bitcoin/time-series/interactions.tsv", "metric_not_in_plan"},
	}
	for _, tc := range tests {
		resp, body := h.Get(tc.target, h.Limited)
		if resp.StatusCode != 403 || gatewaytest.DecodeError(t, body).Code != tc.code {
			t.Errorf("%s: %d %s; want 403 %s", tc.target, resp.StatusCode, body, tc.code)
		}
		if resp.Header.Get("RateLimit-Policy") == "" {
			t.Errorf("%s: 403 for a valid key lacks rate-limit headers", tc.target)
		}
	}
	if resp, _ := h.Get("/topic/bitcoin/time-series/sentiment.tsv", h.Limited); resp.StatusCode != 200 {
		t.Errorf("allowed metric: %d", resp.StatusCode)
	}
	if n := h.Up.Count(); n != 1 {
		t.Errorf("upstream requests: got %d; want 1 (only the allowed metric)", n)
	}
}

// TestExpiredAndDisabledKeys: both get the uniform invalid_api_key 401.
func TestExpiredAndDisabledKeys(t *testing.T) {
	expiredKey, disabledKey := gatewaytest.NewKey(t), gatewaytest.NewKey(t)
	h := gatewaytest.New(t, func(c *config.Config) {
		past := gatewaytest.Now.Add(-time.Hour)
		c.Keys = append(c.Keys,
			config.Key{ID: "old", SHA256: auth.Digest(expiredKey), Plan: "full", Expires: &past},
			config.Key{ID: "off", SHA256: auth.Digest(disabledKey), Plan: "full", Disabled: true})
	})
	for _, k := range []string{expiredKey, disabledKey} {
		resp, body := h.Get("/api4/public/topics/list/v1", k)
		if resp.StatusCode != 401 || gatewaytest.DecodeError(t, body).Code != "invalid_api_key" {
			t.Errorf("got %d %s; want 401 invalid_api_key", resp.StatusCode, body)
		}
	}
}

// TestReloadUnderLoad rewrites keys and limits several times while clients
// keep calling: no request fails, the new limits show, a removed key stops at
// once, and a broken config is refused while the old one keeps serving.
func TestReloadUnderLoad(t *testing.T) {
	h := gatewaytest.New(t, func(c *config.Config) {
		for name, p := range c.Plans {
			p.PerSecond, p.Burst = 1e6, 1e6
			c.Plans[name] = p
		}
	})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var sent, failed atomic.Int64
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 400; i++ { // bounded
				select {
				case <-stop:
					return
				default:
				}
				req, _ := http.NewRequest("GET", h.Base+"/api4/public/topics/list/v1", nil)
				req.Header.Set("Authorization", "Bearer "+h.Full)
				resp, err := h.Client.Do(req)
				sent.Add(1)
				if err != nil || resp.StatusCode != 200 {
					failed.Add(1)
				}
				if err == nil {
					resp.Body.Close()
				}
			}
		}()
	}
	for i := 1; i <= 5; i++ {
		next := *h.Config
		next.Plans = map[string]config.Plan{}
		for name, p := range h.Config.Plans {
			next.Plans[name] = p
		}
		p := next.Plans["full"]
		p.Burst = 1e6 + i
		next.Plans["full"] = p
		if err := h.Gateway.Reload(&next); err != nil {
			t.Fatalf("reload %d: %v", i, err)
		}
		// A broken config in between is refused.
		broken := next
		broken.Keys = append([]config.Key{{ID: "x", SHA256: "not-hex", Plan: "gold"}}, next.Keys...)
		if err := h.Gateway.Reload(&broken); err == nil {
			t.Fatal("a broken config was accepted")
		}
	}
	close(stop)
	wg.Wait()
	if failed.Load() != 0 {
		t.Fatalf("%d of %d requests failed during reloads", failed.Load(), sent.Load())
	}
	resp, _ := h.Get("/api4/public/topics/list/v1", h.Full)
	if pol := resp.Header.Get("RateLimit-Policy"); !strings.Contains(pol, "q=1000005") {
		t.Errorf("new burst not visible: RateLimit-Policy %q", pol)
	}
	// Remove the limited key: it stops working with the next request.
	next := *h.Config
	next.Keys = []config.Key{h.Config.Keys[0]}
	if err := h.Gateway.Reload(&next); err != nil {
		t.Fatal(err)
	}
	if resp, _ := h.Get("/api4/public/topics/list/v1", h.Limited); resp.StatusCode != 401 {
		t.Errorf("removed key: got %d; want 401", resp.StatusCode)
	}
	if resp, _ := h.Get("/api4/public/topics/list/v1", h.Full); resp.StatusCode != 200 {
		t.Errorf("kept key: got %d; want 200", resp.StatusCode)
	}
}

// TestKeyNeverLogged: keys sent in the header or (wrongly) in the query
// never reach the logs.
func TestKeyNeverLogged(t *testing.T) {
	h := gatewaytest.New(t, nil)
	h.Get("/api4/public/topics/list/v1", h.Full)
	h.Get("/api4/public/topics/list/v1?key="+h.Limited, "")
	h.Get("/api4/public/topics/list/v1", h.Full+"x")
	h.Get("/api4/nowhere", h.Limited)
	logs := h.Logs.String()
	for _, k := range []string{h.Full, h.Limited, h.Full[3:30], h.Limited[3:30]} {
		if strings.Contains(logs, k) {
			t.Fatalf("a key (or a part of it) appears in the logs")
		}
	}
	var lines int
	for _, l := range strings.Split(strings.TrimSpace(logs), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == "request" {
			lines++
		}
	}
	if lines != 4 {
		t.Errorf("access log lines: got %d; want 4", lines)
	}
}

// Regression: a client that went away before its answer was charged, because
// nothing was written and an unwritten status counted as delivered.
func TestClientGoneIsNotCharged(t *testing.T) {
	h := gatewaytest.New(t, func(c *config.Config) {
		p := c.Plans["full"]
		p.Daily = 2
		p.Endpoints = []string{"list", "series"} // whatsup (cost 5) could never fit a daily 2
		c.Plans["full"] = p
	}, func(o *demo.Options) { o.Latency = 300 * time.Millisecond })
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", h.Base+"/api4/public/topic/solana/time-series/v1", nil)
	req.Header.Set("Authorization", "Bearer "+h.Full)
	if resp, err := h.Client.Do(req); err == nil {
		resp.Body.Close()
		t.Fatal("the request was answered before the client gave up")
	}
	// Wait (bounded) until the gateway has finished the abandoned request.
	deadline := time.Now().Add(5 * time.Second)
	for gatewaytest.Metric(t, h.Gateway.Registry(), "trendgate_requests_total", "status", "499") < 1 {
		if time.Now().After(deadline) {
			t.Fatal("the gateway never recorded the abandoned request as 499")
		}
		time.Sleep(5 * time.Millisecond) // waiting for the server goroutine, not for time
	}
	for i := 0; i < 2; i++ { // the whole daily quota is still there
		if resp, body := h.Get("/api4/public/topics/list/v1", h.Full); resp.StatusCode != 200 {
			t.Fatalf("request %d after the abandoned one: %d %s", i, resp.StatusCode, body)
		}
	}
	if resp, _ := h.Get("/api4/public/topics/list/v1", h.Full); resp.StatusCode != 429 {
		t.Errorf("third request: got %d; want 429 (quota of 2 used by delivered responses only)", resp.StatusCode)
	}
}
