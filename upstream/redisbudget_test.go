package upstream

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"trendgate/internal/clock"
	"trendgate/internal/testing/redistest"
)

// testRedis connects to the local Redis, skipping the test when it is
// unreachable (failing instead when CI=true).
func testRedis(t *testing.T) *redis.Client {
	t.Helper()
	return redistest.Client(t, redistest.Addr)
}

// testPrefix returns a fresh "tg:test:<random>:" prefix whose keys are
// deleted when the test ends.
func testPrefix(t *testing.T, rdb *redis.Client) string {
	t.Helper()
	return redistest.Prefix(t, rdb)
}

func scanKeys(ctx context.Context, rdb *redis.Client, prefix string) ([]string, error) {
	var keys []string
	iter := rdb.Scan(ctx, 0, prefix+"*", 100).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	return keys, iter.Err()
}

func newRedisBudget(t *testing.T, rdb redis.UniversalClient, cfg BudgetConfig, prefix string, m *Metrics) *RedisBudget {
	t.Helper()
	local, err := NewLocalBudget(cfg, clock.Real{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewRedisBudget(rdb, cfg, prefix, time.Second, local, nil, m, nil)
	if err != nil {
		t.Fatalf("NewRedisBudget: %v", err)
	}
	return b
}

// inOneMinute runs fn with a fresh prefix until one run starts and ends in
// the same Redis-clock minute (at most 3 runs), so a window roll-over in
// the middle cannot change what fn observes.
func inOneMinute(t *testing.T, rdb *redis.Client, fn func(prefix string) error) {
	t.Helper()
	ctx := context.Background()
	for range 3 {
		before, err := rdb.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		ferr := fn(testPrefix(t, rdb))
		after, err := rdb.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		if before.Truncate(time.Minute).Equal(after.Truncate(time.Minute)) {
			if ferr != nil {
				t.Fatal(ferr)
			}
			return
		}
	}
	t.Fatal("could not run within one minute window in 3 tries")
}

func TestRedisBudgetShared(t *testing.T) {
	rdb := testRedis(t)
	rdb2 := testRedis(t)
	tests := []struct {
		name       string
		cfg        BudgetConfig
		background bool
		want       int
	}{
		{"per minute 10", BudgetConfig{PerMinute: 10}, false, 10},
		{"per day 7", BudgetConfig{PerDay: 7}, false, 7},
		{"background keeps the reserve", BudgetConfig{PerMinute: 8, RefreshReserve: 0.25}, true, 6},
		{"plan preset", BudgetConfig{Plan: "hobby"}, false, 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			inOneMinute(t, rdb, func(prefix string) error {
				a := newRedisBudget(t, rdb, tc.cfg, prefix, nil)
				b := newRedisBudget(t, rdb2, tc.cfg, prefix, nil)
				got := 0
				for i := range 30 {
					budget := Budget(a)
					if i%2 == 1 {
						budget = b
					}
					ok, wait, err := take(budget, context.Background(), tc.background)
					if err != nil {
						return err
					}
					if ok {
						got++
					} else if wait <= 0 {
						return errors.New("refusal without a wait")
					}
				}
				if got != tc.want {
					return errors.New("got " + strconv.Itoa(got) + " takes across both; want " + strconv.Itoa(tc.want))
				}
				return nil
			})
		})
	}
}

func TestRedisBudgetSharedBackoff(t *testing.T) {
	rdb := testRedis(t)
	ctx := context.Background()
	prefix := testPrefix(t, rdb)
	m := NewMetrics(nil)
	cfg := BudgetConfig{PerMinute: 100, PerDay: 1000}
	a := newRedisBudget(t, rdb, cfg, prefix, m)
	b := newRedisBudget(t, testRedis(t), cfg, prefix, m)

	now, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	reset := now.Add(30 * time.Second)
	a.Observe(ctx, hdr(hdrMinuteReset, unixStr(reset), hdrMinuteRemaining, "0"), http.StatusTooManyRequests)
	ok, wait, err := take(b, ctx, false)
	if err != nil || ok {
		t.Fatalf("other instance after 429: got ok=%v err=%v; want refused", ok, err)
	}
	if wait <= 25*time.Second || wait > 30*time.Second {
		t.Errorf("got wait %v; want about 30s", wait)
	}
	// A shorter reset seen later does not shorten the block.
	b.Observe(ctx, hdr(hdrMinuteReset, unixStr(now.Add(5*time.Second))), http.StatusTooManyRequests)
	if _, wait2, _ := take(a, ctx, false); wait2 < wait-time.Second {
		t.Errorf("got wait %v after a shorter reset; want at least %v", wait2, wait-time.Second)
	}
	if n := m.BudgetFallbacks; readCounter(t, n) != 0 {
		t.Errorf("got %v fallbacks; want 0", readCounter(t, n))
	}

	keys, err := scanKeys(ctx, rdb, prefix)
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) == 0 {
		t.Fatal("got no keys; want the block key")
	}
	for _, k := range keys {
		if ttl := rdb.PTTL(ctx, k).Val(); ttl <= 0 || ttl > 25*time.Hour {
			t.Errorf("key %s: got TTL %v; want a positive TTL", k, ttl)
		}
	}
}

func TestRedisBudgetReconcileAndTTL(t *testing.T) {
	rdb := testRedis(t)
	ctx := context.Background()
	inOneMinute(t, rdb, func(prefix string) error {
		cfg := BudgetConfig{PerMinute: 10, PerDay: 100}
		a := newRedisBudget(t, rdb, cfg, prefix, nil)
		b := newRedisBudget(t, rdb, cfg, prefix, nil)
		a.Observe(ctx, hdr(hdrMinuteRemaining, "3", hdrDayRemaining, "50"), http.StatusOK)
		got, _ := takeN(t, b, 10, false)
		if got != 3 {
			return errors.New("got " + strconv.Itoa(got) + " takes after reconcile; want 3")
		}
		if m, d := b.tokens(); m != 0 || d != 47 {
			return errors.New("got tokens " + strconv.FormatInt(m, 10) + "/" + strconv.FormatInt(d, 10) + "; want 0/47")
		}
		keys, err := scanKeys(ctx, rdb, prefix)
		if err != nil {
			return err
		}
		if len(keys) != 2 {
			return errors.New("got " + strconv.Itoa(len(keys)) + " keys; want 2 (minute, day)")
		}
		for _, k := range keys {
			if ttl := rdb.PTTL(ctx, k).Val(); ttl <= 0 {
				return errors.New("key " + k + " has no TTL")
			}
		}
		return nil
	})
}

func TestRedisBudgetFallback(t *testing.T) {
	// No Redis needed: the client points at a closed port.
	rdb := redis.NewClient(&redis.Options{Addr: closedAddr(t), MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = rdb.Close() })
	m := NewMetrics(nil)
	cfg := BudgetConfig{PerMinute: 1}
	local := newBudget(t, cfg, clock.NewFake(t0))
	b, err := NewRedisBudget(rdb, cfg, "tg:test:fallback:", 0, local, nil, m, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := takeN(t, b, 3, false); got != 1 {
		t.Errorf("got %d takes from the fallback; want 1", got)
	}
	b.Observe(context.Background(), hdr(), http.StatusTooManyRequests)
	if got := readCounter(t, m.BudgetFallbacks); got != 4 {
		t.Errorf("got %v fallbacks; want 4", got)
	}
}

func TestNewRedisBudgetValidates(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = rdb.Close() })
	local := newBudget(t, BudgetConfig{}, nil)
	tests := []struct {
		name     string
		client   redis.UniversalClient
		cfg      BudgetConfig
		timeout  time.Duration
		fallback Budget
	}{
		{"nil client", nil, BudgetConfig{}, 0, local},
		{"nil fallback", rdb, BudgetConfig{}, 0, nil},
		{"negative timeout", rdb, BudgetConfig{}, -time.Second, local},
		{"bad config", rdb, BudgetConfig{PerDay: -1}, 0, local},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := NewRedisBudget(tc.client, tc.cfg, "p:", tc.timeout, tc.fallback, nil, nil, nil); err == nil {
				t.Error("got nil error; want one")
			}
		})
	}
}

// TestClientsShareRedis429 checks end to end that one instance's upstream
// 429 stops the other instance's calls.
func TestClientsShareRedis429(t *testing.T) {
	rdb := testRedis(t)
	prefix := testPrefix(t, rdb)
	now, err := rdb.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	stub := newStub(t, respond(429, `{"error":"Rate limit exceeded (minute)"}`,
		hdrMinuteReset, unixStr(now.Add(40*time.Second)), hdrMinuteRemaining, "0"))
	cfg := testConfig(stub.srv.URL)
	cfg.Budget = BudgetConfig{PerMinute: 50}
	a, _ := newTestClient(t, cfg, clock.Real{}, WithBudget(newRedisBudget(t, rdb, cfg.Budget, prefix, nil)))
	b, _ := newTestClient(t, cfg, clock.Real{}, WithBudget(newRedisBudget(t, rdb, cfg.Budget, prefix, nil)))
	if _, err := a.Do(context.Background(), seriesReq); !errors.Is(err, ErrRateLimited) {
		t.Fatalf("instance a: got %v; want ErrRateLimited", err)
	}
	_, err = b.Do(context.Background(), seriesReq)
	if !errors.Is(err, ErrRateLimited) || RetryAfter(err) < 30*time.Second {
		t.Fatalf("instance b: got %v (retry %v); want ErrRateLimited for about 40s", err, RetryAfter(err))
	}
	if n := stub.calls.Load(); n != 1 {
		t.Errorf("got %d upstream calls; want 1", n)
	}
}
