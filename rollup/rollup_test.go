package rollup

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"trendgate/internal/clock"
	"trendgate/internal/testing/redistest"
)

var t0 = time.Date(2026, 10, 29, 12, 0, 0, 0, time.UTC)

// traffic records a fixed mix over four days starting at t0 on s, moving
// clk: two accounts, three keys, two routes, every outcome class.
func traffic(s Store, clk *clock.Fake) {
	for day := range 4 {
		clk.Set(t0.AddDate(0, 0, day))
		for i := range 3 + day {
			s.Record(Event{Account: "acme", Key: "k1", Route: "trending", Class: Class2xx, Requests: 1, Units: 2, Upstream: int64(i % 2), Bytes: 100})
		}
		s.Record(Event{Account: "acme", Key: "k2", Route: "series", Class: Class429, Requests: 1})
		s.Record(Event{Key: "solo", Route: "whatsup", Class: Class2xx, Requests: 1, Units: 1, Bytes: 50})
		s.Record(Event{Key: "solo", Route: "whatsup", Class: Class5xx, Requests: 1})
	}
}

func query(t *testing.T, s Store, q Query) []Series {
	t.Helper()
	got, err := s.Query(context.Background(), q)
	if err != nil {
		t.Fatalf("Query(%+v) = %v", q, err)
	}
	return got
}

func TestLocalQuery(t *testing.T) {
	clk := clock.NewFake(t0)
	l, err := OpenLocal("", Config{}, clk, nil)
	if err != nil {
		t.Fatal(err)
	}
	traffic(l, clk)
	all := query(t, l, Query{From: DateOf(t0), To: DateOf(t0).AddDays(3)})
	if len(all) != 2 || all[0].Account != "acme" || all[1].Account != "solo" {
		t.Fatalf("accounts = %+v, want acme and solo", all)
	}
	acme := all[0]
	// k1: 3+4+5+6 requests of 2 units each.
	if got, want := acme.Total.Units, int64(2*(3+4+5+6)); got != want {
		t.Errorf("acme units = %d, want %d", got, want)
	}
	if got, want := acme.Total.Requests, int64(18+4); got != want {
		t.Errorf("acme requests = %d, want %d", got, want)
	}
	if got, want := len(acme.Days), 4; got != want {
		t.Fatalf("acme days = %d, want %d", got, want)
	}
	d0 := acme.Days[0]
	wantCells := []Cell{{Route: "series", Class: Class429, Requests: 1}, {Route: "trending", Class: Class2xx, Requests: 3}}
	if d0.Date != DateOf(t0) || !reflect.DeepEqual(d0.Endpoints, wantCells) || d0.UpstreamCalls != 1 || d0.BytesSent != 300 {
		t.Errorf("acme day 0 = %+v, want %s with cells %+v, 1 upstream call, 300 bytes", d0, DateOf(t0), wantCells)
	}
	k2 := query(t, l, Query{From: DateOf(t0), To: DateOf(t0).AddDays(3), Account: "acme", Key: "k2"})
	if len(k2) != 1 || k2[0].Key != "k2" || k2[0].Total.Requests != 4 || k2[0].Total.Units != 0 {
		t.Errorf("k2 = %+v, want 4 requests and no units", k2)
	}
	one := query(t, l, Query{From: DateOf(t0).AddDays(1), To: DateOf(t0).AddDays(1), Account: "solo"})
	if len(one) != 1 || len(one[0].Days) != 1 || one[0].Total.Units != 1 || one[0].Total.Requests != 2 {
		t.Errorf("solo on day 1 = %+v, want one day: 1 unit, 2 requests", one)
	}
	if _, err := l.Query(context.Background(), Query{From: DateOf(t0), To: DateOf(t0).AddDays(-1)}); err != ErrRange {
		t.Errorf("from after to: err = %v, want ErrRange", err)
	}
}

func TestLocalFileSurvivesRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.usage")
	clk := clock.NewFake(t0)
	l, err := OpenLocal(path, Config{}, clk, nil)
	if err != nil {
		t.Fatal(err)
	}
	traffic(l, clk)
	q := Query{From: DateOf(t0), To: DateOf(t0).AddDays(3)}
	want := query(t, l, q)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l2, err := OpenLocal(path, Config{}, clk, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	if got := query(t, l2, q); !reflect.DeepEqual(got, want) {
		t.Errorf("after restart:\ngot  %+v\nwant %+v", got, want)
	}
}

// Several flushes append deltas; a torn last record is dropped at start
// and the records before it kept whole.
func TestLocalTornTail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.usage")
	clk := clock.NewFake(t0)
	l, err := OpenLocal(path, Config{}, clk, nil)
	if err != nil {
		t.Fatal(err)
	}
	l.Record(Event{Key: "a", Route: "trending", Requests: 1, Units: 1})
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	kept := l.FileSize()
	l.Record(Event{Key: "a", Route: "trending", Requests: 1, Units: 5})
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	if l.FileSize() <= kept {
		t.Fatalf("second flush wrote nothing: size %d, was %d", l.FileSize(), kept)
	}
	// An idle flush writes nothing.
	size := l.FileSize()
	if err := l.Flush(); err != nil || l.FileSize() != size {
		t.Fatalf("idle flush: err %v, size %d → %d", err, size, l.FileSize())
	}
	_ = l.w.f.Close() // a kill -9: no Close, no last flush
	for _, cut := range []int64{1, 3, size - kept - 1} {
		t.Run(fmt.Sprint("cut ", cut), func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "torn.usage")
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, b[:size-cut], 0o600); err != nil {
				t.Fatal(err)
			}
			l2, err := OpenLocal(p, Config{}, clk, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer l2.Close()
			got := query(t, l2, Query{From: DateOf(t0), To: DateOf(t0)})
			if len(got) != 1 || got[0].Total.Units != 1 || got[0].Total.Requests != 1 {
				t.Errorf("after a torn tail: %+v, want the first record only (1 unit, 1 request)", got)
			}
		})
	}
	// A flipped byte inside the last record fails its checksum.
	b, _ := os.ReadFile(path)
	b[len(b)-2] ^= 0xff
	p := filepath.Join(t.TempDir(), "flipped.usage")
	_ = os.WriteFile(p, b, 0o600)
	l3, err := OpenLocal(p, Config{}, clk, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l3.Close()
	if got := query(t, l3, Query{From: DateOf(t0), To: DateOf(t0)}); len(got) != 1 || got[0].Total.Units != 1 {
		t.Errorf("after a flipped byte: %+v, want 1 unit", got)
	}
}

func TestLocalRetention(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.usage")
	clk := clock.NewFake(t0)
	l, err := OpenLocal(path, Config{RetentionDays: 3}, clk, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for day := range 5 {
		clk.Set(t0.AddDate(0, 0, day))
		l.Record(Event{Key: "a", Route: "trending", Requests: 1, Units: int64(day + 1)})
		if err := l.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	// Days 2, 3 and 4 are kept (units 3+4+5).
	if got := l.Oldest(clk.Now()); got != DateOf(t0).AddDays(2) {
		t.Errorf("Oldest = %s, want %s", got, DateOf(t0).AddDays(2))
	}
	got := query(t, l, Query{From: DateOf(t0), To: DateOf(t0).AddDays(4)})
	if len(got) != 1 || got[0].Total.Units != 12 || len(got[0].Days) != 3 {
		t.Fatalf("kept = %+v, want 3 days and 12 units", got)
	}
	l2, err := OpenLocal(path, Config{RetentionDays: 3}, clk, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	if got2 := query(t, l2, Query{From: DateOf(t0), To: DateOf(t0).AddDays(4)}); !reflect.DeepEqual(got2, got) {
		t.Errorf("after reopening the compacted file: %+v, want %+v", got2, got)
	}
}

// A month's totals do not change once it is over: a late event for one of
// its days lands in the open month.
func TestMonthClose(t *testing.T) {
	for _, tc := range []struct {
		name  string
		store func(t *testing.T, clk clock.Clock) Store
		flush func(Store) error
	}{
		{"local", func(t *testing.T, clk clock.Clock) Store {
			l, err := OpenLocal(filepath.Join(t.TempDir(), "u"), Config{}, clk, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = l.Close() })
			return l
		}, func(s Store) error { return s.(*Local).Flush() }},
		{"redis", func(t *testing.T, clk clock.Clock) Store { return newTestRedis(t, clk) },
			func(s Store) error { return s.(*Redis).Flush(context.Background()) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clock.NewFake(time.Date(2026, 10, 31, 23, 59, 0, 0, time.UTC))
			s := tc.store(t, clk)
			oct31 := DateOf(clk.Now())
			s.Record(Event{Day: oct31, Account: "acme", Key: "k1", Route: "trending", Requests: 1, Units: 3})
			if err := tc.flush(s); err != nil {
				t.Fatal(err)
			}
			october := Query{From: 20261001, To: 20261031, Account: "acme"}
			// Recorded before midnight, flushed after: the local store has
			// it at once, the Redis one lands it in November.
			s.Record(Event{Day: oct31, Account: "acme", Key: "k1", Route: "trending", Requests: 1, Units: 4})
			before := query(t, s, october) // as the month closes
			clk.Set(time.Date(2026, 11, 1, 0, 0, 1, 0, time.UTC))
			// Late after midnight, for the closed day.
			s.Record(Event{Day: oct31, Account: "acme", Key: "k1", Route: "trending", Requests: 1, Units: 5})
			if err := tc.flush(s); err != nil {
				t.Fatal(err)
			}
			after := query(t, s, october)
			if !reflect.DeepEqual(after, before) || len(before) != 1 {
				t.Errorf("October after its close:\ngot  %+v\nwant %+v", after, before)
			}
			nov := query(t, s, Query{From: 20261101, To: 20261130, Account: "acme"})
			if len(nov) != 1 || len(nov[0].Days) != 1 || nov[0].Days[0].Date != 20261101 || nov[0].Total.Units < 5 {
				t.Errorf("November = %+v, want the late units on 2026-11-01", nov)
			}
			if tc.name == "redis" && nov[0].Total.Units != 9 {
				t.Errorf("redis: November units = %d, want 9 (both rows flushed after midnight)", nov[0].Total.Units)
			}
			if tc.name == "local" && nov[0].Total.Units != 5 {
				t.Errorf("local: November units = %d, want 5 (the 4 were recorded before midnight)", nov[0].Total.Units)
			}
		})
	}
}

func newTestRedis(t *testing.T, clk clock.Clock) *Redis {
	t.Helper()
	c := redistest.Client(t, "127.0.0.1:6379")
	s, err := NewRedis(c, redistest.Prefix(t, c), Config{}, clk, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The Redis store reads back what the local one holds for the same
// traffic, and two instances' events are counted once each.
// TestLocalQueryPages: reading every account pages by account id (After,
// Limit), and the pages put together are the whole answer.
func TestLocalQueryPages(t *testing.T) {
	clk := clock.NewFake(t0)
	l, err := OpenLocal("", Config{}, clk, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 7 {
		l.Record(Event{Account: fmt.Sprintf("a%d", 6-i), Key: fmt.Sprintf("k%d", i), Route: "trending", Class: Class2xx, Requests: 1, Units: int64(i + 1)})
	}
	day := DateOf(t0)
	whole := query(t, l, Query{From: day, To: day})
	if len(whole) != 7 {
		t.Fatalf("every account: %d series, want 7", len(whole))
	}
	var paged []Series
	after := ""
	for range 10 {
		page := query(t, l, Query{From: day, To: day, After: after, Limit: 3})
		if len(page) > 3 {
			t.Fatalf("a page of limit 3 has %d series", len(page))
		}
		if len(page) == 0 {
			break
		}
		paged = append(paged, page...)
		after = page[len(page)-1].Account
	}
	if !reflect.DeepEqual(paged, whole) {
		t.Errorf("pages put together:\n%+v\nwant the whole answer\n%+v", paged, whole)
	}
	if got := query(t, l, Query{From: day, To: day, After: "a6"}); len(got) != 0 {
		t.Errorf("after the last account: %+v, want nothing", got)
	}
}

func TestRedisMatchesLocal(t *testing.T) {
	clk := clock.NewFake(t0)
	l, _ := OpenLocal("", Config{}, clk, nil)
	traffic(l, clk)
	clk.Set(t0)
	a := newTestRedis(t, clk)
	b := &Redis{rdb: a.rdb, prefix: a.prefix, clk: clk, log: a.log, cfg: a.cfg, pending: newTable()} // a second instance
	for day := range 4 {
		clk.Set(t0.AddDate(0, 0, day))
		for i := range 3 + day {
			s := a
			if i%2 == 1 {
				s = b
			}
			s.Record(Event{Account: "acme", Key: "k1", Route: "trending", Class: Class2xx, Requests: 1, Units: 2, Upstream: int64(i % 2), Bytes: 100})
		}
		b.Record(Event{Account: "acme", Key: "k2", Route: "series", Class: Class429, Requests: 1})
		a.Record(Event{Key: "solo", Route: "whatsup", Class: Class2xx, Requests: 1, Units: 1, Bytes: 50})
		a.Record(Event{Key: "solo", Route: "whatsup", Class: Class5xx, Requests: 1})
		for _, s := range []*Redis{a, b} {
			if err := s.Flush(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, q := range []Query{
		{From: DateOf(t0), To: DateOf(t0).AddDays(3)},
		{From: DateOf(t0).AddDays(1), To: DateOf(t0).AddDays(2), Account: "acme"},
		{From: DateOf(t0), To: DateOf(t0).AddDays(3), Account: "acme", Key: "k1"},
		{From: DateOf(t0), To: DateOf(t0).AddDays(3), Limit: 1},
		{From: DateOf(t0), To: DateOf(t0).AddDays(3), After: "acme", Limit: 1},
	} {
		if got, want := query(t, a, q), query(t, l, q); !reflect.DeepEqual(got, want) {
			t.Errorf("%+v:\nredis %+v\nlocal %+v", q, got, want)
		}
	}
	ttl, err := a.rdb.TTL(context.Background(), a.dayKey("acme", DateOf(t0))).Result()
	if err != nil || ttl <= 400*24*time.Hour || ttl > 401*24*time.Hour {
		t.Errorf("day key TTL = %v (%v), want just over 400 days", ttl, err)
	}
}

func TestParseDate(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Date
		ok   bool
	}{
		{"2026-11-03", 20261103, true},
		{"2026-02-29", 0, false},
		{"2026-1-03", 0, false},
		{"20261103", 0, false},
		{"2026-11-03T00:00:00Z", 0, false},
		{"", 0, false},
	} {
		got, err := ParseDate(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseDate(%q) = %v, %v; want %v, ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

// Records made while flushes run are all written once: the reopened file
// holds exactly what was recorded.
func TestLocalConcurrentFlush(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.usage")
	clk := clock.NewFake(t0)
	l, err := OpenLocal(path, Config{}, clk, nil)
	if err != nil {
		t.Fatal(err)
	}
	const writers, each = 4, 500
	done := make(chan struct{})
	for w := range writers {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range each {
				l.Record(Event{Account: "acme", Key: fmt.Sprint("k", w), Route: "list", Requests: 1, Units: int64(i%3 + 1)})
			}
		}()
	}
	for range writers {
		for {
			if err := l.Flush(); err != nil {
				t.Error(err)
			}
			select {
			case <-done:
			default:
				continue
			}
			break
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l2, err := OpenLocal(path, Config{}, clk, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	got := query(t, l2, Query{From: DateOf(t0), To: DateOf(t0)})
	// Units per writer: 500 requests cycling 1, 2, 3.
	wantUnits := int64(writers * (each/3*6 + 1 + 2))
	if len(got) != 1 || got[0].Total.Requests != writers*each || got[0].Total.Units != wantUnits {
		t.Errorf("reopened: %+v, want %d requests and %d units", got, writers*each, wantUnits)
	}
}
