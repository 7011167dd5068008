package activity

import (
	"reflect"
	"sync"
	"testing"
	"time"

	"trendgate/api"
)

var t0 = time.Date(2026, 11, 19, 10, 30, 15, 0, time.UTC)

func TestKeyWindow(t *testing.T) {
	type rec struct {
		at     time.Duration // after t0
		ep     api.Endpoint
		status int
		units  int
	}
	tests := []struct {
		name          string
		recs          []rec
		readAt        time.Duration
		wantRequests  uint64
		wantUnits     uint64
		wantCounts    int
		wantSeenAfter time.Duration
	}{
		{name: "nothing", readAt: 0},
		{name: "one hour, two classes", recs: []rec{
			{0, api.EndpointSeries, 200, 1}, {time.Minute, api.EndpointSeries, 304, 1}, {2 * time.Minute, api.EndpointSeries, 429, 0},
		}, readAt: 3 * time.Minute, wantRequests: 3, wantUnits: 2, wantCounts: 3, wantSeenAfter: 2 * time.Minute},
		{name: "23 hours back still counts", recs: []rec{
			{0, api.EndpointWhatsup, 200, 5}, {23 * time.Hour, api.EndpointWhatsup, 200, 5},
		}, readAt: 23 * time.Hour, wantRequests: 2, wantUnits: 10, wantCounts: 1, wantSeenAfter: 23 * time.Hour},
		{name: "24 hours back has left the window", recs: []rec{
			{0, api.EndpointWhatsup, 200, 5}, {24 * time.Hour, api.EndpointList, 200, 1},
		}, readAt: 24 * time.Hour, wantRequests: 1, wantUnits: 1, wantCounts: 1, wantSeenAfter: 24 * time.Hour},
		{name: "slot reused a day later restarts", recs: []rec{
			{0, api.EndpointList, 200, 1}, {0, api.EndpointList, 200, 1}, {24 * time.Hour, api.EndpointList, 200, 1},
		}, readAt: 24*time.Hour + time.Minute, wantRequests: 1, wantUnits: 1, wantCounts: 1, wantSeenAfter: 24 * time.Hour},
		{name: "late write for a reused slot is dropped", recs: []rec{
			{24 * time.Hour, api.EndpointList, 200, 1}, {0, api.EndpointList, 200, 1},
		}, readAt: 24 * time.Hour, wantRequests: 1, wantUnits: 1, wantCounts: 1, wantSeenAfter: 24 * time.Hour},
		{name: "invalid endpoint only marks seen", recs: []rec{{0, 0, 401, 0}}, readAt: 0, wantSeenAfter: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var k Key
			for _, r := range tc.recs {
				k.Record(t0.Add(r.at), r.ep, r.status, r.units)
			}
			w := k.Window(t0.Add(tc.readAt))
			if w.Requests != tc.wantRequests || w.Units != tc.wantUnits || len(w.Counts) != tc.wantCounts {
				t.Errorf("got %d requests, %d units, %d counts (%+v); want %d, %d, %d",
					w.Requests, w.Units, len(w.Counts), w.Counts, tc.wantRequests, tc.wantUnits, tc.wantCounts)
			}
			if len(tc.recs) == 0 {
				if !w.LastSeen.IsZero() {
					t.Errorf("got last seen %v; want zero", w.LastSeen)
				}
			} else if want := t0.Add(tc.wantSeenAfter); !w.LastSeen.Equal(want) {
				t.Errorf("got last seen %v; want %v", w.LastSeen, want)
			}
			if want := time.Date(2026, 11, 18, 11, 0, 0, 0, time.UTC).Add(tc.readAt.Truncate(time.Hour)); tc.readAt < time.Hour && !w.Since.Equal(want) {
				t.Errorf("got since %v; want %v", w.Since, want)
			}
		})
	}
}

func TestClassOf(t *testing.T) {
	for _, tc := range []struct {
		status int
		want   string
	}{{0, "2xx"}, {200, "2xx"}, {304, "3xx"}, {400, "4xx"}, {499, "4xx"}, {429, "429"}, {500, "5xx"}, {504, "5xx"}} {
		if got := ClassOf(tc.status).String(); got != tc.want {
			t.Errorf("ClassOf(%d) = %s; want %s", tc.status, got, tc.want)
		}
	}
}

func TestKeysRetain(t *testing.T) {
	var s Keys
	a := s.Retain([]string{"a", "b"})
	a["a"].Record(t0, api.EndpointList, 200, 1)
	b := s.Retain([]string{"a"})
	if b["a"] != a["a"] {
		t.Errorf("got a new Key for a retained id; want the same counters")
	}
	if _, ok := b["b"]; ok {
		t.Errorf("got b after it was dropped")
	}
	c := s.Retain([]string{"a", "b"})
	if c["b"] == a["b"] {
		t.Errorf("got b's old counters back after it was removed; want fresh ones")
	}
}

func TestRecorderRates(t *testing.T) {
	r := New(t0)
	// 10 seconds of traffic: each second 3 hits, 1 miss, 1 limited.
	for s := range 10 {
		now := t0.Add(time.Duration(s) * time.Second)
		for range 3 {
			r.Request(now, OutcomeHit, 100*time.Microsecond, "bitcoin")
		}
		r.Request(now, OutcomeMiss, 150*time.Millisecond, "#ai")
		r.Request(now, OutcomeLimited, 50*time.Microsecond, "bitcoin")
		r.UpstreamCall(now, "#ai")
	}
	tests := []struct {
		name         string
		at           time.Duration
		wantHit      float64
		wantRatio    float64
		wantUpMinute uint64
	}{
		{name: "window full", at: 10 * time.Second, wantHit: 3, wantRatio: 0.75, wantUpMinute: 10},
		{name: "current second is not in the rate", at: 9 * time.Second, wantHit: 2.7, wantRatio: 0.75, wantUpMinute: 10},
		{name: "half gone", at: 15 * time.Second, wantHit: 1.5, wantRatio: 0.75, wantUpMinute: 10},
		{name: "rates gone, upstream minute not", at: 30 * time.Second, wantHit: 0, wantRatio: -1, wantUpMinute: 10},
		{name: "all gone", at: 70 * time.Second, wantHit: 0, wantRatio: -1, wantUpMinute: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := r.Snapshot(t0.Add(tc.at), 5)
			if got := s.Rates[OutcomeHit]; !near(got, tc.wantHit) {
				t.Errorf("got hit rate %v; want %v", got, tc.wantHit)
			}
			if !near(s.HitRatio, tc.wantRatio) {
				t.Errorf("got hit ratio %v; want %v", s.HitRatio, tc.wantRatio)
			}
			if s.UpstreamLastMinute != tc.wantUpMinute {
				t.Errorf("got %d upstream calls in the minute; want %d", s.UpstreamLastMinute, tc.wantUpMinute)
			}
			if s.Totals[OutcomeHit] != 30 || s.Totals[OutcomeLimited] != 10 || s.UpstreamTotal != 10 {
				t.Errorf("got totals %v, upstream %d; want 30 hits, 10 limited, 10 upstream", s.Totals, s.UpstreamTotal)
			}
			if !near(s.HitRatioTotal, 0.75) {
				t.Errorf("got total hit ratio %v; want 0.75", s.HitRatioTotal)
			}
		})
	}
}

func TestRecorderLatency(t *testing.T) {
	r := New(t0)
	for i := range 1000 {
		d := time.Millisecond
		if i%100 == 0 { // 1% slow
			d = 2 * time.Second
		}
		r.Request(t0, OutcomeHit, d, "")
	}
	s := r.Snapshot(t0, 5)
	if s.LatencySamples != 1000 {
		t.Fatalf("got %d samples; want 1000", s.LatencySamples)
	}
	within := func(got, want time.Duration) bool { return got >= want*8/10 && got <= want*125/100 }
	if !within(s.P50, time.Millisecond) {
		t.Errorf("got p50 %v; want about 1ms (within a bucket)", s.P50)
	}
	if !within(s.P99, time.Millisecond) {
		t.Errorf("got p99 %v; want about 1ms: exactly 1%% is slow, so the 99th is the last fast one", s.P99)
	}
	r.Request(t0, OutcomeHit, 2*time.Second, "")
	r.Request(t0, OutcomeHit, 2*time.Second, "")
	if s := r.Snapshot(t0, 5); !within(s.P99, 2*time.Second) {
		t.Errorf("got p99 %v with 1.2%% slow; want about 2s", s.P99)
	}
	if s := r.Snapshot(t0.Add(LatencyWindow+10*time.Second), 5); s.LatencySamples != 0 || s.P50 != 0 {
		t.Errorf("got %d samples, p50 %v a minute later; want none", s.LatencySamples, s.P50)
	}
}

func TestRecorderTopicsAndRefusals(t *testing.T) {
	r := New(t0)
	for i := range 5 {
		r.Request(t0, OutcomeHit, 0, "bitcoin")
		if i < 2 {
			r.Request(t0, OutcomeMiss, 0, "#ai")
			r.UpstreamCall(t0, "#ai")
		}
	}
	r.UpstreamCall(t0, "ai agents") // a refresh nobody asked for
	r.Refusal(t0, "rate_limited")
	r.Refusal(t0, "rate_limited")
	r.Refusal(t0.Add(-11*time.Minute), "invalid_api_key") // outside the window

	s := r.Snapshot(t0, 2)
	wantReq := []TopicCount{{"bitcoin", 5, 0}, {"#ai", 2, 2}}
	if !equalTopics(s.TopByRequests, wantReq) {
		t.Errorf("got by requests %+v; want %+v", s.TopByRequests, wantReq)
	}
	wantUp := []TopicCount{{"#ai", 2, 2}, {"ai agents", 0, 1}}
	if !equalTopics(s.TopByUpstream, wantUp) {
		t.Errorf("got by upstream %+v; want %+v", s.TopByUpstream, wantUp)
	}
	if len(s.Refusals) != 1 || s.Refusals[0] != (CodeCount{"rate_limited", 2}) {
		t.Errorf("got refusals %+v; want rate_limited 2", s.Refusals)
	}

	// The next period keeps the previous one; two periods later it is gone.
	r.Request(t0.Add(TopicPeriod), OutcomeHit, 0, "bitcoin")
	if s := r.Snapshot(t0.Add(TopicPeriod), 5); len(s.TopByRequests) == 0 || s.TopByRequests[0].Requests != 6 {
		t.Errorf("got %+v one period later; want bitcoin 6 (both periods)", s.TopByRequests)
	}
	r.Request(t0.Add(2*TopicPeriod), OutcomeHit, 0, "solana")
	if s := r.Snapshot(t0.Add(2*TopicPeriod), 5); !equalTopics(s.TopByRequests, []TopicCount{{"bitcoin", 1, 0}, {"solana", 1, 0}}) {
		t.Errorf("got %+v two periods later; want only the last two periods", s.TopByRequests)
	}
}

func TestRecorderTopicTableFull(t *testing.T) {
	r := New(t0)
	for i := range topicSlots * 2 {
		r.Request(t0, OutcomeHit, 0, "topic "+string(rune('a'+i%26))+string(rune('a'+i/26%26)))
	}
	s := r.Snapshot(t0, topicSlots*2)
	var counted uint64
	for _, tc := range s.TopByRequests {
		counted += tc.Requests
	}
	if counted+s.OtherTopicRequests != topicSlots*2 {
		t.Errorf("got %d counted + %d other; want every one of %d requests accounted for", counted, s.OtherTopicRequests, topicSlots*2)
	}
}

// TestConcurrent records from many goroutines across an hour boundary and
// checks that no count is lost (run with -race).
func TestConcurrent(t *testing.T) {
	r := New(t0)
	var k Key
	const workers, each = 8, 500
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				now := t0.Add(time.Duration(i%2) * time.Second)
				r.Request(now, OutcomeHit, time.Millisecond, "bitcoin")
				k.Record(now, api.EndpointSeries, 200, w%2+1)
			}
		}()
	}
	wg.Wait()
	s := r.Snapshot(t0.Add(2*time.Second), 1)
	if s.Totals[OutcomeHit] != workers*each || s.TopByRequests[0].Requests != workers*each {
		t.Errorf("got %d hits, topic %d; want %d", s.Totals[OutcomeHit], s.TopByRequests[0].Requests, workers*each)
	}
	if w := k.Window(t0.Add(time.Second)); w.Requests != workers*each || w.Units != workers*each*3/2 {
		t.Errorf("got %d requests, %d units; want %d, %d", w.Requests, w.Units, workers*each, workers*each*3/2)
	}
}

func equalTopics(a, b []TopicCount) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }

// BenchmarkRecord is what a cache hit pays: one Key.Record and one
// Recorder.Request. It must not allocate.
func BenchmarkRecord(b *testing.B) {
	r := New(t0)
	var k Key
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		now := t0.Add(time.Duration(i) * time.Microsecond) // one new topic period at most
		k.Record(now, api.EndpointSeries, 200, 1)
		r.Request(now, OutcomeHit, 300*time.Microsecond, "bitcoin")
	}
}

// TestKeyExportRestore: a Key's export, restored into a fresh Key, gives
// the same 24-hour window and last-seen time; counts older than the
// window at restore time are left out.
func TestKeyExportRestore(t *testing.T) {
	now := time.Date(2026, 11, 18, 15, 30, 0, 0, time.UTC)
	var k Key
	k.Record(now.Add(-30*time.Hour), api.EndpointList, 200, 1) // outside the window
	k.Record(now.Add(-5*time.Hour), api.EndpointSeries, 200, 1)
	k.Record(now.Add(-time.Minute), api.EndpointWhatsup, 429, 0)
	k.UpstreamCall(now.Add(-2 * time.Hour))
	k.UpstreamAbandoned(now.Add(-2*time.Hour), 1)
	rec := k.Export(now)

	var got Key
	got.Restore(rec, now)
	if a, b := got.Window(now), k.Window(now); !reflect.DeepEqual(a, b) {
		t.Errorf("restored window %+v; want %+v", a, b)
	}
	later := now.Add(20 * time.Hour) // the series hour has left the window
	var again Key
	again.Restore(rec, later)
	if w := again.Window(later); w.Requests != 1 || w.UpstreamCalls != 1 {
		t.Errorf("restored 20 h later: %d requests, %d upstream calls; want 1 and 1 (the series hour fell out)", w.Requests, w.UpstreamCalls)
	}
}
