package console

import (
	"container/heap"
	"context"
	"math"
	"sync"
	"sync/atomic"

	"trendgate/api"
	"trendgate/limits"
)

// topQuota keeps the accounts that have used the largest share of a quota,
// as the admissions of this instance report them, in a bounded min-heap:
// the summary's top lists and the quota gauges start from it instead of
// reading every key. It holds at most topQuotaSize accounts, a few times
// the lists' length, or as many as the gauges ask for (hold), so
// an account that falls out and comes back is seen again by its next
// admission.
//
// Within a window an account's share only grows (a refund gives back one
// request's units), so an account whose share beats the smallest held
// always gets in, and one that does not could not be in the lists; what it
// holds are candidates, whose figures the summary reads again. When the day
// or month changes, shares held for the window that ended are dropped to
// what is left of them (the other window's), and the heap is reordered.
// In cluster mode it sees this instance's admissions only (each reporting
// the account's shared figures), so an account charged only through other
// instances is missing from this instance's lists until it is charged here.
type topQuota struct {
	// floor is the smallest share held while the heap is full, as
	// math.Float64bits; 0 while it has room. An admission whose share is
	// not above it returns without the lock: the hot path's common case.
	floor atomic.Uint64
	// win is windowKey(day, month), for the same fast path: an admission
	// of other windows takes the lock.
	win atomic.Int64

	mu         sync.Mutex          // guards entries, heap, size, day and month
	entries    map[string]*topItem // account id → its place in heap
	heap       topHeap
	size       int // how many accounts it holds at most; 0: topQuotaSize
	day, month int // the newest windows seen (YYYYMMDD, YYYYMM)
}

// topQuotaSize bounds topQuota unless hold asks for more: four times the
// lists' length.
const topQuotaSize = 4 * topN

// hold lets t hold at least n accounts from now on: the quota gauges rank
// the metrics.max_accounts accounts (and the detail ones) from it. It never
// shrinks.
func (t *topQuota) hold(n int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n > t.sizeLocked() {
		t.size = n
		t.setFloorLocked()
	}
}

// sizeLocked is how many accounts t holds at most. t.mu must be held.
func (t *topQuota) sizeLocked() int { return max(t.size, topQuotaSize) }

// topItem is one account's latest share of its quotas.
type topItem struct {
	account    string
	key        string // the key of its latest admission
	day, month int    // the windows of dayPct and monthPct
	dayPct     float64
	monthPct   float64
	share      float64 // max(dayPct, monthPct): the heap's order
	place      int     // in the heap
}

// observe wraps a limiter so that every admission it grants is noted.
func (t *topQuota) observe(next limits.Limiter) limits.Limiter {
	return &topObserver{next: next, top: t}
}

// note records an admission's standing: d's remaining units against its
// policy's quotas.
func (t *topQuota) note(s limits.Subject, d limits.Decision) {
	p := d.Policy
	if p.Daily <= 0 && p.Monthly <= 0 {
		return // no quota: the lists take such accounts by id, not from here
	}
	var dayPct, monthPct float64
	if p.Daily > 0 {
		dayPct = 100 * float64(p.Daily-d.DailyRemaining) / float64(p.Daily)
	}
	if p.Monthly > 0 {
		monthPct = 100 * float64(p.Monthly-d.MonthlyRemaining) / float64(p.Monthly)
	}
	share := max(dayPct, monthPct)
	if f := t.floor.Load(); f != 0 && share <= math.Float64frombits(f) && t.win.Load() == windowKey(d.Day, d.Month) {
		return
	}
	account := api.AccountOf(s.Key, s.Account)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.entries == nil {
		t.entries = make(map[string]*topItem, topQuotaSize)
	}
	if d.Day > t.day || d.Month > t.month {
		t.rollLocked(max(d.Day, t.day), max(d.Month, t.month))
	}
	it := t.entries[account]
	switch {
	case it != nil:
	case len(t.heap) < t.sizeLocked():
		it = &topItem{account: account}
		t.entries[account] = it
		heap.Push(&t.heap, it)
	case share > t.heap[0].share:
		it = t.heap[0]
		delete(t.entries, it.account)
		it.account = account
		t.entries[account] = it
	default:
		return
	}
	it.key, it.day, it.month, it.dayPct, it.monthPct, it.share = s.Key, d.Day, d.Month, dayPct, monthPct, share
	heap.Fix(&t.heap, it.place)
	t.setFloorLocked()
}

// windowKey packs a day and a month into one comparable number.
func windowKey(day, month int) int64 { return int64(day)*1_000_000 + int64(month) }

// rollLocked moves to the windows day and month: shares held for older
// windows drop to zero. t.mu must be held.
func (t *topQuota) rollLocked(day, month int) {
	t.day, t.month = day, month
	t.win.Store(windowKey(day, month))
	for _, it := range t.heap {
		if it.day != day {
			it.dayPct = 0
		}
		if it.month != month {
			it.monthPct = 0
		}
		it.share = max(it.dayPct, it.monthPct)
	}
	heap.Init(&t.heap)
	t.setFloorLocked()
}

// setFloorLocked publishes the smallest share held once the heap is full.
// t.mu must be held.
func (t *topQuota) setFloorLocked() {
	if len(t.heap) < t.sizeLocked() {
		t.floor.Store(0)
		return
	}
	// A share of exactly 0 is stored as the smallest positive float, so
	// that 0 keeps meaning "room left".
	t.floor.Store(math.Float64bits(max(t.heap[0].share, math.SmallestNonzeroFloat64)))
}

// candidates returns the accounts held, each with the key of its latest
// admission.
func (t *topQuota) candidates() map[string]string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]string, len(t.heap))
	for _, it := range t.heap {
		out[it.account] = it.key
	}
	return out
}

// topHeap is a min-heap of items by share.
type topHeap []*topItem

func (h topHeap) Len() int           { return len(h) }
func (h topHeap) Less(i, j int) bool { return h[i].share < h[j].share }
func (h topHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].place, h[j].place = i, j
}
func (h *topHeap) Push(x any) {
	it := x.(*topItem)
	it.place = len(*h)
	*h = append(*h, it)
}
func (h *topHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	*h = old[:len(old)-1]
	return it
}

// topObserver is a limiter that tells topQuota of every admission granted.
type topObserver struct {
	next limits.Limiter
	top  *topQuota
}

var _ limits.Limiter = (*topObserver)(nil)

// Admit implements limits.Limiter.
func (o *topObserver) Admit(ctx context.Context, s limits.Subject, p limits.Policy, cost int) (limits.Decision, error) {
	d, err := o.next.Admit(ctx, s, p, cost)
	if err == nil && d.Allowed {
		o.top.note(s, d)
	}
	return d, err
}

// Refund implements limits.Limiter.
func (o *topObserver) Refund(ctx context.Context, s limits.Subject, d limits.Decision) error {
	return o.next.Refund(ctx, s, d)
}
