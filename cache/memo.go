package cache

// memoSlot is one memoized value and the bytes charged for it.
type memoSlot struct {
	v    any
	size int64 // guarded by the entry's acctMu
}

// Memo returns the derived value stored under k, if any.
func (e *Entry) Memo(k any) (any, bool) {
	s, ok := e.memo.Load(k)
	if !ok {
		return nil, false
	}
	return s.(*memoSlot).v, true
}

// StoreMemo stores v under k unless a value is already there, and returns
// the value now stored (LoadOrStore semantics). size is the memory v keeps
// alive beyond the entry itself (bytes it does not share with Body, plus
// its own overhead). While a local tier holds the entry, size is charged
// against that tier's byte bound at once; when the entry and its memo would
// pass the tier's per-entry share, v is returned but not stored, so the
// caller uses it for this response only. Memo values live and die with the
// entry, and so does their charge.
func (e *Entry) StoreMemo(k, v any, size int64) (actual any) {
	s := &memoSlot{v: v}
	if prev, loaded := e.memo.LoadOrStore(k, s); loaded {
		return prev.(*memoSlot).v
	}
	if !e.charge(s, size) {
		e.memo.CompareAndDelete(k, s)
	}
	return v
}

// ReplaceMemo stores v under k in place of whatever is there (a value
// derived from an older configuration), releasing the old value's charge
// and charging size as StoreMemo does. It reports whether v is stored.
func (e *Entry) ReplaceMemo(k, v any, size int64) bool {
	s := &memoSlot{v: v}
	if prev, loaded := e.memo.Swap(k, s); loaded {
		e.uncharge(prev.(*memoSlot))
	}
	if !e.charge(s, size) {
		e.memo.CompareAndDelete(k, s)
		return false
	}
	return true
}

// GrowMemo charges n more bytes to the value stored under k, which grew
// after it was stored (a compressed copy made on first demand). It reports
// whether the value may keep them; on false the caller must not keep the
// new bytes in the value (use them for this response only).
func (e *Entry) GrowMemo(k any, n int64) bool {
	s, ok := e.memo.Load(k)
	if !ok {
		return false
	}
	return e.charge(s.(*memoSlot), n)
}

// MemoBytes returns the bytes charged for the entry's memo.
func (e *Entry) MemoBytes() int64 {
	e.acctMu.Lock()
	defer e.acctMu.Unlock()
	return e.memoBytes
}

// charge adds n bytes to slot s; while a local tier holds the entry it
// charges them there and makes room, or refuses when the entry would pass
// the tier's per-entry share.
func (e *Entry) charge(s *memoSlot, n int64) bool {
	e.acctMu.Lock()
	l := e.holder
	if l != nil && cost(e)+e.memoBytes+n > l.maxEntry {
		e.acctMu.Unlock()
		return false
	}
	s.size += n
	e.memoBytes += n
	pinned := e.pinnedBy
	if l != nil {
		l.variantBytes.Add(n)
	} else if pinned != nil { // made for a response after the entry left: alive as long as its pins
		e.pinnedCost += n
		pinned.pinnedBytes.Add(n)
	}
	e.acctMu.Unlock()
	switch { // outside acctMu: evicting takes other entries' locks
	case l != nil:
		l.makeRoom(e.Key)
	case pinned != nil:
		pinned.makeRoom("")
	}
	return true
}

// uncharge releases slot s, which left the memo.
func (e *Entry) uncharge(s *memoSlot) {
	e.acctMu.Lock()
	n := s.size
	s.size = 0
	e.memoBytes -= n
	l := e.holder
	if l == nil && e.pinnedBy != nil {
		l = e.pinnedBy
		e.pinnedCost -= n
		l.pinnedBytes.Add(-n)
	} else if l != nil {
		l.variantBytes.Add(-n)
	}
	e.acctMu.Unlock()
	if l != nil {
		l.resize()
	}
}
