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
// last seen. It takes about 10 KB. The zero value is ready to use; a Key
// is safe for concurrent use and Record neither locks nor allocates.
type Key struct {
	lastSeen atomic.Int64 // unix nanoseconds of the latest Record; 0: never
	slots    [hourSlots][numEndpoints][numClasses]keyCell
	upstream [hourSlots]tagged // upstream requests the key's cold misses caused, by hour
	// abandoned counts the part of upstream made for requests whose client
	// had gone (499) by the time the answer came, by hour.
	abandoned [hourSlots]tagged
}

// LastSeen returns the time of the key's latest Record; zero if none.
func (k *Key) LastSeen() time.Time {
	if ns := k.lastSeen.Load(); ns != 0 {
		return time.Unix(0, ns).UTC()
	}
	return time.Time{}
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
	k.abandoned[h%hourSlots].add(h, uint64(n))
}

// UpstreamCall counts one upstream request (an attempt the budget paid
// for) caused by a cold miss of the key at now.
func (k *Key) UpstreamCall(now time.Time) {
	h := hourOf(now)
	k.upstream[h%hourSlots].add(h, 1)
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
	if !ep.Valid() {
		return
	}
	h := hourOf(now)
	c := &k.slots[h%hourSlots][ep][ClassOf(status)]
	c.requests.add(h, 1)
	if units > 0 {
		c.units.add(h, uint64(units))
	}
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
	for back := uint64(0); back < hourSlots && back <= h; back++ {
		w.UpstreamCalls += k.upstream[(h-back)%hourSlots].get(h - back)
		w.UpstreamAbandoned += k.abandoned[(h-back)%hourSlots].get(h - back)
	}
	for ep := api.EndpointList; ep < numEndpoints; ep++ {
		for c := StatusClass(0); c < numClasses; c++ {
			var kc KeyCount
			for back := uint64(0); back < hourSlots && back <= h; back++ {
				tag := h - back
				cell := &k.slots[tag%hourSlots][ep][c]
				kc.Requests += cell.requests.get(tag)
				kc.Units += cell.units.get(tag)
			}
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
// stays configured. The zero value is ready to use.
type Keys struct {
	mu   sync.Mutex // guards keys
	keys map[string]*Key
}

// Retain returns the counters of ids, creating those not yet known, and
// forgets every id not listed (a key removed from the configuration).
// The returned map is the caller's; the gateway builds one per
// configuration snapshot, so requests find their Key with a plain map
// read.
func (s *Keys) Retain(ids []string) map[string]*Key {
	s.mu.Lock()
	defer s.mu.Unlock()
	next := make(map[string]*Key, len(ids))
	for _, id := range ids {
		k := s.keys[id]
		if k == nil {
			k = new(Key)
		}
		next[id] = k
	}
	s.keys = next
	out := make(map[string]*Key, len(next))
	for id, k := range next {
		out[id] = k
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
		slot := tag % hourSlots
		if up, ab := k.upstream[slot].get(tag), k.abandoned[slot].get(tag); up != 0 || ab != 0 {
			rec.Hours = append(rec.Hours, HourCount{Hour: tag, Upstream: up, Abandon: ab})
		}
		for _, ep := range api.Endpoints {
			for c := StatusClass(0); c < numClasses; c++ {
				cell := &k.slots[slot][ep][c]
				if r, u := cell.requests.get(tag), cell.units.get(tag); r != 0 || u != 0 {
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
// before serving, on a Key that counted nothing yet.
func (k *Key) Restore(rec KeyRecord, now time.Time) {
	if ns := rec.LastSeen.UnixNano(); !rec.LastSeen.IsZero() && k.lastSeen.Load() < ns {
		k.lastSeen.Store(ns)
	}
	h := hourOf(now)
	inWindow := func(tag uint64) bool { return tag <= h && h-tag < hourSlots }
	for _, hc := range rec.Hours {
		if inWindow(hc.Hour) {
			k.upstream[hc.Hour%hourSlots].add(hc.Hour, hc.Upstream)
			k.abandoned[hc.Hour%hourSlots].add(hc.Hour, hc.Abandon)
		}
	}
	for _, c := range rec.Cells {
		if !inWindow(c.Hour) || !c.Endpoint.Valid() || c.Class >= numClasses {
			continue
		}
		cell := &k.slots[c.Hour%hourSlots][c.Endpoint][c.Class]
		cell.requests.add(c.Hour, c.Requests)
		cell.units.add(c.Hour, c.Units)
	}
}
