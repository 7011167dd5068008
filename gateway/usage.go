package gateway

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"trendgate/admin"
	"trendgate/config"
	"trendgate/console"
	"trendgate/proxy"
	"trendgate/rollup"
)

// openHistory opens the usage history (package rollup) of g and gives
// it to the chain: in cluster mode the hashes on g's Redis, shared by every
// instance; otherwise memory and, with state.path set, the file
// <state.path>.usage beside the state file (separate from it). Events are
// written every usage.flush_interval by a goroutine that g's closers stop,
// after a last write.
func openHistory(g *Gateway, cfg *config.Config, deps *proxy.Deps) (*History, error) {
	type runner interface {
		rollup.Store
		Run(ctx context.Context, tick <-chan time.Time)
		FlushInterval() time.Duration
	}
	var s runner
	log := g.log.Named("usage")
	if g.keysRedis != nil {
		r, err := rollup.NewRedis(g.keysRedis, cfg.Redis.Prefix, cfg.Usage, g.clk, log)
		if err != nil {
			return nil, err
		}
		s = r
	} else {
		path := ""
		if cfg.State.Path != "" {
			path = cfg.State.Path + ".usage"
		}
		l, err := rollup.OpenLocal(path, cfg.Usage, g.clk, log)
		if err != nil {
			return nil, fmt.Errorf("usage history: %w", err)
		}
		g.closers = append(g.closers, func() error {
			if err := l.Close(); err != nil {
				log.Error("usage rollups: closing the file failed", zap.Error(err))
			}
			return nil
		})
		s = l
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t := time.NewTicker(s.FlushInterval())
	go func() {
		defer close(done)
		s.Run(ctx, t.C)
	}()
	// Appended after the Local's Close, so it runs before it (closers run
	// last first): the loop's last flush, then the file's.
	g.closers = append(g.closers, func() error {
		cancel()
		<-done
		t.Stop()
		return nil
	})
	deps.Rollups = s
	return &History{store: s}, nil // its console is set once built
}

// History is a gateway's usage history as the admin routes read it: the
// rollup store, with names checked against the console's index of the
// keys and accounts in force.
type History struct {
	store   rollup.Store
	console *console.Console
}

var _ admin.HistorySource = (*History)(nil)

// Query reads the rollups q selects.
func (h *History) Query(ctx context.Context, q rollup.Query) ([]rollup.Series, error) {
	return h.store.Query(ctx, q)
}

// Oldest is the first day kept at now.
func (h *History) Oldest(now time.Time) rollup.Date { return h.store.Oldest(now) }

// KnownAccount reports whether id is an account in force: a configured
// account, or a key without one (a lookup in the console's index).
func (h *History) KnownAccount(id string) bool { return h.console.KnownAccount(id) }

// AccountOfKey returns the account of the key id in force.
func (h *History) AccountOfKey(id string) (string, bool) { return h.console.AccountOfKey(id) }

// Flush writes what the usage history recorded since its last write (to
// the file, or to Redis in cluster mode) now rather than at the next
// usage.flush_interval.
func (h *History) Flush(ctx context.Context) error {
	switch s := h.store.(type) {
	case *rollup.Local:
		return s.Flush()
	case *rollup.Redis:
		return s.Flush(ctx)
	}
	return nil
}

// History is the gateway's usage history.
func (g *Gateway) History() *History { return g.history }
