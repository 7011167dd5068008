package state

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"trendgate/api"
	"trendgate/limits"
)

// gate holds compactions in beforeSwap until it is opened. The test's
// cleanup opens it before the store's Close (which waits for the
// compaction), so that a failing test ends.
type gate struct {
	ch   chan struct{}
	once sync.Once
}

// newGate returns a closed gate; call it after newKeyedStore.
func newGate(t *testing.T) *gate {
	g := &gate{ch: make(chan struct{})}
	t.Cleanup(g.open)
	return g
}

func (g *gate) open() { g.once.Do(func() { close(g.ch) }) }

// startCompaction grows k's journal by one counted key per interval
// write until a write starts a compaction, whose swap then waits in
// beforeSwap until g opens (later ones do not wait). It returns once the
// compaction has written its new file.
func startCompaction(t *testing.T, k *keyedStore, g *gate) {
	t.Helper()
	written := make(chan struct{})
	var once sync.Once
	k.s.beforeSwap = func() {
		once.Do(func() { close(written) })
		<-g.ch
	}
	k.s.compactAt = 1
	for i := 0; ; i++ {
		if i == 100 {
			t.Fatal("100 interval writes started no compaction")
		}
		k.keys["key-00000"].Record(k.clk.Now(), api.EndpointSeries, 200, 1)
		if err := k.s.flush(writeTick); err != nil {
			t.Fatal(err)
		}
		k.s.flushMu.Lock()
		started := k.s.compacting != nil
		k.s.flushMu.Unlock()
		if started {
			break
		}
	}
	<-written
}

// within fails t unless done is closed within a minute: what it waits
// for must not wait for the compaction held in beforeSwap.
func within(t *testing.T, done <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatalf("%s waited for the compaction to end", what)
	}
}

// TestSyncDuringCompaction: while a compaction's new file waits to be
// swapped in, a request that needs a higher ceiling is admitted (its Sync
// appends a record to the old file) and the interval's write appends one
// too; once swapped in, the new file holds the snapshot and both records,
// and every account's stored count covers what it used.
func TestSyncDuringCompaction(t *testing.T) {
	k := newKeyedStore(t, 10)
	ctx := context.Background()
	for _, id := range []string{"key-00001", "key-00002"} { // counted in the snapshot
		if _, err := k.lim.Admit(ctx, limits.Subject{Key: id}, limits.Policy{Daily: 1000}, 3); err != nil {
			t.Fatal(err)
		}
	}
	g := newGate(t)
	startCompaction(t, k, g)

	admitted := make(chan struct{})
	var d limits.Decision
	var err error
	go func() {
		defer close(admitted)
		// A first request of its account: its ceiling is 0, so it waits
		// for a write.
		d, err = k.lim.Admit(ctx, limits.Subject{Key: "key-00003"}, limits.Policy{Daily: 1000}, 5)
	}()
	within(t, admitted, "a request waiting for its ceiling")
	if err != nil || !d.Allowed {
		t.Fatalf("Admit during the compaction: %+v %v", d, err)
	}
	k.keys["key-00004"].Record(k.clk.Now(), api.EndpointWhatsup, 200, 7)
	ticked := make(chan struct{})
	go func() {
		defer close(ticked)
		if err := k.s.flush(writeTick); err != nil {
			t.Error(err)
		}
	}()
	within(t, ticked, "the interval's write")

	g.open()
	k.s.awaitCompaction()
	snap, info, err := LoadInfo(k.path)
	if err != nil {
		t.Fatal(err)
	}
	if info.Records != 3 {
		t.Errorf("%d records after the compaction; want its snapshot and the two records appended meanwhile", info.Records)
	}
	if w := snap.Usage["key-00004"]; len(w.Cells) != 1 || w.Cells[0].Units != 7 {
		t.Errorf("usage of key-00004 counted during the compaction: %+v; want 7 units", w)
	}
	stored := map[string]int64{}
	for _, c := range snap.Counters {
		stored[c.Subject] = c.DayUsed
	}
	for _, c := range k.lim.Checkpoint(k.clk.Now(), false) { // the exact counts
		if stored[c.Subject] < c.DayUsed {
			t.Errorf("account %s: the file stores %d; it used %d (a crash now would lose units)", c.Subject, stored[c.Subject], c.DayUsed)
		}
	}
	if stored["key-00003"] < 5 {
		t.Errorf("key-00003 stored at %d; want its 5 units reserved", stored["key-00003"])
	}

	// The journal goes on from the new file.
	k.keys["key-00005"].Record(k.clk.Now(), api.EndpointSeries, 200, 2)
	if err := k.s.flush(writeTick); err != nil {
		t.Fatal(err)
	}
	k.s.awaitCompaction()
	if snap, err := Load(k.path); err != nil || len(snap.Usage["key-00005"].Cells) != 1 {
		t.Errorf("after one more write: %v, key-00005 %+v; want it counted", err, snap.Usage["key-00005"])
	}
}

// compactingKeeper is the store as a limiter's keeper whose first Sync
// starts a compaction before asking for the write, so that the
// compaction's checkpoint falls between a request's need and the record
// that serves it. It counts the Syncs.
type compactingKeeper struct {
	s     *Store
	now   func() time.Time
	once  sync.Once
	syncs atomic.Int32
}

func (k *compactingKeeper) Sync(ctx context.Context) error {
	k.once.Do(func() {
		k.s.flushMu.Lock()
		k.s.startCompaction(k.now())
		k.s.flushMu.Unlock()
	})
	k.syncs.Add(1)
	return k.s.Sync(ctx)
}

// TestRequestWaitingAtCompactionStart: a request that waits for its
// ceiling while a compaction takes its checkpoint is served by the next
// record, with one Sync, while the compaction is still running: the
// checkpoint does not take its need (with CheckpointAll the record had
// nothing of it, and the request asked for a second write).
func TestRequestWaitingAtCompactionStart(t *testing.T) {
	k := newKeyedStore(t, 10)
	g, written := newGate(t), make(chan struct{})
	k.s.beforeSwap = func() {
		close(written)
		<-g.ch
	}
	kp := &compactingKeeper{s: k.s, now: k.clk.Now}
	k.lim.SetKeeper(kp)

	admitted := make(chan struct{})
	var d limits.Decision
	var err error
	go func() {
		defer close(admitted)
		d, err = k.lim.Admit(context.Background(), limits.Subject{Key: "key-00007"}, limits.Policy{Daily: 1000}, 5)
	}()
	within(t, admitted, "a request waiting for its ceiling when the compaction started")
	if err != nil || !d.Allowed {
		t.Fatalf("Admit: %+v %v", d, err)
	}
	if n := kp.syncs.Load(); n != 1 {
		t.Errorf("the request asked for %d writes; want 1", n)
	}
	<-written
	g.open()
	k.s.awaitCompaction()
	snap, err := Load(k.path)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range snap.Counters {
		if c.Subject == "key-00007" && c.DayUsed >= 5 {
			return
		}
	}
	t.Errorf("stored counters %+v; want key-00007 at 5 or more", snap.Counters)
}

// TestCompactionFailureKeepsJournal: a compaction that cannot put its new
// file in place leaves the old journal, records appended meanwhile
// included, and makes the next write a whole one, which stores the usage
// the failed snapshot took.
func TestCompactionFailureKeepsJournal(t *testing.T) {
	k := newKeyedStore(t, 10)
	g := newGate(t)
	startCompaction(t, k, g)
	k.keys["key-00006"].Record(k.clk.Now(), api.EndpointSeries, 200, 4)
	if err := k.s.flush(writeTick); err != nil { // appended to the old file while the compaction waits
		t.Fatal(err)
	}
	// The rename fails: a directory with something in it stands where the
	// new file would go. The old file is moved aside meanwhile and back
	// after, as it was.
	aside := k.path + ".aside"
	if err := os.Rename(k.path, aside); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(k.path+"/x", 0o700); err != nil {
		t.Fatal(err)
	}
	g.open()
	k.s.awaitCompaction()
	if err := os.RemoveAll(k.path); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(aside, k.path); err != nil {
		t.Fatal(err)
	}
	old, err := Load(k.path)
	if err != nil || old.Usage["key-00006"].Cells[0].Units != 4 {
		t.Fatalf("old journal after the failed compaction: %v %+v; want key-00006's 4 units", err, old.Usage)
	}
	k.s.flushMu.Lock()
	whole := k.s.whole
	k.s.flushMu.Unlock()
	if !whole {
		t.Fatal("after a failed compaction the next write is not a whole one")
	}
	if err := k.s.flush(writeTick); err != nil {
		t.Fatal(err)
	}
	snap, info, err := LoadInfo(k.path)
	if err != nil || info.Records != 1 {
		t.Fatalf("after the next write: %+v %v; want one whole snapshot", info, err)
	}
	if u := snap.Usage["key-00000"]; len(u.Cells) != 1 || u.Cells[0].Requests == 0 {
		t.Errorf("key-00000's usage, taken by the failed compaction: %+v; want it stored", u)
	}
}

// BenchmarkSyncDuringCompaction is a request waiting for its ceiling (the
// first of an account: one Sync) made just after a compaction started,
// with 100,000 keys and accounts each used once, as BenchmarkStoreWrite:
// held-ms is how long starting the compaction held the journal (its
// checkpoint; a Sync then waits for it), sync-ms how long the request
// waited after that, compaction-ms how long the compaction took from its
// start to the swap (what the request waited when compactions held the
// journal throughout).
func BenchmarkSyncDuringCompaction(b *testing.B) {
	s, lim, _, clk := newLargeStore(b)
	var held, waited, compacting time.Duration
	i := 0
	for b.Loop() {
		start := time.Now()
		s.flushMu.Lock()
		s.startCompaction(clk.Now())
		s.flushMu.Unlock()
		started := time.Now()
		i++
		d, err := lim.Admit(context.Background(), limits.Subject{Key: fmt.Sprintf("new-%d", i)}, limits.Policy{Daily: 1000}, 1)
		if err != nil || !d.Allowed {
			b.Fatalf("Admit: %+v %v", d, err)
		}
		waited += time.Since(started)
		s.awaitCompaction()
		compacting += time.Since(start)
		held += started.Sub(start)
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(i) }
	b.ReportMetric(ms(held), "held-ms")
	b.ReportMetric(ms(waited), "sync-ms")
	b.ReportMetric(ms(compacting), "compaction-ms")
}

// TestResetDuringCompactionWithFailedRecord: a quota reset whose record
// fails to be appended while a compaction runs stays in memory (the reset
// says it is not stored), the compaction does not bring back the count its
// snapshot took from before the reset, and the next write, a whole one,
// stores the reset.
func TestResetDuringCompactionWithFailedRecord(t *testing.T) {
	k := newKeyedStore(t, 10)
	ctx := context.Background()
	if _, err := k.lim.Admit(ctx, limits.Subject{Key: "key-00008"}, limits.Policy{Daily: 1000}, 3); err != nil {
		t.Fatal(err)
	}
	g := newGate(t)
	startCompaction(t, k, g) // its snapshot holds key-00008 at 3 or more

	k.s.flushMu.Lock()
	_ = k.s.f.Close() // the next append fails
	k.s.flushMu.Unlock()
	if _, err := k.lim.ResetQuota(ctx, "key-00008", limits.QuotaDay); err == nil {
		t.Fatal("ResetQuota with the append failing: no error; want 'not stored'")
	}
	g.open()
	k.s.awaitCompaction()
	if err := k.s.flush(writeTick); err != nil { // a whole write: an append failed
		t.Fatal(err)
	}
	snap, info, err := LoadInfo(k.path)
	if err != nil || info.Records != 1 {
		t.Fatalf("after the next write: %+v %v; want one whole snapshot", info, err)
	}
	for _, c := range snap.Counters {
		if c.Subject == "key-00008" && c.DayUsed != 0 {
			t.Errorf("key-00008 stored at %d after its day was reset; want 0", c.DayUsed)
		}
	}
}
