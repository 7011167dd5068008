package upstream

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"trendgate/internal/clock"
)

// grants makes n claims for c and counts the grants; every refusal must
// carry a wait, and share refusals are counted apart.
func grants(b Budget, c Claim, n int) (granted, shareRefused int, err error) {
	for range n {
		v, err := b.Take(context.Background(), c)
		if err != nil {
			return granted, shareRefused, err
		}
		switch {
		case v.OK:
			granted++
		case v.RetryAfter <= 0:
			return granted, shareRefused, fmt.Errorf("refusal without a wait: %+v", v)
		case v.Share:
			shareRefused++
		}
	}
	return granted, shareRefused, nil
}

// fairScenario is one sequence of claims with the grants each must get.
type fairScenario struct {
	name  string
	cfg   BudgetConfig
	steps []fairStep
}

// fairStep makes n claims; n 0 withdraws the claim's account instead.
type fairStep struct {
	claim              Claim
	n                  int
	wantGranted, share int
}

var (
	keyA = Claim{Account: "key-a"}
	keyB = Claim{Account: "key-b"}
	keyC = Claim{Account: "key-c"}
)

// fairScenarios all fit in one minute. With per_minute 20 and the default
// newcomer reserve of 0.2, 4 calls are held back for newcomers and the pool
// of 16 is split among the active keys.
var fairScenarios = []fairScenario{
	{"a key alone floods, then a newcomer", BudgetConfig{PerMinute: 20, NewcomerReserve: 0.2}, []fairStep{
		{keyA, 25, 16, 9}, // the pool, never the newcomers' part
		{keyB, 3, 3, 0},   // the B: whatsup, list, series all served
		{keyB, 5, 1, 0},   // B may finish the minute: A is past its share
		{keyA, 1, 0, 0},   // the minute is empty: an account refusal
	}},
	{"the other key asked first", BudgetConfig{PerMinute: 20, NewcomerReserve: 0.2}, []fairStep{
		{keyB, 1, 1, 0},
		{keyA, 25, 8, 17}, // A stops at its share; B's guarantee is kept
		{keyB, 11, 7, 4},  // B uses its share; 4 stay held for newcomers
		{keyC, 5, 4, 0},   // a newcomer finds them; then the minute is empty
	}},
	{"weights split the pool", BudgetConfig{PerMinute: 20, NewcomerReserve: 0.2}, []fairStep{
		{Claim{Account: "small", Weight: 1}, 1, 1, 0},
		{Claim{Account: "big", Weight: 3}, 30, 12, 18},  // 16 × 3/4
		{Claim{Account: "small", Weight: 1}, 30, 3, 27}, // 16 × 1/4, 4 held for newcomers
	}},
	{"per-minute cap", BudgetConfig{PerMinute: 20}, []fairStep{
		{Claim{Account: "capped", PerMinute: 3}, 5, 3, 2},
		{keyB, 5, 5, 0},
	}},
	{"no newcomer reserve", BudgetConfig{PerMinute: 10, NewcomerReserve: 0}, []fairStep{
		{keyA, 12, 10, 0},
	}},
	{"background claims keep only the refresh reserve", BudgetConfig{PerMinute: 8, RefreshReserve: 0.25, NewcomerReserve: 0.2}, []fairStep{
		{Claim{Background: true}, 10, 6, 0},
		{keyA, 5, 2, 0},
	}},
	{"day window", BudgetConfig{PerDay: 10, NewcomerReserve: 0.2}, []fairStep{
		{keyA, 10, 8, 2},
		{keyB, 3, 2, 0},
	}},
	elevenAccounts(),
	{"a withdrawn account holds no reservation", BudgetConfig{PerMinute: 20, NewcomerReserve: 0.2}, []fairStep{
		{claim: keyA, n: 1, wantGranted: 1},
		{claim: keyB, n: 1, wantGranted: 1},
		// A's own quota refuses it now: its 7 more of the even split are
		// not held for it, and B is guaranteed the whole pool (16 calls:
		// within its guarantee it may use one of the newcomers' 4, as A
		// used one of the pool).
		{claim: keyA, n: 0}, // withdraw
		{claim: keyB, n: 20, wantGranted: 15, share: 5},
		{claim: keyC, n: 5, wantGranted: 3}, // a newcomer finds the rest
		{claim: keyA, n: 1, wantGranted: 0}, // the minute is empty
	}},
	{"without the withdrawal the reservation holds", BudgetConfig{PerMinute: 20, NewcomerReserve: 0.2}, []fairStep{
		{claim: keyA, n: 1, wantGranted: 1},
		{claim: keyB, n: 1, wantGranted: 1},
		{claim: keyB, n: 20, wantGranted: 7, share: 13},
	}},
}

// elevenAccounts is issue 29's first measurement in one minute: eleven
// accounts are active (each made one call), so each is guaranteed
// floor(16/11) = 1 call of the pool. Their second calls may use only what
// nobody is due, never the newcomers' 4; a share of 1.45 used to round up
// to 2 calls each, so 10 accounts took the whole minute and a newcomer got
// none.
func elevenAccounts() fairScenario {
	sc := fairScenario{name: "fractional shares round down (eleven accounts, then newcomers)",
		cfg: BudgetConfig{PerMinute: 20, NewcomerReserve: 0.2}}
	account := func(i int) Claim { return Claim{Account: fmt.Sprintf("acct-%02d", i)} }
	for i := range 11 {
		sc.steps = append(sc.steps, fairStep{claim: account(i), n: 1, wantGranted: 1})
	}
	// 9 tokens left, 4 of them the newcomers': 5 second calls, to whoever
	// asks first (2, 2, 1), none for the rest.
	for i, granted := range []int{2, 2, 1, 0, 0, 0, 0, 0, 0, 0} {
		sc.steps = append(sc.steps, fairStep{claim: account(i), n: 2, wantGranted: granted, share: 2 - granted})
	}
	sc.steps = append(sc.steps,
		fairStep{claim: Claim{Account: "newcomer-1"}, n: 3, wantGranted: 1, share: 2},
		fairStep{claim: Claim{Account: "newcomer-2"}, n: 1, wantGranted: 1},
	)
	return sc
}

func TestLocalBudgetFairShare(t *testing.T) {
	for _, sc := range fairScenarios {
		t.Run(sc.name, func(t *testing.T) {
			b := newBudget(t, sc.cfg, clock.NewFake(t0))
			for i, st := range sc.steps {
				if st.n == 0 {
					b.Withdraw(context.Background(), st.claim.Account)
					continue
				}
				got, share, err := grants(b, st.claim, st.n)
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				if got != st.wantGranted || share != st.share {
					t.Fatalf("step %d (%s ×%d): %d granted, %d refused for share; want %d, %d",
						i, st.claim.Account, st.n, got, share, st.wantGranted, st.share)
				}
			}
		})
	}
}

func TestRedisBudgetFairShare(t *testing.T) {
	rdb, rdb2 := testRedis(t), testRedis(t)
	for _, sc := range fairScenarios {
		t.Run(sc.name, func(t *testing.T) {
			inOneMinute(t, rdb, func(prefix string) error {
				// Two instances: the share is account-wide, not per instance.
				a := newRedisBudget(t, rdb, sc.cfg, prefix, nil)
				b := newRedisBudget(t, rdb2, sc.cfg, prefix, nil)
				for i, st := range sc.steps {
					inst := Budget(a)
					if i%2 == 1 {
						inst = b
					}
					if st.n == 0 {
						inst.Withdraw(context.Background(), st.claim.Account)
						continue
					}
					got, share, err := grants(inst, st.claim, st.n)
					if err != nil {
						return fmt.Errorf("step %d: %w", i, err)
					}
					if got != st.wantGranted || share != st.share {
						return fmt.Errorf("step %d (%s ×%d): %d granted, %d refused for share; want %d, %d",
							i, st.claim.Account, st.n, got, share, st.wantGranted, st.share)
					}
				}
				return nil
			})
		})
	}
}

// TestLocalBudgetFairWindow checks that a key still asking holds its
// guarantee, that share refusals wait for the next minute, and that a key
// that stopped asking stops holding its guarantee after the fair window.
func TestLocalBudgetFairWindow(t *testing.T) {
	clk := clock.NewFake(t0) // 10 s into a minute
	b := newBudget(t, BudgetConfig{PerMinute: 20, NewcomerReserve: 0.2, FairWindow: 2 * time.Minute}, clk)
	if got, _, _ := grants(b, keyB, 1); got != 1 {
		t.Fatal("B's first call refused")
	}
	clk.Advance(5 * time.Second) // B still asking: its guarantee is held
	if got, _, _ := grants(b, keyA, 20); got != 8 {
		t.Fatalf("A with B asking: %d granted; want 8", got)
	}
	v, _ := b.Take(context.Background(), keyA)
	if v.OK || !v.Share || v.RetryAfter != 45*time.Second {
		t.Fatalf("A past its share: %+v; want a share refusal until the next minute (45s)", v)
	}
	clk.Advance(2 * time.Minute) // B quiet for 3 minutes now
	if got, _, _ := grants(b, keyA, 20); got != 16 {
		t.Fatalf("A after B went quiet: %d granted; want the whole pool, 16", got)
	}
}

func TestShareRefusesEdges(t *testing.T) {
	for _, c := range []struct {
		limit, used, reserve, held int64
		self                       standing
		others                     []standing
		want                       bool
	}{
		{0, 100, 0, 0, standing{1, 100, true}, nil, false},                                        // unlimited
		{1, 0, newcomerReserve(1, 0.2), 0, standing{1, 0, true}, nil, false},                      // a one-call window is usable
		{3, 2, newcomerReserve(3, 0.2), 1, standing{1, 2, true}, nil, true},                       // hobby: 1 held back
		{3, 2, newcomerReserve(3, 0.2), 1, standing{1, 0, true}, []standing{{1, 2, true}}, false}, // newcomer gets it
		{10, 5, 0, 0, standing{1, 0, true}, []standing{{1, 0, true}, {1, 5, true}}, false},        // within its guarantee
		{20, 12, 4, 3, standing{1, 11, true}, []standing{{1, 1, true}}, true},                     // the other's 7 held: refused
		{20, 12, 4, 3, standing{1, 11, true}, []standing{{1, 1, false}}, false},                   // not asking: lent
		{20, 16, 4, 3, standing{1, 15, true}, []standing{{1, 1, false}}, false},                   // 16th: 3 stay for newcomers
		{20, 17, 4, 3, standing{1, 16, true}, []standing{{1, 1, false}}, true},                    // 17th: into the newcomers' 3
		{20, 17, 4, 0, standing{1, 16, true}, []standing{{1, 1, false}}, false},                   // nothing held for newcomers
	} {
		if got := shareRefuses(c.limit, c.used, c.reserve, c.held, c.self, c.others); got != c.want {
			t.Errorf("shareRefuses(%d, %d, %d, %d, %v, %v) = %v; want %v", c.limit, c.used, c.reserve, c.held, c.self, c.others, got, c.want)
		}
	}
}

// TestLocalBudgetMinuteHorizon: an account that has not asked for a whole
// minute holds none of the current minute, even within the (longer) fair
// window; it still holds its part of the day.
func TestLocalBudgetMinuteHorizon(t *testing.T) {
	clk := clock.NewFake(t0) // 10 s into a minute
	b := newBudget(t, BudgetConfig{PerMinute: 20, PerDay: 100, NewcomerReserve: 0.2, FairWindow: 5 * time.Minute}, clk)
	if got, _, _ := grants(b, keyB, 1); got != 1 {
		t.Fatal("B's first call refused")
	}
	clk.Advance(61 * time.Second)
	if got, _, _ := grants(b, keyA, 20); got != 16 {
		t.Fatalf("A a minute after B's last claim: %d granted; want the whole pool, 16", got)
	}
	// The day (pool 80) still counts B as active: guaranteed 40 each, A
	// may go on to 40 + what nobody is due beyond B's 39 and the 20 held
	// for newcomers: 100-1-39-20 = 40. Each minute gives A its pool of 16.
	total := 16
	for range 3 {
		clk.Advance(time.Minute)
		got, _, _ := grants(b, keyA, 20)
		total += got
	}
	if total != 40 {
		t.Fatalf("A over four minutes: %d granted; want 40 (B's part of the day held)", total)
	}
}

// TestBudgetShares: the minute's shares as the dashboard shows them, in
// process and from Redis (the same on every instance).
func TestBudgetShares(t *testing.T) {
	cfg := BudgetConfig{PerMinute: 20, NewcomerReserve: 0.2}
	check := func(t *testing.T, b Budget) error {
		ctx := context.Background()
		if _, _, err := grants(b, keyB, 1); err != nil {
			return err
		}
		if _, _, err := grants(b, keyA, 25); err != nil {
			return err
		}
		sr := b.(shareReporter)
		got, err := sr.shares(ctx)
		if err != nil {
			return err
		}
		want := []Share{{Account: "key-a", Weight: 1, Active: true, Used: 8, Guarantee: 8}, {Account: "key-b", Weight: 1, Active: true, Used: 1, Guarantee: 8}}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Errorf("shares: got %+v; want %+v", got, want)
		}
		b.Withdraw(ctx, "key-a")
		got, err = sr.shares(ctx)
		if err != nil {
			return err
		}
		want = []Share{{Account: "key-a", Weight: 1, Active: false, Used: 8}, {Account: "key-b", Weight: 1, Active: true, Used: 1, Guarantee: 16}}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Errorf("after withdrawing key-a: got %+v; want %+v", got, want)
		}
		return nil
	}
	t.Run("local", func(t *testing.T) {
		if err := check(t, newBudget(t, cfg, clock.NewFake(t0))); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("redis", func(t *testing.T) {
		rdb := testRedis(t)
		inOneMinute(t, rdb, func(prefix string) error { return check(t, newRedisBudget(t, rdb, cfg, prefix, nil)) })
	})
}

// lendStep makes n claims at an offset into the minute.
type lendStep struct {
	at          time.Duration
	claim       Claim
	n           int
	wantGranted int
}

// lendingScenarios are issue 40's idle guarantee in one minute (per_minute
// 20, newcomer reserve 0.2): A asks once at the minute's start, B asks
// on. Before, B got 8 and 11 calls went unused.
var lendingScenarios = []struct {
	name  string
	steps []lendStep
}{
	{"an idle guarantee is lent", []lendStep{
		{0, keyA, 1, 1},
		{1 * time.Second, keyB, 20, 8},  // A is asking: its 7 are held
		{11 * time.Second, keyB, 20, 8}, // A stopped asking: lent, 3 stay for newcomers
		{12 * time.Second, keyC, 5, 3},  // a newcomer finds them
	}},
	{"the owner takes its guarantee back", []lendStep{
		{0, keyA, 1, 1},
		{1 * time.Second, keyB, 8, 8},
		{11 * time.Second, keyB, 4, 4}, // borrowed from A's 7
		{30 * time.Second, keyA, 1, 1}, // A asks again: its 6 left are held for it
		{31 * time.Second, keyB, 5, 0}, // the borrower is refused first
		{32 * time.Second, keyA, 9, 6}, // A takes back the 6 left, within its guarantee
	}},
}

var lendingConfig = BudgetConfig{PerMinute: 20, NewcomerReserve: 0.2}

func TestLocalBudgetLendsIdleGuarantee(t *testing.T) {
	for _, sc := range lendingScenarios {
		t.Run(sc.name, func(t *testing.T) {
			start := t0.Truncate(time.Minute)
			clk := clock.NewFake(start)
			b := newBudget(t, lendingConfig, clk)
			for i, st := range sc.steps {
				clk.Set(start.Add(st.at))
				if got, _, err := grants(b, st.claim, st.n); err != nil || got != st.wantGranted {
					t.Fatalf("step %d (%s ×%d at %s): %d granted (err %v); want %d", i, st.claim.Account, st.n, st.at, got, err, st.wantGranted)
				}
			}
		})
	}
}

// TestRedisBudgetLendsIdleGuarantee is the same rule in cluster mode. The
// scripts read Redis TIME, so time is stood in for by the accounts' last
// claims, moved back in the shared state by how long ago each step's
// offset makes them.
func TestRedisBudgetLendsIdleGuarantee(t *testing.T) {
	rdb := testRedis(t)
	ctx := context.Background()
	for _, sc := range lendingScenarios {
		t.Run(sc.name, func(t *testing.T) {
			inOneMinute(t, rdb, func(prefix string) error {
				b := newRedisBudget(t, rdb, lendingConfig, prefix, nil)
				seen := b.keys[5]
				last := map[string]time.Duration{}
				for i, st := range sc.steps {
					now, err := rdb.Time(ctx).Result()
					if err != nil {
						return err
					}
					for account, at := range last {
						score := float64(now.Add(-(st.at - at)).UnixMilli())
						if err := rdb.ZAddXX(ctx, seen, redis.Z{Score: score, Member: account}).Err(); err != nil {
							return err
						}
					}
					if got, _, err := grants(b, st.claim, st.n); err != nil || got != st.wantGranted {
						return fmt.Errorf("step %d (%s ×%d at %s): %d granted (err %v); want %d", i, st.claim.Account, st.n, st.at, got, err, st.wantGranted)
					}
					last[st.claim.Account] = st.at
				}
				return nil
			})
		})
	}
}

func TestNewcomersHeld(t *testing.T) {
	const lend = 15 * time.Second
	for _, c := range []struct {
		reserve, drawn int64
		left, lend     time.Duration
		want           int64
	}{
		{4, 0, 30 * time.Second, lend, 4}, // before the minute's lending end
		{4, 1, 30 * time.Second, lend, 3}, // one quiet account drew a call
		{4, 0, 15 * time.Second, lend, 4}, // the lending starts
		{4, 0, 14 * time.Second, lend, 4}, // ceil(4×14/15)
		{4, 0, 11 * time.Second, lend, 3}, // ceil(4×11/15)
		{4, 0, 3 * time.Second, lend, 1},  // ceil(4×3/15)
		{4, 0, 0, lend, 0},                // the minute's end
		{4, 3, 11 * time.Second, lend, 1}, // what was drawn is not held again
		{4, 0, 3 * time.Second, 0, 4},     // lending off
		{4, 6, 30 * time.Second, lend, 0}, // never below 0
	} {
		if got := newcomersHeld(c.reserve, c.drawn, c.left, c.lend); got != c.want {
			t.Errorf("newcomersHeld(%d, %d, %s, %s) = %d; want %d", c.reserve, c.drawn, c.left, c.lend, got, c.want)
		}
	}
}

// With newcomer_lend, the newcomers' part is spent as the minute runs out
// instead of being left unused: ten accounts asking all minute (issue 40's
// mixed workload) used 80 of 100 calls a minute, 20 held for newcomers who
// never came.
func TestLocalBudgetLendsNewcomersPartLate(t *testing.T) {
	start := t0.Truncate(time.Minute)
	for _, c := range []struct {
		name string
		lend time.Duration
		want int
	}{
		{"held to the end", 0, 80},
		// The last claims, 1 s before the minute's end, leave
		// ceil(20×1/15) = 2 held.
		{"lent in the last 15 s", 15 * time.Second, 98},
	} {
		t.Run(c.name, func(t *testing.T) {
			clk := clock.NewFake(start)
			b := newBudget(t, BudgetConfig{PerMinute: 100, NewcomerReserve: 0.2, NewcomerLend: c.lend}, clk)
			total := 0
			for s := range 60 { // every account asks every second
				clk.Set(start.Add(time.Duration(s) * time.Second))
				for a := range 10 {
					got, _, err := grants(b, Claim{Account: fmt.Sprintf("acct-%d", a)}, 1)
					if err != nil {
						t.Fatal(err)
					}
					total += got
				}
			}
			if total != c.want {
				t.Errorf("calls granted in the minute = %d; want %d", total, c.want)
			}
		})
	}
}

// TestRedisBudgetLendsNewcomersPartLate: the Lua lends the newcomers' part
// by the same rule, on Redis's clock. With newcomer_lend a whole minute,
// the part held is ceil(20 × the minute's time left / 60 s); an account
// alone may take the rest. A run whose expectation changed while it ran
// (the held part ticked down) is run again.
func TestRedisBudgetLendsNewcomersPartLate(t *testing.T) {
	rdb := testRedis(t)
	ctx := context.Background()
	cfg := BudgetConfig{PerMinute: 100, NewcomerReserve: 0.2, NewcomerLend: time.Minute}
	held := func(now time.Time) int {
		left := now.Truncate(time.Minute).Add(time.Minute).Sub(now)
		return int(newcomersHeld(20, 0, left, time.Minute))
	}
	for range 5 {
		before, err := rdb.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		b := newRedisBudget(t, rdb, cfg, testPrefix(t, rdb), nil)
		got, _, err := grants(b, keyA, 100)
		if err != nil {
			t.Fatal(err)
		}
		after, err := rdb.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		if want := 100 - held(before); held(after) == held(before) && before.Truncate(time.Minute).Equal(after.Truncate(time.Minute)) {
			if got != want {
				t.Fatalf("granted %d at %s; want %d (%d held for newcomers)", got, before.Format("15:04:05.000"), want, held(before))
			}
			return
		}
	}
	t.Fatal("the held part changed during every run")
}
