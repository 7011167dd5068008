package activity

import (
	"fmt"
	"runtime"
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

// TestKeyTakeChanged: a key reports a change once per batch of counts,
// for every kind of count, and nothing while idle.
func TestKeyTakeChanged(t *testing.T) {
	var k Key
	if k.TakeChanged() {
		t.Fatal("a key never used reports a change")
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
		if !k.TakeChanged() {
			t.Errorf("%s: no change reported", tc.name)
		}
		if k.TakeChanged() {
			t.Errorf("%s: a second change reported without a count", tc.name)
		}
	}
}

// BenchmarkKeyRecord is one Key.Record of a key in steady use: no
// allocation once its slot exists.
func BenchmarkKeyRecord(b *testing.B) {
	var k Key
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
