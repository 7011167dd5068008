package state

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"trendgate/activity"
	"trendgate/api"
	"trendgate/internal/clock"
	"trendgate/limits"
)

// keyedStore is a Store on a temporary file with a real limiter and n
// keys' usage counters.
type keyedStore struct {
	s    *Store
	lim  *limits.Local
	keys map[string]*activity.Key
	clk  *clock.Fake
	path string
	m    *Metrics
}

func newKeyedStore(t *testing.T, n int) *keyedStore {
	t.Helper()
	k := &keyedStore{clk: clock.NewFake(t0), path: filepath.Join(t.TempDir(), "state"), m: NewMetrics(nil)}
	var usage activity.Keys
	k.keys = usage.Retain(keyIDs("key-%05d", n))
	var err error
	if k.lim, err = limits.NewLocal(limits.DefaultConfig(), k.clk, nil); err != nil {
		t.Fatal(err)
	}
	// No interval write during a test: the tests write when they mean to;
	// a Sync is served by the loop, as in the gateway.
	k.s = New(Options{Path: k.path, Counters: k.lim, Clock: k.clk, Metrics: k.m, Interval: time.Hour,
		Usage: &usage})
	k.lim.SetKeeper(k.s)
	if err := k.s.Flush(); err != nil {
		t.Fatal(err)
	}
	k.s.Start()
	t.Cleanup(func() { _ = k.s.Close() })
	return k
}

func (k *keyedStore) size(t *testing.T) int64 {
	t.Helper()
	fi, err := os.Stat(k.path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// TestStoreIdleWritesNothing: with nothing counted since the last write,
// the interval's write appends nothing, however many keys and accounts
// there are.
func TestStoreIdleWritesNothing(t *testing.T) {
	k := newKeyedStore(t, 2000)
	for id, key := range k.keys {
		key.Record(k.clk.Now(), api.EndpointSeries, 200, 1)
		if d, err := k.lim.Admit(context.Background(), limits.Subject{Key: id}, limits.Policy{Daily: 1000}, 1); err != nil || !d.Allowed {
			t.Fatalf("Admit %s: %+v %v", id, d, err)
		}
	}
	if err := k.s.flush(writeTick); err != nil { // what the 2,000 keys did
		t.Fatal(err)
	}
	size := k.size(t)
	written := testutil.ToFloat64(k.m.Written)
	for range 5 {
		if err := k.s.flush(writeTick); err != nil {
			t.Fatal(err)
		}
	}
	if got := k.size(t); got != size {
		t.Errorf("file grew from %d to %d bytes with nothing counted", size, got)
	}
	if got := testutil.ToFloat64(k.m.Written); got != written {
		t.Errorf("trendgate_state_written_bytes_total went from %v to %v with nothing counted", written, got)
	}
}

// TestStoreAppendsChangesOnly: one key counted among 2,000 appends one
// small record holding that key, which a restart reads back.
func TestStoreAppendsChangesOnly(t *testing.T) {
	k := newKeyedStore(t, 2000)
	before := k.size(t)
	k.keys["key-01234"].Record(k.clk.Now(), api.EndpointWhatsup, 200, 5)
	if err := k.s.flush(writeTick); err != nil {
		t.Fatal(err)
	}
	if grew := k.size(t) - before; grew <= 0 || grew > 100 {
		t.Errorf("one key counted appended %d bytes; want one small record (at most 100)", grew)
	}
	snap, info, err := LoadInfo(k.path)
	if err != nil {
		t.Fatal(err)
	}
	if info.Records != 2 || len(snap.Usage) != 1 || len(snap.Usage["key-01234"].Cells) != 1 || snap.Usage["key-01234"].Cells[0].Units != 5 {
		t.Errorf("read back: %d records, usage %+v; want 2 records, key-01234 with 5 units", info.Records, snap.Usage)
	}
}

// TestStoreFlushRacingCounts: keys counted from several goroutines while
// the interval's writes run (go test -race): the file read back after one
// more write holds every count, none lost to a write it raced with.
func TestStoreFlushRacingCounts(t *testing.T) {
	k := newKeyedStore(t, 20)
	const writers, counts = 4, 500
	ids := keyIDs("key-%05d", 20)
	stop, flushed := make(chan struct{}), make(chan error, 1)
	go func() { // the interval's writes, back to back
		for {
			select {
			case <-stop:
				flushed <- k.s.flush(writeTick) // what the last of them missed
				return
			default:
			}
			if err := k.s.flush(writeTick); err != nil {
				flushed <- err
				return
			}
		}
	}()
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range counts {
				k.keys[ids[(w+i)%len(ids)]].Record(k.clk.Now(), api.EndpointSeries, 200, 1)
			}
		})
	}
	wg.Wait()
	close(stop)
	if err := <-flushed; err != nil {
		t.Fatal(err)
	}
	snap, err := Load(k.path)
	if err != nil {
		t.Fatal(err)
	}
	var total uint64
	for _, id := range ids {
		for _, c := range snap.Usage[id].Cells {
			total += c.Requests
		}
	}
	if total != writers*counts {
		t.Errorf("the file holds %d requests; %d were counted", total, writers*counts)
	}
}

// TestStoreGroupCommit: requests that each wait for their account's first
// reservation while a write is under way share the next one: one record,
// one fsync, all of them stored.
func TestStoreGroupCommit(t *testing.T) {
	k := newKeyedStore(t, 0)
	const n = 50
	k.s.flushMu.Lock() // a write under way
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if d, err := k.lim.Admit(context.Background(), limits.Subject{Key: fmt.Sprintf("acct-%d", i)}, limits.Policy{Daily: 1000}, 1); err != nil || !d.Allowed {
				t.Errorf("Admit: %+v %v", d, err)
			}
		}()
	}
	for waiting := 0; waiting < n; runtime.Gosched() {
		k.s.mu.Lock()
		waiting = len(k.s.waiters)
		k.s.mu.Unlock()
	}
	k.s.flushMu.Unlock()
	wg.Wait()
	snap, info, err := LoadInfo(k.path)
	if err != nil {
		t.Fatal(err)
	}
	// One record for the 50 waiting; at most one more, holding the units
	// they then reserved, written for the request left asking for a write.
	if changes := info.Records - 1; changes < 1 || changes > 2 {
		t.Errorf("%d requests waiting together made %d records after the snapshot; want 1 (and 1 more at most)", n, changes)
	}
	if len(snap.Counters) != n {
		t.Errorf("%d accounts stored; want %d", len(snap.Counters), n)
	}
}

// TestStoreCompacts: once the records appended outgrow the whole write
// before them, the interval's write replaces the file with one snapshot
// holding the same state.
func TestStoreCompacts(t *testing.T) {
	k := newKeyedStore(t, 10)
	k.s.compactAt = 1
	for range 3 {
		k.keys["key-00003"].Record(k.clk.Now(), api.EndpointSeries, 200, 1)
		if err := k.s.flush(writeTick); err != nil {
			t.Fatal(err)
		}
		k.s.awaitCompaction()
	}
	snap, info, err := LoadInfo(k.path)
	if err != nil {
		t.Fatal(err)
	}
	if info.Records > 2 {
		t.Errorf("%d records after compaction was due; want the journal compacted", info.Records)
	}
	if w := snap.Usage["key-00003"]; len(w.Cells) != 1 || w.Cells[0].Requests != 3 {
		t.Errorf("usage after compaction: %+v; want 3 requests", w)
	}
}

// TestStoreReplacesTornTail: a file ending in a record a crash cut short
// loads without it, and the first write replaces the file whole, so that
// later records are not appended after the torn one.
func TestStoreReplacesTornTail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state")
	b := appendRecord(encode(sample()), kindChanges, Snapshot{Written: t0, Counters: []limits.Counter{{Subject: "acme-prod", Day: 20261118, DayUsed: 999}}})
	if err := os.WriteFile(path, b[:len(b)-3], 0o600); err != nil {
		t.Fatal(err)
	}
	snap, info, err := LoadInfo(path)
	if err != nil || info.Torn == 0 || snap.Counters[0].DayUsed != 212 {
		t.Fatalf("torn file: %+v %+v %v; want the snapshot's 212, the torn record dropped", snap.Counters, info, err)
	}
	s := New(Options{Path: path, Clock: clock.NewFake(t0)})
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, info, err := LoadInfo(path); err != nil || info.Torn != 0 || info.Records != 1 {
		t.Errorf("after the first write: %+v %v; want one whole snapshot", info, err)
	}
}

// newLargeStore is a started Store, written whole once, keeping a
// limiter's counters and 100,000 keys' usage, each key used once and its
// own account charged one unit of a daily quota. It is closed when b ends.
func newLargeStore(b *testing.B) (*Store, *limits.Local, map[string]*activity.Key, *clock.Fake) {
	b.Helper()
	clk := clock.NewFake(t0)
	lim, err := limits.NewLocal(limits.DefaultConfig(), clk, nil)
	if err != nil {
		b.Fatal(err)
	}
	var usage activity.Keys
	keys := usage.Retain(keyIDs("key-%06d", 100_000))
	for _, k := range keys {
		k.Record(clk.Now(), api.EndpointSeries, 200, 1)
	}
	s := New(Options{Path: filepath.Join(b.TempDir(), "state"), Counters: lim, Clock: clk, Interval: time.Hour, Usage: &usage})
	for id := range keys { // before the keeper: no write per account
		if _, err := lim.Admit(context.Background(), limits.Subject{Key: id}, limits.Policy{Daily: 1000}, 1); err != nil {
			b.Fatal(err)
		}
	}
	lim.SetKeeper(s)
	s.Start()
	b.Cleanup(func() { _ = s.Close() })
	if err := s.Flush(); err != nil {
		b.Fatal(err)
	}
	return s, lim, keys, clk
}

// BenchmarkStoreWrite is one interval's write with 100,000 keys, each
// used once before: idle (nothing changed), one key and one account
// changed, and a compaction of the whole state.
func BenchmarkStoreWrite(b *testing.B) {
	s, lim, keys, clk := newLargeStore(b)
	one := keys["key-000042"]
	for _, bc := range []struct {
		name   string
		before func()
		kind   writeKind
	}{
		{"idle", func() {}, writeTick},
		{"one-changed", func() {
			one.Record(clk.Now(), api.EndpointSeries, 200, 1)
			_, _ = lim.Admit(context.Background(), limits.Subject{Key: "key-000042"}, limits.Policy{Daily: 1000}, 1)
		}, writeTick},
		{"compaction", func() {}, writeWhole},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				bc.before()
				if err := s.flush(bc.kind); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(s.size), "file-bytes")
		})
	}
}

// BenchmarkStoreFlushFewUsed is one interval's write with 100,000 keys of
// which 10 were counted since the previous write: what it costs follows
// the 10, not the 100,000.
func BenchmarkStoreFlushFewUsed(b *testing.B) {
	clk := clock.NewFake(t0)
	var usage activity.Keys
	keys := usage.Retain(keyIDs("key-%06d", 100_000))
	used := make([]*activity.Key, 10)
	for i := range used {
		used[i] = keys[fmt.Sprintf("key-%06d", i*9973)]
	}
	s := New(Options{Path: filepath.Join(b.TempDir(), "state"), Clock: clk, Interval: time.Hour, Usage: &usage})
	if err := s.Flush(); err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	b.ReportAllocs()
	for b.Loop() {
		for _, k := range used {
			k.Record(clk.Now(), api.EndpointSeries, 200, 1)
		}
		if err := s.flush(writeTick); err != nil {
			b.Fatal(err)
		}
	}
}

// keyIDs returns n key ids made by format from 0..n-1.
func keyIDs(format string, n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf(format, i)
	}
	return ids
}
