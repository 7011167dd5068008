package rollup

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"trendgate/api"
	"trendgate/internal/clock"
)

// Local keeps the rollups in memory and, with a path, in an append-only
// file of their own (file.go): each Flush appends what was recorded since
// the last one as one checksummed record, and the file is rewritten whole
// (compacted) when days fall out of the retention or when it has grown to
// twice what it holds. Build it with OpenLocal; it is safe for concurrent
// use.
type Local struct {
	clk  clock.Clock
	log  *zap.Logger
	cfg  Config
	path string // "" keeps the rollups in memory only

	flushMu sync.Mutex  // serializes Flush and Close; guards w
	w       *fileWriter // nil without a path

	mu sync.Mutex // guards the fields below
	// all is every kept row; pending is what was recorded since the last
	// Flush (deltas), written by the next.
	all     table
	pending table
	oldest  Date // the first day all may hold; older rows are dropped on compaction
	// byAccount indexes all's rows by account, so that reading one
	// account holds mu only for that account's rows.
	byAccount map[string]map[rowKey]*row
}

// OpenLocal loads the rollups file at path (none yet is an empty history;
// a torn or damaged tail is dropped and logged) and returns the store.
// Days older than the retention are dropped, and the file compacted, at
// once. path "" keeps the rollups in memory only.
func OpenLocal(path string, cfg Config, clk clock.Clock, log *zap.Logger) (*Local, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("rollup: %w", err)
	}
	if clk == nil {
		clk = clock.Real{}
	}
	if log == nil {
		log = zap.NewNop()
	}
	l := &Local{clk: clk, log: log, cfg: cfg.withDefaults(), path: path, all: newTable(), pending: newTable(),
		byAccount: map[string]map[rowKey]*row{}}
	if path == "" {
		return l, nil
	}
	res, err := readFile(path, l.all)
	if err != nil {
		return nil, err
	}
	for k, r := range l.all.rows {
		l.indexLocked(k, r)
	}
	if res.dropped > 0 {
		log.Warn("usage rollups file: a torn or damaged tail was dropped",
			zap.String("path", path), zap.Int64("kept_bytes", res.good), zap.Int64("dropped_bytes", res.dropped))
	}
	l.w = res.writer
	l.oldest = l.Oldest(clk.Now())
	// Always rewrite at start: it drops expired days and a damaged tail,
	// and starts the file's dictionary afresh.
	b, strs := l.encodeAllLocked()
	if err := l.install(b, strs); err != nil {
		return nil, err
	}
	return l, nil
}

// Oldest is the first day kept at now.
func (l *Local) Oldest(now time.Time) Date { return oldest(DateOf(now), l.cfg.RetentionDays) }

// Retention returns the days kept.
func (l *Local) Retention() int { return l.cfg.RetentionDays }

// Record adds e in memory; the next Flush writes it.
func (l *Local) Record(e Event) {
	if e.Key == "" {
		return
	}
	e.Account = api.AccountOf(e.Key, e.Account)
	today := DateOf(l.clk.Now())
	day := landing(e.Day, today)
	k := rowKey{day, e.Account, e.Key}
	l.mu.Lock()
	r := l.all.rows[k]
	if r == nil {
		r = l.all.put(k)
		l.indexLocked(k, r)
	}
	r.add(&e)
	if l.path != "" {
		l.pending.add(day, &e)
	}
	l.mu.Unlock()
}

// Flush appends what was recorded since the last Flush to the file (one
// record, synced) and compacts the file when a day fell out of the
// retention or it doubled. It writes nothing when nothing was recorded.
// Record is not held up by the write: only taking the recorded rows (or,
// to compact, encoding every row) happens under the lock Record takes.
func (l *Local) Flush() error {
	l.flushMu.Lock()
	defer l.flushMu.Unlock()
	if l.w == nil {
		return nil
	}
	l.mu.Lock()
	if o := l.Oldest(l.clk.Now()); o > l.oldest || l.w.broken || l.w.size > 2*l.w.base+1<<20 {
		l.oldest = max(o, l.oldest)
		b, strs := l.encodeAllLocked()
		l.mu.Unlock()
		return l.install(b, strs)
	}
	pending := l.pending
	l.pending = newTable()
	l.mu.Unlock()
	if len(pending.rows) == 0 {
		return nil
	}
	if err := l.w.append(pending.rows); err != nil {
		// The file's state is unknown after a failed write: the next
		// Flush rewrites it whole from memory, which holds everything.
		return fmt.Errorf("rollup: write %s: %w (rewriting it whole next)", l.path, err)
	}
	return nil
}

// encodeAllLocked drops rows older than l.oldest and encodes the rest as
// a whole file; what was pending is in it. l.mu is held.
func (l *Local) encodeAllLocked() ([]byte, map[string]uint64) {
	for k := range l.all.rows {
		if k.day < l.oldest {
			delete(l.all.rows, k)
			if m := l.byAccount[k.account]; m != nil {
				delete(m, k)
				if len(m) == 0 {
					delete(l.byAccount, k.account)
				}
			}
		}
	}
	l.pending = newTable()
	return encodeFile(l.all.rows)
}

// install replaces the file with b (see encodeAllLocked). l.flushMu is
// held.
func (l *Local) install(b []byte, strs map[string]uint64) error {
	w, err := installFile(l.path, l.w, b, strs)
	if err != nil {
		if l.w != nil {
			l.w.broken = true // try again at the next Flush
		}
		return fmt.Errorf("rollup: compact %s: %w", l.path, err)
	}
	l.w = w
	return nil
}

// Run flushes every flush interval until ctx ends, then flushes once
// more. Errors are logged; what failed is written by a later flush.
func (l *Local) Run(ctx context.Context, tick <-chan time.Time) {
	for {
		select {
		case <-ctx.Done():
			if err := l.Flush(); err != nil {
				l.log.Error("usage rollups: last flush failed", zap.Error(err))
			}
			return
		case <-tick:
			if err := l.Flush(); err != nil {
				l.log.Error("usage rollups: flush failed", zap.Error(err))
			}
		}
	}
}

// FlushInterval is the configured interval between flushes.
func (l *Local) FlushInterval() time.Duration { return l.cfg.FlushInterval }

// Close flushes and closes the file.
func (l *Local) Close() error {
	err := l.Flush()
	l.flushMu.Lock()
	defer l.flushMu.Unlock()
	if l.w != nil {
		err = errors.Join(err, l.w.f.Close())
		l.w = nil
	}
	return err
}

// Query reads the rollups q selects from memory.
func (l *Local) Query(_ context.Context, q Query) ([]Series, error) {
	if q.From > q.To {
		return nil, ErrRange
	}
	accounts := []string{q.Account}
	if q.Account == "" {
		l.mu.Lock()
		accounts = make([]string, 0, len(l.byAccount))
		for a := range l.byAccount {
			accounts = append(accounts, a)
		}
		l.mu.Unlock()
		accounts = q.page(accounts)
	}
	var out []Series
	for _, a := range accounts {
		out = append(out, l.queryAccount(a, q)...)
	}
	return out, nil
}

// queryAccount reads the rows of account that q selects, holding mu for
// that account's rows only.
func (l *Local) queryAccount(account string, q Query) []Series {
	l.mu.Lock()
	defer l.mu.Unlock()
	return collect(func(yield func(rowKey, *row)) {
		for k, r := range l.byAccount[account] {
			if k.day < q.From || k.day > q.To || (q.Key != "" && k.key != q.Key) {
				continue
			}
			yield(k, r)
		}
	}, q.Key != "")
}

// indexLocked adds the row r of k to byAccount. l.mu is held.
func (l *Local) indexLocked(k rowKey, r *row) {
	m := l.byAccount[k.account]
	if m == nil {
		m = map[rowKey]*row{}
		l.byAccount[k.account] = m
	}
	m[k] = r
}

// FileSize is the rollups file's size in bytes (0 without a file).
func (l *Local) FileSize() int64 {
	l.flushMu.Lock()
	defer l.flushMu.Unlock()
	if l.w == nil {
		return 0
	}
	return l.w.size
}
