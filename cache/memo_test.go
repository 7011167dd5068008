package cache

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"trendgate/internal/clock"
)

type memoKey string

// fillLocal stores n entries of a 1000-byte body in l, returning them.
func fillLocal(t *testing.T, l *Local, n int) []*Entry {
	t.Helper()
	var es []*Entry
	body := strings.Repeat("x", 1000)
	for i := range n {
		e := entry(fmt.Sprintf("v2|whatsup|topic%d||||", i), fmt.Sprintf("topic%d", i), t0, time.Hour+time.Duration(i)*time.Second, body)
		l.Set(context.Background(), e)
		es = append(es, e)
	}
	l.Wait()
	return es
}

// held returns the entry l holds under e.Key, if it is e.
func held(l *Local, e *Entry) bool {
	got, ok := l.Get(context.Background(), e.Key)
	return ok && got == e
}

// Regression: memo values (per-plan projections, gzip copies) were not
// charged, so a full cache held max_bytes of entries plus all their
// variants. They are charged when created and the bound holds at once, even
// when nothing new is admitted afterwards (hits only).
func TestMemoChargedAgainstBound(t *testing.T) {
	const maxBytes = 64 << 10
	reg := prometheus.NewRegistry()
	l := newLocal(t, maxBytes, NewMetrics(reg))
	es := fillLocal(t, l, 80) // about 1.3 KB each: more than fits
	if got := l.Bytes(); got > maxBytes {
		t.Fatalf("Bytes after fill = %d; want <= %d", got, maxBytes)
	}
	var grown *Entry
	for _, e := range es {
		if held(l, e) {
			grown = e
			break
		}
	}
	if grown == nil {
		t.Fatal("no entry held after the fill")
	}
	before := l.Len()
	evictions := metric(t, reg, "trendgate_cache_evictions_total", "", "")
	const size = 5000 // within the per-entry share (64 KiB / 8) with the entry and the growth below
	if got := grown.StoreMemo(memoKey("limited"), "projected", size); got != "projected" {
		t.Fatalf("StoreMemo = %v; want the value", got)
	}
	if _, ok := grown.Memo(memoKey("limited")); !ok {
		t.Fatalf("the memo value was not kept")
	}
	if got := l.VariantBytes(); got != size {
		t.Errorf("VariantBytes = %d; want %d", got, size)
	}
	if got := l.Bytes(); got > maxBytes {
		t.Errorf("Bytes after the memo value = %d; want <= %d (entries evicted to make room)", got, maxBytes)
	}
	if !held(l, grown) {
		t.Errorf("the entry that grew was evicted; want others evicted")
	}
	if got := l.Len(); got >= before {
		t.Errorf("entries held = %d; want fewer than %d", got, before)
	}
	if got := metric(t, reg, "trendgate_cache_evictions_total", "", ""); got <= evictions {
		t.Errorf("evictions = %v; want more than %v", got, evictions)
	}
	if got := metric(t, reg, "trendgate_cache_variant_bytes", "", ""); got != size {
		t.Errorf("variant_bytes gauge = %v; want %d", got, size)
	}
	if got := metric(t, reg, "trendgate_cache_bytes", "", ""); got != float64(l.Bytes()) {
		t.Errorf("bytes gauge = %v; want %d (entries and variants)", got, l.Bytes())
	}

	// Growing the value (a gzip copy made later) is charged too.
	if !grown.GrowMemo(memoKey("limited"), 1000) {
		t.Fatalf("GrowMemo refused within the share")
	}
	if got := l.VariantBytes(); got != size+1000 {
		t.Errorf("VariantBytes after GrowMemo = %d; want %d", got, size+1000)
	}
	if got := l.Bytes(); got > maxBytes {
		t.Errorf("Bytes after GrowMemo = %d; want <= %d", got, maxBytes)
	}

	// The charge leaves with the entry.
	l.Delete(context.Background(), grown.Key)
	l.Wait()
	if got := l.VariantBytes(); got != 0 {
		t.Errorf("VariantBytes after the entry left = %d; want 0", got)
	}
}

func TestMemoShare(t *testing.T) {
	const maxBytes = 64 << 10 // per-entry share: 8 KiB, memo included
	for _, tc := range []struct {
		name      string
		size      int64
		wantKept  bool
		wantBytes int64
	}{
		{"within the share", 4000, true, 4000},
		{"past the share", 8000, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLocal(t, maxBytes, nil)
			e := fillLocal(t, l, 1)[0]
			if got := e.StoreMemo(memoKey("gz"), "copy", tc.size); got != "copy" {
				t.Errorf("StoreMemo = %v; want the value either way", got)
			}
			if _, kept := e.Memo(memoKey("gz")); kept != tc.wantKept {
				t.Errorf("kept = %v; want %v", kept, tc.wantKept)
			}
			if got := l.VariantBytes(); got != tc.wantBytes {
				t.Errorf("VariantBytes = %d; want %d", got, tc.wantBytes)
			}
		})
	}
}

func TestReplaceMemoReleasesOld(t *testing.T) {
	l := newLocal(t, 1<<20, nil)
	e := fillLocal(t, l, 1)[0]
	e.StoreMemo(memoKey("limited"), "old", 3000)
	for i := range 5 { // five reloads, one plan: one value's worth of bytes
		if !e.ReplaceMemo(memoKey("limited"), fmt.Sprint("new", i), 2000) {
			t.Fatalf("ReplaceMemo %d refused", i)
		}
	}
	if got := l.VariantBytes(); got != 2000 {
		t.Errorf("VariantBytes = %d; want 2000 (the old values released)", got)
	}
	if v, _ := e.Memo(memoKey("limited")); v != "new4" {
		t.Errorf("Memo = %v; want new4", v)
	}
}

// An entry no tier holds (a dropped Set, a too-large answer) keeps its memo
// for the requests holding it, charging nothing; stored later, its memo is
// charged then.
func TestMemoOfEntryNotHeld(t *testing.T) {
	l := newLocal(t, 1<<20, nil)
	e := entry(key, "bitcoin", t0, time.Minute, "{}")
	e.StoreMemo(memoKey("gz"), "copy", 500)
	if _, ok := e.Memo(memoKey("gz")); !ok {
		t.Fatal("memo of an unheld entry not kept")
	}
	if got := l.VariantBytes(); got != 0 {
		t.Errorf("VariantBytes = %d; want 0 before the entry is stored", got)
	}
	l.Set(context.Background(), e)
	if got := l.VariantBytes(); got != 500 {
		t.Errorf("VariantBytes = %d; want 500 once stored", got)
	}
}

// Regression: one upstream body near upstream.max_body_bytes took a large
// share of the bound. An entry costing more than max_bytes/8 is served to
// every waiter but not stored, and the Result says so.
func TestTooLargeServedNotStored(t *testing.T) {
	const maxBytes = 64 << 10
	for _, tc := range []struct {
		name      string
		bodyBytes int
		wantLarge bool
	}{
		{"small", 1000, false},
		{"over the share", maxBytes/8 + 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLocal(t, maxBytes, nil)
			c, err := New(DefaultConfig(), l, clock.NewFake(t0), nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close(context.Background()) })
			fetches := 0
			fetch := func(context.Context, bool) (*Entry, error) {
				fetches++
				return &Entry{Status: 200, Body: []byte(strings.Repeat("x", tc.bodyBytes)), FreshUntil: t0.Add(time.Hour)}, nil
			}
			res, err := c.Get(context.Background(), key, fetch)
			if err != nil {
				t.Fatal(err)
			}
			if res.Outcome != Miss || res.TooLarge != tc.wantLarge || len(res.Entry.Body) != tc.bodyBytes {
				t.Errorf("Get = %v TooLarge %v, %d bytes; want miss, %v, %d bytes", res.Outcome, res.TooLarge, len(res.Entry.Body), tc.wantLarge, tc.bodyBytes)
			}
			if _, stored := l.Get(context.Background(), key); stored == tc.wantLarge {
				t.Errorf("stored = %v; want %v", stored, !tc.wantLarge)
			}
		})
	}
}

// Concurrent fills and memo charges keep the ledger exact: the variant
// bytes are the memo bytes of the entries held, and the bound holds once
// ristretto has applied every Set.
func TestMemoConcurrentLedger(t *testing.T) {
	const maxBytes = 128 << 10
	l := newLocal(t, maxBytes, nil)
	body := strings.Repeat("y", 900)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 300 {
				e := entry(fmt.Sprintf("v2|series|t%d-%d||||", w, i), "t", t0, time.Hour, body)
				l.Set(context.Background(), e)
				e.StoreMemo(memoKey("gz"), "copy", int64(200+i%7*100))
				e.GrowMemo(memoKey("gz"), 50)
			}
		})
	}
	wg.Wait()
	l.Wait()
	var want int64
	l.mu.Lock()
	for _, r := range l.keys {
		if r.last != nil {
			want += r.last.MemoBytes()
		}
	}
	l.mu.Unlock()
	if got := l.VariantBytes(); got != want {
		t.Errorf("VariantBytes = %d; want %d (the memo bytes of the entries held)", got, want)
	}
	if got := l.Bytes(); got > maxBytes {
		t.Errorf("Bytes = %d; want <= %d", got, maxBytes)
	}
}

// In cluster mode an entry read from the shared tier is kept in the local
// tier, and what is derived from it there is charged like any other.
func TestMemoChargedForSharedHit(t *testing.T) {
	l := newLocal(t, 1<<20, nil)
	shared := newMapStore()
	shared.Set(context.Background(), entry(key, "bitcoin", t0, time.Hour, `{"data":[]}`))
	s := Tiered(l, shared)
	e, ok := s.Get(context.Background(), key)
	if !ok {
		t.Fatal("shared entry not found")
	}
	e.StoreMemo(memoKey("gz"), "copy", 700)
	if got, ok := l.Get(context.Background(), key); !ok || got != e {
		t.Fatalf("the shared hit is not held locally")
	}
	if got := l.VariantBytes(); got != 700 {
		t.Errorf("local VariantBytes = %d; want 700", got)
	}
	if a, ok := s.(Admitter); !ok || a.Admits(entry(key, "", t0, time.Hour, strings.Repeat("x", 1<<20/8+1))) {
		t.Errorf("Tiered admits an entry over the local share; want refused")
	}
}

func TestClearReleasesMemo(t *testing.T) {
	l := newLocal(t, 1<<20, nil)
	for _, e := range fillLocal(t, l, 10) {
		e.StoreMemo(memoKey("gz"), "copy", 300)
	}
	if got := l.VariantBytes(); got != 10*300 {
		t.Fatalf("VariantBytes = %d; want %d", got, 10*300)
	}
	l.Clear(context.Background())
	l.Wait()
	if got, gotAll := l.VariantBytes(), l.Bytes(); got != 0 || gotAll != 0 {
		t.Errorf("after Clear: VariantBytes %d, Bytes %d; want 0, 0", got, gotAll)
	}
}
