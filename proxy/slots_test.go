package proxy_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"trendgate/config"
	"trendgate/demo"
	"trendgate/gateway/gatewaytest"
)

// slowGate stands between the gateway and the demo upstream and holds
// every request whose path contains hold until release: an upstream that
// takes as long as the test says. It counts the requests it holds.
type slowGate struct {
	up      atomic.Pointer[demo.Server]
	hold    string
	release chan struct{}
	held    atomic.Int64
	calls   atomic.Int64
}

func (g *slowGate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.calls.Add(1)
	if strings.Contains(r.URL.Path, g.hold) {
		g.held.Add(1)
		select {
		case <-g.release:
		case <-r.Context().Done():
		}
		g.held.Add(-1)
	}
	g.up.Load().ServeHTTP(w, r)
}

// The probe, in the whole gateway: with max_conns 8, one account
// (team-full) sends 40 cold misses that the upstream holds; another
// account's (team-limited) cold miss is answered while all of them are
// still held, the first account's overflow is refused 503 upstream_busy
// with Retry-After (never a timeout), and once the slow calls end neither
// account meets upstream_paused. Before, the second account's miss
// waited for the first account's calls, whose slot waits then counted as
// upstream timeouts and opened the breaker for everyone.
func TestSlowAccountCannotHoldEverySlot(t *testing.T) {
	gate := &slowGate{hold: "slowtopic", release: make(chan struct{})}
	srv := httptest.NewServer(gate)
	t.Cleanup(srv.Close)
	var once sync.Once
	open := func() { once.Do(func() { close(gate.release) }) }
	t.Cleanup(open) // before srv.Close: held requests end first

	h := gatewaytest.New(t, func(c *config.Config) {
		gatewaytest.RoomyFullPlan(c)
		c.Upstream.BaseURL = srv.URL
		c.Upstream.MaxConns = 8
		c.Upstream.SlotWait = 50 * time.Millisecond
	})
	gate.up.Store(h.Up)

	const flood = 40
	type reply struct {
		status int
		code   string
		retry  string
	}
	replies := make(chan reply, flood)
	for i := range flood {
		go func() { // ends when the gateway answers (the gate is opened below)
			target := "/api4/public/topic/slowtopic" + string(rune('a'+i%26)) + string(rune('a'+i/26)) + "/whatsup/v1"
			resp, body := h.Get(target, h.Full)
			var code string
			if resp.StatusCode != http.StatusOK {
				code = gatewaytest.DecodeError(t, body).Code
			}
			replies <- reply{resp.StatusCode, code, resp.Header.Get("Retry-After")}
		}()
	}
	if !gatewaytest.PollUntil(func() bool { return gate.held.Load() == 6 }) {
		t.Fatalf("held upstream calls = %d; want 6 (8 slots less the 2 kept for other accounts)", gate.held.Load())
	}

	// The other account's cold miss, while the slow calls hold: served.
	topic := strings.ReplaceAll(h.Up.Topics()[1], " ", "%20")
	resp, body := h.Get("/api4/public/topic/"+strings.ReplaceAll(topic, "#", "%23")+"/whatsup/v1", h.Limited)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("other account's cold miss while the slow calls hold: %d %s; want 200", resp.StatusCode, body)
	}
	if held := gate.held.Load(); held != 6 {
		t.Fatalf("held upstream calls after the other account's miss = %d; want still 6", held)
	}

	open()
	var ok, busy int
	for range flood {
		r := <-replies
		switch {
		case r.status == http.StatusOK:
			ok++
		case r.status == http.StatusServiceUnavailable && r.code == "upstream_busy" && r.retry != "":
			busy++
		default:
			t.Errorf("flooding account's answer: %d %q (Retry-After %q); want 200 or 503 upstream_busy with Retry-After", r.status, r.code, r.retry)
		}
	}
	if ok < 6 || ok+busy != flood {
		t.Errorf("flood: %d answered, %d busy; want at least 6 answered, the rest busy", ok, busy)
	}

	// Afterwards, nobody is paused: the breaker never counted a local wait.
	for _, key := range []string{h.Full, h.Limited} {
		topic := strings.ReplaceAll(h.Up.Topics()[2], " ", "%20")
		resp, body := h.Get("/api4/public/topic/"+strings.ReplaceAll(topic, "#", "%23")+"/time-series/v1?bucket=day", key)
		if resp.StatusCode != http.StatusOK {
			t.Errorf("cold miss after the flood: %d %s; want 200 (no upstream_paused)", resp.StatusCode, body)
		}
	}
}
