package proxy_test

// Upstream protection through the whole gateway (issue 5): the outbound
// budget under a bounded simulated hour of load, an upstream 429 with its
// reset, and the upstream down, hanging, flapping or returning garbage.
// Every client response is also checked for headers that came from the
// upstream.

import (
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"trendgate/api"
	"trendgate/config"
	"trendgate/demo"
	"trendgate/gateway/gatewaytest"
	"trendgate/internal/breaker"
	"trendgate/upstream"
)

// Cache-Status values as clients see them.
const (
	csHit          = "trendgate; hit"
	csStale        = "trendgate; hit; stale"
	csStaleIfError = `trendgate; hit; stale; detail="upstream-error"`
	csMiss         = "trendgate; fwd=miss; stored"
	csCollapsed    = "trendgate; fwd=miss; collapsed"
)

// promptly bounds how long a request may take once the gateway knows not
// to call the upstream. It is a functional bound (below the 3 s upstream
// timeouts configured in these tests, so a request that waited for a
// hanging upstream always exceeds it), not a speed target: it leaves room
// for reading a 9.5 MiB oversize body under -race on a loaded host, which
// took 1.3 s once.
const promptly = 2 * time.Second

// TestProtectSimulatedHour runs a bounded load of 300 clients over 150
// topics (601 distinct requests, Zipf popularity) for one simulated hour
// against a demo upstream with the "individual" plan's real limits
// (10/min, 2,000/day) and the gateway's budget on the 90% preset. The
// upstream must never answer 429 and the gateway's calls must stay within
// the budget in every minute; the share answered is reported.
func TestProtectSimulatedHour(t *testing.T) {
	if testing.Short() {
		t.Skip("simulated hour skipped in -short mode")
	}
	const (
		clients = 300
		minutes = 60
		rounds  = 3 // requests per client per simulated minute, 20 s apart
		workers = 32
		step    = time.Minute / rounds
	)
	var keys []string
	h := gatewaytest.NewProtectHarness(t, func(c *config.Config) {
		c.Upstream.Budget = upstream.BudgetConfig{Plan: "individual", RefreshReserve: 0.25}
		keys = gatewaytest.AddClientKeys(t, c, clients)
	}, func(o *demo.Options) { o.PerMinute, o.PerDay = 10, 2000 })
	budget := h.Config.Upstream.Budget.Resolved()
	if budget.PerMinute >= 10 || budget.PerDay >= 2000 {
		t.Fatalf("budget %d/min %d/day is not below the demo account's 10/min 2,000/day", budget.PerMinute, budget.PerDay)
	}

	targets := append([]string{"/api4/public/topics/list/v1"}, gatewaytest.TopicTargets(h.Up, 150)...)
	pick := make([]func() string, clients)
	for i := range pick {
		z := rand.NewZipf(rand.New(rand.NewPCG(uint64(i), 42)), 1.1, 2, uint64(len(targets)-1))
		pick[i] = func() string { return targets[z.Uint64()] }
	}

	type tally struct {
		requests, hit, stale, staleIfError, miss, collapsed int
		budget503, share429, other                          int
		otherSample                                         string
	}
	var (
		mu  sync.Mutex // guards tot
		tot tally
	)
	count := func(r gatewaytest.ClientReply) {
		leaks := gatewaytest.UpstreamHeaderLeaks(r.Header)
		mu.Lock()
		defer mu.Unlock()
		tot.requests++
		switch {
		case r.Err != nil:
			tot.other++
			tot.otherSample = r.Err.Error()
		case len(leaks) > 0:
			tot.other++
			tot.otherSample = "upstream headers reached the client: " + leaks[0]
		case r.Status == http.StatusOK:
			switch cs := r.Header.Get("Cache-Status"); cs {
			case csHit:
				tot.hit++
			case csStale:
				tot.stale++
			case csStaleIfError:
				tot.staleIfError++
			case csMiss:
				tot.miss++
			case csCollapsed:
				tot.collapsed++
			default:
				tot.other++
				tot.otherSample = "200 with Cache-Status " + cs
			}
		case r.Status == http.StatusServiceUnavailable && r.Code() == "upstream_budget_exhausted" && retryAfter(r) >= 1 && retryAfter(r) <= 60:
			// The minute budget is out; a token frees up within the minute.
			tot.budget503++
		case r.Status == http.StatusTooManyRequests && r.Code() == "upstream_share_exhausted" && retryAfter(r) >= 1 && retryAfter(r) <= 86400:
			// This key had its fair share of the minute (or of the day:
			// then Retry-After runs to midnight) while others wait.
			tot.share429++
		default:
			tot.other++
			tot.otherSample = strconv.Itoa(r.Status) + " " + r.Text()
		}
	}

	for m := 0; m < minutes; m++ {
		for range rounds {
			jobs := make(chan int)
			var wg sync.WaitGroup
			for range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for c := range jobs {
						count(h.Send(pick[c](), keys[c]))
					}
				}()
			}
			for c := range clients {
				jobs <- c
			}
			close(jobs)
			wg.Wait()
			// Background refreshes started by this round end before the
			// clock moves, so each call lands in the minute it was budgeted.
			h.Quiesce()
			h.Clock.Advance(step)
		}
	}

	perMinute := map[time.Time]int{}
	for _, r := range h.Up.Requests() {
		perMinute[r.At.Truncate(time.Minute)]++
	}
	maxPerMinute, calls := 0, 0
	for _, n := range perMinute {
		maxPerMinute = max(maxPerMinute, n)
		calls += n
	}
	answered := tot.hit + tot.stale + tot.staleIfError + tot.miss + tot.collapsed
	share := float64(answered) / float64(tot.requests)
	t.Logf("simulated hour: %d clients x %d min x %d rounds = %d client requests over %d distinct requests",
		clients, minutes, rounds, tot.requests, len(targets))
	t.Logf("answered 200: %d (%.1f%%): hit %d, stale %d, stale-if-error %d, miss %d, collapsed %d",
		answered, 100*share, tot.hit, tot.stale, tot.staleIfError, tot.miss, tot.collapsed)
	t.Logf("503 upstream_budget_exhausted: %d; 429 upstream_share_exhausted: %d; other: %d", tot.budget503, tot.share429, tot.other)
	t.Logf("upstream calls: %d in %d minutes, max %d in one minute (budget %d/min, %d/day; account 10/min, 2000/day); upstream 429s: %d",
		calls, len(perMinute), maxPerMinute, budget.PerMinute, budget.PerDay, h.UpTap.Status(http.StatusTooManyRequests))

	if tot.requests != clients*minutes*rounds {
		t.Errorf("client requests: got %d; want %d", tot.requests, clients*minutes*rounds)
	}
	if tot.other > 0 {
		t.Errorf("%d responses were neither a 200 nor a budget 503 (Retry-After within the minute) or a share 429, e.g. %.300s", tot.other, tot.otherSample)
	}
	if n := h.UpTap.Status(http.StatusTooManyRequests); n != 0 {
		t.Errorf("upstream 429 answers: got %d; want 0", n)
	}
	if n := h.Metric("trendgate_upstream_rate_limited_total"); n != 0 {
		t.Errorf("trendgate_upstream_rate_limited_total: got %v; want 0", n)
	}
	if maxPerMinute > budget.PerMinute {
		t.Errorf("upstream calls in one minute: got %d; want at most the budget's %d", maxPerMinute, budget.PerMinute)
	}
	if calls > budget.PerDay {
		t.Errorf("upstream calls in the hour: got %d; want at most the day budget %d", calls, budget.PerDay)
	}
	// The popular requests are cached and refreshed in time, so most
	// clients are answered although the upstream takes at most 9 calls a
	// minute for 601 distinct requests.
	if share < 0.75 {
		t.Errorf("answered share: got %.3f; want at least 0.75", share)
	}
	if tot.stale == 0 || tot.miss == 0 || tot.budget503 == 0 {
		t.Errorf("the load did not exercise stale serving, misses and budget refusals (stale %d, miss %d, 503 %d)",
			tot.stale, tot.miss, tot.budget503)
	}
}

// retryAfter returns the Retry-After seconds of r, or -1 when absent.
func retryAfter(r gatewaytest.ClientReply) int {
	v, err := strconv.Atoi(r.Header.Get("Retry-After"))
	if err != nil {
		return -1
	}
	return v
}

// TestProtectUpstream429 switches the upstream to answering 429 with its
// minute reset: after the first 429 the gateway makes no upstream call
// until the reset (even though the upstream would answer again), serves
// what it has stale, answers cold requests 503 with the remaining wait as
// Retry-After, and charges no quota for what it did not deliver.
func TestProtectUpstream429(t *testing.T) {
	h := gatewaytest.NewProtectHarness(t, gatewaytest.RoomyFullPlan)
	const (
		expired = "/api4/public/topic/bitcoin/whatsup/v1"                 // beyond stale-while-revalidate
		stale   = "/api4/public/topic/ethereum/time-series/v1?bucket=day" // within it
	)
	cold := []string{"/api4/public/topic/solana/whatsup/v1", "/topic/dogecoin/time-series/posts_active.tsv"}
	costs := h.Config.Limits.Costs
	costOf := map[string]int{expired: costs.For(api.EndpointWhatsup), stale: costs.For(api.EndpointSeries), cold[0]: costs.For(api.EndpointWhatsup), cold[1]: costs.For(api.EndpointTSV)}

	if r := h.Send(expired, h.Full); r.Status != http.StatusOK {
		t.Fatalf("warming %s: %d %s", expired, r.Status, r.Text())
	}
	h.Clock.Advance(100 * time.Minute)
	if r := h.Send(stale, h.Full); r.Status != http.StatusOK {
		t.Fatalf("warming %s: %d %s", stale, r.Status, r.Text())
	}
	// Now both entries are past their hour of freshness: the first also
	// past the hour of stale-while-revalidate, the second within it.
	h.Clock.Advance(70 * time.Minute)
	charged0 := h.Metric("trendgate_quota_charged_units_total", "account", "team-full")

	h.Up.SetFault(demo.FaultRateLimit)
	calls0 := h.Up.Count()
	reset := h.Clock.Now().Truncate(time.Minute).Add(time.Minute)
	first := h.Send(cold[0], h.Full)
	if first.Status != http.StatusServiceUnavailable || first.Code() != "upstream_rate_limited" {
		t.Fatalf("cold request during the upstream's 429: got %d %s; want 503 upstream_rate_limited", first.Status, first.Text())
	}
	if got, want := retryAfter(first), int(reset.Sub(h.Clock.Now())/time.Second); got != want {
		t.Errorf("Retry-After: got %d; want %d (the upstream's minute reset)", got, want)
	}
	if got := h.Up.Count() - calls0; got != 1 {
		t.Fatalf("upstream calls for the first cold request: got %d; want 1 (a 429 is not retried)", got)
	}
	gatewaytest.CheckNoUpstreamHeaders(t, "503 after upstream 429", &http.Response{Header: first.Header})

	// The upstream would answer now; the gateway must still wait for the reset.
	h.Up.SetFault(demo.FaultNone)
	delivered := 0
	for _, wait := range []time.Duration{0, 30 * time.Second} {
		h.Clock.Advance(wait)
		left := int(reset.Sub(h.Clock.Now()) / time.Second)
		for round := range 3 {
			for _, target := range []string{expired, stale, cold[0], cold[1]} {
				r := h.Send(target, h.Full)
				gatewaytest.CheckNoUpstreamHeaders(t, target, &http.Response{Header: r.Header})
				switch target {
				case expired, stale:
					want := csStaleIfError
					if target == stale {
						want = csStale
					}
					if r.Status != http.StatusOK || r.Header.Get("Cache-Status") != want {
						t.Errorf("%s at %s before the reset (round %d): got %d %q; want 200 %q",
							target, h.Clock.Now().Format(time.TimeOnly), round, r.Status, r.Header.Get("Cache-Status"), want)
					}
					delivered += costOf[target]
				default:
					if r.Status != http.StatusServiceUnavailable || retryAfter(r) != left {
						t.Errorf("%s at %s before the reset: got %d Retry-After %d (%s); want 503 Retry-After %d",
							target, h.Clock.Now().Format(time.TimeOnly), r.Status, retryAfter(r), r.Text(), left)
					}
				}
			}
		}
		h.Quiesce() // background refreshes of the stale entry end before counting
		if got := h.Up.Count() - calls0; got != 1 {
			t.Fatalf("upstream calls %s before the reset: got %d; want still 1", reset.Sub(h.Clock.Now()), got)
		}
	}
	if got := h.Metric("trendgate_quota_charged_units_total", "account", "team-full") - charged0; int(got) != delivered {
		t.Errorf("quota charged while the upstream was limiting: got %v units; want %d (only the delivered stale answers)", got, delivered)
	}

	h.Clock.Set(reset.Add(time.Second))
	for _, target := range []string{cold[0], expired} {
		r := h.Send(target, h.Full)
		if r.Status != http.StatusOK || r.Header.Get("Cache-Status") != csMiss {
			t.Errorf("%s after the reset: got %d %q; want 200 %q", target, r.Status, r.Header.Get("Cache-Status"), csMiss)
		}
	}
	if got := h.Up.Count() - calls0; got < 3 {
		t.Errorf("upstream calls after the reset: got %d in all; want the two fetches made", got)
	}
	if n := h.UpTap.Status(http.StatusTooManyRequests); n != 1 {
		t.Errorf("upstream 429 answers: got %d; want exactly the first", n)
	}
}

// TestProtectRefreshReserve: background refreshes of popular (stale)
// entries may spend the minute's budget only down to the refresh reserve;
// the rest stays for cold misses, which nobody else can answer.
func TestProtectRefreshReserve(t *testing.T) {
	const perMinute, reserve = 8, 0.25
	h := gatewaytest.NewProtectHarness(t, func(c *config.Config) {
		gatewaytest.RoomyFullPlan(c)
		c.Upstream.Budget = upstream.BudgetConfig{PerMinute: perMinute, RefreshReserve: reserve}
	})
	targets := gatewaytest.TopicTargets(h.Up, 20)
	var warm []string
	for i := 2; i < len(targets); i += 4 {
		warm = append(warm, targets[i]) // whatsup: fresh for an hour
	}
	warm = warm[:10]
	for i, target := range warm {
		if i == perMinute/2 || i == perMinute {
			h.Clock.Advance(time.Minute) // stay within each minute's budget
		}
		if r := h.Send(target, h.Full); r.Status != http.StatusOK {
			t.Fatalf("warming %s: %d %s", target, r.Status, r.Text())
		}
	}
	// Past their hour of freshness, within stale-while-revalidate, at the
	// start of a fresh budget minute.
	h.Clock.Set(h.Clock.Now().Truncate(time.Minute).Add(80 * time.Minute))
	calls0, finished0 := h.Up.Count(), h.UpstreamCalls()
	for i, target := range warm {
		r := h.Send(target, h.Full)
		if r.Status != http.StatusOK || r.Header.Get("Cache-Status") != csStale {
			t.Errorf("%s: got %d %q; want 200 %q", target, r.Status, r.Header.Get("Cache-Status"), csStale)
		}
		// One refresh at a time, so they spend the budget in this order.
		if !gatewaytest.PollUntil(func() bool { return int(h.UpstreamCalls()-finished0) == i+1 }) {
			t.Fatalf("the background refresh of %s did not finish", target)
		}
	}
	if got := h.UpstreamCalls() - finished0; int(got) != len(warm) {
		t.Fatalf("background refreshes finished: got %v; want %d", got, len(warm))
	}
	wantRefreshes := int(float64(perMinute) * (1 - reserve))
	if got := h.Up.Count() - calls0; got != wantRefreshes {
		t.Errorf("background refreshes that reached the upstream: got %d of %d; want %d (%.0f%% of %d/min kept in reserve)",
			got, len(warm), wantRefreshes, 100*reserve, perMinute)
	}
	cold := targets[len(targets)-4:]
	for i, target := range cold {
		r := h.Send(target, h.Full)
		if i < perMinute-wantRefreshes {
			if r.Status != http.StatusOK || r.Header.Get("Cache-Status") != csMiss {
				t.Errorf("cold %s with the reserve left: got %d %q %s; want 200 %q", target, r.Status, r.Header.Get("Cache-Status"), r.Text(), csMiss)
			}
			continue
		}
		if r.Status != http.StatusServiceUnavailable || r.Code() != "upstream_budget_exhausted" || retryAfter(r) < 1 || retryAfter(r) > 60 {
			t.Errorf("cold %s with the budget spent: got %d Retry-After %d %s; want 503 upstream_budget_exhausted within the minute",
				target, r.Status, retryAfter(r), r.Text())
		}
	}
}

// faultConfig gives the upstream short timeouts and a breaker that opens
// after three consecutive failures for five (simulated) seconds.
func faultConfig(c *config.Config) {
	gatewaytest.RoomyFullPlan(c)
	c.Upstream.Timeout = 3 * time.Second
	c.Upstream.ResponseHeaderTimeout = 3 * time.Second
	c.Upstream.Breaker = upstream.BreakerConfig{Failures: 3, Backoff: 5 * time.Second, MaxBackoff: time.Minute}
}

// goroutineSlack is how many more goroutines than before a fault may exist
// once it has cleared: a few pooled connections. A leak of one goroutine
// per failed request (each scenario makes dozens) exceeds it.
const goroutineSlack = 10

// TestProtectFaults switches the upstream into each failure mode. Warm keys
// keep getting 200 marked stale; cold keys get a prompt 502 with
// Retry-After until the breaker opens and a prompt 503 with Retry-After
// after, with no further upstream call; after the fault clears everything
// is fetched again and no goroutine is left over.
func TestProtectFaults(t *testing.T) {
	tests := []struct {
		name     string
		fault    demo.Fault
		coldCode string // the 502's code before the breaker opens
		opens    bool   // consecutive failures open the breaker
	}{
		{"server error", demo.FaultServerError, "bad_upstream_response", true},
		{"connection reset", demo.FaultReset, "upstream_unavailable", true},
		{"garbage", demo.FaultGarbage, "bad_upstream_response", true},
		{"wrong shape", demo.FaultWrongShape, "bad_upstream_response", true},
		{"oversize", demo.FaultOversize, "bad_upstream_response", true},
		{"flapping 50%", demo.FaultFlap, "bad_upstream_response", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := gatewaytest.NewProtectHarness(t, faultConfig)
			targets := gatewaytest.TopicTargets(h.Up, 20)
			warm := targets[:4]
			warmUp(h, warm)
			goroutines := h.SettledGoroutines()

			h.Up.SetFault(tc.fault)
			seen := map[string]int{}
			openedAt := -1 // upstream arrivals when the breaker was first seen open
			for i := range 40 {
				var target string
				// warm, cold, cold: not in step with a flapping upstream
				isWarm := i%3 == 0
				if isWarm {
					target = warm[i/3%len(warm)]
				} else {
					target = targets[len(warm)+i]
				}
				r := h.Send(target, h.Full)
				if r.Err != nil {
					t.Fatalf("%s: %v", target, r.Err)
				}
				gatewaytest.CheckNoUpstreamHeaders(t, target, &http.Response{Header: r.Header})
				if r.Took > promptly {
					t.Errorf("%s took %s; want under %s", target, r.Took, promptly)
				}
				cs := r.Header.Get("Cache-Status")
				seen[strconv.Itoa(r.Status)+" "+r.Code()+cs]++
				switch {
				case isWarm && r.Status == http.StatusOK && (cs == csStaleIfError || !tc.opens && (cs == csMiss || cs == csHit)):
				case isWarm:
					t.Errorf("warm %s: got %d %q %s; want 200 %q", target, r.Status, cs, r.Text(), csStaleIfError)
				case r.Status == http.StatusServiceUnavailable && r.Code() == "upstream_paused" && retryAfter(r) > 0:
					if openedAt < 0 {
						openedAt = h.Up.Count()
					}
				case r.Status == http.StatusBadGateway && r.Code() == tc.coldCode && retryAfter(r) > 0:
					if openedAt >= 0 {
						t.Errorf("cold %s: 502 after the breaker opened", target)
					}
				case !tc.opens && r.Status == http.StatusOK && cs == csMiss:
				default:
					t.Errorf("cold %s: got %d Retry-After %d %s; want 502 %s or 503 upstream_paused, with Retry-After",
						target, r.Status, retryAfter(r), r.Text(), tc.coldCode)
				}
				if openedAt >= 0 && h.Up.Count() != openedAt {
					t.Fatalf("upstream calls after the breaker opened: %d; want none", h.Up.Count()-openedAt)
				}
			}
			t.Logf("%s: statuses %v", tc.name, seen)
			if s := h.Metric("trendgate_breaker_state", "dependency", "upstream"); tc.opens != (s == float64(breaker.Open)) {
				t.Errorf("breaker state after the fault: got %v; want open %v", s, tc.opens)
			}
			if tc.opens != (openedAt >= 0) {
				t.Errorf("breaker opened: got %v; want %v (statuses %v)", openedAt >= 0, tc.opens, seen)
			}
			if !tc.opens && (seen["200 "+csMiss] == 0 || seen["502 "+tc.coldCode] == 0) {
				t.Errorf("flapping upstream: cold requests should both succeed and fail, got %v", seen)
			}
			checkRecovered(h, 5*time.Second, targets[len(targets)-1], warm[0], goroutines)
		})
	}
}

// TestProtectHang: an upstream that never answers costs the first cold
// callers the configured upstream timeout (3 s) and opens the breaker, while
// a warm key is served stale after cache.stale_if_error_wait; from then on
// no request waits for the upstream: warm keys get 200 stale at once, cold
// keys a prompt 503 with Retry-After. When the backoff has passed exactly
// one probe goes out while everyone else is still answered promptly.
func TestProtectHang(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for real upstream timeouts; skipped in -short mode")
	}
	h := gatewaytest.NewProtectHarness(t, faultConfig)
	timeout := h.Config.Upstream.Timeout
	targets := gatewaytest.TopicTargets(h.Up, 40)
	warm := targets[:4]
	cold := targets[4:]
	warmUp(h, warm)
	goroutines := h.SettledGoroutines()

	h.Up.SetFault(demo.FaultHang)
	failures := h.Config.Upstream.Breaker.Failures
	// Before the breaker opens, cold callers wait for the upstream timeout
	// and get 504; a warm one gets its stale entry once stale_if_error_wait
	// (shorter than the timeout) has passed.
	wait := h.Config.Cache.StaleIfErrorWait
	for i, r := range h.SendAll(h.Full, append([]string{warm[0]}, cold[:failures]...)) {
		gatewaytest.CheckNoUpstreamHeaders(t, r.Target, &http.Response{Header: r.Header})
		if i == 0 {
			t.Logf("warm %s before the breaker opened: %d %q after %s", r.Target, r.Status, r.Header.Get("Cache-Status"), r.Took.Round(time.Millisecond))
			if r.Status != http.StatusOK || r.Header.Get("Cache-Status") != csStaleIfError {
				t.Errorf("warm %s on a hanging upstream: got %d %q; want 200 %q", r.Target, r.Status, r.Header.Get("Cache-Status"), csStaleIfError)
			}
			if r.Took < wait-100*time.Millisecond || r.Took >= timeout {
				t.Errorf("warm %s answered after %s; want after the %s stale_if_error_wait, before the %s upstream timeout", r.Target, r.Took, wait, timeout)
			}
			continue
		}
		if r.Took < timeout-100*time.Millisecond {
			t.Errorf("%s answered after %s, before the %s upstream timeout could have passed", r.Target, r.Took, timeout)
		}
		if r.Status != http.StatusGatewayTimeout || r.Code() != "upstream_timeout" || retryAfter(r) < 1 {
			t.Errorf("cold %s on a hanging upstream: got %d Retry-After %d %s; want 504 upstream_timeout with Retry-After",
				r.Target, r.Status, retryAfter(r), r.Text())
		}
	}
	if s := h.Metric("trendgate_breaker_state", "dependency", "upstream"); s != float64(breaker.Open) {
		t.Fatalf("breaker after %d timeouts: got state %v; want open", failures, s)
	}

	// Open: nothing waits and nothing reaches the upstream.
	calls := h.Up.Count()
	var mixed []string
	for i := range 10 {
		mixed = append(mixed, warm[i%len(warm)], cold[failures+i])
	}
	for i, r := range h.SendAll(h.Full, mixed) {
		checkOpenReply(t, r, i%2 == 0)
	}
	if got := h.Up.Count() - calls; got != 0 {
		t.Errorf("upstream calls while the breaker is open: got %d; want 0", got)
	}

	// Half-open: one probe; the other callers do not wait for it.
	h.Clock.Advance(h.Config.Upstream.Breaker.Backoff)
	probeRound := h.SendAll(h.Full, cold[failures+10:failures+20])
	if got := h.Up.Count() - calls; got != 1 {
		t.Errorf("upstream calls once the backoff passed: got %d; want exactly 1 probe", got)
	}
	slow := 0
	for _, r := range probeRound {
		if r.Took > promptly {
			slow++
			if r.Status != http.StatusGatewayTimeout {
				t.Errorf("the probe %s: got %d %s; want 504", r.Target, r.Status, r.Text())
			}
			continue
		}
		checkOpenReply(t, r, false)
	}
	if slow != 1 {
		t.Errorf("requests that waited for the hanging upstream after the backoff: got %d; want only the probe", slow)
	}
	// The failed probe reopened the breaker with a doubled backoff.
	for i, r := range h.SendAll(h.Full, mixed) {
		checkOpenReply(t, r, i%2 == 0)
	}
	checkRecovered(h, 2*h.Config.Upstream.Breaker.Backoff, cold[len(cold)-1], warm[0], goroutines)
}

// checkOpenReply checks one answer given while the breaker is open: prompt,
// 200 stale for a warm key, 503 upstream_paused with Retry-After for a
// cold one, and no upstream header either way.
func checkOpenReply(t *testing.T, r gatewaytest.ClientReply, warm bool) {
	t.Helper()
	if r.Err != nil {
		t.Fatalf("%s: %v", r.Target, r.Err)
	}
	if r.Took > promptly {
		t.Errorf("%s took %s with the breaker open; want under %s", r.Target, r.Took, promptly)
	}
	gatewaytest.CheckNoUpstreamHeaders(t, r.Target, &http.Response{Header: r.Header})
	if warm {
		if r.Status != http.StatusOK || r.Header.Get("Cache-Status") != csStaleIfError {
			t.Errorf("warm %s: got %d %q %s; want 200 %q", r.Target, r.Status, r.Header.Get("Cache-Status"), r.Text(), csStaleIfError)
		}
		return
	}
	if r.Status != http.StatusServiceUnavailable || r.Code() != "upstream_paused" || retryAfter(r) < 1 {
		t.Errorf("cold %s: got %d Retry-After %d %s; want 503 upstream_paused with Retry-After", r.Target, r.Status, retryAfter(r), r.Text())
	}
}

// TestProtectNoUpstreamHeaders: whatever headers the upstream (or a CDN in
// front of it) sends — its rate-limit counters, cookies, server name,
// X-Lunar-* — none reaches a client, on any kind of response.
func TestProtectNoUpstreamHeaders(t *testing.T) {
	h := gatewaytest.NewProtectHarness(t, nil)
	target := "/api4/public/topic/bitcoin/time-series/v1"
	check := func(what string, resp *http.Response) {
		t.Helper()
		gatewaytest.CheckNoUpstreamHeaders(t, what, resp)
	}
	miss, _ := h.Get(target, h.Full)
	if miss.Header.Get("Cache-Status") != csMiss {
		t.Fatalf("first request: Cache-Status %q; want %q", miss.Header.Get("Cache-Status"), csMiss)
	}
	check("miss", miss)
	hit, _ := h.Get(target, h.Full)
	check("hit", hit)
	check("limited plan", func() *http.Response { r, _ := h.Get(target, h.Limited); return r }())
	check("gzip", func() *http.Response { r, _ := h.Get(target, h.Full, "Accept-Encoding", "gzip"); return r }())
	check("304", func() *http.Response {
		r, _ := h.Get(target, h.Full, "If-None-Match", hit.Header.Get("ETag"))
		return r
	}())
	check("HEAD", func() *http.Response { r, _ := h.Do(http.MethodHead, target, h.Full); return r }())
	check("tsv", func() *http.Response { r, _ := h.Get("/topic/bitcoin/time-series/sentiment.tsv", h.Full); return r }())
	check("list", func() *http.Response { r, _ := h.Get("/api4/public/topics/list/v1", h.Full); return r }())
	h.Up.SetFault(demo.FaultServerError)
	bad, _ := h.Get("/api4/public/topic/ethereum/whatsup/v1", h.Full)
	if bad.StatusCode != http.StatusBadGateway {
		t.Errorf("upstream 500: got %d; want 502", bad.StatusCode)
	}
	check("502", bad)
	if h.UpTap.Status(http.StatusOK) == 0 || h.UpTap.Status(http.StatusInternalServerError) == 0 {
		t.Fatal("the tap saw no upstream answers; the headers were never offered to the gateway")
	}
}

// TestProtectSlowUpstream: when the upstream takes seconds, clients of
// entries past their freshness do not wait for it (one background refresh
// per entry, served stale meanwhile), and a herd on a cold key waits for a
// single upstream call.
func TestProtectSlowUpstream(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for a real upstream latency; skipped in -short mode")
	}
	const latency = promptly + time.Second // a request that waited for it is not prompt
	h := gatewaytest.NewProtectHarness(t, gatewaytest.RoomyFullPlan)
	targets := gatewaytest.TopicTargets(h.Up, 3)
	warm := targets[:4]
	for _, target := range warm {
		if r := h.Send(target, h.Full); r.Status != http.StatusOK {
			t.Fatalf("warming %s: %d %s", target, r.Status, r.Text())
		}
	}
	// Past every warm entry's freshness, within stale-while-revalidate.
	h.Clock.Advance(65 * time.Minute)
	h.Up.SetLatency(latency)
	calls0, finished0 := h.Up.Count(), h.UpstreamCalls()
	var herd []string
	for i := range 20 {
		herd = append(herd, warm[i%len(warm)])
	}
	for _, r := range h.SendAll(h.Full, herd) {
		if r.Status != http.StatusOK || r.Header.Get("Cache-Status") != csStale || r.Took > promptly {
			t.Errorf("%s on a slow upstream: got %d %q after %s; want 200 %q under %s",
				r.Target, r.Status, r.Header.Get("Cache-Status"), r.Took, csStale, promptly)
		}
	}
	if !gatewaytest.PollUntil(func() bool { return int(h.UpstreamCalls()-finished0) >= len(warm) }) {
		t.Fatal("the background refreshes did not finish")
	}
	if got := h.Up.Count() - calls0; got != len(warm) {
		t.Errorf("upstream calls for %d stale requests on %d entries: got %d; want one refresh each", len(herd), len(warm), got)
	}
	for _, target := range warm {
		if r := h.Send(target, h.Full); r.Status != http.StatusOK || r.Header.Get("Cache-Status") != csHit || r.Took > promptly {
			t.Errorf("%s after its refresh: got %d %q after %s; want a prompt 200 %q", target, r.Status, r.Header.Get("Cache-Status"), r.Took, csHit)
		}
	}

	calls0 = h.Up.Count()
	cold := targets[len(targets)-1]
	statuses := map[string]int{}
	for _, r := range h.SendAll(h.Full, []string{cold, cold, cold, cold, cold, cold, cold, cold}) {
		statuses[strconv.Itoa(r.Status)+" "+r.Header.Get("Cache-Status")]++
	}
	if got := h.Up.Count() - calls0; got != 1 {
		t.Errorf("upstream calls for 8 concurrent clients on a cold key: got %d; want 1", got)
	}
	if statuses["200 "+csMiss] != 1 || statuses["200 "+csCollapsed] != 7 {
		t.Errorf("cold herd answers: got %v; want one %q and seven %q", statuses, csMiss, csCollapsed)
	}
}

// warmUp fetches targets once and moves the clock three hours on, past
// every entry's freshness and stale-while-revalidate, so they are served
// only when the upstream fails.
func warmUp(h *gatewaytest.ProtectHarness, targets []string) {
	h.T.Helper()
	for _, target := range targets {
		if r := h.Send(target, h.Full); r.Status != http.StatusOK {
			h.T.Fatalf("warming %s: %d %s", target, r.Status, r.Text())
		}
	}
	h.Clock.Advance(3 * time.Hour)
}

// checkRecovered clears the fault, lets the breaker's backoff pass and
// checks that cold and warm requests are fetched again (a warm entry
// refreshed during the fault may be a fresh hit) and that no goroutine is
// left behind by the fault.
func checkRecovered(h *gatewaytest.ProtectHarness, backoff time.Duration, cold, warm string, goroutines int) {
	t := h.T
	t.Helper()
	h.Up.SetFault(demo.FaultNone)
	h.Clock.Advance(backoff)
	for _, target := range []string{cold, warm} {
		r := h.Send(target, h.Full)
		cs := r.Header.Get("Cache-Status")
		if r.Status != http.StatusOK || cs != csMiss && (target == cold || cs != csHit) {
			t.Errorf("%s after the fault cleared: got %d %q %.200s; want 200 %q", target, r.Status, cs, r.Text(), csMiss)
		}
	}
	if s := h.Metric("trendgate_breaker_state", "dependency", "upstream"); s != float64(breaker.Closed) {
		t.Errorf("breaker state after recovery: got %v; want closed", s)
	}
	after := h.SettledGoroutines()
	t.Logf("goroutines: %d before the fault, %d after it cleared", goroutines, after)
	if after > goroutines+goroutineSlack {
		t.Errorf("goroutines: %d after the fault cleared; want at most %d (%d before + %d)", after, goroutines+goroutineSlack, goroutines, goroutineSlack)
	}
}
