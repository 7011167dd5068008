package state

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"trendgate/activity"
	"trendgate/internal/atomicfile"
	"trendgate/internal/clock"
	"trendgate/limits"
)

// ErrClosed is returned by Sync once the Store is closed.
var ErrClosed = errors.New("state: store closed")

// Counters is the limiter whose quota counters a Store keeps
// (*limits.Local).
type Counters interface {
	Checkpoint(now time.Time, reserve bool) []limits.Counter
	CheckpointAll(now time.Time) []limits.Counter
	PeekAll(now time.Time) []limits.Counter
	Commit(cs []limits.Counter)
}

var (
	_ Counters      = (*limits.Local)(nil)
	_ limits.Keeper = (*Store)(nil)
)

// Options are a Store's parts. Usage is the per-key counters to keep (the
// configured keys'); nil keeps none. Counters nil keeps no quota
// counters. A nil Clock is clock.Real{}, a nil Logger zap.NewNop(), nil
// Metrics an unregistered set.
type Options struct {
	Path     string
	Interval time.Duration
	Counters Counters
	Usage    *activity.Keys
	Clock    clock.Clock
	Logger   *zap.Logger
	Metrics  *Metrics
}

// Store keeps the state file. Every interval it appends one record of what
// changed (the accounts whose counters changed, the keys counted since),
// or nothing when nothing did; when Sync asks, one record of the changed
// counters, shared by every Sync waiting then; and once the records
// appended since the latest whole write outgrow it (at least compactAfter
// bytes), a whole new file in place of the old one (a compaction), as at
// the first write and at Close. Build it with New, start it with Start.
//
// The interval's compaction runs beside the appends: its snapshot is taken
// under flushMu, then written and synced under a temporary name without
// it, while records go on being appended to the old file (and kept); the
// new file, those records appended, replaces the old one under flushMu.
// So a Sync during a compaction waits for one small record, not for the
// whole file (about 0.5 s at 100,000 keys).
type Store struct {
	o    Options
	kick chan struct{} // a flush is wanted now; capacity 1
	stop chan struct{} // closed by Close
	done chan struct{} // closed when the loop has returned

	mu      sync.Mutex   // guards waiters, started and closed
	waiters []chan error // Sync calls the next flush answers
	started bool
	closed  bool

	flushMu sync.Mutex // serializes flushes (the loop's, Flush's and Close's) and guards the fields below
	f       *os.File   // the file, open for appending; nil until a whole write
	size    int64      // the file's size
	base    int64      // its size after the latest whole write
	whole   bool       // the next write replaces the file whole: the first, and any after a failure
	// compactAt is the least the journal grows past its latest whole
	// write before it is compacted (compactAfter; tests lower it).
	compactAt int64
	// compacting is the compaction running beside the appends; nil when
	// none. compactDone is closed when it has ended.
	compacting  *compaction
	compactDone chan struct{}
	// beforeSwap, when set (tests), runs in a compaction after its new
	// file is written and before it takes flushMu to swap the files.
	beforeSwap func()
}

// compaction is a whole write running beside the appends.
type compaction struct {
	file     *atomicfile.Pending // the new file, its snapshot written by the compaction's goroutine
	snap     Snapshot
	now      time.Time
	tail     []byte          // the records appended to the old file since the snapshot, in order
	accounts map[string]bool // the accounts checkpointed since the snapshot, stored or not
}

// compactAfter is the least a journal grows past its latest whole write
// before it is compacted: below it, a whole write would cost more than the
// records it drops.
const compactAfter = 1 << 20

// New returns a Store for opts; it writes nothing until Start or Close.
func New(o Options) *Store {
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.Interval <= 0 {
		o.Interval = DefaultFlushInterval
	}
	if o.Metrics == nil {
		o.Metrics = NewMetrics(nil)
	}
	return &Store{o: o, kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}), whole: true, compactAt: compactAfter}
}

// Start runs the flush loop until Close.
func (s *Store) Start() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started || s.closed {
		return
	}
	s.started = true
	go s.loop()
}

func (s *Store) loop() {
	defer close(s.done)
	t := time.NewTicker(s.o.Interval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			_ = s.flush(writeTick)
		case <-s.kick:
			_ = s.flush(writeSync)
		}
	}
}

// Sync implements limits.Keeper: it asks for a write now and returns once
// a checkpoint taken after the call is stored and committed, with the
// error of that write, or ctx's. Every Sync waiting when a write starts
// shares it: one record appended and one fsync (a whole write only when
// the previous one failed).
func (s *Store) Sync(ctx context.Context) error {
	ch := make(chan error, 1)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	s.waiters = append(s.waiters, ch)
	s.mu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default: // a write is already asked for; it takes the waiter too
	}
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Flush replaces the state file whole now, with quota reservations ahead
// (a compaction), after any compaction running. The gateway calls it once
// before serving, so that a path that cannot be written stops the start and
// an older or torn file is replaced by a whole one.
func (s *Store) Flush() error { return s.flush(writeWhole) }

// A write is one of these.
type writeKind int

const (
	// writeTick appends the changed counters and keys' usage, compacting
	// once the journal has grown enough; nothing changed writes nothing.
	writeTick writeKind = iota
	// writeSync appends the changed counters only: the write a request
	// waiting for a higher ceiling needs, kept small.
	writeSync
	// writeWhole replaces the file with a snapshot, reserving ahead.
	writeWhole
	// writeLast replaces the file with the exact state of a clean stop.
	writeLast
)

// flush takes a checkpoint and stores it as kind says. Counters stored are
// committed as ceilings (limits.Local.Commit). It answers the Sync calls
// made before the checkpoint was taken. A whole write waits for a
// compaction running to end first; an interval's write that finds the
// journal grown starts one, after appending its record.
func (s *Store) flush(kind writeKind) error {
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	for (kind >= writeWhole || s.whole) && s.compacting != nil {
		done := s.compactDone
		s.flushMu.Unlock()
		<-done
		s.flushMu.Lock()
	}
	s.mu.Lock()
	waiters := s.waiters
	s.waiters = nil
	s.mu.Unlock()

	now := s.o.Clock.Now()
	if s.whole {
		kind = max(kind, writeWhole)
	}
	var n int
	var err error
	if kind >= writeWhole {
		n, err = s.writeWhole(now, kind == writeWhole)
	} else {
		n, err = s.appendChanges(now, kind == writeTick)
	}
	s.report(now, n, err)
	for _, w := range waiters {
		w <- err
	}
	if err == nil && kind == writeTick && s.compacting == nil && s.size-s.base > max(s.compactAt, s.base) {
		s.startCompaction(now)
	}
	return err
}

// report counts a write in the metrics and logs its failure.
func (s *Store) report(now time.Time, n int, err error) {
	s.o.Metrics.flushed(now, n, s.size, err)
	if err != nil {
		s.o.Logger.Error("state not written: quota counters written ahead keep their last ceiling, "+
			"and requests that need more are admitted past it until a write succeeds",
			zap.String("path", s.o.Path), zap.Error(err))
	}
}

// snapshot takes the checkpoint of a whole write: every account's counters
// (reserved ahead, or exact for a clean stop) and every key's usage.
// flushMu must be held.
func (s *Store) snapshot(now time.Time, reserve bool) Snapshot {
	snap := Snapshot{Written: now}
	if s.o.Counters != nil {
		if reserve {
			snap.Counters = s.o.Counters.CheckpointAll(now)
		} else {
			snap.Counters = s.o.Counters.Checkpoint(now, false)
		}
	}
	if s.o.Usage != nil {
		snap.Usage = export(s.o.Usage.TakeAll(), now) // this write holds every change
	}
	return snap
}

// export returns the usage records of keys at now, leaving out the keys
// with nothing to store.
func export(keys map[string]*activity.Key, now time.Time) map[string]activity.KeyRecord {
	out := make(map[string]activity.KeyRecord, len(keys))
	for id, k := range keys {
		if rec := k.Export(now); !rec.LastSeen.IsZero() || len(rec.Cells) > 0 || len(rec.Hours) > 0 {
			out[id] = rec
		}
	}
	return out
}

// startCompaction takes a compaction's checkpoint (every account's
// counters, reserved ahead, and every key with its changes taken) and
// writes its snapshot in a goroutine of its own. flushMu must be held.
//
// The counters are peeked (limits.Local.PeekAll), not checkpointed: a
// checkpoint would clear a waiting request's need and its account's
// change, so the record appended for its Sync would not hold the account,
// and the request would have to ask for a second write.
//
// The keys' usage is exported by the goroutine, after the checkpoint: a
// key counted meanwhile may be stored with counts newer than a record
// appended after the snapshot holds, but that count marked the key
// changed again, so a later record stores it anew.
func (s *Store) startCompaction(now time.Time) {
	file, err := atomicfile.Create(s.o.Path, 0o600)
	if err != nil {
		s.report(now, 0, fmt.Errorf("state: compaction: %w", err)) // the journal stays as it is; the next interval tries again
		return
	}
	c := &compaction{file: file, snap: Snapshot{Written: now}, now: now, accounts: make(map[string]bool)}
	if s.o.Counters != nil {
		c.snap.Counters = s.o.Counters.PeekAll(now)
	}
	var keys map[string]*activity.Key
	if s.o.Usage != nil {
		keys = s.o.Usage.TakeAll()
	}
	done := make(chan struct{})
	s.compacting, s.compactDone = c, done
	go func() {
		defer close(done)
		if keys != nil {
			c.snap.Usage = export(keys, now)
		}
		s.compact(c)
	}()
}

// compact writes and syncs c's snapshot, then, under flushMu, appends the
// records appended to the old file meanwhile and puts the new file in its
// place. Its counters are committed but for the accounts checkpointed
// after it: the records stored theirs, committed already, which are the
// file's; a record that failed left theirs as they were, at most what the
// file holds, and its accounts' resets are not undone. A failure
// leaves the old file, which holds every record, and makes the next
// write a whole one (the snapshot took every key's usage change).
func (s *Store) compact(c *compaction) {
	b := encode(c.snap)
	_, err := c.file.Write(b)
	if err == nil {
		err = c.file.Sync()
	}
	if s.beforeSwap != nil {
		s.beforeSwap()
	}
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	s.compacting = nil
	if err == nil {
		_, err = c.file.Write(c.tail)
	}
	if err != nil {
		c.file.Abort()
	} else {
		err = c.file.Commit() // the new file is in place unless this failed before the rename
	}
	if err != nil {
		if s.f != nil {
			_ = s.f.Close()
			s.f = nil
		}
		s.whole = true
		s.report(c.now, 0, fmt.Errorf("state: compaction: %w", err))
		return
	}
	if s.o.Counters != nil {
		kept := c.snap.Counters[:0:0]
		for _, ct := range c.snap.Counters {
			if !c.accounts[ct.Subject] {
				kept = append(kept, ct)
			}
		}
		s.o.Counters.Commit(kept)
	}
	_ = s.f.Close()
	s.f = nil
	s.size, s.base = int64(len(b)+len(c.tail)), int64(len(b))
	f, err := os.OpenFile(s.o.Path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		s.whole = true
		err = fmt.Errorf("state: open for appending: %w", err)
	} else {
		s.f = f
	}
	s.report(c.now, len(b), err)
}

// awaitCompaction returns once no compaction is running.
func (s *Store) awaitCompaction() {
	s.flushMu.Lock()
	done := s.compactDone
	s.flushMu.Unlock()
	if done != nil {
		<-done
	}
}

// writeWhole replaces the file with one snapshot of everything: every
// account's counters (reserved ahead, or exact for a clean stop) and every
// key's usage. It returns the bytes written. flushMu must be held.
func (s *Store) writeWhole(now time.Time, reserve bool) (int, error) {
	snap := s.snapshot(now, reserve)
	if s.f != nil {
		_ = s.f.Close()
		s.f = nil
	}
	s.whole = true
	n, err := write(s.o.Path, snap)
	if err != nil {
		return 0, err
	}
	if s.o.Counters != nil {
		s.o.Counters.Commit(snap.Counters) // stored, whatever happens to the append handle
	}
	s.size, s.base = int64(n), int64(n)
	f, err := os.OpenFile(s.o.Path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return n, fmt.Errorf("state: open for appending: %w", err)
	}
	s.f, s.whole = f, false
	return n, nil
}

// appendChanges appends one record of the accounts whose counters changed
// since the previous checkpoint and, with usage, of the keys counted since
// the previous write, synced before the counters are committed; nothing
// changed appends nothing. After a failure the file may end in part of a
// record, so the next write replaces it whole. flushMu must be held.
func (s *Store) appendChanges(now time.Time, usage bool) (int, error) {
	rec := Snapshot{Written: now}
	if s.o.Counters != nil {
		rec.Counters = s.o.Counters.Checkpoint(now, true)
	}
	if usage && s.o.Usage != nil {
		for id, k := range s.o.Usage.TakeChanged() {
			if rec.Usage == nil {
				rec.Usage = make(map[string]activity.KeyRecord)
			}
			rec.Usage[id] = k.Export(now)
		}
	}
	if len(rec.Counters) == 0 && len(rec.Usage) == 0 {
		return 0, nil
	}
	if c := s.compacting; c != nil {
		// The compaction commits none of these accounts' snapshot
		// counters: this checkpoint is later, whether or not its record
		// is stored (a failed one has cleared their window resets).
		for _, ct := range rec.Counters {
			c.accounts[ct.Subject] = true
		}
	}
	b := appendRecord(nil, kindChanges, rec)
	if _, err := s.f.Write(b); err != nil {
		s.whole = true
		return 0, fmt.Errorf("state: append: %w", err)
	}
	if err := s.f.Sync(); err != nil {
		s.whole = true
		return 0, fmt.Errorf("state: append: %w", err)
	}
	s.size += int64(len(b))
	if c := s.compacting; c != nil { // the new file gets it too
		c.tail = append(c.tail, b...)
	}
	if s.o.Counters != nil {
		s.o.Counters.Commit(rec.Counters)
	}
	return len(b), nil
}

// Close stops the loop and replaces the file a last time with the exact
// state (no reservation ahead: a clean stop loses nothing and charges
// nothing unused). Call it once nothing is admitted any more (after the
// drain). Sync calls then return ErrClosed.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	started := s.started
	s.mu.Unlock()
	close(s.stop)
	if started {
		<-s.done
	}
	err := s.flush(writeLast) // after the compaction running, if any
	s.flushMu.Lock()
	if s.f != nil {
		_ = s.f.Close()
		s.f = nil
	}
	s.flushMu.Unlock()
	s.mu.Lock()
	waiters := s.waiters
	s.waiters = nil
	s.mu.Unlock()
	for _, w := range waiters {
		w <- ErrClosed
	}
	return err
}

// Metrics are the state file's collectors.
type Metrics struct {
	// Flushes counts writes by result (ok, error); a check that finds
	// nothing changed writes nothing and is not counted.
	Flushes *prometheus.CounterVec
	// LastFlush is when the file was last known to hold the current state
	// (unix seconds): a write, or a check that found nothing to write.
	LastFlush prometheus.Gauge
	// Bytes is the file's size after the latest write.
	Bytes prometheus.Gauge
	// Written counts the bytes written: records appended and whole files.
	Written prometheus.Counter
	// Loads counts the state files read at start by result: ok, missing
	// (a first start), damaged (truncated or corrupted: see on_damage).
	Loads *prometheus.CounterVec
}

// NewMetrics builds the collectors and registers them with reg (nil: not
// registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Flushes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trendgate_state_flushes_total", Help: "State file writes by result (ok, error).",
		}, []string{"result"}),
		LastFlush: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "trendgate_state_last_flush_timestamp_seconds",
			Help: "When the state file was last known to hold the current state (a write, or nothing to write).",
		}),
		Bytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "trendgate_state_bytes", Help: "Size of the state file after the latest write.",
		}),
		Written: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "trendgate_state_written_bytes_total", Help: "Bytes written to the state file (records appended and whole rewrites).",
		}),
		Loads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trendgate_state_loads_total", Help: "State files read at start by result (ok, missing, damaged).",
		}, []string{"result"}),
	}
	if reg != nil {
		reg.MustRegister(m.Flushes, m.LastFlush, m.Bytes, m.Written, m.Loads)
	}
	return m
}

// flushed records one flush at now that wrote n bytes (0: nothing had
// changed), leaving the file at size.
func (m *Metrics) flushed(now time.Time, n int, size int64, err error) {
	if err != nil {
		m.Flushes.WithLabelValues("error").Inc()
		return
	}
	m.LastFlush.Set(float64(now.UnixNano()) / 1e9)
	if n == 0 {
		return
	}
	m.Flushes.WithLabelValues("ok").Inc()
	m.Written.Add(float64(n))
	m.Bytes.Set(float64(size))
}
