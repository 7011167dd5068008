package gateway

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"trendgate/activity"
	"trendgate/config"
	"trendgate/internal/clock"
	"trendgate/internal/redisconn"
	"trendgate/limits"
	"trendgate/proxy"
	"trendgate/state"
)

// keeper is where the quota counters and the keys' usage outlive a
// restart: the state file (state.path), or in cluster mode the counters'
// Redis, whose persistence it reads once at start.
type keeper struct {
	log      *zap.Logger
	clk      clock.Clock
	reg      prometheus.Registerer
	settings func() *proxy.Settings // the settings in force
	usage    func() *activity.Keys  // the keys' 24 h counters, kept across reloads
	cluster  bool                   // cluster mode (at start): the counters are Redis's
	// store keeps quota counters and usage across restarts; nil with
	// state.path empty. redisKeeps is what the counters' Redis keeps on
	// disk, read once at start in cluster mode.
	store      *state.Store
	unlock     func() error // the state file's lock (see state.Lock)
	once       sync.Once    // lets go of it once
	redisKeeps string
}

// open loads state.path (off when empty) before the gateway serves:
// the local limiter's quota counters (not in cluster mode, where Redis
// keeps them) and each configured key's 24-hour usage and last use. It
// then writes the file once, whole, so a path that cannot be written stops
// the start rather than a crash later (and a file of the earlier whole-file
// format, or one ending in a torn record, is replaced by a whole journal),
// and starts the store, which the limiter then waits on before reserving
// past what is stored (limits.Keeper).
//
// A damaged file (truncated, corrupted) is never used in part. With
// state.on_damage refuse (the default) the start fails with a message
// naming the command that moves the file aside; with spent the file is
// moved aside (kept for inspection) and every subject starts the current
// day and month with its quotas used up, so nothing unreadable is forgiven.
func (s *keeper) open(cfg *config.Config, local *limits.Local) (err error) {
	sc := cfg.State
	if sc.Path == "" {
		return nil
	}
	unlock, err := state.Lock(sc.Path)
	if err != nil {
		return fmt.Errorf("state.path: %w", err)
	}
	defer func() {
		if err != nil {
			_ = unlock()
		}
	}()
	log := s.log.Named("state")
	m := state.NewMetrics(s.reg)
	if cfg.ClusterMode() {
		local = nil // the counters are Redis's; the local limiter is only its fallback
	}
	now := s.clk.Now()
	snap, info, err := state.LoadInfo(sc.Path)
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
		usage := s.settings().KeyActivities()
		for id, rec := range snap.Usage {
			if k := usage[id]; k != nil {
				k.Restore(rec, now)
			}
		}
		log.Info("state loaded", zap.String("path", sc.Path), zap.Time("written", snap.Written),
			zap.Int("quota_subjects", restored), zap.Int("keys_with_usage", len(snap.Usage)),
			zap.Int("format_version", info.Version), zap.Int("records", info.Records), zap.Int("bytes", info.Bytes))
		if info.Torn > 0 {
			log.Warn("state file ended in a record a crash cut short; it was dropped",
				zap.String("path", sc.Path), zap.Int("torn_bytes", info.Torn))
		}
	}

	opts := state.Options{
		Path:     sc.Path,
		Interval: sc.FlushInterval,
		Usage:    s.usage(),
		Clock:    s.clk,
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
	s.store, s.unlock = store, unlock
	return nil
}

// close writes the exact state a last time and stops the store (a
// clean stop loses nothing), then lets go of the file's lock, so a new
// gateway may take it over. Serve calls it once the listeners have
// drained; Close calls it too, and the second call does nothing.
func (s *keeper) close() {
	if s.store == nil {
		return
	}
	if err := s.store.Close(); err != nil {
		s.log.Named("state").Error("last state write failed; the next start finds the previous flush", zap.Error(err))
	}
	s.once.Do(func() { _ = s.unlock() })
}

// checkRedis asks the counters' Redis what it keeps on disk,
// once at start, and says so in the log and in /readyz's details. Quotas
// on a Redis that keeps nothing are reset by its restart: that is a
// warning. A Redis that refuses CONFIG GET (managed services often do)
// is reported as unknown.
func (s *keeper) checkRedis(cfg *config.Config, rdb redis.UniversalClient) {
	ctx, cancel := context.WithTimeout(context.Background(), redisconn.StartupTimeout)
	defer cancel()
	p := limits.ReadPersistence(ctx, rdb)
	s.redisKeeps = p.Keeps()
	log := s.log.Named("redis")
	switch {
	case p.KeepsNothing() && cfg.QuotasConfigured():
		log.Warn("quotas are kept in a Redis that keeps nothing on disk (appendonly no, save \"\"): "+
			"a restart of that Redis resets every daily and monthly quota to zero; "+
			"turn on appendonly (see docs/restarts.md)", zap.String("redis_persistence", s.redisKeeps))
	case !p.Known:
		log.Info("redis persistence unknown: quotas survive a Redis restart only if it keeps them on disk",
			zap.String("redis_persistence", s.redisKeeps))
	default:
		log.Info("redis persistence", zap.String("redis_persistence", s.redisKeeps))
	}
}

// readyDetails says, in /readyz, where the quota counters live and so what
// a restart does to them.
func (s *keeper) readyDetails() map[string]string {
	d := map[string]string{}
	switch {
	case s.cluster:
		d["quota_counters"] = "redis"
		d["redis_persistence"] = s.redisKeeps
	case s.store != nil:
		d["quota_counters"] = "state file"
	default:
		d["quota_counters"] = "memory (a restart resets them)"
	}
	return d
}
