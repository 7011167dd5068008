// Package activity keeps recent traffic figures for the operator's console:
// per-key requests and quota units over the last 24 hours, and the
// gateway-wide request rates by outcome, latency quantiles, upstream calls,
// top topics and recent refusals.
//
// Recording never takes a lock and, once a figure's counters exist, never
// allocates on the path of a cache hit: every figure lives in fixed arrays
// of atomic counters (a key's are allocated by its first use, hour slot by
// hour slot: see Key), each tagged
// with the time slot (second, ten seconds, minute or hour) it counts, so a
// counter that belongs to an expired slot is restarted by the first write
// of the new slot (one compare-and-swap) and ignored by readers. Readers add
// up the slots of the window they report; a figure is exact for the slots
// it keeps, and writes arriving after their slot was reused are dropped.
// Time comes from the caller (an injected clock), never from time.Now.
package activity

import "sync/atomic"

// countBits is the width of the count in a tagged counter; the slot tag
// takes the upper 64-countBits bits. A count wraps past 2^32 (4.29e9) per
// slot, and tags (seconds since 1970 at the finest) fit until 2106.
const countBits = 32

const countMask = 1<<countBits - 1

// tagged is a counter that belongs to one time slot. The zero value is an
// empty counter of slot 0.
type tagged struct{ v atomic.Uint64 }

// add adds n to the counter for slot tag, restarting it when it still
// holds an older slot. A write for a slot older than the one held is
// dropped.
func (c *tagged) add(tag uint64, n uint64) {
	for {
		old := c.v.Load()
		held := old >> countBits
		var next uint64
		switch {
		case held == tag:
			next = old + n
		case held < tag:
			next = tag<<countBits | n&countMask
		default:
			return
		}
		if c.v.CompareAndSwap(old, next) {
			return
		}
	}
}

// get returns the count held for slot tag, 0 when the counter holds
// another slot.
func (c *tagged) get(tag uint64) uint64 {
	v := c.v.Load()
	if v>>countBits != tag {
		return 0
	}
	return v & countMask
}
