package proxy

import (
	"errors"
	"fmt"
	"io/fs"

	"go.uber.org/zap"

	"trendgate/activity"
	"trendgate/config"
	"trendgate/limits"
	"trendgate/state"
)

// openState loads state.path (off when empty) before the gateway serves:
// the local limiter's quota counters (not in cluster mode, where Redis
// keeps them) and each configured key's 24-hour usage and last use. It
// then writes the file once, so a path that cannot be written stops the
// start rather than a crash later, and starts the store, which the limiter
// then waits on before reserving past what is stored (limits.Keeper).
//
// A damaged file (truncated, corrupted) is never used in part. With
// state.on_damage refuse (the default) the start fails with a message
// naming the command that moves the file aside; with spent the file is
// moved aside (kept for inspection) and every subject starts the current
// day and month with its quotas used up, so nothing unreadable is forgiven.
func (g *Gateway) openState(cfg *config.Config, local *limits.Local) error {
	sc := cfg.State
	if sc.Path == "" {
		return nil
	}
	log := g.log.Named("state")
	m := state.NewMetrics(g.reg)
	if cfg.ClusterMode() {
		local = nil // the counters are Redis's; the local limiter is only its fallback
	}
	now := g.clk.Now()
	snap, err := state.Load(sc.Path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		m.Loads.WithLabelValues("missing").Inc()
		log.Info("no state file yet; quota counters and usage start from zero", zap.String("path", sc.Path))
	case errors.Is(err, state.ErrDamaged):
		m.Loads.WithLabelValues("damaged").Inc()
		if sc.OnDamage != state.OnDamageSpent {
			log.Error("state file damaged; refusing to start", zap.String("path", sc.Path), zap.Error(err))
			return fmt.Errorf("%w; refusing to start rather than reset what customers used: "+
				"run `trendgate state reset -config <file>` to move it aside and start from zero, "+
				"or set state.on_damage: spent to start with today's and this month's quotas used up", err)
		}
		aside, rerr := state.Reset(sc.Path, now)
		if rerr != nil {
			return fmt.Errorf("%w; and it could not be moved aside: %w", err, rerr)
		}
		if local != nil {
			local.PresumeSpent(now)
		}
		log.Error("state file damaged; starting with every quota of today and this month spent (state.on_damage: spent)",
			zap.String("path", sc.Path), zap.String("moved_to", aside), zap.Error(err))
	case err != nil:
		return err
	default:
		m.Loads.WithLabelValues("ok").Inc()
		restored := 0
		if local != nil {
			restored = local.Restore(snap.Counters, now)
		}
		usage := g.rt.Load().usage
		for id, rec := range snap.Usage {
			if k := usage[id]; k != nil {
				k.Restore(rec, now)
			}
		}
		log.Info("state loaded", zap.String("path", sc.Path), zap.Time("written", snap.Written),
			zap.Int("quota_subjects", restored), zap.Int("keys_with_usage", len(snap.Usage)))
	}

	opts := state.Options{
		Path:     sc.Path,
		Interval: sc.FlushInterval,
		Usage:    func() map[string]*activity.Key { return g.rt.Load().usage },
		Clock:    g.clk,
		Logger:   log,
		Metrics:  m,
	}
	if local != nil {
		opts.Counters = local
	}
	store := state.New(opts)
	if err := store.Flush(); err != nil {
		return fmt.Errorf("state.path: %w", err)
	}
	if local != nil {
		local.SetKeeper(store)
	}
	store.Start()
	g.state = store
	return nil
}

// closeState writes the exact state a last time and stops the store (a
// clean stop loses nothing). Serve calls it once the listeners have
// drained; Close calls it too, and the second call does nothing.
func (g *Gateway) closeState() {
	if g.state == nil {
		return
	}
	if err := g.state.Close(); err != nil {
		g.log.Named("state").Error("last state write failed; the next start finds the previous flush", zap.Error(err))
	}
}
