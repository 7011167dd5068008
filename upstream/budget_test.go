package upstream

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"trendgate/internal/clock"
)

func newBudget(t *testing.T, cfg BudgetConfig, clk clock.Clock) *LocalBudget {
	t.Helper()
	b, err := NewLocalBudget(cfg, clk)
	if err != nil {
		t.Fatalf("NewLocalBudget: %v", err)
	}
	return b
}

// takeN makes n takes and returns how many succeeded and the last wait.
func takeN(t *testing.T, b Budget, n int, background bool) (int, time.Duration) {
	t.Helper()
	okCount := 0
	var wait time.Duration
	for range n {
		ok, ra, err := take(b, context.Background(), background)
		if err != nil {
			t.Fatalf("Take: %v", err)
		}
		if ok {
			okCount++
		} else {
			wait = ra
		}
	}
	return okCount, wait
}

func TestLocalBudgetPerMinuteRefill(t *testing.T) {
	clk := clock.NewFake(t0) // 10 s into the minute
	b := newBudget(t, BudgetConfig{PerMinute: 3}, clk)
	if got, wait := takeN(t, b, 5, false); got != 3 || wait != 50*time.Second {
		t.Fatalf("got %d takes, wait %v; want 3, 50s", got, wait)
	}
	clk.Advance(49 * time.Second)
	if got, wait := takeN(t, b, 1, false); got != 0 || wait != time.Second {
		t.Fatalf("at 59s got %d takes, wait %v; want 0, 1s", got, wait)
	}
	clk.Advance(time.Second)
	if got, _ := takeN(t, b, 5, false); got != 3 {
		t.Fatalf("next minute: got %d takes; want 3", got)
	}
}

func TestLocalBudgetPerDay(t *testing.T) {
	clk := clock.NewFake(t0)
	b := newBudget(t, BudgetConfig{PerMinute: 2, PerDay: 5}, clk)
	total := 0
	for range 4 { // four minutes, two takes each, day cap 5
		got, _ := takeN(t, b, 2, false)
		total += got
		clk.Advance(time.Minute)
	}
	if total != 5 {
		t.Fatalf("got %d takes in a day; want 5", total)
	}
	midnight := time.Date(2026, 3, 15, 0, 0, 0, 0, time.UTC)
	if _, wait := takeN(t, b, 1, false); wait != midnight.Sub(clk.Now()) {
		t.Fatalf("got wait %v; want until midnight %v", wait, midnight.Sub(clk.Now()))
	}
	clk.Set(midnight.Add(-time.Second))
	if got, _ := takeN(t, b, 1, false); got != 0 {
		t.Fatalf("just before midnight got %d takes; want 0", got)
	}
	clk.Set(midnight)
	if got, _ := takeN(t, b, 3, false); got != 2 {
		t.Fatalf("after midnight got %d takes; want 2 (minute cap)", got)
	}
}

func TestLocalBudgetReserve(t *testing.T) {
	tests := []struct {
		name           string
		cfg            BudgetConfig
		wantBackground int // background takes before the reserve stops them
		wantTotal      int // then foreground takes on top
	}{
		{"minute reserve 25%", BudgetConfig{PerMinute: 8, RefreshReserve: 0.25}, 6, 8},
		{"day reserve 50%", BudgetConfig{PerDay: 4, RefreshReserve: 0.5}, 2, 4},
		{"no reserve", BudgetConfig{PerMinute: 5}, 5, 5},
		{"full reserve", BudgetConfig{PerMinute: 5, RefreshReserve: 1}, 0, 5},
		{"unlimited ignores reserve", BudgetConfig{RefreshReserve: 0.9}, 50, 100},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := newBudget(t, tc.cfg, clock.NewFake(t0))
			bg, _ := takeN(t, b, 50, true)
			if bg != tc.wantBackground {
				t.Errorf("got %d background takes; want %d", bg, tc.wantBackground)
			}
			fg, _ := takeN(t, b, 50, false)
			if bg+fg != tc.wantTotal {
				t.Errorf("got %d takes in total; want %d", bg+fg, tc.wantTotal)
			}
		})
	}
}

func TestLocalBudgetPlanPreset(t *testing.T) {
	tests := []struct {
		plan                  string
		perMinute, wantMinute int
	}{
		{"hobby", 0, 3},
		{"individual", 0, 9},
		{"builder", 0, 90},
		{"scale", 0, 450},
		{"builder", 7, 7}, // explicit numbers win
	}
	for _, tc := range tests {
		t.Run(tc.plan, func(t *testing.T) {
			b := newBudget(t, BudgetConfig{Plan: tc.plan, PerMinute: tc.perMinute}, clock.NewFake(t0))
			if got, _ := takeN(t, b, 1000, false); got != tc.wantMinute {
				t.Errorf("got %d takes per minute; want %d", got, tc.wantMinute)
			}
		})
	}
	if _, err := NewLocalBudget(BudgetConfig{Plan: "gold"}, nil); err == nil {
		t.Error("unknown plan: got nil error; want one")
	}
}

func hdr(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return h
}

func unixStr(t time.Time) string { return strconv.FormatInt(t.Unix(), 10) }

func TestLocalBudgetObserve(t *testing.T) {
	tests := []struct {
		name       string
		cfg        BudgetConfig
		status     int
		h          http.Header
		wantMinute int64 // tokens left after Observe (-1 unlimited)
		wantDay    int64
		wantBlock  time.Duration // 0: not blocked
	}{
		{"lower minute and day", BudgetConfig{PerMinute: 9, PerDay: 1800}, 200,
			hdr(hdrMinuteRemaining, "4", hdrDayRemaining, "100"), 4, 100, 0},
		{"higher remaining does not raise", BudgetConfig{PerMinute: 9, PerDay: 1800}, 200,
			hdr(hdrMinuteRemaining, "50", hdrDayRemaining, "5000"), 9, 1800, 0},
		{"garbage headers ignored", BudgetConfig{PerMinute: 9}, 200,
			hdr(hdrMinuteRemaining, "-3", hdrDayRemaining, "many"), 9, -1, 0},
		{"minute remaining zero blocks to reset", BudgetConfig{PerMinute: 9}, 200,
			hdr(hdrMinuteRemaining, "0", hdrMinuteReset, unixStr(t0.Add(20*time.Second))), 0, -1, 20 * time.Second},
		{"429 without headers blocks to next minute", BudgetConfig{}, 429, hdr(), -1, -1, 50 * time.Second},
		{"429 with past reset blocks to next minute", BudgetConfig{}, 429,
			hdr(hdrMinuteReset, unixStr(t0.Add(-time.Hour))), -1, -1, 50 * time.Second},
		{"429 with a reset further ahead than a minute (another clock) blocks to next minute", BudgetConfig{}, 429,
			hdr(hdrMinuteReset, unixStr(t0.Add(100*time.Hour))), -1, -1, 50 * time.Second},
		{"day remaining zero blocks to day reset", BudgetConfig{}, 200,
			hdr(hdrDayRemaining, "0", hdrDayReset, unixStr(t0.Add(3*time.Hour))), -1, -1, 3 * time.Hour},
		{"day remaining zero blocks to midnight", BudgetConfig{PerDay: 10}, 429,
			hdr(hdrDayRemaining, "0"), -1, 0, 11*time.Hour + 29*time.Minute + 50*time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk := clock.NewFake(t0)
			b := newBudget(t, tc.cfg, clk)
			b.Observe(context.Background(), tc.h, tc.status)
			if m, d := b.tokens(); m != tc.wantMinute || d != tc.wantDay {
				t.Errorf("got tokens %d/%d; want %d/%d", m, d, tc.wantMinute, tc.wantDay)
			}
			ok, wait, _ := take(b, context.Background(), false)
			if tc.wantBlock == 0 {
				if !ok && tc.wantMinute != 0 {
					t.Errorf("got refused (wait %v); want a token", wait)
				}
				return
			}
			if ok || wait != tc.wantBlock {
				t.Fatalf("got ok=%v wait %v; want blocked for %v", ok, wait, tc.wantBlock)
			}
			clk.Advance(tc.wantBlock - time.Second)
			if ok, _, _ := take(b, context.Background(), false); ok {
				t.Fatal("one second before the reset: got a token; want none")
			}
		})
	}
}

func TestLocalBudgetBlockNeverShrinks(t *testing.T) {
	clk := clock.NewFake(t0)
	b := newBudget(t, BudgetConfig{}, clk)
	b.Observe(context.Background(), hdr(hdrMinuteReset, unixStr(t0.Add(40*time.Second))), 429)
	b.Observe(context.Background(), hdr(hdrMinuteReset, unixStr(t0.Add(10*time.Second))), 429)
	if ok, wait, _ := take(b, context.Background(), false); ok || wait != 40*time.Second {
		t.Fatalf("got ok=%v wait %v; want blocked for 40s", ok, wait)
	}
	clk.Advance(40 * time.Second)
	if ok, _, _ := take(b, context.Background(), false); !ok {
		t.Fatal("after the reset: got refused; want a token")
	}
}

// take is Take for a claim that names no account, as three values.
func take(b Budget, ctx context.Context, background bool) (bool, time.Duration, error) {
	v, err := b.Take(ctx, Claim{Background: background})
	return v.OK, v.RetryAfter, err
}

// TestResetOnAClockAhead is a regression test (issue 26's oracle): an
// upstream whose clock runs two days ahead sent a minute reset two days
// ahead, and the gateway refused every call for two days. A reset further
// ahead than its window is taken as absent: the hold ends at our own next
// minute boundary.
func TestResetOnAClockAhead(t *testing.T) {
	now := time.Date(2026, 11, 19, 10, 30, 15, 0, time.UTC)
	ahead := now.Add(48 * time.Hour)
	h := http.Header{}
	h.Set(hdrMinuteRemaining, "0")
	h.Set(hdrMinuteReset, strconv.FormatInt(ahead.Truncate(time.Minute).Add(time.Minute).Unix(), 10))
	h.Set(hdrDayRemaining, "0")
	h.Set(hdrDayReset, strconv.FormatInt(ahead.Add(24*time.Hour).Unix(), 10))
	got := blockUntil(parseRateHeaders(h, now), http.StatusTooManyRequests, now)
	if want := time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC); !got.Equal(want) {
		t.Errorf("blocked until %v; want %v (the next UTC midnight on our clock)", got, want)
	}
	h.Set(hdrDayRemaining, "5")
	got = blockUntil(parseRateHeaders(h, now), http.StatusTooManyRequests, now)
	if want := now.Truncate(time.Minute).Add(time.Minute); !got.Equal(want) {
		t.Errorf("minute block until %v; want %v", got, want)
	}
	// A plausible reset is kept.
	h.Set(hdrMinuteReset, strconv.FormatInt(now.Add(40*time.Second).Unix(), 10))
	if got := blockUntil(parseRateHeaders(h, now), http.StatusTooManyRequests, now); !got.Equal(now.Add(40 * time.Second)) {
		t.Errorf("plausible reset: blocked until %v", got)
	}
}
