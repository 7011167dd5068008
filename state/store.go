package state

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"trendgate/activity"
	"trendgate/internal/clock"
	"trendgate/limits"
)

// ErrClosed is returned by Sync once the Store is closed.
var ErrClosed = errors.New("state: store closed")

// Counters is the limiter whose quota counters a Store keeps
// (*limits.Local).
type Counters interface {
	Checkpoint(now time.Time, reserve bool) []limits.Counter
	Commit(cs []limits.Counter)
}

var (
	_ Counters      = (*limits.Local)(nil)
	_ limits.Keeper = (*Store)(nil)
)

// Options are a Store's parts. Usage returns the per-key counters to keep
// (the configured keys'); nil keeps none. Counters nil keeps no quota
// counters. A nil Clock is clock.Real{}, a nil Logger zap.NewNop(), nil
// Metrics an unregistered set.
type Options struct {
	Path     string
	Interval time.Duration
	Counters Counters
	Usage    func() map[string]*activity.Key
	Clock    clock.Clock
	Logger   *zap.Logger
	Metrics  *Metrics
}

// Store writes the state file every interval, whenever Sync asks, and a
// last time on Close. Build it with New, start it with Start.
type Store struct {
	o    Options
	kick chan struct{} // a flush is wanted now; capacity 1
	stop chan struct{} // closed by Close
	done chan struct{} // closed when the loop has returned

	mu      sync.Mutex   // guards waiters, started and closed
	waiters []chan error // Sync calls the next flush answers
	started bool
	closed  bool

	flushMu sync.Mutex // serializes flushes: the loop's and Close's last one
}

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
	return &Store{o: o, kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
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
		case <-s.kick:
		}
		s.flush(true)
	}
}

// Sync implements limits.Keeper: it asks for a flush now and returns once
// a checkpoint taken after the call is stored and committed, with the
// error of that flush, or ctx's.
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
	default: // a flush is already asked for; it takes the waiter too
	}
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Flush writes the state now, with quota reservations ahead (as the loop
// does). Tests and the loop use it.
func (s *Store) Flush() error { return s.flush(true) }

// flush takes a checkpoint and writes it: with reserve, the limiter's
// counters raised by their reservations, committed as ceilings once
// stored; without, the exact counts. It answers the Sync calls made before
// the checkpoint was taken.
func (s *Store) flush(reserve bool) error {
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	s.mu.Lock()
	waiters := s.waiters
	s.waiters = nil
	s.mu.Unlock()

	now := s.o.Clock.Now()
	snap := Snapshot{Written: now}
	if s.o.Counters != nil {
		snap.Counters = s.o.Counters.Checkpoint(now, reserve)
	}
	if s.o.Usage != nil {
		keys := s.o.Usage()
		snap.Usage = make(map[string]activity.KeyRecord, len(keys))
		for id, k := range keys {
			if rec := k.Export(now); !rec.LastSeen.IsZero() || len(rec.Cells) > 0 || len(rec.Hours) > 0 {
				snap.Usage[id] = rec
			}
		}
	}
	n, err := write(s.o.Path, snap)
	if err == nil && s.o.Counters != nil {
		s.o.Counters.Commit(snap.Counters)
	}
	s.o.Metrics.flushed(now, n, err)
	if err != nil {
		s.o.Logger.Error("state not written: quota counters written ahead keep their last ceiling, "+
			"and requests that need more are admitted past it until a write succeeds",
			zap.String("path", s.o.Path), zap.Error(err))
	}
	for _, w := range waiters {
		w <- err
	}
	return err
}

// Close stops the loop and writes the exact state a last time (no
// reservation ahead: a clean stop loses nothing and charges nothing
// unused). Call it once nothing is admitted any more (after the drain).
// Sync calls then return ErrClosed.
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
	err := s.flush(false)
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
	// Flushes counts writes by result (ok, error).
	Flushes *prometheus.CounterVec
	// LastFlush is the time of the latest successful write (unix seconds).
	LastFlush prometheus.Gauge
	// Bytes is the size of the latest file written.
	Bytes prometheus.Gauge
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
			Name: "trendgate_state_last_flush_timestamp_seconds", Help: "Time of the latest successful state file write.",
		}),
		Bytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "trendgate_state_bytes", Help: "Size of the latest state file written.",
		}),
		Loads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trendgate_state_loads_total", Help: "State files read at start by result (ok, missing, damaged).",
		}, []string{"result"}),
	}
	if reg != nil {
		reg.MustRegister(m.Flushes, m.LastFlush, m.Bytes, m.Loads)
	}
	return m
}

func (m *Metrics) flushed(now time.Time, n int, err error) {
	if err != nil {
		m.Flushes.WithLabelValues("error").Inc()
		return
	}
	m.Flushes.WithLabelValues("ok").Inc()
	m.LastFlush.Set(float64(now.UnixNano()) / 1e9)
	m.Bytes.Set(float64(n))
}
