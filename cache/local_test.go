package cache

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"trendgate/internal/clock"
)

func newLocal(t testing.TB, maxBytes int64, m *Metrics) *Local {
	t.Helper()
	l, err := NewLocal(maxBytes, m)
	if err != nil {
		t.Fatalf("NewLocal: %v", err)
	}
	t.Cleanup(l.Close)
	return l
}

func TestNewLocalRejectsBadBound(t *testing.T) {
	for _, n := range []int64{0, -1} {
		if _, err := NewLocal(n, nil); err == nil {
			t.Errorf("NewLocal(%d) succeeded; want error", n)
		}
	}
}

func TestLocalGetChecksKey(t *testing.T) {
	l := newLocal(t, 1<<20, nil)
	e := entry(key, "bitcoin", t0, time.Minute, `{}`)
	l.Set(context.Background(), e)
	l.Wait()
	if got, ok := l.Get(context.Background(), key); !ok || got != e {
		t.Fatalf("Get = %v, %v; want the entry", got, ok)
	}
	// An entry stored under a key it does not carry is a miss.
	l.rc.Set("v2|list||||", e, cost(e))
	l.Wait()
	if _, ok := l.Get(context.Background(), "v2|list||||"); ok {
		t.Errorf("Get of an entry with a mismatched Key hit; want miss")
	}
}

func TestLocalMemoryBound(t *testing.T) {
	const maxBytes = 64 << 10
	reg := prometheus.NewRegistry()
	l := newLocal(t, maxBytes, NewMetrics(reg))
	body := strings.Repeat("x", 1000)
	const n = 2000 // about 40 times what fits
	for i := range n {
		k := fmt.Sprintf("v2|whatsup|topic%d||||", i)
		l.Set(context.Background(), &Entry{Key: k, Topic: fmt.Sprintf("topic%d", i), Status: 200,
			Body: []byte(body), Fetched: t0, FreshUntil: t0.Add(time.Hour)})
		if i%100 == 0 {
			l.Wait() // let ristretto keep up so few Sets are dropped
		}
	}
	l.Wait()
	if got := l.Bytes(); got > maxBytes || got <= 0 {
		t.Errorf("Bytes = %d; want in (0, %d]", got, maxBytes)
	}
	held := 0
	for i := range n {
		if _, ok := l.Get(context.Background(), fmt.Sprintf("v2|whatsup|topic%d||||", i)); ok {
			held++
		}
	}
	per := cost(&Entry{Key: "v2|whatsup|topic0||||", Topic: "topic0", Body: []byte(body)})
	if int64(held)*per > maxBytes || held == 0 {
		t.Errorf("%d entries of cost >= %d held; want > 0 and at most %d bytes", held, per, maxBytes)
	}
	if got := l.Len(); got != held {
		t.Errorf("index Len = %d; want %d (the entries ristretto holds)", got, held)
	}
	if got := metric(t, reg, "trendgate_cache_bytes", "", ""); got != float64(l.Bytes()) {
		t.Errorf("bytes gauge = %v; want %d", got, l.Bytes())
	}
	if got := metric(t, reg, "trendgate_cache_max_bytes", "", ""); got != float64(maxBytes) {
		t.Errorf("max_bytes gauge = %v; want %d", got, maxBytes)
	}
	if got := metric(t, reg, "trendgate_cache_entries", "", ""); got != float64(held) {
		t.Errorf("entries gauge = %v; want %d", got, held)
	}
	if got := metric(t, reg, "trendgate_cache_evictions_total", "", ""); got == 0 {
		t.Errorf("evictions_total = 0; want > 0 after overfilling")
	}
}

func TestLocalIndexFollowsDeletesAndUpdates(t *testing.T) {
	l := newLocal(t, 1<<20, nil)
	ctx := context.Background()
	a1 := entry("v2|whatsup|a||||", "a", t0, time.Minute, `1`)
	a2 := entry("v2|whatsup|a||||", "a", t0, time.Minute, `2`)
	b := entry("v2|whatsup|b||||", "b", t0, time.Minute, `3`)
	l.Set(ctx, a1)
	l.Set(ctx, b)
	l.Wait()
	l.Set(ctx, a2) // an update replaces a1 and keeps the key indexed
	l.Wait()
	if got := l.TopicKeys(ctx, "a"); !slices.Equal(got, []string{a1.Key}) {
		t.Errorf("TopicKeys(a) after update = %q; want [%q]", got, a1.Key)
	}
	if e, _ := l.Get(ctx, a1.Key); e != a2 {
		t.Errorf("Get after update = %p; want a2 %p", e, a2)
	}
	l.Delete(ctx, a1.Key)
	l.Wait()
	if got := l.TopicKeys(ctx, "a"); len(got) != 0 {
		t.Errorf("TopicKeys(a) after Delete = %q; want none", got)
	}
	if got := l.Len(); got != 1 {
		t.Errorf("Len after Delete = %d; want 1", got)
	}
	l.Clear(ctx)
	if got := l.Len(); got != 0 {
		t.Errorf("Len after Clear = %d; want 0", got)
	}
}

func TestPurge(t *testing.T) {
	keys := map[string]string{ // key -> topic
		"v2|list||||":               "",
		"v2|whatsup|bitcoin||||":    "bitcoin",
		"v2|series|bitcoin|hour|1w": "bitcoin",
		"v2|series|bitcoin|day|1y":  "bitcoin",
		"v2|whatsup|ethereum||||":   "ethereum",
	}
	tests := []struct {
		name string
		sel  Selector
		want int
		gone []string
	}{
		{"nothing", Selector{}, 0, nil},
		{"by key", Selector{Key: "v2|list||||"}, 1, []string{"v2|list||||"}},
		{"missing key", Selector{Key: "v2|whatsup|nope||||"}, 0, nil},
		{"by topic", Selector{Topic: "bitcoin"}, 3, []string{"v2|whatsup|bitcoin||||", "v2|series|bitcoin|hour|1w", "v2|series|bitcoin|day|1y"}},
		{"key and its topic count once", Selector{Key: "v2|whatsup|ethereum||||", Topic: "ethereum"}, 1, []string{"v2|whatsup|ethereum||||"}},
		{"all", Selector{All: true}, 5, []string{"v2|list||||", "v2|whatsup|bitcoin||||", "v2|series|bitcoin|hour|1w", "v2|series|bitcoin|day|1y", "v2|whatsup|ethereum||||"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := newLocal(t, 1<<20, nil)
			c, err := New(DefaultConfig(), l, clock.NewFake(t0), nil, nil)
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			ctx := context.Background()
			for k, topic := range keys {
				l.Set(ctx, entry(k, topic, t0, time.Hour, `{}`))
			}
			l.Wait()
			if got := c.Purge(ctx, tc.sel); got != tc.want {
				t.Errorf("Purge(%+v) = %d; want %d", tc.sel, got, tc.want)
			}
			l.Wait()
			for k := range keys {
				_, ok := c.Peek(ctx, k)
				if gone := slices.Contains(tc.gone, k); ok == gone {
					t.Errorf("after Purge, %q present = %v; want %v", k, ok, !gone)
				}
			}
		})
	}
}

func TestLocalBackstopCoversMaxStale(t *testing.T) {
	l := newLocal(t, 1<<20, nil)
	if _, err := New(DefaultConfig(), l, nil, nil, nil); err != nil {
		t.Fatalf("New: %v", err)
	}
	e := &Entry{Key: key, Topic: "bitcoin", Status: 200, Body: []byte(`{}`), Fetched: time.Now(), FreshUntil: time.Now().Add(time.Minute)}
	l.Set(context.Background(), e)
	l.Wait()
	ttl, ok := l.rc.GetTTL(key)
	want := time.Minute + DefaultConfig().MaxStale
	if !ok || ttl > want || ttl < want-time.Minute {
		t.Errorf("ristretto TTL = %s, %v; want about %s (fresh life + MaxStale)", ttl, ok, want)
	}
}

// Regression: ristretto applies Sets on its own goroutine, so a Get right
// after Set used to miss; a request arriving just after a fill then
// fetched again (TestCrossPlanOrder saw 4 upstream calls for 3 paths).
func TestLocalSetIsVisibleAtOnce(t *testing.T) {
	l := newLocal(t, 1<<20, nil)
	now := time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)
	for i := range 200 {
		key := fmt.Sprintf("v2|series|topic%d|hour|1w||", i)
		l.Set(context.Background(), entry(key, "topic", now, time.Minute, "{}"))
		if _, ok := l.Get(context.Background(), key); !ok {
			t.Fatalf("Get right after Set of %q missed", key)
		}
	}
}
