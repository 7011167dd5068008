package cache

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/ristretto/v2"
)

// entryOverhead approximates the memory of an Entry beyond its byte fields
// (struct, strings headers, memo map, ristretto bookkeeping).
const entryOverhead = 256

// avgEntryBytes sizes ristretto's admission counters: it wants about ten
// counters per entry it expects to hold.
const avgEntryBytes = 4 << 10

// ErrInvalidMaxBytes is returned by NewLocal for a non-positive bound.
var ErrInvalidMaxBytes = errors.New("cache: max bytes must be > 0")

// maxEntryShare is the largest share of MaxBytes one entry may take, its
// memo included: a bigger entry is served but not stored (see Admits), a
// memo value that would take it past the share is not kept.
const maxEntryShare = 8

// victimSample is how many held keys makeRoom looks at to pick one victim.
const victimSample = 5

// Local is the in-process tier: a ristretto cache bounded by MaxBytes, with
// entries costing cap(Body)+len(Key)+a fixed overhead, and a key index per
// topic for purging. The values derived from an entry (its memo: projected
// bodies, compressed copies) are charged against the same bound when they
// are created: Local counts them itself (ristretto's cost is fixed at Set
// and an update of it evicts nothing), lowers ristretto's bound by as much
// so later admissions make room for them, and evicts entries at once when
// a new memo value takes the total past MaxBytes. An entry that leaves
// while responses are still being written from it (Entry.Pin) keeps
// counting, as pinned bytes, until the last of them is done: its memory is
// still alive, so the tier holds that much less. Ristretto's TTL is only a
// memory backstop (FreshUntil minus Fetched plus the retention); freshness
// is the Cache's. Use NewLocal; the zero value is not usable.
type Local struct {
	rc        *ristretto.Cache[string, *Entry]
	m         *Metrics
	retention atomic.Int64 // time.Duration kept after FreshUntil
	clearing  atomic.Bool  // set while Clear runs, so its removals are not counted as evictions
	maxBytes  int64        // the bound on entries plus memo bytes
	maxEntry  int64        // the most one entry may cost, memo included (maxBytes/maxEntryShare)

	removals     atomic.Uint64 // counts Delete and Clear calls (see Removals)
	variantBytes atomic.Int64  // memo bytes of the entries held (see Entry.charge)
	pinnedBytes  atomic.Int64  // cost and memo bytes of entries that left while pinned (see Entry.Pin)
	evictMu      sync.Mutex    // serializes makeRoom, so concurrent charges do not evict twice

	mu     sync.Mutex                     // guards keys and topics
	keys   map[string]*keyRef             // key -> values ristretto holds or is admitting
	topics map[string]map[string]struct{} // topic -> keys
}

// keyRef counts the values of one key that ristretto holds or has pending:
// every value passed to a successful ristretto Set ends in exactly one
// OnExit call, so the key is indexed exactly while refs > 0.
type keyRef struct {
	topic string
	refs  int
	last  *Entry // the value most recently Set; makeRoom ranks victims by it
}

var (
	_ Store      = (*Local)(nil)
	_ TopicIndex = (*Local)(nil)
	_ Retainer   = (*Local)(nil)
	_ Admitter   = (*Local)(nil)
)

// NewLocal returns a local tier holding at most maxBytes of entries and
// the values derived from them. A nil m gets an unregistered Metrics; a
// non-nil m reports this tier's bytes and entries (the last Local built
// with m wins). Close it when done.
func NewLocal(maxBytes int64, m *Metrics) (*Local, error) {
	if maxBytes <= 0 {
		return nil, ErrInvalidMaxBytes
	}
	l := &Local{
		m:        orNew(m),
		maxBytes: maxBytes,
		maxEntry: max(maxBytes/maxEntryShare, 1),
		keys:     make(map[string]*keyRef),
		topics:   make(map[string]map[string]struct{}),
	}
	l.retention.Store(int64(DefaultConfig().MaxStale))
	counters := max(maxBytes/avgEntryBytes*10, 1024)
	rc, err := ristretto.NewCache(&ristretto.Config[string, *Entry]{
		NumCounters:        counters,
		MaxCost:            maxBytes,
		BufferItems:        64,
		IgnoreInternalCost: true, // entryOverhead is ours
		OnEvict: func(it *ristretto.Item[*Entry]) {
			if !l.clearing.Load() {
				l.m.evictions.Inc()
			}
		},
		OnExit: l.exit,
	})
	if err != nil {
		return nil, fmt.Errorf("cache: local tier: %w", err)
	}
	l.rc = rc
	l.m.local.Store(l)
	return l, nil
}

// cost is what e itself is charged against MaxBytes (its memo is charged
// apart, see Entry.charge). The body is charged by capacity: that is what
// it keeps alive.
func cost(e *Entry) int64 {
	return int64(cap(e.Body)+len(e.Key)+len(e.Topic)+len(e.ContentType)) + entryOverhead
}

// Admits reports whether Set may store e: an entry costing more than
// MaxBytes/8 is served to its callers but never stored, so one large
// upstream body cannot take the bound.
func (l *Local) Admits(e *Entry) bool { return e != nil && cost(e) <= l.maxEntry }

// Get returns the entry for key; a stored entry with another Key is a miss.
func (l *Local) Get(_ context.Context, key string) (*Entry, bool) {
	e, ok := l.rc.Get(key)
	if !ok || e == nil || e.Key != key {
		return nil, false
	}
	return e, true
}

// Set offers e to ristretto, which may drop or reject it. It returns once
// ristretto has applied the Set: ristretto buffers Sets and applies them
// on its own goroutine, and until then Get misses. A fill that returned
// before that would let the next request for the key (arriving after
// singleflight forgot it) fetch again and spend upstream budget. The wait
// is one round trip to that goroutine, paid only by fills.
func (l *Local) Set(_ context.Context, e *Entry) {
	if e == nil || e.Key == "" || !l.Admits(e) {
		return
	}
	ttl := time.Duration(l.retention.Load())
	if !e.Fetched.IsZero() && e.FreshUntil.After(e.Fetched) {
		ttl += e.FreshUntil.Sub(e.Fetched)
	}
	l.ref(e)
	if !l.rc.SetWithTTL(e.Key, e, cost(e), ttl) {
		l.exit(e) // dropped: ristretto will never report it
		return
	}
	l.rc.Wait()
	if e.MemoBytes() > 0 { // held again with values derived while it was not
		l.makeRoom(e.Key)
	}
}

// Delete removes key.
func (l *Local) Delete(_ context.Context, key string) {
	l.removals.Add(1)
	l.rc.Del(key)
}

// Clear removes everything; the removals are not counted as evictions.
func (l *Local) Clear(_ context.Context) {
	l.removals.Add(1)
	l.clearing.Store(true)
	defer l.clearing.Store(false)
	l.rc.Clear()
}

// TopicKeys returns the keys indexed for topic.
func (l *Local) TopicKeys(_ context.Context, topic string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	keys := make([]string, 0, len(l.topics[topic]))
	for k := range l.topics[topic] {
		keys = append(keys, k)
	}
	return keys
}

// Removals counts the Delete and Clear calls so far (purges; evictions
// are not counted). A caller copying an entry in from another tier reads
// it before that tier's read and again after its Set: a change means a
// purge may have run in between, which the copy must not undo.
func (l *Local) Removals() uint64 { return l.removals.Load() }

// SetRetention sets how long after FreshUntil entries are kept at most.
func (l *Local) SetRetention(maxStale time.Duration) { l.retention.Store(int64(maxStale)) }

// Len returns the number of keys held or being admitted.
func (l *Local) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.keys)
}

// MaxBytes returns the bound the tier was built with (cache.max_bytes).
func (l *Local) MaxBytes() int64 { return l.maxBytes }

// Bytes returns the cost currently held, entries and their memo values
// together: at most the configured maxBytes once pending Sets are applied.
func (l *Local) Bytes() int64 { return l.entryBytes() + l.variantBytes.Load() }

// VariantBytes returns the part of Bytes held by values derived from the
// entries (projected bodies, compressed copies).
func (l *Local) VariantBytes() int64 { return l.variantBytes.Load() }

// PinnedBytes returns the bytes of entries (with their memo values) that
// left the tier while responses were still being written from them; they
// count against MaxBytes besides Bytes until those responses are done.
func (l *Local) PinnedBytes() int64 { return l.pinnedBytes.Load() }

// entryBytes is the cost ristretto holds (entries without their memo).
func (l *Local) entryBytes() int64 { return l.rc.MaxCost() - l.rc.RemainingCost() }

// CountPinned makes l count e, which the caller has pinned, as pinned
// bytes if no tier counts it: an answer the tier did not keep (too large,
// or refused by ristretto's admission) is as alive as a held one while
// responses are written from it, so l holds that much less until the last
// Unpin. Call it on the miss path only; a hit's entry is held already.
func (l *Local) CountPinned(e *Entry) {
	e.acctMu.Lock()
	if e.holder != nil || e.pinnedBy != nil || e.pins.Load() == 0 {
		e.acctMu.Unlock()
		return
	}
	e.leaving.Store(true) // our pin is held, so the last Unpin comes later and sees it
	e.pinnedBy, e.pinnedCost = l, cost(e)+e.memoBytes
	l.pinnedBytes.Add(e.pinnedCost)
	e.acctMu.Unlock()
	l.makeRoom("")
}

// resize gives ristretto the bound left after the memo and pinned bytes,
// so that its own admissions make room for them.
func (l *Local) resize() {
	l.rc.UpdateMaxCost(max(l.maxBytes-l.variantBytes.Load()-l.pinnedBytes.Load(), 1))
}

// makeRoom restores the bound after memo bytes were charged: it lowers
// ristretto's bound and, while entries, memo and pinned bytes together pass
// MaxBytes, evicts held entries other than protect (the one that grew),
// each the soonest to go stale among a few sampled keys. Ristretto only
// evicts when it admits a new entry, so without this a cache that only
// serves hits would keep the new bytes over the bound.
func (l *Local) makeRoom(protect string) {
	l.evictMu.Lock()
	defer l.evictMu.Unlock()
	l.resize()
	l.rc.Wait()                             // apply pending Sets and Dels so entryBytes is current
	tried := map[string]bool{protect: true} // each key once, so the loop ends
	for l.Bytes()+l.pinnedBytes.Load() > l.maxBytes {
		victim := l.victim(tried)
		if victim == "" {
			return
		}
		tried[victim] = true
		l.rc.Del(victim)
		l.m.evictions.Inc()
		l.rc.Wait()
	}
}

// victim returns the key not in skip that goes stale first among up to
// victimSample held keys (map order is random); "" when there is none.
func (l *Local) victim(skip map[string]bool) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	best, seen := "", 0
	var until time.Time
	for k, r := range l.keys {
		if skip[k] || r.last == nil {
			continue
		}
		if best == "" || r.last.FreshUntil.Before(until) {
			best, until = k, r.last.FreshUntil
		}
		if seen++; seen == victimSample {
			break
		}
	}
	return best
}

// Wait blocks until ristretto has applied the Sets buffered so far (tests).
func (l *Local) Wait() { l.rc.Wait() }

// Close stops ristretto's goroutines and drops every entry.
func (l *Local) Close() {
	l.clearing.Store(true)
	l.rc.Close()
}

func (l *Local) ref(e *Entry) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.keys[e.Key]
	if r == nil {
		r = &keyRef{topic: e.Topic}
		l.keys[e.Key] = r
		ks := l.topics[e.Topic]
		if ks == nil {
			ks = make(map[string]struct{})
			l.topics[e.Topic] = ks
		}
		ks[e.Key] = struct{}{}
	}
	r.refs++
	r.last = e
	l.hold(e)
}

// hold records one more ristretto value referencing e; the first one
// charges e's memo bytes here (and ends counting e as pinned: it is held
// again). An entry another Local holds is charged there only.
func (l *Local) hold(e *Entry) {
	e.acctMu.Lock()
	defer e.acctMu.Unlock()
	if e.holder != nil && e.holder != l {
		return
	}
	if e.holds++; e.holds == 1 {
		e.holder = l
		l.variantBytes.Add(e.memoBytes)
		if e.pinnedBy == l {
			l.pinnedBytes.Add(-e.pinnedCost)
			e.pinnedBy, e.pinnedCost = nil, 0
			e.leaving.Store(false)
		}
	}
}

// release drops one ristretto value referencing e; the last one releases
// e's memo bytes (the memo dies with the entry once no request holds it).
// When responses are still being written from e (pinned), its cost and
// memo bytes are counted as pinned until the last of them Unpins.
func (l *Local) release(e *Entry) {
	e.acctMu.Lock()
	defer e.acctMu.Unlock()
	if e.holder != l || e.holds == 0 {
		return
	}
	if e.holds--; e.holds == 0 {
		e.holder = nil
		l.variantBytes.Add(-e.memoBytes)
		if e.pinnedBy != nil {
			return
		}
		e.leaving.Store(true) // before reading pins: see Entry.Unpin
		if e.pins.Load() > 0 {
			e.pinnedBy, e.pinnedCost = l, cost(e)+e.memoBytes
			l.pinnedBytes.Add(e.pinnedCost)
		} else {
			e.leaving.Store(false)
		}
	}
}

// exit is ristretto's OnExit: one value of e.Key left (or never entered).
func (l *Local) exit(e *Entry) {
	if e == nil {
		return
	}
	l.release(e)
	defer l.resize()
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.keys[e.Key]
	if r == nil {
		return
	}
	if r.refs--; r.refs > 0 {
		return
	}
	delete(l.keys, e.Key)
	if ks := l.topics[r.topic]; ks != nil {
		delete(ks, e.Key)
		if len(ks) == 0 {
			delete(l.topics, r.topic)
		}
	}
}
