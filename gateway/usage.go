package gateway

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"trendgate/admin"
	"trendgate/config"
	"trendgate/proxy"
	"trendgate/rollup"
)

// startRollups opens the usage history (package rollup) and gives it to
// the chain: in cluster mode the hashes on rdb, shared by every instance;
// otherwise memory and, with state.path set, the file
// <state.path>.usage beside the state file (separate from it). Events are
// written every usage.flush_interval by a goroutine Close stops, after a
// last write.
func (g *Gateway) startRollups(cfg *config.Config, deps *proxy.Deps) error {
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
			return err
		}
		s = r
	} else {
		path := ""
		if cfg.State.Path != "" {
			path = cfg.State.Path + ".usage"
		}
		l, err := rollup.OpenLocal(path, cfg.Usage, g.clk, log)
		if err != nil {
			return fmt.Errorf("usage history: %w", err)
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
	g.rollups, deps.Rollups = s, s
	return nil
}

// historySource is the usage history as the admin routes read it.
type historySource struct{ g *Gateway }

var _ admin.HistorySource = historySource{}

func (h historySource) Query(ctx context.Context, q rollup.Query) ([]rollup.Series, error) {
	return h.g.rollups.Query(ctx, q)
}

func (h historySource) Oldest(now time.Time) rollup.Date { return h.g.rollups.Oldest(now) }

// KnownAccount reports whether id is an account of the configuration in
// force: a configured account, or a key without one.
func (h historySource) KnownAccount(id string) bool {
	for _, rk := range h.g.Config().ResolvedKeys() {
		if rk.Account == id {
			return true
		}
	}
	for _, a := range h.g.Config().Accounts {
		if a.ID == id {
			return true
		}
	}
	return false
}

// AccountOfKey returns the account of the configured key id.
func (h historySource) AccountOfKey(id string) (string, bool) {
	for _, rk := range h.g.Config().ResolvedKeys() {
		if rk.Key.ID == id {
			return rk.Account, true
		}
	}
	return "", false
}

// FlushUsage writes what the usage history recorded since its last write
// (to the file, or to Redis in cluster mode) now rather than at the next
// usage.flush_interval.
func (g *Gateway) FlushUsage(ctx context.Context) error {
	switch s := g.rollups.(type) {
	case *rollup.Local:
		return s.Flush()
	case *rollup.Redis:
		return s.Flush(ctx)
	}
	return nil
}
