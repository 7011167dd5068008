package cache

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"trendgate/api"
)

// Entry is one cached upstream answer for one canonical request. Entries are
// immutable once handed to a Store: readers share them, so neither Body nor
// any other field may be changed afterwards; derived representations go in
// the memo instead. The zero value is an empty, already stale entry.
type Entry struct {
	// Key is the canonical key, e.g. "v2|series|bitcoin|hour|1w||". Stores
	// compare it on every read; a mismatch is a miss.
	Key string
	// Topic is the canonical topic ("" for the topics list); Purge by topic
	// uses it.
	Topic string
	// Status is the upstream status stored: 200, or 404 for a negative entry.
	Status int
	// ContentType is the upstream's media type.
	ContentType string
	// Body is the upstream's full validated representation; never mutated.
	Body []byte
	// Generated is the upstream's generated time in unix seconds, 0 if
	// unknown.
	Generated int64
	// Fetched is when the gateway received the answer (zero: unknown; the
	// Cache fills it in from its clock).
	Fetched time.Time
	// FreshUntil is set by the fetcher (see Config.FreshUntil); the zero
	// time means the entry is stale from the start.
	FreshUntil time.Time
	// Derived marks an answer the gateway cut from a wider answer it held
	// (package series) instead of asking the upstream. Only the local tier
	// keeps it: read back from Redis or a snapshot it is false.
	Derived bool

	memo sync.Map // derived values: key -> *memoSlot (see memo.go)

	acctMu    sync.Mutex // guards holder, holds, memoBytes, pinnedBy, pinnedCost and every memoSlot.size
	holder    *Local     // the local tier charging the memo's bytes; nil while none holds the entry
	holds     int        // values of holder's ristretto cache that reference this entry
	memoBytes int64      // sum of the memo slots' sizes

	pins       atomic.Int32 // responses being written from the entry (Pin, Unpin)
	leaving    atomic.Bool  // set while a tier may count the entry as pinned (see Local.release)
	pinnedBy   *Local       // the tier the entry left while pinned, which still counts it; nil otherwise
	pinnedCost int64        // what pinnedBy counts for it: cost plus memo bytes
}

// Pin marks the entry as in use by a response being written; Unpin ends
// that. An entry that leaves a local tier (evicted, replaced) while pinned
// keeps counting against that tier's bound, as pinned bytes, until the last
// Unpin: its memory stays alive until then, so the tier makes room for it
// by holding less. Pin is one atomic add, Unpin one atomic add and one
// load unless the entry left while pinned; entries no tier holds are
// pinned the same way at no other cost.
func (e *Entry) Pin() { e.pins.Add(1) }

// Unpin ends one Pin. The last Unpin of an entry that left its tier while
// pinned releases the bytes the tier still counted for it. (Local.release
// sets leaving before it reads pins, and Unpin lowers pins before it reads
// leaving, so at least one of them sees the other: an entry is never left
// counted as pinned with no pins.)
func (e *Entry) Unpin() {
	if e.pins.Add(-1) == 0 && e.leaving.Load() {
		e.unpinned()
	}
}

// Counted reports whether a local tier counts the entry's bytes against
// its bound, held or pinned; an entry never stored (too large, or dropped
// by the store) is counted nowhere.
func (e *Entry) Counted() bool {
	e.acctMu.Lock()
	defer e.acctMu.Unlock()
	return e.holder != nil || e.pinnedBy != nil
}

// unpinned runs when the pin count reached zero: an entry that a tier
// counts as pinned stops being counted.
func (e *Entry) unpinned() {
	e.acctMu.Lock()
	l := e.pinnedBy
	if l == nil || e.pins.Load() != 0 { // pinned again meanwhile: the next Unpin releases
		e.acctMu.Unlock()
		return
	}
	n := e.pinnedCost
	e.pinnedBy, e.pinnedCost = nil, 0
	e.leaving.Store(false)
	e.acctMu.Unlock()
	l.pinnedBytes.Add(-n)
	l.resize()
}

// Age returns how long ago the entry was fetched, never negative; 0 when
// Fetched is unknown.
func (e *Entry) Age(now time.Time) time.Duration {
	if e.Fetched.IsZero() || now.Before(e.Fetched) {
		return 0
	}
	return now.Sub(e.Fetched)
}

// Store is one cache tier. Implementations must be safe for concurrent use.
// A Set may be silently dropped, so callers never depend on it being visible.
type Store interface {
	// Get returns the entry stored under key; an entry whose Key differs from
	// key is a miss.
	Get(ctx context.Context, key string) (*Entry, bool)
	// Set stores e under e.Key, or drops it.
	Set(ctx context.Context, e *Entry)
	// Delete removes key.
	Delete(ctx context.Context, key string)
	// Clear removes everything.
	Clear(ctx context.Context)
}

// Admitter is implemented by stores that refuse some entries (the local
// tier refuses one costing more than a set share of its bound); Cache.Get
// asks it so it can say that a fetched entry was served but not stored.
type Admitter interface {
	// Admits reports whether Set would store e.
	Admits(e *Entry) bool
}

// TopicIndex is implemented by stores that can list the keys they hold for
// one topic, which Cache.Purge needs to purge by topic. Stores without it
// cannot be purged by topic.
type TopicIndex interface {
	// TopicKeys returns the canonical keys stored for topic (a superset is
	// allowed: deleting a missing key is harmless).
	TopicKeys(ctx context.Context, topic string) []string
}

// Retainer is implemented by stores with a memory backstop (a ristretto TTL,
// a Redis PX): New tells them Config.MaxStale so the backstop never drops an
// entry that could still be served stale.
type Retainer interface {
	// SetRetention sets how long after FreshUntil an entry must be kept.
	SetRetention(maxStale time.Duration)
}

// Outcome says how a Get was answered. The zero value is Hit.
type Outcome int

// Outcomes of Cache.Get.
const (
	// Hit: a fresh entry was found.
	Hit Outcome = iota
	// Miss: the entry came from this caller's fetch or a coalesced wait on
	// one.
	Miss
	// Stale: a stale entry was served at once while a background refresh
	// runs.
	Stale
	// StaleIfError: the fetch failed and a stale entry was served instead.
	StaleIfError
)

// String returns the outcome's log name: "hit", "miss", "stale" or
// "stale-if-error".
func (o Outcome) String() string {
	switch o {
	case Hit:
		return "hit"
	case Miss:
		return "miss"
	case Stale:
		return "stale"
	case StaleIfError:
		return "stale-if-error"
	}
	return "unknown"
}

// Result is the answer of Cache.Get. The zero value has no entry.
type Result struct {
	// Entry is the entry served; never nil when Get returns a nil error.
	Entry *Entry
	// Outcome says how it was obtained.
	Outcome Outcome
	// Coalesced is true when this caller waited on another caller's fetch.
	Coalesced bool
	// Err is the fetch error behind a StaleIfError outcome, nil otherwise.
	Err error
	// TooLarge is true when a fetched entry (Outcome Miss) was served but
	// not stored, because the store refuses entries that large.
	TooLarge bool
}

// Selector chooses what Cache.Purge removes: everything when All is set,
// otherwise the entry with canonical Key (when not empty) and every entry of
// Topic (when not empty). The zero value selects nothing.
type Selector struct {
	Key, Topic string
	All        bool
}

// Class describes a request for the freshness rules of Config.FreshUntil.
// The zero value names no endpoint, which is never fresh.
type Class struct {
	// Endpoint is the operation the answer is for.
	Endpoint api.Endpoint
	// Bucket is "hour" or "day" (series only).
	Bucket string
	// End is the end of an absolute window; zero when the window reaches
	// now.
	End time.Time
	// Negative marks an unknown-topic answer (404 or empty data).
	Negative bool
	// Fresh is a configured route's fresh lifetime (EndpointRoute only).
	Fresh time.Duration
}

// ClosedAfter is how long after its end a series window counts as closed:
// its rows may still be revised (late-counted interactions) until then.
const ClosedAfter = 2 * time.Hour

// FreshUntil returns until when an answer of class cl fetched at now is
// fresh. It is pure: negative answers get TTL.Negative; list, whatsup and
// tsv their TTLs; a configured route its own Fresh; series whose window ended more than 2h before now
// TTL.SeriesClosed; daily series TTL.SeriesDay; hourly series reaching now
// the next hour boundary plus TTL.Settle, capped at now+TTL.SeriesHourMax.
// An unknown endpoint is fresh until now, i.e. never.
func (c Config) FreshUntil(cl Class, now time.Time) time.Time {
	if cl.Negative {
		return now.Add(c.TTL.Negative)
	}
	switch cl.Endpoint {
	case api.EndpointList:
		return now.Add(c.TTL.List)
	case api.EndpointWhatsup:
		return now.Add(c.TTL.Whatsup)
	case api.EndpointTSV:
		return now.Add(c.TTL.TSV)
	case api.EndpointRoute:
		return now.Add(cl.Fresh)
	case api.EndpointSeries:
		if !cl.End.IsZero() && now.Sub(cl.End) > ClosedAfter {
			return now.Add(c.TTL.SeriesClosed)
		}
		if cl.Bucket == "day" {
			return now.Add(c.TTL.SeriesDay)
		}
		boundary := now.Truncate(time.Hour).Add(time.Hour).Add(c.TTL.Settle)
		if capped := now.Add(c.TTL.SeriesHourMax); capped.Before(boundary) {
			return capped
		}
		return boundary
	}
	return now
}
