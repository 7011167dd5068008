package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"trendgate/auth"
	"trendgate/config"
	"trendgate/internal/clock"
)

// memoFixture is a chain on the demo upstream with keys of every kind a
// memo must not carry past its validity, and two ways to send it a
// request: on one connection with a memo, as the HTTP/1.1 lane does, and
// as a request without one.
type memoFixture struct {
	t    testing.TB
	clk  *clock.Fake
	g    *testChain
	conn context.Context // the memo connection's context
	cfg  *config.Config
	keys map[string]string // id → token
}

func newMemoFixture(t testing.TB) *memoFixture {
	t.Helper()
	clk, _, upURL := startDemo(t)
	f := &memoFixture{t: t, clk: clk, keys: map[string]string{}}
	cfg := config.Default()
	cfg.Upstream.BaseURL = upURL
	expires, notBefore := clk.Now().Add(time.Hour), clk.Now().Add(30*time.Minute)
	for _, k := range []config.Key{
		{ID: "full", Plan: config.PlanFull},
		{ID: "limited", Plan: config.PlanLimited},
		{ID: "trial", Plan: config.PlanFull, Expires: &expires},
		{ID: "later", Plan: config.PlanFull, NotBefore: &notBefore},
	} {
		token, err := auth.Generate()
		if err != nil {
			t.Fatal(err)
		}
		k.SHA256 = auth.Digest(token)
		f.keys[k.ID] = token
		cfg.Keys = append(cfg.Keys, k)
	}
	f.cfg = cfg
	f.g = newTestChain(t, cfg, clk)
	f.conn = f.g.ConnContext(context.Background(), nil)
	return f
}

// memo is the memo connection's memo.
func (f *memoFixture) memo() *connMemo { return f.conn.Value(memoKey{}).(*connMemo) }

// send serves target with the Authorization values given (none: no
// header), on the memo connection when onConn.
func (f *memoFixture) send(onConn bool, target string, authz ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, target, nil)
	for _, a := range authz {
		r.Header.Add("Authorization", a)
	}
	if onConn {
		r = r.WithContext(f.g.RequestContext(f.conn))
	}
	w := httptest.NewRecorder()
	f.g.ServeHTTP(w, r)
	return w
}

// answer is what a client can tell of a response apart from its body's
// data: the status, the error code, the data mode and the rate-limit
// policy.
func answer(w *httptest.ResponseRecorder) string {
	var e struct{ Code string }
	_ = json.Unmarshal(w.Body.Bytes(), &e)
	return fmt.Sprintf("%d %q mode=%q policy=%q", w.Code, e.Code, w.Header().Get("X-Data-Mode"), w.Header().Get("RateLimit-Policy"))
}

// reload serves cfg changed by change from now on.
func (f *memoFixture) reload(change func(*config.Config)) {
	f.t.Helper()
	next := *f.cfg
	next.Keys = append([]config.Key(nil), f.cfg.Keys...)
	change(&next)
	if err := next.Validate(); err != nil {
		f.t.Fatal(err)
	}
	set, err := Recompile(f.g.Settings(), &next)
	if err != nil {
		f.t.Fatal(err)
	}
	f.g.Swap(set)
	f.cfg = &next
}

// TestConnMemoAnswersAsWithout sends one sequence of requests on a
// connection with a memo and, each, again without one: keys that change,
// turn invalid, are disabled, expire or start to be valid, a duplicate
// header, a window that depends on the time, and reloads in between. Every
// answer must be the same both ways.
func TestConnMemoAnswersAsWithout(t *testing.T) {
	f := newMemoFixture(t)
	bearer := func(id string) string { return "Bearer " + f.keys[id] }
	list := "/api4/public/topics/list/v1"
	startOnly := func() string {
		return fmt.Sprintf("/api4/public/topic/bitcoin/time-series/v1?start=%d", f.clk.Now().Add(-5*time.Minute).Unix())
	}
	disable := func(id string) func(*config.Config) {
		return func(c *config.Config) {
			for i := range c.Keys {
				if c.Keys[i].ID == id {
					c.Keys[i].Disabled = true
				}
			}
		}
	}
	steps := []struct {
		name   string
		before func() // runs before the step's two requests
		target func() string
		authz  []string
	}{
		{name: "later, not valid yet", authz: []string{bearer("later")}},
		{name: "full", authz: []string{bearer("full")}},
		{name: "full again", authz: []string{bearer("full")}},
		{name: "another key on the connection", authz: []string{bearer("limited")}},
		{name: "back to full", authz: []string{bearer("full")}},
		{name: "not a key", authz: []string{"Bearer tg_notakey"}},
		{name: "no key"},
		{name: "the key twice", authz: []string{bearer("full"), bearer("full")}},
		{name: "full after refusals", authz: []string{bearer("full")}},
		{name: "trial", authz: []string{bearer("trial")}},
		{name: "trial at its last second", before: func() { f.clk.Advance(time.Hour - time.Second) }, authz: []string{bearer("trial")}},
		{name: "trial expired", before: func() { f.clk.Advance(time.Second) }, authz: []string{bearer("trial")}},
		{name: "later, now valid", authz: []string{bearer("later")}},
		{name: "start without end", target: startOnly, authz: []string{bearer("full")}},
		{name: "start without end, later", before: func() { f.clk.Advance(3 * time.Minute) }, target: startOnly, authz: []string{bearer("full")}},
		{name: "full before it is disabled", authz: []string{bearer("full")}},
		{name: "full disabled", before: func() { f.reload(disable("full")) }, authz: []string{bearer("full")}},
		{name: "limited before it is moved", authz: []string{bearer("limited")}},
		{name: "limited again", authz: []string{bearer("limited")}},
		{name: "limited moved to full", before: func() {
			f.reload(func(c *config.Config) {
				for i := range c.Keys {
					if c.Keys[i].ID == "limited" {
						c.Keys[i].Plan = config.PlanFull
					}
				}
			})
		}, authz: []string{bearer("limited")}},
		{name: "limited's rate changed", before: func() {
			f.reload(func(c *config.Config) {
				rate := 3.0
				for i := range c.Keys {
					if c.Keys[i].ID == "limited" {
						c.Keys[i].PerSecond = &rate
					}
				}
			})
		}, authz: []string{bearer("limited")}},
	}
	for _, s := range steps {
		if s.before != nil {
			s.before()
		}
		target := list
		if s.target != nil {
			target = s.target()
		}
		got, want := answer(f.send(true, target, s.authz...)), answer(f.send(false, target, s.authz...))
		if got != want {
			t.Errorf("%s: with the memo %s; without %s", s.name, got, want)
		}
	}
}

// TestConnMemoServesRepeats: a repeated request on a connection takes its
// route and key from the memo. The memo is made to disagree with the
// snapshot to show it: its plan is swapped for the limited one, and the
// next request is served as the limited plan's; a reload ends that.
func TestConnMemoServesRepeats(t *testing.T) {
	f := newMemoFixture(t)
	list := "/api4/public/topics/list/v1"
	full := "Bearer " + f.keys["full"]
	for range 2 { // a record is made for the second of two in a row
		if w := f.send(true, list, full); w.Code != http.StatusOK || w.Header().Get("X-Data-Mode") != "" {
			t.Fatalf("first requests: %s", answer(w))
		}
	}
	m := f.memo()
	km, rm := m.lastKey.Load(), m.lastRoute.Load()
	if km == nil || rm == nil || km.authz != full || km.p.KeyID != "full" || rm.key == "" || rm.target != list {
		t.Fatalf("memo after the first requests: key %+v route %+v", km, rm)
	}
	swapped := *km
	swapped.plan = f.g.Settings().plans[config.PlanLimited]
	m.lastKey.Store(&swapped)
	if w := f.send(true, list, full); w.Header().Get("X-Data-Mode") != "limited" {
		t.Errorf("repeat: %s; want the memo's (limited) plan, so the memo was not used", answer(w))
	}
	if w := f.send(false, list, full); w.Header().Get("X-Data-Mode") != "" {
		t.Errorf("without the memo: %s; want the full plan", answer(w))
	}
	f.reload(func(*config.Config) {})
	if w := f.send(true, list, full); w.Header().Get("X-Data-Mode") != "" {
		t.Errorf("after a reload: %s; want the full plan again", answer(w))
	}
}

// TestConnMemoKeepsNoWindowNearNow: a series window with a start and no
// end is parsed against the time, so its route is not kept.
func TestConnMemoKeepsNoWindowNearNow(t *testing.T) {
	f := newMemoFixture(t)
	target := fmt.Sprintf("/api4/public/topic/bitcoin/time-series/v1?start=%d", f.clk.Now().Add(-5*time.Minute).Unix())
	for range 2 {
		if w := f.send(true, target, "Bearer "+f.keys["full"]); w.Code != http.StatusOK {
			t.Fatalf("status: %s", answer(w))
		}
	}
	if rm := f.memo().lastRoute.Load(); rm != nil {
		t.Errorf("the memo kept the route of %q (%q)", target, rm.target)
	}
	if f.memo().lastKey.Load() == nil {
		t.Error("the memo did not keep the key")
	}
}

// TestConnMemoKeepsOnlyRepeats: a connection whose requests each differ
// from the last, in key and target, makes no record and costs no
// allocation a connection without a memo does not, also when it kept one
// of them before; a request asked twice in a row is kept.
func TestConnMemoKeepsOnlyRepeats(t *testing.T) {
	f := newMemoFixture(t)
	f.reload(unlimited)
	full, limited := "Bearer "+f.keys["full"], "Bearer "+f.keys["limited"]
	list, whatsup := "/api4/public/topics/list/v1", "/api4/public/topic/bitcoin/whatsup/v1"
	alternate := func(onConn bool) func() {
		return func() {
			f.send(onConn, list, full)
			f.send(onConn, whatsup, limited)
		}
	}
	alternate(false)() // both answers cached
	withMemo, without := fewestAllocs(alternate(true)), fewestAllocs(alternate(false))
	if m := f.memo(); m.lastKey.Load() != nil || m.lastRoute.Load() != nil {
		t.Errorf("alternating requests made a record: key %v, route %v", m.lastKey.Load() != nil, m.lastRoute.Load() != nil)
	}
	if withMemo > without {
		t.Errorf("alternating requests: %v allocations a pair on a memo connection, %v without one", withMemo, without)
	}
	// The list with the full key kept, then the same alternation: the
	// list is served from its records, the other is never kept.
	f.send(true, list, full)
	f.send(true, list, full)
	km, rm := f.memo().lastKey.Load(), f.memo().lastRoute.Load()
	if km == nil || rm == nil {
		t.Fatal("a repeat was not kept")
	}
	if withMemo := fewestAllocs(alternate(true)); withMemo > without {
		t.Errorf("alternating with one kept: %v allocations a pair on a memo connection, %v without one", withMemo, without)
	}
	if f.memo().lastKey.Load() != km || f.memo().lastRoute.Load() != rm {
		t.Error("alternating with one kept replaced its records")
	}
	f.send(true, whatsup, limited) // twice in a row
	if km, rm := f.memo().lastKey.Load(), f.memo().lastRoute.Load(); km == nil || km.p.KeyID != "limited" || rm == nil || rm.target != whatsup {
		t.Errorf("a repeat was not kept: key %+v, route %+v", km, rm)
	}
}

// fewestAllocs is the fewest allocations f made per call over several
// measurements. testing.AllocsPerRun counts the whole process's, so a
// goroutine the gateway runs in the background (the cache's, a ticker's)
// sometimes adds some to one measurement (70 against 69 a pair once in
// CI); what f itself allocates is in every one.
func fewestAllocs(f func()) float64 {
	fewest := testing.AllocsPerRun(50, f)
	for range 4 {
		fewest = min(fewest, testing.AllocsPerRun(50, f))
	}
	return fewest
}

// TestConnMemoSharedByStreams: the streams of an HTTP/2 connection share
// one memo and run at once. Goroutines on one memo, each with its own key
// and target, alternating so that each finds the memo holding another's,
// must each be answered as their own key and target are (run with -race:
// no record may be read half made).
func TestConnMemoSharedByStreams(t *testing.T) {
	f := newMemoFixture(t)
	f.reload(unlimited)
	type client struct{ id, target, mode string }
	clients := []client{
		{"full", "/api4/public/topics/list/v1", ""},
		{"limited", "/api4/public/topics/list/v1", "limited"},
		{"full", "/api4/public/topic/bitcoin/whatsup/v1", ""},
		{"limited", "/api4/public/topic/bitcoin/time-series/v1?interval=1d&bucket=hour", "limited"},
	}
	const rounds = 50
	errs := make(chan error, len(clients)*rounds)
	var wg sync.WaitGroup
	for _, cl := range clients {
		wg.Go(func() {
			for range rounds {
				w := f.send(true, cl.target, "Bearer "+f.keys[cl.id])
				want := f.send(false, cl.target, "Bearer "+f.keys[cl.id])
				if w.Code != http.StatusOK || w.Header().Get("X-Data-Mode") != cl.mode || w.Body.String() != want.Body.String() {
					errs <- fmt.Errorf("%s %s: %s, body equal to one without the memo: %v", cl.id, cl.target, answer(w), w.Body.String() == want.Body.String())
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// unlimited gives every key limits no test here reaches.
func unlimited(c *config.Config) {
	rate, burst, units := 1e9, 1_000_000_000, int64(1e15)
	for i := range c.Keys {
		c.Keys[i].PerSecond, c.Keys[i].Burst, c.Keys[i].Daily, c.Keys[i].Monthly = &rate, &burst, &units, &units
	}
}

// discard is a ResponseWriter that keeps only the status.
type discard struct {
	h      http.Header
	status int
}

func (d *discard) Header() http.Header { return d.h }
func (d *discard) WriteHeader(code int) {
	if d.status == 0 {
		d.status = code
	}
}
func (d *discard) Write(b []byte) (int, error) {
	d.WriteHeader(http.StatusOK)
	return len(b), nil
}

// BenchmarkHitOnConnection is one cached list hit through the chain, a
// request built as the HTTP/1.1 lane builds it, on a connection whose
// last request was the same (memo) and with no memo (none).
func BenchmarkHitOnConnection(b *testing.B) {
	f := newMemoFixture(b)
	f.reload(unlimited) // never the limit under test here
	for _, onConn := range []bool{true, false} {
		name := "none"
		if onConn {
			name = "memo"
		}
		b.Run(name, func(b *testing.B) {
			base := httptest.NewRequest(http.MethodGet, "/api4/public/topics/list/v1", nil)
			base.Header.Set("Authorization", "Bearer "+f.keys["full"])
			w := &discard{h: http.Header{}}
			ctx := context.Background()
			if onConn {
				ctx = f.conn
			}
			b.ReportAllocs()
			for b.Loop() {
				clear(w.h)
				w.status = 0
				f.g.ServeHTTP(w, base.WithContext(f.g.RequestContext(ctx)))
				if w.status != http.StatusOK {
					b.Fatalf("status %d", w.status)
				}
			}
		})
	}
}
