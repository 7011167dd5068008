package activity

import (
	"sync"
	"sync/atomic"
	"time"

	"trendgate/api"
)

// StatusClass groups response statuses for the per-key counters.
type StatusClass uint8

// The status classes. 429 is kept apart from the other 4xx answers: it is
// the key meeting its limits, not a bad request.
const (
	Class2xx StatusClass = iota
	Class3xx
	Class4xx
	Class429
	Class5xx
	numClasses
)

var classNames = [numClasses]string{"2xx", "3xx", "4xx", "429", "5xx"}

// String returns the class name: 2xx, 3xx, 4xx, 429 or 5xx.
func (c StatusClass) String() string {
	if c < numClasses {
		return classNames[c]
	}
	return "unknown"
}

// ClassOf returns the class of an HTTP status; 0 (nothing written) is
// 2xx, as net/http answers 200 then, and a 499 (client gone) is 4xx.
func ClassOf(status int) StatusClass {
	switch {
	case status == 429:
		return Class429
	case status >= 500:
		return Class5xx
	case status >= 400:
		return Class4xx
	case status >= 300:
		return Class3xx
	}
	return Class2xx
}

// hourSlots is the number of hourly slots a Key keeps: the current hour
// and the 23 before it.
const hourSlots = 24

// numEndpoints sizes the per-endpoint arrays, indexed by api.Endpoint
// (index 0, the zero Endpoint, is never recorded): the built-in endpoints
// and one slot for all configured routes together.
const numEndpoints = api.EndpointRoute + 1

// Key holds one API key's request and quota-unit counts for the last 24
// hours, by endpoint and status class, in hourly slots, and when it was
// last seen. Keys.Retain makes them; the zero value is ready to use too,
// but is on no Keys' changed list. The Key is all a key never used costs
// (56 bytes, no counters): the hourly ring is allocated by the first
// count, and within it an hour slot, and an endpoint's class counters in
// that slot, by the first count that needs them. Slots are reused from one
// day to the next (their counters are tagged with their hour), so a key in
// steady use allocates nothing more. A Key is safe for concurrent use;
// Record never locks, and allocates only on a slot's or endpoint's first
// count.
type Key struct {
	lastSeen atomic.Int64 // unix nanoseconds of the latest Record; 0: never
	// changed is set after every count and cleared by the Keys that made
	// k when it takes k off its changed list (Keys.TakeChanged): the
	// state file writes only the keys counted since its previous write.
	// The count that sets it puts k on that list, so k is on it (or about
	// to be) exactly while changed is set.
	changed atomic.Bool
	hours   atomic.Pointer[keyHours] // nil until the first count
	// set is the Keys that made k (nil for a Key of its own, which is on
	// no list), id k's id in it; both are fixed. next is the key below k
	// on set's changed list while k is on it.
	set  *Keys
	id   string
	next *Key
}

// keyHours is a Key's ring of hourly slots, indexed by hour % hourSlots;
// a nil slot has counted nothing yet.
type keyHours [hourSlots]atomic.Pointer[hourCounts]

// hourCounts is one hourly slot of a Key: the upstream requests the key's
// cold misses caused, the part of them made for requests whose client had
// gone (499) by the time the answer came, and per endpoint (nil: none
// counted in this slot yet) the counts by status class.
type hourCounts struct {
	upstream, abandoned tagged
	endpoints           [numEndpoints]atomic.Pointer[classCounts]
}

// classCounts is one hour's counts of one endpoint, by status class.
type classCounts [numClasses]keyCell

// slot returns k's hourly slot i, nil when it never counted anything.
func (k *Key) slot(i uint64) *hourCounts {
	if hs := k.hours.Load(); hs != nil {
		return hs[i].Load()
	}
	return nil
}

// slotForWrite returns k's hourly slot i, allocating the ring and the
// slot on their first count.
func (k *Key) slotForWrite(i uint64) *hourCounts {
	hs := k.hours.Load()
	if hs == nil {
		hs = new(keyHours)
		if !k.hours.CompareAndSwap(nil, hs) {
			hs = k.hours.Load()
		}
	}
	hc := hs[i].Load()
	if hc == nil {
		hc = new(hourCounts)
		if !hs[i].CompareAndSwap(nil, hc) {
			hc = hs[i].Load()
		}
	}
	return hc
}

// classes returns the slot's counters of ep, allocating them on their
// first count.
func (hc *hourCounts) classes(ep api.Endpoint) *classCounts {
	cc := hc.endpoints[ep].Load()
	if cc == nil {
		cc = new(classCounts)
		if !hc.endpoints[ep].CompareAndSwap(nil, cc) {
			cc = hc.endpoints[ep].Load()
		}
	}
	return cc
}

// LastSeen returns the time of the key's latest Record; zero if none.
func (k *Key) LastSeen() time.Time {
	if ns := k.lastSeen.Load(); ns != 0 {
		return time.Unix(0, ns).UTC()
	}
	return time.Time{}
}

// markChanged sets changed after a count, and puts k on its set's changed
// list when that count is the first since the list was last taken. A key
// already marked costs one load, which keeps a busy key's cache line
// shared between cores; of counts racing to mark it, the one whose
// compare-and-swap wins puts it on the list.
func (k *Key) markChanged() {
	if !k.changed.Load() && k.changed.CompareAndSwap(false, true) && k.set != nil {
		k.set.pushChanged(k)
	}
}

// UpstreamAbandoned counts n upstream requests (already counted by
// UpstreamCall) made for a request of the key whose client left before
// the answer came, at now: the request's quota was refunded, the calls
// were paid for.
func (k *Key) UpstreamAbandoned(now time.Time, n int) {
	if n <= 0 {
		return
	}
	h := hourOf(now)
	k.slotForWrite(h%hourSlots).abandoned.add(h, uint64(n))
	k.markChanged()
}

// UpstreamCall counts one upstream request (an attempt the budget paid
// for) caused by a cold miss of the key at now.
func (k *Key) UpstreamCall(now time.Time) {
	h := hourOf(now)
	k.slotForWrite(h%hourSlots).upstream.add(h, 1)
	k.markChanged()
}

// keyCell is one hour's count for one endpoint and status class.
type keyCell struct{ requests, units tagged }

// Record counts one request answered at now for endpoint ep with status,
// and units quota units charged for it (0 when nothing was charged). An
// invalid endpoint is not counted, but still marks the key as seen.
func (k *Key) Record(now time.Time, ep api.Endpoint, status int, units int) {
	ns := now.UnixNano()
	if k.lastSeen.Load() < ns {
		k.lastSeen.Store(ns)
	}
	if ep.Valid() {
		h := hourOf(now)
		c := &k.slotForWrite(h % hourSlots).classes(ep)[ClassOf(status)]
		c.requests.add(h, 1)
		if units > 0 {
			c.units.add(h, uint64(units))
		}
	}
	k.markChanged()
}

// hourOf is the slot tag of now's hour: hours since 1970 (0 before).
func hourOf(now time.Time) uint64 {
	s := now.Unix()
	if s < 0 {
		return 0
	}
	return uint64(s / 3600)
}

// KeyCount is one endpoint and status class's figures in a KeyWindow.
type KeyCount struct {
	Endpoint api.Endpoint
	Class    StatusClass
	Requests uint64
	Units    uint64
}

// KeyWindow is a Key's figures over the 24 hours that end with the current
// one (the current hour so far and the 23 full hours before it).
type KeyWindow struct {
	// Since is the start of the oldest hour counted.
	Since time.Time
	// Requests and Units are the totals of Counts.
	Requests, Units uint64
	// UpstreamCalls is how many upstream requests the key's cold misses
	// caused (background refreshes are nobody's).
	UpstreamCalls uint64
	// UpstreamAbandoned is the part of UpstreamCalls made for requests
	// whose client had gone before the answer came.
	UpstreamAbandoned uint64
	// Counts lists every endpoint and status class with requests, in
	// endpoint then class order.
	Counts []KeyCount
	// LastSeen is the time of the latest request; zero if none was
	// recorded since the process started.
	LastSeen time.Time
}

// Window returns k's figures for the 24 hours ending with now's hour.
func (k *Key) Window(now time.Time) KeyWindow {
	h := hourOf(now)
	w := KeyWindow{Since: time.Unix(int64(h+1-hourSlots)*3600, 0).UTC()}
	if ns := k.lastSeen.Load(); ns != 0 {
		w.LastSeen = time.Unix(0, ns).UTC()
	}
	var sums [numEndpoints][numClasses]KeyCount
	for back := uint64(0); back < hourSlots && back <= h; back++ {
		tag := h - back
		hc := k.slot(tag % hourSlots)
		if hc == nil {
			continue
		}
		w.UpstreamCalls += hc.upstream.get(tag)
		w.UpstreamAbandoned += hc.abandoned.get(tag)
		for ep := api.EndpointList; ep < numEndpoints; ep++ {
			cc := hc.endpoints[ep].Load()
			if cc == nil {
				continue
			}
			for c := range StatusClass(numClasses) {
				sums[ep][c].Requests += cc[c].requests.get(tag)
				sums[ep][c].Units += cc[c].units.get(tag)
			}
		}
	}
	for ep := api.EndpointList; ep < numEndpoints; ep++ {
		for c := range StatusClass(numClasses) {
			kc := sums[ep][c]
			if kc.Requests == 0 {
				continue
			}
			kc.Endpoint, kc.Class = ep, c
			w.Counts = append(w.Counts, kc)
			w.Requests += kc.Requests
			w.Units += kc.Units
		}
	}
	return w
}

// Keys is the set of Key counters of the configured keys. It survives
// configuration reloads: Retain hands out the same *Key for an id that
// stays configured. It also lists the keys counted since the store of
// usage last asked (TakeChanged), so that a flush costs what the keys
// counted since did, not what all the keys configured are. The zero value
// is ready to use.
type Keys struct {
	mu   sync.Mutex // guards keys
	keys map[string]*Key
	// changed is the top of the list of keys marked since the latest
	// take, linked by Key.next: a lock-free stack that counts push onto
	// (one compare-and-swap per key, the first count after a take) and a
	// take empties whole (one swap), so a key is never on it twice.
	changed atomic.Pointer[Key]
}

// Retain returns the counters of ids, creating those not yet known, and
// forgets every id not listed (a key removed from the configuration).
// The gateway builds one map per configuration snapshot, so requests find
// their Key with a plain map read. The returned map is shared with s until
// the next Retain: read only.
func (s *Keys) Retain(ids []string) map[string]*Key {
	s.mu.Lock()
	defer s.mu.Unlock()
	next := make(map[string]*Key, len(ids))
	for _, id := range ids {
		k := s.keys[id]
		if k == nil {
			k = &Key{set: s, id: id}
		}
		next[id] = k
	}
	s.keys = next
	return next
}

// pushChanged puts k, just marked, on the changed list.
func (s *Keys) pushChanged(k *Key) {
	for {
		top := s.changed.Load()
		k.next = top
		if s.changed.CompareAndSwap(top, k) {
			return
		}
	}
}

// TakeChanged returns the keys in force that counted anything (or were
// seen) since the previous TakeChanged or TakeAll, and starts over; nil
// when none did. It costs what those keys did, whatever the number of keys
// configured. A count racing with it is reported now or by the next call,
// never lost: Record marks the key after counting, and the caller reads
// the counts after this call. A key removed from the configuration is not
// returned.
func (s *Keys) TakeChanged() map[string]*Key {
	taken := s.takeList()
	if len(taken) == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out map[string]*Key
	for _, k := range taken {
		if s.keys[k.id] != k {
			continue // removed (or removed and added again: a new Key)
		}
		if out == nil {
			out = make(map[string]*Key, len(taken))
		}
		out[k.id] = k
	}
	return out
}

// TakeAll returns every key in force and starts the changes over, as
// TakeChanged does: for a caller that writes every key's counts. The map
// is shared with s until the next Retain: read only.
func (s *Keys) TakeAll() map[string]*Key {
	s.takeList()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.keys
}

// takeList empties the changed list and clears its keys' marks, each once
// the key is off the list: from then on a count puts it on again.
func (s *Keys) takeList() []*Key {
	var out []*Key
	for k := s.changed.Swap(nil); k != nil; {
		next := k.next
		k.next = nil
		k.changed.Store(false)
		out = append(out, k)
		k = next
	}
	return out
}

// KeyRecord is a Key's figures in the form a store keeps across restarts:
// only the non-zero counts of the 24 hours a Key holds. The zero value is
// a key never seen.
type KeyRecord struct {
	// LastSeen is the time of the key's latest request; zero if none.
	LastSeen time.Time
	// Cells are the non-zero hourly counts by endpoint and status class.
	Cells []Cell
	// Hours are the non-zero hourly upstream counts.
	Hours []HourCount
}

// Cell is one hour's count for one endpoint and status class.
type Cell struct {
	Hour     uint64 // hours since 1970
	Endpoint api.Endpoint
	Class    StatusClass
	Requests uint64
	Units    uint64
}

// HourCount is one hour's upstream requests caused by a key, and the part
// of them made for clients that had gone.
type HourCount struct {
	Hour              uint64 // hours since 1970
	Upstream, Abandon uint64
}

// Export returns k's figures for the 24 hours ending with now's hour.
func (k *Key) Export(now time.Time) KeyRecord {
	var rec KeyRecord
	if ns := k.lastSeen.Load(); ns != 0 {
		rec.LastSeen = time.Unix(0, ns).UTC()
	}
	h := hourOf(now)
	for back := uint64(0); back < hourSlots && back <= h; back++ {
		tag := h - back
		hc := k.slot(tag % hourSlots)
		if hc == nil {
			continue
		}
		if up, ab := hc.upstream.get(tag), hc.abandoned.get(tag); up != 0 || ab != 0 {
			rec.Hours = append(rec.Hours, HourCount{Hour: tag, Upstream: up, Abandon: ab})
		}
		for ep := api.EndpointList; ep < numEndpoints; ep++ {
			cc := hc.endpoints[ep].Load()
			if cc == nil {
				continue
			}
			for c := range StatusClass(numClasses) {
				if r, u := cc[c].requests.get(tag), cc[c].units.get(tag); r != 0 || u != 0 {
					rec.Cells = append(rec.Cells, Cell{Hour: tag, Endpoint: ep, Class: c, Requests: r, Units: u})
				}
			}
		}
	}
	return rec
}

// Restore adds rec's counts to k, keeping only those of the 24 hours
// ending with now's hour and of valid endpoints and classes, and moves
// k's last-seen time to rec's when that is later. The gateway calls it
// before serving, on a Key that counted nothing yet. Only the slots that
// receive a count are allocated.
func (k *Key) Restore(rec KeyRecord, now time.Time) {
	if ns := rec.LastSeen.UnixNano(); !rec.LastSeen.IsZero() && k.lastSeen.Load() < ns {
		k.lastSeen.Store(ns)
	}
	h := hourOf(now)
	inWindow := func(tag uint64) bool { return tag <= h && h-tag < hourSlots }
	for _, hc := range rec.Hours {
		if inWindow(hc.Hour) && (hc.Upstream != 0 || hc.Abandon != 0) {
			slot := k.slotForWrite(hc.Hour % hourSlots)
			slot.upstream.add(hc.Hour, hc.Upstream)
			slot.abandoned.add(hc.Hour, hc.Abandon)
		}
	}
	for _, c := range rec.Cells {
		if !inWindow(c.Hour) || !c.Endpoint.Valid() || c.Class >= numClasses || (c.Requests == 0 && c.Units == 0) {
			continue
		}
		cell := &k.slotForWrite(c.Hour % hourSlots).classes(c.Endpoint)[c.Class]
		cell.requests.add(c.Hour, c.Requests)
		cell.units.add(c.Hour, c.Units)
	}
}
