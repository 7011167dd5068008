package gatewaytest

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"trendgate/auth"
	"trendgate/config"
	"trendgate/demo"
)

// UpTap sits between the gateway and the demo upstream. It counts the
// requests in flight and the statuses the upstream answered, and adds
// headers the real upstream (or a CDN in front of it) may send, which must
// never reach the gateway's clients.
type upTap struct {
	up       atomic.Pointer[demo.Server] // set once the harness has built it
	srv      *httptest.Server
	inflight atomic.Int64

	mu       sync.Mutex  // guards statuses
	statuses map[int]int // upstream status → count
}

// leakedUpstreamHeaders are set by the tap on every upstream answer, on top
// of the demo's own X-Rate-Limit-* and X-Lunar-* headers.
var leakedUpstreamHeaders = map[string]string{
	"Set-Cookie":       "upstream_session=s3cr3t; Path=/; HttpOnly",
	"Server":           "lunar-edge/9.9",
	"X-Lunar-Trace-Id": "trace-from-upstream",
	"Via":              "1.1 upstream-cdn",
}

func (p *upTap) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.inflight.Add(1)
	defer p.inflight.Add(-1)
	for k, v := range leakedUpstreamHeaders {
		w.Header().Set(k, v)
	}
	rw := &tapWriter{ResponseWriter: w}
	p.up.Load().ServeHTTP(rw, r)
	if rw.status == 0 {
		return // hijacked and reset, or hung until the request ended
	}
	p.mu.Lock()
	p.statuses[rw.status]++
	p.mu.Unlock()
}

// Status returns how many answers with status code the upstream sent.
func (p *upTap) Status(code int) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.statuses[code]
}

// tapWriter records the status and passes hijacking through (FaultReset).
type tapWriter struct {
	http.ResponseWriter
	status int
}

func (w *tapWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *tapWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *tapWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return w.ResponseWriter.(http.Hijacker).Hijack()
}

// ProtectHarness is a harness whose gateway reaches the demo upstream
// through a tap.
type ProtectHarness struct {
	*Harness
	UpTap *upTap
}

// NewProtectHarness is newHarness with the upstream behind a tap.
func NewProtectHarness(t *testing.T, mutate func(*config.Config), opts ...func(*demo.Options)) *ProtectHarness {
	t.Helper()
	p := &upTap{statuses: make(map[int]int)}
	p.srv = httptest.NewServer(p)
	t.Cleanup(p.srv.Close) // runs after the harness's cleanups release hung requests
	h := New(t, func(c *config.Config) {
		c.Upstream.BaseURL = p.srv.URL
		if mutate != nil {
			mutate(c)
		}
	}, opts...)
	p.up.Store(h.Up)
	return &ProtectHarness{Harness: h, UpTap: p}
}

// Metric sums the samples of the named metric family in the gateway's
// registry whose labels include every name/value pair in labels.
func (h *ProtectHarness) Metric(name string, labels ...string) float64 {
	h.T.Helper()
	return Metric(h.T, h.Gateway.Registry(), name, labels...)
}

// UpstreamCalls is how many upstream client calls have finished, whatever
// their result (budget refusals and open-breaker refusals included).
func (h *ProtectHarness) UpstreamCalls() float64 {
	return h.Metric("trendgate_upstream_requests_total") + h.Metric("trendgate_upstream_refusals_total")
}

// WaitFor polls cond (every 2 ms, at most 10 s of real time) and reports
// whether it became true. It waits for work already started to finish;
// it never stands in for the passing of simulated time.
func PollUntil(cond func() bool) bool {
	deadline := time.Now().Add(10 * time.Second)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// Quiesce waits until no request is in flight to the upstream and the
// gateway's count of finished upstream calls has stopped moving, so
// background refreshes started by the last requests have ended.
func (p *ProtectHarness) Quiesce() {
	p.T.Helper()
	last, stable := -1.0, 0
	ok := PollUntil(func() bool {
		n := p.UpstreamCalls()
		if p.UpTap.inflight.Load() == 0 && n == last {
			stable++
		} else {
			stable = 0
		}
		last = n
		return stable >= 3
	})
	if !ok {
		p.T.Fatal("upstream calls did not settle within 10 s")
	}
}

// UpstreamHeaderLeaks returns the names of headers in h that came from the
// upstream: its rate-limit counters, its X-Lunar-* headers, cookies, its
// server name and the tap's extra headers.
func UpstreamHeaderLeaks(h http.Header) []string {
	var leaks []string
	for name, vals := range h {
		lower := strings.ToLower(name)
		switch {
		case strings.HasPrefix(lower, "x-rate-limit-"), lower == "x-rate-limit",
			strings.HasPrefix(lower, "x-lunar-"), lower == "set-cookie", lower == "server", lower == "via":
			leaks = append(leaks, name)
			continue
		}
		for _, v := range vals {
			for _, leaked := range leakedUpstreamHeaders {
				if v == leaked {
					leaks = append(leaks, name)
				}
			}
		}
	}
	return leaks
}

// CheckNoUpstreamHeaders fails the test when resp carries an upstream header.
func CheckNoUpstreamHeaders(t *testing.T, what string, resp *http.Response) {
	t.Helper()
	if leaks := UpstreamHeaderLeaks(resp.Header); len(leaks) > 0 {
		t.Errorf("%s: upstream headers reached the client: %v", what, leaks)
	}
}

// TopicTargets returns, for each of the first n demo topics, its hourly
// series, daily series, whatsup and TSV targets, topic by topic.
func TopicTargets(up *demo.Server, n int) []string {
	topics := up.Topics()
	if n > len(topics) {
		n = len(topics)
	}
	out := make([]string, 0, 4*n)
	for _, topic := range topics[:n] {
		seg := strings.ReplaceAll(url.PathEscape(topic), "$", "%24")
		out = append(out,
			"/api4/public/topic/"+seg+"/time-series/v1",
			"/api4/public/topic/"+seg+"/time-series/v1?bucket=day",
			"/api4/public/topic/"+seg+"/whatsup/v1",
			"/topic/"+seg+"/time-series/sentiment.tsv",
		)
	}
	return out
}

// addKeys appends n generated keys to c, every fifth on the limited plan,
// and returns the secrets in the same order.
func AddClientKeys(t *testing.T, c *config.Config, n int) []string {
	t.Helper()
	secrets := make([]string, n)
	for i := range secrets {
		k, err := auth.Generate()
		if err != nil {
			t.Fatal(err)
		}
		secrets[i] = k
		plan := config.PlanFull
		if i%5 == 4 {
			plan = config.PlanLimited
		}
		c.Keys = append(c.Keys, config.Key{ID: "client-" + strconv.Itoa(i), SHA256: auth.Digest(k), Plan: plan})
	}
	return secrets
}

// SettledGoroutines returns the goroutine count once it has stopped
// falling (idle client connections closed first).
func (h *ProtectHarness) SettledGoroutines() int {
	h.Client.CloseIdleConnections()
	last, stable := runtime.NumGoroutine(), 0
	PollUntil(func() bool {
		n := runtime.NumGoroutine()
		if n >= last {
			stable++
		} else {
			stable = 0
		}
		last = min(last, n)
		return stable >= 25
	})
	return last
}

// ClientReply is one client response, collected without failing the test so
// that goroutines may send requests.
type ClientReply struct {
	Target string
	Status int
	Header http.Header
	Body   []byte
	Took   time.Duration // real time from sending to the end of the body
	Err    error
}

// Code returns the JSON error code of an error clientReply, "" otherwise.
func (r ClientReply) Code() string {
	var e struct {
		Code string `json:"code"`
	}
	if json.Unmarshal(r.Body, &e) != nil {
		return ""
	}
	return e.Code
}

// Text returns the start of the body, for messages.
func (r ClientReply) Text() string {
	if len(r.Body) > 200 {
		return string(r.Body[:200]) + "..."
	}
	return string(r.Body)
}

// Send makes one GET request with key ("" sends no Authorization); it is
// safe to call from any goroutine.
func (h *ProtectHarness) Send(target, key string) ClientReply {
	r := ClientReply{Target: target}
	req, err := http.NewRequest(http.MethodGet, h.Base+target, nil)
	if err != nil {
		r.Err = err
		return r
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	start := time.Now()
	resp, err := h.Client.Do(req)
	if err != nil {
		r.Err = err
		return r
	}
	defer resp.Body.Close()
	r.Body, r.Err = io.ReadAll(resp.Body)
	r.Took = time.Since(start)
	r.Status, r.Header = resp.StatusCode, resp.Header
	return r
}

// SendAll sends one request per target concurrently and returns the
// replies in target order.
func (h *ProtectHarness) SendAll(key string, targets []string) []ClientReply {
	out := make([]ClientReply, len(targets))
	var wg sync.WaitGroup
	for i, target := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = h.Send(target, key)
		}()
	}
	wg.Wait()
	return out
}

// SendHeader is send with one extra request header.
func (h *ProtectHarness) SendHeader(target, key, name, value string) ClientReply {
	req, err := http.NewRequest(http.MethodGet, h.Base+target, nil)
	if err != nil {
		h.T.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set(name, value)
	resp, err := h.Client.Do(req)
	if err != nil {
		h.T.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return ClientReply{Target: target, Status: resp.StatusCode, Header: resp.Header, Body: b}
}

// RoomyFullPlan lifts the full plan's rate so that the per-key limiter,
// whose bucket refills only as the fake clock moves, never answers 429 in
// tests about the upstream.
func RoomyFullPlan(c *config.Config) {
	p := c.Plans[config.PlanFull]
	p.PerSecond, p.Burst = 10000, 10000
	c.Plans[config.PlanFull] = p
}
