package upstream

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"trendgate/internal/clock"
)

// demandBudget is an in-process budget of perMinute calls on a fake clock
// set at at, with the default fair-share settings.
func demandBudget(t *testing.T, perMinute int, at time.Time) (*LocalBudget, *clock.Fake) {
	t.Helper()
	cfg := DefaultConfig().Budget
	cfg.PerMinute, cfg.PerDay = perMinute, 0
	clk := clock.NewFake(at)
	return newBudget(t, cfg, clk), clk
}

// demandStep is one claim and whether it must be granted.
type demandStep struct {
	tenant, key string
	times       int  // the claim is made this many times (0: once)
	ok          bool // every one of them granted, or every one refused
}

func runDemandSteps(t *testing.T, b *LocalBudget, steps []demandStep) {
	t.Helper()
	for i, s := range steps {
		for range max(s.times, 1) {
			v, _ := b.Take(context.Background(), Claim{Account: s.tenant, Key: s.key})
			if v.OK != s.ok {
				t.Fatalf("step %d (%s asks %q): granted %v; want %v (verdict %+v)", i, s.tenant, s.key, v.OK, s.ok, v)
			}
			if !v.OK && v.RetryAfter <= 0 {
				t.Fatalf("step %d (%s asks %q): refused without Retry-After: %+v", i, s.tenant, s.key, v)
			}
		}
	}
}

// The minute's calls left go to the refused requests asked most; a request
// asked less is refused at once (never kept waiting) while they would take
// every call left, and first come, first served holds among equals.
func TestDemandGateSpendsTheMinuteOnTheMostAsked(t *testing.T) {
	minute := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	b, clk := demandBudget(t, 3, minute.Add(50*time.Second))
	runDemandSteps(t, b, []demandStep{
		{key: "/x1", ok: true}, {key: "/x2", ok: true}, {key: "/x3", ok: true},
		{key: "/hot", times: 3},  // refused: the minute is used
		{key: "/warm", times: 2}, // refused too
	})
	clk.Set(minute.Add(time.Minute)) // 3 calls again; /hot and /warm still asked for
	runDemandSteps(t, b, []demandStep{
		{key: "/cold", ok: true}, // 2 more-asked requests, 3 calls left
		{key: "/cold2"},          // 2 more-asked requests, 2 calls left: held
		{key: "/warm", ok: true}, // /hot alone is ahead of it
		{key: "/cold2"},          // asked twice now, /hot (3) still ahead of it, 1 call left
		{key: "/hot", ok: true},
	})
	v, _ := b.Take(context.Background(), Claim{Key: "/cold2"})
	if v.OK || v.Share || v.Demand || v.RetryAfter <= 0 {
		t.Errorf("with the minute used: %+v; want a budget refusal with Retry-After", v)
	}

	// A flood of requests asked once each is served first come, first
	// served: the gate never holds a call for requests asked as little.
	b, clk = demandBudget(t, 20, minute)
	for i := range 20 {
		runDemandSteps(t, b, []demandStep{{key: fmt.Sprintf("/once/%d", i), ok: true}})
	}
	runDemandSteps(t, b, []demandStep{{key: "/once/20"}})
	clk.Set(minute.Add(time.Minute))
	for i := range 20 {
		runDemandSteps(t, b, []demandStep{{key: fmt.Sprintf("/next/%d", i), ok: true}})
	}
}

// A refused request holds calls only while it is asked for: pendingFor
// after its last ask, the calls are everybody's again; and what nobody asks
// for any more is forgotten.
func TestDemandGateForgetsWhatIsNoLongerAsked(t *testing.T) {
	minute := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	b, clk := demandBudget(t, 1, minute.Add(50*time.Second))
	runDemandSteps(t, b, []demandStep{{key: "/x", ok: true}, {key: "/hot", times: 3}})
	clk.Set(minute.Add(time.Minute))
	if v, _ := b.Take(context.Background(), Claim{Key: "/cold"}); v.OK || !v.Demand || v.RetryAfter <= 0 || v.RetryAfter > pendingFor {
		t.Fatalf("/cold with 1 call left and /hot refused 3 times: %+v; want held for /hot, Retry-After within %v", v, pendingFor)
	}
	clk.Set(minute.Add(50*time.Second + pendingFor + time.Second))
	runDemandSteps(t, b, []demandStep{{key: "/cold", ok: true}}) // /hot no longer asked for

	clk.Advance(20 * demandHalfLife)
	runDemandSteps(t, b, []demandStep{{key: "/late", ok: true}})
	b.mu.Lock()
	n, pending := len(b.demand.keys), len(b.demand.pending)
	b.mu.Unlock()
	if n != 1 || pending != 0 {
		t.Errorf("after 20 half-lives: %d requests remembered, %d pending; want only /late, granted", n, pending)
	}
}

// The fair share comes first: one account asking its refused requests over
// and over cannot hold another account's guaranteed calls, while a claim
// that borrows (or names no account) is held for them; requests asked by
// more accounts do hold guaranteed calls.
func TestDemandGateKeepsTheGuarantees(t *testing.T) {
	minute := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	b, _ := demandBudget(t, 20, minute) // 4 for newcomers, a pool of 16
	steps := []demandStep{{tenant: "b", key: "/b/first", ok: true}}
	for i := range 7 {
		steps = append(steps, demandStep{tenant: "a", key: fmt.Sprintf("/a/%d", i), ok: true})
	}
	steps = append(steps, demandStep{tenant: "a", key: "/a/7", ok: true}) // A's 8th, its guarantee used
	for i := range 12 {
		steps = append(steps, demandStep{tenant: "a", key: fmt.Sprintf("/a/more/%d", i), times: 3}) // share refusals
	}
	for i := range 7 { // B's guarantee is 8: all granted despite A's 12 pending requests
		steps = append(steps, demandStep{tenant: "b", key: fmt.Sprintf("/b/%d", i), ok: true})
	}
	steps = append(steps, demandStep{key: "/nobody"}) // 4 calls left, 12 requests asked more: held
	runDemandSteps(t, b, steps)

	// A and C use the minute's pool (8 each), then both ask the same 5
	// requests (share refusals: their guarantees are used). B, new in the
	// minute and within its guarantee, asks a request only it asks: the
	// 4 calls left are held for the 5 requests two accounts ask.
	b, _ = demandBudget(t, 20, minute)
	steps = nil
	for i := range 8 {
		steps = append(steps, demandStep{tenant: "a", key: fmt.Sprintf("/a/%d", i), ok: true})
	}
	for i := range 8 {
		steps = append(steps, demandStep{tenant: "c", key: fmt.Sprintf("/c/%d", i), ok: true})
	}
	for i := range 5 {
		steps = append(steps, demandStep{tenant: "a", key: fmt.Sprintf("/shared/%d", i)}, demandStep{tenant: "c", key: fmt.Sprintf("/shared/%d", i)})
	}
	steps = append(steps, demandStep{tenant: "b", key: "/b/alone"})
	runDemandSteps(t, b, steps)
	if v, _ := b.Take(context.Background(), Claim{Account: "b", Key: "/shared/0"}); !v.OK {
		t.Errorf("B asks a request two accounts ask: %+v; want it granted", v)
	}
}

// TestDemandGateZipfSimulation replays a Zipf workload against the
// in-process budget, with and without the demand gate, and reports how many
// requests each left unanswered: 10 accounts take turns asking 50 requests
// a second for 10 minutes, 75 % of them over 1,000 requests by Zipf
// popularity (s = 1.1) and 25 % asked once only (like the sliding windows
// of the mixed workload); an answer is kept 2 minutes; 100 calls a minute.
// First come, first served spends the minute's calls on whatever comes
// first; the gate spends them where the demand is.
func TestDemandGateZipfSimulation(t *testing.T) {
	fcfs := simulateZipf(t, false)
	gated := simulateZipf(t, true)
	t.Logf("unanswered of %d requests: first come, first served %d, demand gate %d (%.1f%% fewer)",
		fcfs.asked, fcfs.refused, gated.refused, 100*float64(fcfs.refused-gated.refused)/float64(fcfs.refused))
	if gated.asked != fcfs.asked {
		t.Fatalf("the runs asked %d and %d requests; want the same workload", gated.asked, fcfs.asked)
	}
	if gated.calls > fcfs.calls+5 || gated.calls*100 < fcfs.calls*90 {
		t.Errorf("upstream calls: gate %d, first come %d; want the same budget spent", gated.calls, fcfs.calls)
	}
	if gated.refused*100 > fcfs.refused*95 {
		t.Errorf("the gate left %d requests unanswered, first come, first served %d; want at least 5%% fewer", gated.refused, fcfs.refused)
	}
}

type zipfRun struct{ asked, refused, calls int }

func simulateZipf(t *testing.T, gated bool) zipfRun {
	t.Helper()
	const (
		seconds, perSecond, requests = 600, 50, 1000
		ttl                          = 2 * time.Minute
	)
	b, clk := demandBudget(t, 100, time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC))
	rnd := rand.New(rand.NewPCG(40, 3))
	zipf := rand.NewZipf(rnd, 1.1, 1, requests-1)
	cached := map[string]time.Time{} // request → until when its answer is kept
	var r zipfRun
	for s := range seconds {
		now := clk.Now()
		for i := range perSecond {
			key := fmt.Sprintf("/zipf/%d", zipf.Uint64())
			if rnd.IntN(4) == 0 {
				key = fmt.Sprintf("/once/%d/%d", s, i)
			}
			r.asked++
			if until, ok := cached[key]; ok && now.Before(until) {
				continue
			}
			c := Claim{Account: fmt.Sprintf("account-%d", (s*perSecond+i)%10)}
			if gated {
				c.Key = key
			}
			v, _ := b.Take(context.Background(), c)
			if !v.OK {
				r.refused++
				continue
			}
			r.calls++
			cached[key] = now.Add(ttl)
		}
		clk.Advance(time.Second)
	}
	return r
}

// BenchmarkDemandGateHolds measures the gate's decision for a request
// asked once while 1,000 refused requests are pending and the minute has
// 990 calls left (the scan is over the pending requests).
func BenchmarkDemandGateHolds(b *testing.B) {
	now := time.Date(2026, 11, 27, 12, 0, 50, 0, time.UTC)
	var g demandGate
	for i := range 1000 {
		key := fmt.Sprintf("/hot/%d", i)
		g.ask(key, "a", now)
		g.refused(key, g.ask(key, "b", now), now)
	}
	now = now.Add(10 * time.Second)
	cold := &keyDemand{asks: 1, at: now, askers: []asker{{"c", now}}}
	b.ReportAllocs()
	for b.Loop() {
		if !g.holds("/cold", cold, 990, now, false) {
			b.Fatal("not held; want held for the 1,000 pending requests")
		}
	}
}
