// Package gctune keeps the garbage collector from running more often than
// the process's memory budget calls for.
//
// With GOGC=100 the collector's goal is twice the live heap, so a gateway
// whose live heap is a few MB (a cache still small, a hundred keys)
// collects every few MB allocated: several times a second at thousands of
// requests a second, each cycle taking CPU from requests and stretching
// the latency of those that arrive meanwhile. Its soft memory limit
// (server.memory_limit, or the one derived from cache.max_bytes) already
// budgets for garbage between cycles. A Tuner sets GOGC so that the goal
// lies a fixed headroom above the live heap, never less than GOGC=100
// gives: garbage up to headroom is allowed at any heap size, and a large
// heap is collected as before. The soft memory limit still bounds
// everything; near it the collector works harder whatever GOGC says.
package gctune

import (
	"context"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// minPercent is GOGC's default: the goal is never nearer the live heap.
const minPercent = 100

// maxPercent bounds GOGC when the live heap is tiny (at start), so that a
// burst of allocation right after it cannot run far before the first
// cycle measures the heap again.
const maxPercent = 5000

// Percent returns the GOGC that puts the heap goal headroom bytes above a
// live heap of live bytes, within [100, 5000].
func Percent(live, headroom int64) int {
	if live <= 0 {
		return maxPercent
	}
	p := headroom * 100 / live
	return int(min(max(p, minPercent), maxPercent))
}

// Tuner applies Percent at every tick.
type Tuner struct {
	// Headroom is the garbage allowed above the live heap, in bytes.
	Headroom int64
	// ReadLive returns the live heap (nil: runtime/metrics
	// /gc/heap/live:bytes, the heap marked live by the last cycle).
	ReadLive func() int64
	// Set applies a GOGC value (nil: debug.SetGCPercent).
	Set func(percent int)

	current int
}

// Step sets GOGC for the live heap now, when it differs from the value in
// force by more than a tenth (GOGC is then left as it is, sparing the
// pacer a recomputation for nothing). It returns the value in force.
func (t *Tuner) Step() int {
	p := Percent(t.readLive(), t.Headroom)
	if t.current == 0 || p*10 < t.current*9 || p*10 > t.current*11 {
		t.set(p)
		t.current = p
	}
	return t.current
}

// Run calls Step now and at every tick until ctx ends.
func (t *Tuner) Run(ctx context.Context, tick <-chan time.Time) {
	for {
		t.Step()
		select {
		case <-ctx.Done():
			return
		case <-tick:
		}
	}
}

func (t *Tuner) readLive() int64 {
	if t.ReadLive != nil {
		return t.ReadLive()
	}
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return int64(s[0].Value.Uint64())
}

func (t *Tuner) set(p int) {
	if t.Set != nil {
		t.Set(p)
		return
	}
	debug.SetGCPercent(p)
}
