package upstream

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"trendgate/api"
	"trendgate/internal/breaker"
	"trendgate/internal/clock"
)

func TestRequestBuiltExactly(t *testing.T) {
	tests := []struct {
		name       string
		prefix     string // appended to the server URL as base_url
		key        string
		req        Request
		wantURI    string
		wantAccept string
		wantAuth   string
	}{
		{
			name: "series with query", key: testKey, req: seriesReq,
			wantURI:    "/api4/public/topic/%23ai/time-series/v1?bucket=hour&interval=1w",
			wantAccept: "application/json", wantAuth: "Bearer " + testKey,
		},
		{
			name: "list without query, no key", req: Request{Endpoint: api.EndpointList, Path: "/api4/public/topics/list/v1"},
			wantURI: "/api4/public/topics/list/v1", wantAccept: "application/json",
		},
		{
			name: "base url with a trailing slash", prefix: "/", key: testKey,
			req:     Request{Endpoint: api.EndpointWhatsup, Path: "/api4/public/topic/ai%20agents/whatsup/v1"},
			wantURI: "/api4/public/topic/ai%20agents/whatsup/v1", wantAccept: "application/json",
			wantAuth: "Bearer " + testKey,
		},
		{
			name: "tsv", key: testKey,
			req:     Request{Endpoint: api.EndpointTSV, Path: "/topic/%24btc/time-series/interactions.tsv"},
			wantURI: "/topic/%24btc/time-series/interactions.tsv", wantAccept: accept(api.EndpointTSV),
			wantAuth: "Bearer " + testKey,
		},
	}
	bodies := map[api.Endpoint]string{api.EndpointSeries: seriesBody, api.EndpointList: listBody, api.EndpointWhatsup: whatsupBody, api.EndpointTSV: "time\tinteractions\n"}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			stub := newStub(t, respond(200, bodies[tc.req.Endpoint]))
			cfg := testConfig(stub.srv.URL + tc.prefix)
			cfg.APIKey = tc.key
			c, _ := newTestClient(t, cfg, clock.NewFake(t0))
			if _, err := c.Do(context.Background(), tc.req); err != nil {
				t.Fatalf("Do: %v", err)
			}
			r := stub.lastRequest()
			if r.Method != http.MethodGet {
				t.Errorf("got method %s; want GET", r.Method)
			}
			if r.RequestURI != tc.wantURI {
				t.Errorf("got request URI %q; want %q", r.RequestURI, tc.wantURI)
			}
			want := map[string]string{"Accept": tc.wantAccept, "Accept-Encoding": "gzip", "User-Agent": "trendgate"}
			if tc.wantAuth != "" {
				want["Authorization"] = tc.wantAuth
			}
			var gotNames, wantNames []string
			for k := range r.Header {
				gotNames = append(gotNames, k)
			}
			for k, v := range want {
				wantNames = append(wantNames, k)
				if got := r.Header.Values(k); len(got) != 1 || got[0] != v {
					t.Errorf("got header %s %q; want %q", k, got, v)
				}
			}
			slices.Sort(gotNames)
			slices.Sort(wantNames)
			if !slices.Equal(gotNames, wantNames) {
				t.Errorf("got headers %v; want exactly %v", gotNames, wantNames)
			}
		})
	}
}

func TestDoRejectsMalformedRequest(t *testing.T) {
	stub := newStub(t, respond(200, seriesBody))
	c, _ := newTestClient(t, testConfig(stub.srv.URL), clock.NewFake(t0))
	for _, req := range []Request{
		{Endpoint: api.EndpointSeries, Path: "api4/no-slash"},
		{Endpoint: api.EndpointSeries, Path: "/a?b=c"},
		{Endpoint: api.EndpointSeries, Path: "/a#frag"},
		{Endpoint: api.Endpoint(99), Path: "/a"},
	} {
		if _, err := c.Do(context.Background(), req); err == nil {
			t.Errorf("Do(%+v): got nil error; want one", req)
		}
	}
	if n := stub.calls.Load(); n != 0 {
		t.Errorf("got %d upstream calls; want 0", n)
	}
}

func TestRedirectNotFollowed(t *testing.T) {
	target := newStub(t, respond(200, seriesBody))
	stub := newStub(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.srv.URL+r.URL.Path, http.StatusFound)
	})
	c, _ := newTestClient(t, testConfig(stub.srv.URL), clock.NewFake(t0))
	_, err := c.Do(context.Background(), seriesReq)
	if !errors.Is(err, ErrBadResponse) {
		t.Fatalf("got error %v; want ErrBadResponse", err)
	}
	if n := target.calls.Load(); n != 0 {
		t.Errorf("redirect target got %d calls; want 0", n)
	}
}

func TestStatusMapping(t *testing.T) {
	secret := "SECRET-UPSTREAM-TEXT"
	tests := []struct {
		name    string
		status  int
		wantErr error
	}{
		{"not found", 404, nil},
		{"server error", 500, ErrBadResponse},
		{"bad gateway", 502, ErrBadResponse},
		{"unauthorized", 401, ErrBadResponse},
		{"payment required", 402, ErrBadResponse},
		{"forbidden", 403, ErrBadResponse},
		{"teapot", 418, ErrBadResponse},
		{"no content", 204, ErrBadResponse},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			stub := newStub(t, respond(tc.status, `{"error":"`+secret+`"}`))
			c, _ := newTestClient(t, testConfig(stub.srv.URL), clock.NewFake(t0))
			resp, err := c.Do(context.Background(), seriesReq)
			if tc.wantErr == nil {
				if err != nil || resp.Status != tc.status {
					t.Fatalf("got %+v, %v; want status %d", resp, err, tc.status)
				}
				return
			}
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("got error %v; want %v", err, tc.wantErr)
			}
			if msg := err.Error(); strings.Contains(msg, secret) || strings.Contains(msg, testKey) {
				t.Errorf("error %q leaks upstream text or the key", msg)
			}
		})
	}
}

func TestTimeouts(t *testing.T) {
	release := make(chan struct{})
	stub := newStub(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("mode") == "body" {
			w.Header().Set("Content-Length", "1000")
			w.WriteHeader(200)
			_, _ = w.Write([]byte(`{"config":{},`))
			w.(http.Flusher).Flush()
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	t.Cleanup(func() { close(release) }) // runs before stub's Close

	tests := []struct {
		name        string
		query       string
		headerLimit time.Duration
		whole       time.Duration
		callerLimit time.Duration // 0: none
		want        error
	}{
		{"response header timeout", "mode=head", 30 * time.Millisecond, 10 * time.Second, 0, ErrTimeout},
		{"whole fetch timeout during body", "mode=body", 10 * time.Second, 50 * time.Millisecond, 0, ErrTimeout},
		{"caller deadline", "mode=head", 10 * time.Second, 10 * time.Second, 30 * time.Millisecond, ErrTimeout},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(stub.srv.URL)
			cfg.ResponseHeaderTimeout = tc.headerLimit
			cfg.Timeout = tc.whole
			c, _ := newTestClient(t, cfg, clock.NewFake(t0))
			ctx := context.Background()
			if tc.callerLimit > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.callerLimit)
				defer cancel()
			}
			req := seriesReq
			req.RawQuery = tc.query
			_, err := c.Do(ctx, req)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got error %v; want %v", err, tc.want)
			}
		})
	}

	t.Run("caller cancel is not a timeout", func(t *testing.T) {
		c, _ := newTestClient(t, testConfig(stub.srv.URL), clock.NewFake(t0))
		ctx, cancel := context.WithCancel(context.Background())
		before := stub.calls.Load()
		done := make(chan struct{})
		defer close(done)
		go func() { // cancels once the upstream has the request
			defer cancel()
			for stub.calls.Load() == before {
				select {
				case <-done:
					return
				default:
					runtime.Gosched()
				}
			}
		}()
		_, err := c.Do(ctx, Request{Endpoint: api.EndpointSeries, Path: "/x", RawQuery: "mode=head"})
		if !errors.Is(err, context.Canceled) || errors.Is(err, ErrTimeout) {
			t.Fatalf("got error %v; want context.Canceled", err)
		}
	})
}

func gzipped(t *testing.T, s string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestBodyCap(t *testing.T) {
	const limit = 200
	pad := func(n int) string { // a valid list body of exactly n bytes
		s := `{"data":[],"p":""}`
		return s[:len(s)-2] + strings.Repeat("x", n-len(s)) + `"}`
	}
	tests := []struct {
		name     string
		body     []byte
		gzip     bool
		chunked  bool
		wantErr  bool
		wantBody string
	}{
		{name: "exactly the cap", body: []byte(pad(limit)), wantBody: pad(limit)},
		{name: "content-length over the cap", body: []byte(pad(limit + 1)), wantErr: true},
		{name: "streamed over the cap", body: []byte(pad(limit + 1)), chunked: true, wantErr: true},
		{name: "streamed at the cap", body: []byte(pad(limit)), chunked: true, wantBody: pad(limit)},
		{name: "gzip decompressed under the cap", body: gzipped(t, listBody), gzip: true, wantBody: listBody},
		{name: "gzip decompressed over the cap", body: gzipped(t, pad(5*limit)), gzip: true, wantErr: true},
		{name: "corrupt gzip", body: []byte("not gzip at all"), gzip: true, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			stub := newStub(t, func(w http.ResponseWriter, _ *http.Request) {
				if tc.gzip {
					w.Header().Set("Content-Encoding", "gzip")
				}
				if !tc.chunked {
					w.Header().Set("Content-Length", strconv.Itoa(len(tc.body)))
				}
				w.WriteHeader(200)
				_, _ = w.Write(tc.body[:10])
				w.(http.Flusher).Flush()
				_, _ = w.Write(tc.body[10:])
			})
			cfg := testConfig(stub.srv.URL)
			cfg.MaxBodyBytes = limit
			c, _ := newTestClient(t, cfg, clock.NewFake(t0))
			resp, err := c.Do(context.Background(), Request{Endpoint: api.EndpointList, Path: "/api4/public/topics/list/v1"})
			if tc.wantErr {
				if !errors.Is(err, ErrBadResponse) {
					t.Fatalf("got error %v; want ErrBadResponse", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Do: %v", err)
			}
			if string(resp.Body) != tc.wantBody {
				t.Errorf("got body %q; want %q", resp.Body, tc.wantBody)
			}
		})
	}
}

func TestShapeValidation(t *testing.T) {
	tests := []struct {
		name      string
		shape     api.Endpoint
		body      string
		header    string // x-lunar-generated
		wantErr   bool
		wantEmpty bool
		wantGen   int64
	}{
		{name: "list ok", shape: api.EndpointList, body: listBody},
		{name: "list generated from header", shape: api.EndpointList, body: listBody, header: "1764473870", wantGen: 1764473870},
		{name: "list empty", shape: api.EndpointList, body: `{"data":[]}`, wantEmpty: true},
		{name: "list empty object data", shape: api.EndpointList, body: `{"data":{}}`, wantEmpty: true},
		{name: "list data missing", shape: api.EndpointList, body: `{"items":[]}`, wantErr: true},
		{name: "list data not array", shape: api.EndpointList, body: `{"data":"x"}`, wantErr: true},
		{name: "list data non-empty object", shape: api.EndpointList, body: `{"data":{"a":1}}`, wantErr: true},
		{name: "list item not object", shape: api.EndpointList, body: `{"data":[{"topic":"a"},1]}`, wantErr: true},
		{name: "list item null", shape: api.EndpointList, body: `{"data":[null]}`, wantErr: true},
		{name: "top-level array", shape: api.EndpointList, body: `[{"data":[]}]`, wantErr: true},
		{name: "top-level null", shape: api.EndpointList, body: `null`, wantErr: true},
		{name: "truncated json", shape: api.EndpointList, body: `{"data":[{"topic":"a"}`, wantErr: true},
		{name: "trailing garbage", shape: api.EndpointList, body: `{"data":[]} x`, wantErr: true},
		{name: "html error page", shape: api.EndpointList, body: `<html>oops</html>`, wantErr: true},
		{name: "empty body", shape: api.EndpointList, body: ``, wantErr: true},

		{name: "whatsup ok", shape: api.EndpointWhatsup, body: whatsupBody, wantGen: 1760641738},
		{name: "whatsup with themes", shape: api.EndpointWhatsup, body: `{"config":{},"summary":"s","supportive":[{"title":"t"}],"critical":[]}`},
		{name: "whatsup null themes", shape: api.EndpointWhatsup, body: `{"config":{},"summary":"s","supportive":null}`},
		{name: "whatsup empty summary", shape: api.EndpointWhatsup, body: `{"config":{},"summary":"  "}`, wantEmpty: true},
		{name: "whatsup generated header ignored when config has it", shape: api.EndpointWhatsup, body: whatsupBody, header: "5", wantGen: 1760641738},
		{name: "whatsup generated from header", shape: api.EndpointWhatsup, body: `{"config":{},"summary":"s"}`, header: "42", wantGen: 42},
		{name: "whatsup float generated", shape: api.EndpointWhatsup, body: `{"config":{"generated":1760641738.0},"summary":"s"}`, wantGen: 1760641738},
		{name: "whatsup no config", shape: api.EndpointWhatsup, body: `{"summary":"s"}`, wantErr: true},
		{name: "whatsup config not object", shape: api.EndpointWhatsup, body: `{"config":[],"summary":"s"}`, wantErr: true},
		{name: "whatsup no summary", shape: api.EndpointWhatsup, body: `{"config":{}}`, wantErr: true},
		{name: "whatsup summary null", shape: api.EndpointWhatsup, body: `{"config":{},"summary":null}`, wantErr: true},
		{name: "whatsup summary number", shape: api.EndpointWhatsup, body: `{"config":{},"summary":3}`, wantErr: true},
		{name: "whatsup themes not array", shape: api.EndpointWhatsup, body: `{"config":{},"summary":"s","critical":{}}`, wantErr: true},

		{name: "series ok", shape: api.EndpointSeries, body: seriesBody, wantGen: 1760647718},
		{name: "series empty", shape: api.EndpointSeries, body: `{"config":{"generated":7},"data":[]}`, wantEmpty: true, wantGen: 7},
		{name: "series no config", shape: api.EndpointSeries, body: `{"data":[]}`, wantErr: true},
		{name: "series config null", shape: api.EndpointSeries, body: `{"config":null,"data":[]}`, wantErr: true},
		{name: "series no data", shape: api.EndpointSeries, body: `{"config":{}}`, wantErr: true},
		{name: "series row not object", shape: api.EndpointSeries, body: `{"config":{},"data":[[1,2]]}`, wantErr: true},
		{name: "series generated string ignored", shape: api.EndpointSeries, body: `{"config":{"generated":"x"},"data":[{}]}`},

		{name: "tsv ok", shape: api.EndpointTSV, body: "time\tinteractions\n2025-10-13 00:00\t3811420\n"},
		{name: "tsv header only", shape: api.EndpointTSV, body: "time\n"},
		{name: "tsv wrong header", shape: api.EndpointTSV, body: "date\tinteractions\n", wantErr: true},
		{name: "tsv json", shape: api.EndpointTSV, body: `{"error":"x"}`, wantErr: true},
		{name: "tsv invalid utf-8", shape: api.EndpointTSV, body: "time\t\xff\xfe\n", wantErr: true},
		{name: "tsv empty", shape: api.EndpointTSV, body: "", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			hdr := []string{}
			if tc.header != "" {
				hdr = append(hdr, "X-Lunar-Generated", tc.header)
			}
			stub := newStub(t, respond(200, tc.body, hdr...))
			c, _ := newTestClient(t, testConfig(stub.srv.URL), clock.NewFake(t0))
			resp, err := c.Do(context.Background(), Request{Endpoint: tc.shape, Path: "/p"})
			if tc.wantErr {
				if !errors.Is(err, ErrBadResponse) {
					t.Fatalf("got %v; want ErrBadResponse", err)
				}
				if tc.body != "" && strings.Contains(err.Error(), tc.body) {
					t.Errorf("error %q quotes the body", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Do: %v", err)
			}
			if resp.Status != 200 || string(resp.Body) != tc.body {
				t.Errorf("got status %d body %q; want 200 %q", resp.Status, resp.Body, tc.body)
			}
			if resp.Empty != tc.wantEmpty {
				t.Errorf("got Empty %v; want %v", resp.Empty, tc.wantEmpty)
			}
			if resp.Generated != tc.wantGen {
				t.Errorf("got Generated %d; want %d", resp.Generated, tc.wantGen)
			}
		})
	}
}

func TestContentType(t *testing.T) {
	stub := newStub(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header()["Content-Type"] = nil // suppress sniffing
		_, _ = w.Write([]byte("time\tsentiment\n"))
	})
	c, _ := newTestClient(t, testConfig(stub.srv.URL), clock.NewFake(t0))
	resp, err := c.Do(context.Background(), Request{Endpoint: api.EndpointTSV, Path: "/t.tsv"})
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	if want := defaultContentType(api.EndpointTSV); resp.ContentType != want {
		t.Errorf("got content type %q; want %q", resp.ContentType, want)
	}
}

func TestClientBudget(t *testing.T) {
	stub := newStub(t, respond(200, seriesBody))
	cfg := testConfig(stub.srv.URL)
	cfg.Budget = BudgetConfig{PerMinute: 2}
	clk := clock.NewFake(t0)
	c, reg := newTestClient(t, cfg, clk)
	for i := range 2 {
		if _, err := c.Do(context.Background(), seriesReq); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	_, err := c.Do(context.Background(), seriesReq)
	if !errors.Is(err, ErrBudgetExhausted) {
		t.Fatalf("got %v; want ErrBudgetExhausted", err)
	}
	if got, want := RetryAfter(err), 50*time.Second; got != want {
		t.Errorf("got RetryAfter %v; want %v", got, want)
	}
	if n := stub.calls.Load(); n != 2 {
		t.Errorf("got %d upstream calls; want 2", n)
	}
	if got := metricValue(t, reg, "trendgate_upstream_refusals_total", "shape", "series", "reason", "budget"); got != 1 {
		t.Errorf("got budget refusal count %v; want 1", got)
	}
	if got := metricValue(t, reg, "trendgate_upstream_requests_total"); got != float64(stub.calls.Load()) {
		t.Errorf("trendgate_upstream_requests_total %v; want the %d requests the upstream received", got, stub.calls.Load())
	}
	if got := metricValue(t, reg, "trendgate_upstream_budget_tokens", "window", "minute"); got != 0 {
		t.Errorf("got minute tokens gauge %v; want 0", got)
	}
	if got := c.State(); got != breaker.Closed {
		t.Errorf("budget refusals changed the breaker to %v; want closed", got)
	}
	clk.Advance(50 * time.Second)
	if _, err := c.Do(context.Background(), seriesReq); err != nil {
		t.Fatalf("after the minute: %v", err)
	}
}

func TestClient429BlocksUntilReset(t *testing.T) {
	clk := clock.NewFake(t0)
	tests := []struct {
		name      string
		headers   []string
		wantRetry time.Duration
	}{
		{"reset header", []string{"X-Rate-Limit-Minute-Reset", strconv.FormatInt(t0.Add(30*time.Second).Unix(), 10),
			"X-Rate-Limit-Minute-Remaining", "0"}, 30 * time.Second},
		{"no headers: next minute", nil, 50 * time.Second},
		{"daily limit", []string{"X-Rate-Limit-Day-Remaining", "0"}, 24*time.Hour - 12*time.Hour - 30*time.Minute - 10*time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk.Set(t0)
			stub := newStub(t, respond(429, `{"error":"Rate limit exceeded (minute)"}`, tc.headers...))
			c, reg := newTestClient(t, testConfig(stub.srv.URL), clk)
			_, err := c.Do(context.Background(), seriesReq)
			if !errors.Is(err, ErrRateLimited) {
				t.Fatalf("got %v; want ErrRateLimited", err)
			}
			if got := RetryAfter(err); got != tc.wantRetry {
				t.Errorf("got RetryAfter %v; want %v", got, tc.wantRetry)
			}
			stub.set(respond(200, seriesBody))
			for _, step := range []time.Duration{0, tc.wantRetry / 2, tc.wantRetry/2 - time.Second} {
				clk.Advance(step)
				_, err := c.Do(context.Background(), seriesReq)
				// One cause, one code: the calls refused during the block
				// answer as the call that met the 429.
				if !errors.Is(err, ErrRateLimited) {
					t.Fatalf("after %v: got %v; want ErrRateLimited", step, err)
				}
			}
			if n := stub.calls.Load(); n != 1 {
				t.Fatalf("got %d upstream calls while blocked; want 1", n)
			}
			clk.Set(t0.Add(tc.wantRetry))
			if _, err := c.Do(context.Background(), seriesReq); err != nil {
				t.Fatalf("after reset: %v", err)
			}
			if got := metricValue(t, reg, "trendgate_upstream_rate_limited_total"); got != 1 {
				t.Errorf("got rate_limited_total %v; want 1", got)
			}
			if c.State() != breaker.Closed {
				t.Errorf("got breaker %v; want closed", c.State())
			}
		})
	}
}

func TestBreakerTransitions(t *testing.T) {
	clk := clock.NewFake(t0)
	probeStarted := make(chan struct{}, 8) // buffered: a wrongly admitted second caller must not block
	stub := newStub(t, respond(500, `{"error":"boom"}`))
	cfg := testConfig(stub.srv.URL)
	cfg.Retries = 0
	cfg.Breaker = BreakerConfig{Failures: 3, Backoff: 10 * time.Second, MaxBackoff: 25 * time.Second}
	c, reg := newTestClient(t, cfg, clk)
	ctx := context.Background()

	for i := range 3 {
		if _, err := c.Do(ctx, seriesReq); !errors.Is(err, ErrBadResponse) {
			t.Fatalf("failure %d: got %v; want ErrBadResponse", i, err)
		}
	}
	if got := c.State(); got != breaker.Open {
		t.Fatalf("after 3 failures got %v; want open", got)
	}
	if got := metricValue(t, reg, "trendgate_breaker_state", "dependency", "upstream"); got != 2 {
		t.Errorf("got breaker_state gauge %v; want 2", got)
	}
	_, err := c.Do(ctx, seriesReq)
	if !errors.Is(err, ErrBreakerOpen) || RetryAfter(err) != 10*time.Second {
		t.Fatalf("while open: got %v (retry %v); want ErrBreakerOpen after 10s", err, RetryAfter(err))
	}
	clk.Advance(9 * time.Second)
	if _, err := c.Do(ctx, seriesReq); !errors.Is(err, ErrBreakerOpen) {
		t.Fatalf("at 9s: got %v; want ErrBreakerOpen", err)
	}
	if n := stub.calls.Load(); n != 3 {
		t.Fatalf("got %d upstream calls; want 3 (none while open)", n)
	}

	// probe runs one Do whose upstream answer the test chooses while other
	// callers are refused.
	probe := func(status int, body string) error {
		release := make(chan struct{})
		stub.set(func(w http.ResponseWriter, r *http.Request) {
			probeStarted <- struct{}{}
			select {
			case <-release:
				respond(status, body)(w, r)
			case <-r.Context().Done():
			}
		})
		errc := make(chan error, 1)
		go func() {
			_, err := c.Do(ctx, seriesReq)
			errc <- err
		}()
		<-probeStarted
		if got := c.State(); got != breaker.HalfOpen {
			t.Errorf("during probe got %v; want half-open", got)
		}
		// Bounded so that a wrongly admitted caller fails the test, not hangs it.
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if _, err := c.Do(sctx, seriesReq); !errors.Is(err, ErrBreakerOpen) {
			t.Errorf("second caller during probe: got %v; want ErrBreakerOpen", err)
		}
		close(release)
		return <-errc
	}

	clk.Advance(time.Second) // backoff 10s passed
	if err := probe(500, `{}`); !errors.Is(err, ErrBadResponse) {
		t.Fatalf("failed probe: got %v; want ErrBadResponse", err)
	}
	if got := c.State(); got != breaker.Open {
		t.Fatalf("after failed probe got %v; want open", got)
	}
	_, err = c.Do(ctx, seriesReq)
	if got := RetryAfter(err); !errors.Is(err, ErrBreakerOpen) || got != 20*time.Second {
		t.Fatalf("after failed probe: got %v (retry %v); want ErrBreakerOpen, doubled backoff 20s", err, got)
	}
	clk.Advance(20 * time.Second)
	if err := probe(503, `{}`); !errors.Is(err, ErrBadResponse) {
		t.Fatalf("second failed probe: got %v; want ErrBadResponse", err)
	}
	_, err = c.Do(ctx, seriesReq)
	if got := RetryAfter(err); got != 25*time.Second {
		t.Fatalf("got backoff %v; want capped at 25s", got)
	}
	clk.Advance(25 * time.Second)
	if err := probe(200, seriesBody); err != nil {
		t.Fatalf("successful probe: %v", err)
	}
	if got := c.State(); got != breaker.Closed {
		t.Fatalf("after successful probe got %v; want closed", got)
	}
	calls := stub.calls.Load()
	stub.set(respond(200, seriesBody))
	if _, err := c.Do(ctx, seriesReq); err != nil {
		t.Fatalf("closed: %v", err)
	}
	if got := stub.calls.Load(); got != calls+1 {
		t.Errorf("got %d calls; want %d", got, calls+1)
	}
	if got := metricValue(t, reg, "trendgate_breaker_state", "dependency", "upstream"); got != 0 {
		t.Errorf("got breaker_state gauge %v; want 0", got)
	}
}

func TestBreakerIgnoresNotFoundAndBudget(t *testing.T) {
	stub := newStub(t, respond(404, `{"error":"Topic not found"}`))
	cfg := testConfig(stub.srv.URL)
	cfg.Breaker.Failures = 2
	cfg.Budget = BudgetConfig{PerMinute: 2}
	c, _ := newTestClient(t, cfg, clock.NewFake(t0))
	ctx := context.Background()

	if resp, err := c.Do(ctx, seriesReq); err != nil || resp.Status != 404 {
		t.Fatalf("got %+v, %v; want a 404 response", resp, err)
	}
	stub.set(respond(500, `{}`))
	if _, err := c.Do(ctx, seriesReq); !errors.Is(err, ErrBadResponse) {
		t.Fatalf("got %v; want ErrBadResponse", err)
	}
	for range 5 {
		if _, err := c.Do(ctx, seriesReq); !errors.Is(err, ErrBudgetExhausted) {
			t.Fatalf("got %v; want ErrBudgetExhausted", err)
		}
	}
	if got := c.State(); got != breaker.Closed {
		t.Errorf("one failure plus budget refusals: got %v; want closed", got)
	}
}

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

func TestRetryOnlyOnConnectionErrors(t *testing.T) {
	tests := []struct {
		name       string
		closed     bool // use a closed listener instead of the stub
		status     int
		retries    int
		perMinute  int
		wantErr    error
		wantTokens int64 // budget tokens spent
		wantCalls  int64 // calls the stub received
		wantRetry  float64
	}{
		{name: "refused, one retry", closed: true, retries: 1, perMinute: 10, wantErr: ErrUnavailable, wantTokens: 2, wantRetry: 1},
		{name: "refused, no retries", closed: true, retries: 0, perMinute: 10, wantErr: ErrUnavailable, wantTokens: 1},
		{name: "refused, budget refuses the retry", closed: true, retries: 1, perMinute: 1, wantErr: ErrUnavailable, wantTokens: 1},
		{name: "500 not retried", status: 500, retries: 1, perMinute: 10, wantErr: ErrBadResponse, wantTokens: 1, wantCalls: 1},
		{name: "429 not retried", status: 429, retries: 1, perMinute: 10, wantErr: ErrRateLimited, wantTokens: 1, wantCalls: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			stub := newStub(t, respond(tc.status, `{}`))
			base := stub.srv.URL
			if tc.closed {
				base = "http://" + closedAddr(t)
			}
			check := func(t *testing.T) {
				cfg := testConfig(base)
				cfg.Retries = tc.retries
				cfg.Budget = BudgetConfig{PerMinute: tc.perMinute}
				clk := clock.NewFake(t0)
				b, err := NewLocalBudget(cfg.Budget, clk)
				if err != nil {
					t.Fatal(err)
				}
				c, reg := newTestClient(t, cfg, clk, WithBudget(b))
				start := time.Now()
				_, err = c.Do(context.Background(), seriesReq)
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("got %v; want %v", err, tc.wantErr)
				}
				// A retry (even one the budget then refuses) waits a jitter
				// first; a call without retries never waits.
				if waited := time.Since(start); tc.closed && tc.retries > 0 && (waited < maxJitter/4 || waited > maxJitter) {
					t.Errorf("waited %v before the retry; want a jitter within [%v, %v]", waited, maxJitter/4, maxJitter)
				} else if tc.closed && tc.retries == 0 && waited != 0 {
					t.Errorf("waited %v without retries; want no wait", waited)
				}
				if m, _ := b.tokens(); int64(tc.perMinute)-m != tc.wantTokens {
					t.Errorf("got %d tokens spent; want %d", int64(tc.perMinute)-m, tc.wantTokens)
				}
				if n := stub.calls.Load(); n != tc.wantCalls {
					t.Errorf("got %d upstream calls; want %d", n, tc.wantCalls)
				}
				if got := metricValue(t, reg, "trendgate_upstream_retries_total"); got != tc.wantRetry {
					t.Errorf("got retries_total %v; want %v", got, tc.wantRetry)
				}
			}
			// Against a refused address no goroutine waits on the network,
			// so in a synctest bubble the jitter before the retry passes in
			// fake time: the test measures it instead of waiting for it.
			if tc.closed {
				synctest.Test(t, check)
			} else {
				check(t)
			}
		})
	}
}

func TestNoGoroutineGrowthAfterFaults(t *testing.T) {
	release := make(chan struct{})
	stub := newStub(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Query().Get("mode") {
		case "block":
			select {
			case <-release:
			case <-r.Context().Done():
			}
		case "500":
			respond(500, `{}`)(w, r)
		default:
			respond(200, seriesBody)(w, r)
		}
	})
	before := runtime.NumGoroutine()

	cfg := testConfig(stub.srv.URL)
	cfg.ResponseHeaderTimeout = 20 * time.Millisecond
	cfg.Breaker.Failures = 1000
	c, err := New(cfg, clock.NewFake(t0), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	refused := testConfig("http://" + closedAddr(t))
	cr, err := New(refused, clock.NewFake(t0), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		for _, q := range []string{"mode=block", "mode=500", "mode=ok"} {
			_, _ = c.Do(context.Background(), Request{Endpoint: api.EndpointSeries, Path: fmt.Sprintf("/s/%d", i), RawQuery: q})
		}
		_, _ = cr.Do(context.Background(), seriesReq)
	}
	close(release)
	c.Close()
	cr.Close()
	stub.srv.CloseClientConnections()

	after := runtime.NumGoroutine()
	for i := 0; i < 50 && after > before; i++ {
		time.Sleep(10 * time.Millisecond) // poll: connection goroutines exit asynchronously
		after = runtime.NumGoroutine()
	}
	if after > before {
		t.Errorf("got %d goroutines after faults cleared; want at most %d", after, before)
	}
}

// TestDroppedConnectionAttemptsBounded: an upstream that reads a request
// and closes the connection without answering must see at most
// retries+1 attempts of one call, each paid for by the budget, even on a
// kept-alive connection where Go's transport would retry by itself.
func TestDroppedConnectionAttemptsBounded(t *testing.T) {
	var drop atomic.Bool
	stub := newStub(t, func(w http.ResponseWriter, r *http.Request) {
		if drop.Load() {
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		respond(200, listBody)(w, r)
	})
	for _, retries := range []int{0, 1} {
		drop.Store(false)
		cfg := testConfig(stub.srv.URL)
		cfg.Retries = retries
		cfg.Budget = BudgetConfig{PerMinute: 100}
		c, reg := newTestClient(t, cfg, clock.NewFake(t0))
		listReq := Request{Endpoint: api.EndpointList, Path: "/api4/public/topics/list/v1"}
		// A good answer leaves a kept-alive connection in the pool.
		if _, err := c.Do(context.Background(), listReq); err != nil {
			t.Fatalf("first call: %v", err)
		}
		if r := stub.lastRequest(); r.ContentLength != 0 || len(r.TransferEncoding) != 0 || r.Header.Get("Content-Length") != "" {
			t.Fatalf("the upstream got a body framing: length %d, transfer encoding %q", r.ContentLength, r.TransferEncoding)
		}
		drop.Store(true)
		before := stub.calls.Load()
		if _, err := c.Do(context.Background(), listReq); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("retries %d: dropped call: %v; want ErrUnavailable", retries, err)
		}
		seen := stub.calls.Load() - before
		if seen != int64(retries+1) {
			t.Errorf("retries %d: the upstream saw %d attempts of one call; want %d", retries, seen, retries+1)
		}
		if left := metricValue(t, reg, "trendgate_upstream_budget_tokens", "window", "minute"); left != float64(100-1-seen) {
			t.Errorf("retries %d: %v budget tokens left after %d attempts; want every attempt paid (%d)", retries, left, 1+seen, 100-1-seen)
		}
	}
}

// TestUpstreamResetDrivesBudget is issue 15's reproduction: with a
// per-minute budget, an upstream 429 reporting minute-remaining 0 and a
// reset 4 s ahead blocks calls until that reset, tells callers the real
// wait, and lets calls through right after it, not at the gateway's own
// next calendar minute. The day window follows its reset the same way.
func TestUpstreamResetDrivesBudget(t *testing.T) {
	for _, tc := range []struct {
		name  string
		reset time.Duration
		hdrs  func(reset time.Time) []string
	}{
		{"minute", 4 * time.Second, func(r time.Time) []string {
			return []string{"X-Rate-Limit-Minute-Remaining", "0", "X-Rate-Limit-Minute-Reset", strconv.FormatInt(r.Unix(), 10)}
		}},
		{"day", 90 * time.Second, func(r time.Time) []string {
			return []string{"X-Rate-Limit-Day-Remaining", "0", "X-Rate-Limit-Day-Reset", strconv.FormatInt(r.Unix(), 10)}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clock.NewFake(t0) // 10 s into a minute
			reset := t0.Add(tc.reset)
			stub := newStub(t, respond(429, `{"error":"Rate limit exceeded"}`, tc.hdrs(reset)...))
			cfg := testConfig(stub.srv.URL)
			cfg.Budget = BudgetConfig{PerMinute: 10, PerDay: 1000}
			c, _ := newTestClient(t, cfg, clk)
			if _, err := c.Do(context.Background(), seriesReq); !errors.Is(err, ErrRateLimited) || RetryAfter(err) != tc.reset {
				t.Fatalf("the 429: %v (retry %v); want ErrRateLimited, retry %v", err, RetryAfter(err), tc.reset)
			}
			stub.set(respond(200, seriesBody))
			clk.Advance(tc.reset - time.Second)
			_, err := c.Do(context.Background(), seriesReq)
			if !errors.Is(err, ErrRateLimited) || RetryAfter(err) != time.Second {
				t.Fatalf("a second before the reset: %v (retry %v); want ErrRateLimited, retry 1s", err, RetryAfter(err))
			}
			clk.Advance(time.Second)
			if _, err := c.Do(context.Background(), seriesReq); err != nil {
				t.Fatalf("at the upstream's reset: %v; want the call to go through", err)
			}
			if n := stub.calls.Load(); n != 2 {
				t.Errorf("upstream calls: %d; want 2 (none during the block)", n)
			}
		})
	}
}

// TestBudgetLimitGauge checks trendgate_upstream_budget_limit: the
// configured size of each window, a plan preset filling what is unset, and
// -1 for an unlimited window.
func TestBudgetLimitGauge(t *testing.T) {
	tests := []struct {
		name             string
		budget           BudgetConfig
		wantMin, wantDay float64
	}{
		{name: "explicit", budget: BudgetConfig{PerMinute: 60, PerDay: 5000}, wantMin: 60, wantDay: 5000},
		{name: "preset", budget: BudgetConfig{Plan: "builder"}, wantMin: 90, wantDay: 18000},
		{name: "preset with an override", budget: BudgetConfig{Plan: "hobby", PerDay: 50}, wantMin: 3, wantDay: 50},
		{name: "unlimited", budget: BudgetConfig{}, wantMin: -1, wantDay: -1},
		{name: "unlimited day", budget: BudgetConfig{PerMinute: 10}, wantMin: 10, wantDay: -1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig("http://127.0.0.1:1")
			cfg.Budget = tc.budget
			_, reg := newTestClient(t, cfg, clock.NewFake(t0))
			if got := metricValue(t, reg, "trendgate_upstream_budget_limit", "window", "minute"); got != tc.wantMin {
				t.Errorf("minute limit %v; want %v", got, tc.wantMin)
			}
			if got := metricValue(t, reg, "trendgate_upstream_budget_limit", "window", "day"); got != tc.wantDay {
				t.Errorf("day limit %v; want %v", got, tc.wantDay)
			}
		})
	}
}

// TestReceivedIsWhenTheAnswerArrived: an answer's age counts from its
// arrival, not from when the caller gets round to storing it. (The
// differential oracle met the difference: a refresh stored after the clock
// had moved claimed data a quarter of an hour newer than it was.)
func TestReceivedIsWhenTheAnswerArrived(t *testing.T) {
	clk := clock.NewFake(t0)
	for _, status := range []int{http.StatusOK, http.StatusNotFound} {
		stub := newStub(t, func(w http.ResponseWriter, r *http.Request) {
			clk.Advance(time.Minute) // the upstream takes a minute
			respond(status, seriesBody)(w, r)
		})
		c, _ := newTestClient(t, testConfig(stub.srv.URL), clk)
		before := clk.Now()
		resp, err := c.Do(context.Background(), seriesReq)
		if err != nil {
			t.Fatalf("%d: %v", status, err)
		}
		clk.Advance(time.Hour) // the caller is slow to look
		if want := before.Add(time.Minute); !resp.Received.Equal(want) {
			t.Errorf("%d: Received %s; want %s (the answer's arrival)", status, resp.Received, want)
		}
	}
}
