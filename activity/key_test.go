package activity

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"trendgate/api"
)

// TestKeyCountersAppearOnUse: a key never used holds no counters; its
// first count allocates the slot it lands in and nothing else, and the
// route endpoint's counts are exported and restored like the others.
func TestKeyCountersAppearOnUse(t *testing.T) {
	var k Key
	if w := k.Window(t0); w.Requests != 0 || len(w.Counts) != 0 || k.hours.Load() != nil {
		t.Fatalf("a key never used: %+v, ring allocated %v; want nothing", w, k.hours.Load() != nil)
	}
	k.Record(t0, api.EndpointRoute, 200, 2)
	hs := k.hours.Load()
	if hs == nil {
		t.Fatal("no hourly ring after the first count")
	}
	used := 0
	for i := range hs {
		if hc := hs[i].Load(); hc != nil {
			used++
			for ep := range hc.endpoints {
				if hc.endpoints[ep].Load() != nil && api.Endpoint(ep) != api.EndpointRoute {
					t.Errorf("endpoint %d allocated by a count of the route endpoint", ep)
				}
			}
		}
	}
	if used != 1 {
		t.Errorf("%d hour slots allocated by one count; want 1", used)
	}
	var back Key
	back.Restore(k.Export(t0), t0)
	if w := back.Window(t0); w.Requests != 1 || w.Units != 2 || w.Counts[0].Endpoint != api.EndpointRoute {
		t.Errorf("route counts after export and restore: %+v; want 1 request, 2 units on the route endpoint", w)
	}
}

// TestKeysTakeChanged: a key reports a change once per batch of counts,
// for every kind of count, and nothing while idle; a key removed from the
// configuration is not reported, and TakeAll starts the changes over.
func TestKeysTakeChanged(t *testing.T) {
	var s Keys
	keys := s.Retain([]string{"a", "b", "c"})
	k := keys["b"]
	if got := s.TakeChanged(); got != nil {
		t.Fatalf("keys never used report changes: %v", got)
	}
	for _, tc := range []struct {
		name  string
		count func()
	}{
		{"record", func() { k.Record(t0, api.EndpointSeries, 200, 1) }},
		{"invalid endpoint (seen only)", func() { k.Record(t0, 0, 401, 0) }},
		{"upstream call", func() { k.UpstreamCall(t0) }},
		{"upstream abandoned", func() { k.UpstreamAbandoned(t0, 1) }},
	} {
		tc.count()
		tc.count()
		if got := s.TakeChanged(); len(got) != 1 || got["b"] != k {
			t.Errorf("%s: %v reported; want b alone", tc.name, got)
		}
		if got := s.TakeChanged(); got != nil {
			t.Errorf("%s: %v reported again without a count", tc.name, got)
		}
	}

	keys["a"].Record(t0, api.EndpointList, 200, 1)
	keys["c"].Record(t0, api.EndpointList, 200, 1)
	s.Retain([]string{"a", "b"})
	if got := s.TakeChanged(); len(got) != 1 || got["a"] != keys["a"] {
		t.Errorf("after c was removed: %v reported; want a alone", got)
	}
	keys["c"].Record(t0, api.EndpointList, 200, 1) // a request still on the old snapshot
	if got := s.TakeChanged(); got != nil {
		t.Errorf("a removed key counted: %v reported; want nothing", got)
	}

	keys["a"].Record(t0, api.EndpointList, 200, 1)
	if all := s.TakeAll(); len(all) != 2 {
		t.Errorf("TakeAll: %d keys; want the 2 in force", len(all))
	}
	if got := s.TakeChanged(); got != nil {
		t.Errorf("after TakeAll: %v reported; want nothing", got)
	}
	keys["a"].Record(t0, api.EndpointList, 200, 1)
	if got := s.TakeChanged(); len(got) != 1 {
		t.Errorf("a count after TakeAll: %v reported; want a", got)
	}
}

// TestKeysTakeChangedRacingCount: a count racing with a take is reported
// by it or by the next one, in each order a count's two steps (add, then
// mark) and a take can interleave, whether or not the key was already
// marked.
func TestKeysTakeChangedRacingCount(t *testing.T) {
	h := hourOf(t0)
	add := func(k *Key) { k.slotForWrite(h%hourSlots).upstream.add(h, 1) } // Record's count without its mark
	upstream := func(ks map[string]*Key) uint64 {
		if k := ks["a"]; k != nil {
			return k.Window(t0).UpstreamCalls
		}
		return 0
	}
	for _, marked := range []bool{false, true} {
		for _, order := range []string{"add mark take", "add take mark", "take add mark"} {
			var s Keys
			k := s.Retain([]string{"a"})["a"]
			if marked {
				k.UpstreamCall(t0)
			}
			want := k.Window(t0).UpstreamCalls + 1
			var seen uint64 // the latest count a take reported
			for _, step := range strings.Fields(order) {
				switch step {
				case "add":
					add(k)
				case "mark":
					k.markChanged()
				case "take":
					seen = max(seen, upstream(s.TakeChanged()))
				}
			}
			seen = max(seen, upstream(s.TakeChanged()))
			if seen != want {
				t.Errorf("marked before %v, %s: the takes reported %d upstream calls; want %d", marked, order, seen, want)
			}
			if got := s.TakeChanged(); got != nil {
				t.Errorf("marked before %v, %s: a third take reported %v; want nothing", marked, order, got)
			}
		}
	}
}

// TestKeysTakeChangedConcurrent: counts on many keys from several
// goroutines while takes run (go test -race): the last figures the takes
// report for each key, with one more take once the counts are done, are
// all its counts.
func TestKeysTakeChangedConcurrent(t *testing.T) {
	const keys, writers, counts = 50, 4, 2000
	ids := make([]string, keys)
	for i := range ids {
		ids[i] = fmt.Sprintf("key-%02d", i)
	}
	var s Keys
	ks := s.Retain(ids)
	last := make(map[string]uint64)
	take := func() {
		for id, k := range s.TakeChanged() {
			last[id] = k.Window(t0).Requests
		}
	}
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range counts {
				ks[ids[(w+i)%keys]].Record(t0, api.EndpointSeries, 200, 1)
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
			take()
		}
	}
	take()
	var total uint64
	for _, id := range ids {
		if got, want := last[id], ks[id].Window(t0).Requests; got != want {
			t.Errorf("%s: last reported %d requests; it counted %d", id, got, want)
		}
		total += last[id]
	}
	if total != writers*counts {
		t.Errorf("%d requests reported in all; want %d", total, writers*counts)
	}
}

// BenchmarkKeyRecord is one Key.Record of a key in steady use: no
// allocation once its slot exists.
func BenchmarkKeyRecord(b *testing.B) {
	k := new(Keys).Retain([]string{"k"})["k"]
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		k.Record(t0.Add(time.Duration(i)*time.Microsecond), api.EndpointSeries, 200, 1)
	}
}

// BenchmarkKeysMemory measures what keys cost on the heap: 100,000
// configured keys never used (the Keys set and its map included, the ids
// not), then the same keys after one request each, then after a request
// on one endpoint in every hour of a day. It reports bytes per key; b.N
// only repeats the measurement.
func BenchmarkKeysMemory(b *testing.B) {
	const n = 100_000
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("key-%06d", i)
	}
	heap := func() uint64 {
		var m runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	var unused, once, day float64
	for b.Loop() {
		before := heap()
		var s Keys
		keys := s.Retain(ids)
		configured := heap()
		for _, k := range keys {
			k.Record(t0, api.EndpointSeries, 200, 1)
		}
		used := heap()
		for h := 1; h < hourSlots; h++ {
			for _, k := range keys {
				k.Record(t0.Add(time.Duration(h)*time.Hour), api.EndpointSeries, 200, 1)
			}
		}
		allDay := heap()
		unused = float64(configured-before) / n
		once = float64(used-before) / n
		day = float64(allDay-before) / n
		runtime.KeepAlive(&s)
	}
	b.ReportMetric(unused, "B/unused-key")
	b.ReportMetric(once, "B/key-used-once")
	b.ReportMetric(day, "B/key-used-every-hour")
}
