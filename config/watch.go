package config

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"time"

	"go.uber.org/zap"
)

// Watcher reloads a configuration file when it changes or when asked to.
// It polls the file's modification time and size every interval and, when
// either moved, compares a SHA-256 of the content, so a touched but
// unchanged file does not reload; it does not use fsnotify. Build one with
// NewWatcher; the zero value is not usable.
type Watcher struct {
	path     string
	interval time.Duration // <= 0: no polling, only Trigger
	log      *zap.Logger
	onChange func(*Config, error)
	trigger  chan struct{} // buffered (1): a pending Trigger

	// The fields below are owned by the goroutine running Run (and by
	// NewWatcher before Run starts); nothing else touches them.
	stamp fileStamp // what the last check saw
}

// fileStamp identifies one version of the file.
type fileStamp struct {
	modTime int64 // UnixNano
	size    int64
	sum     [sha256.Size]byte
	readErr string // non-empty when the file could not be read
}

// NewWatcher returns a Watcher for the file at path. It reads the file now
// to remember its current version, which the caller is expected to have
// loaded already, so only later changes are reported.
//
// Run calls onChange with the newly parsed configuration, or with nil and
// the error when the changed file cannot be read or is invalid; the caller
// keeps its old configuration then, and reports the outcome itself (once:
// the watcher does not log it too). With onChange nil the watcher only
// logs each outcome. An interval <= 0 turns polling off, leaving Trigger
// as the only way to reload. A nil log logs nothing.
func NewWatcher(path string, interval time.Duration, log *zap.Logger, onChange func(*Config, error)) *Watcher {
	if log == nil {
		log = zap.NewNop()
	}
	if onChange == nil {
		onChange = func(*Config, error) {}
	} else {
		log = zap.NewNop() // onChange reports outcomes
	}
	w := &Watcher{
		path:     path,
		interval: interval,
		log:      log.Named("config"),
		onChange: onChange,
		trigger:  make(chan struct{}, 1),
	}
	w.stamp, _, _ = readStamp(path)
	return w
}

// Trigger asks Run to reload the file now and to call onChange even if the
// file did not change (SIGHUP). It never blocks; triggers that arrive while
// one is pending are merged. A Trigger made before Run starts is handled
// when it starts.
func (w *Watcher) Trigger() {
	select {
	case w.trigger <- struct{}{}:
	default:
	}
}

// Run checks the file every interval and on each Trigger until ctx is
// done, calling onChange from its own goroutine. The caller owns that
// goroutine: it starts Run and stops it by cancelling ctx. Run must not be
// called twice at once.
func (w *Watcher) Run(ctx context.Context) {
	var tick <-chan time.Time
	if w.interval > 0 {
		t := time.NewTicker(w.interval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick:
			w.check(false)
		case <-w.trigger:
			w.check(true)
		}
	}
}

// check reloads the file when it changed, or always when forced.
func (w *Watcher) check(force bool) {
	if !force {
		fi, err := os.Stat(w.path)
		if err == nil && w.stamp.readErr == "" && fi.ModTime().UnixNano() == w.stamp.modTime && fi.Size() == w.stamp.size {
			return
		}
	}
	stamp, data, err := readStamp(w.path)
	changed := stamp.sum != w.stamp.sum || stamp.readErr != w.stamp.readErr
	w.stamp = stamp
	if !changed && !force {
		return
	}
	var cfg *Config
	if err == nil {
		cfg, err = parseFile(w.path, data)
	}
	if err != nil {
		w.log.Warn("config file not reloaded; keeping the current configuration", zap.String("path", w.path), zap.Error(err))
		w.onChange(nil, err)
		return
	}
	w.log.Info("config reloaded", zap.String("path", w.path), zap.Bool("forced", force), zap.Bool("changed", changed))
	w.onChange(cfg, nil)
}

// readStamp stats and reads the file at path. A file that cannot be read
// gets a stamp holding only the error text, so the same failure is
// reported once, not on every poll.
func readStamp(path string) (fileStamp, []byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{readErr: err.Error()}, nil, fmt.Errorf("config: %w", err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return fileStamp{readErr: err.Error()}, nil, fmt.Errorf("config: %w", err)
	}
	return fileStamp{modTime: fi.ModTime().UnixNano(), size: fi.Size(), sum: sha256.Sum256(data)}, data, nil
}
