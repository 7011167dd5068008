package cache

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// An entry that leaves the tier while a response is still being written
// from it keeps counting against the bound, with the memo values made for
// it, until the last Unpin; the tier holds less meanwhile.
func TestPinnedEntryCountsUntilUnpinned(t *testing.T) {
	const maxBytes = 64 << 10
	l := newLocal(t, maxBytes, nil)
	es := fillLocal(t, l, 10)
	e := es[0]
	if !held(l, e) {
		t.Fatal("the first entry is not held")
	}
	e.StoreMemo(memoKey("v"), "variant", 500)
	want := cost(e) + 500

	e.Pin()
	e.Pin() // two responses
	l.Delete(context.Background(), e.Key)
	l.Wait()
	if got := l.PinnedBytes(); got != want {
		t.Fatalf("PinnedBytes after the pinned entry left = %d; want %d (cost plus memo)", got, want)
	}
	if got := l.rc.MaxCost(); got != maxBytes-l.VariantBytes()-want {
		t.Errorf("ristretto bound = %d; want %d (max_bytes less memo and pinned bytes)", got, maxBytes-l.VariantBytes()-want)
	}
	// A value made for a response after the entry left lives as long.
	e.StoreMemo(memoKey("late"), "late variant", 300)
	if got := l.PinnedBytes(); got != want+300 {
		t.Errorf("PinnedBytes after a memo value made while pinned = %d; want %d", got, want+300)
	}
	e.Unpin()
	if got := l.PinnedBytes(); got != want+300 {
		t.Errorf("PinnedBytes with one response left = %d; want %d", got, want+300)
	}
	e.Unpin()
	if got := l.PinnedBytes(); got != 0 {
		t.Errorf("PinnedBytes after the last Unpin = %d; want 0", got)
	}
	if got := l.rc.MaxCost(); got != maxBytes-l.VariantBytes() {
		t.Errorf("ristretto bound after the last Unpin = %d; want %d", got, maxBytes-l.VariantBytes())
	}
}

// An entry that leaves unpinned, or is unpinned before it leaves, is never
// counted as pinned.
func TestUnpinnedEntryLeavesFreely(t *testing.T) {
	l := newLocal(t, 64<<10, nil)
	es := fillLocal(t, l, 3)
	es[0].Pin()
	es[0].Unpin()
	l.Delete(context.Background(), es[0].Key)
	l.Delete(context.Background(), es[1].Key)
	l.Wait()
	if got := l.PinnedBytes(); got != 0 {
		t.Errorf("PinnedBytes = %d; want 0", got)
	}
}

// Pinned bytes make the tier hold less: with pinned entries taking half
// the bound, the entries held and the pinned bytes together stay within
// MaxBytes when more entries arrive.
func TestPinnedBytesKeepBound(t *testing.T) {
	const maxBytes = 64 << 10
	l := newLocal(t, maxBytes, nil)
	es := fillLocal(t, l, 60) // about 1.3 KB each: more than fits
	var pinned []*Entry
	for _, e := range es {
		if held(l, e) && len(pinned) < 24 {
			e.Pin()
			pinned = append(pinned, e)
		}
	}
	for _, e := range pinned {
		l.Delete(context.Background(), e.Key)
	}
	l.Wait()
	if l.PinnedBytes() == 0 {
		t.Fatal("no pinned bytes after deleting pinned entries")
	}
	for i := range 200 {
		l.Set(context.Background(), entry(fmt.Sprintf("v2|whatsup|new%d||||", i), fmt.Sprintf("new%d", i), t0, time.Hour, strings.Repeat("y", 1000)))
	}
	l.Wait()
	if got := l.Bytes() + l.PinnedBytes(); got > maxBytes {
		t.Errorf("held %d + pinned %d = %d; want at most %d", l.Bytes(), l.PinnedBytes(), got, maxBytes)
	}
	for _, e := range pinned {
		e.Unpin()
	}
	if got := l.PinnedBytes(); got != 0 {
		t.Errorf("PinnedBytes after every Unpin = %d; want 0", got)
	}
}

// An entry set again while it is counted as pinned is held, not pinned:
// its bytes are counted once.
func TestPinnedEntryHeldAgain(t *testing.T) {
	l := newLocal(t, 64<<10, nil)
	e := fillLocal(t, l, 1)[0]
	e.Pin()
	l.Delete(context.Background(), e.Key)
	l.Wait()
	if l.PinnedBytes() == 0 {
		t.Fatal("not counted as pinned after leaving")
	}
	l.Set(context.Background(), e)
	if got := l.PinnedBytes(); got != 0 {
		t.Errorf("PinnedBytes after the entry is held again = %d; want 0", got)
	}
	e.Unpin()
	if got := l.PinnedBytes(); got != 0 {
		t.Errorf("PinnedBytes after Unpin = %d; want 0", got)
	}
}

// An answer the tier did not keep (here: larger than its per-entry share)
// counts as pinned while a response is written from it, and the tier
// holds less meanwhile.
func TestCountPinnedUnheldEntry(t *testing.T) {
	const maxBytes = 64 << 10
	l := newLocal(t, maxBytes, nil)
	fillLocal(t, l, 60)
	big := entry("v2|whatsup|big||||", "big", t0, time.Hour, strings.Repeat("z", 12<<10))
	if l.Admits(big) {
		t.Fatal("the big entry is admitted; the test needs one that is not")
	}
	l.CountPinned(big) // not pinned: nothing to count
	if got := l.PinnedBytes(); got != 0 {
		t.Fatalf("PinnedBytes for an unpinned entry = %d; want 0", got)
	}
	big.Pin()
	l.CountPinned(big)
	l.CountPinned(big) // a coalesced waiter: counted once
	if got, want := l.PinnedBytes(), cost(big); got != want {
		t.Fatalf("PinnedBytes = %d; want %d", got, want)
	}
	if got := l.Bytes() + l.PinnedBytes(); got > maxBytes {
		t.Errorf("held %d + pinned %d = %d; want at most %d", l.Bytes(), l.PinnedBytes(), got, maxBytes)
	}
	big.Unpin()
	if got := l.PinnedBytes(); got != 0 {
		t.Errorf("PinnedBytes after Unpin = %d; want 0", got)
	}
	held := fillLocal(t, l, 1)[0]
	held.Pin()
	l.CountPinned(held) // held: counted as held only
	if got := l.PinnedBytes(); got != 0 {
		t.Errorf("PinnedBytes for a held entry = %d; want 0", got)
	}
	held.Unpin()
}
