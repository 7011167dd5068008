package gateway

import (
	"context"
	"time"

	"go.uber.org/zap"
)

// lastUsedEvery is how often a cluster instance shares its keys' latest
// use (see activity.LastUsed): the resolution of last_used across
// instances, and at most one Redis script run per interval, whatever the
// traffic.
const lastUsedEvery = 30 * time.Second

// startLastUsed shares the keys' last use with share every lastUsedEvery
// until the stop it returns (a closer of the gateway's Close), which syncs
// one last time (a failure is logged, not returned).
func startLastUsed(share func(context.Context) error, log *zap.Logger) (closer func() error) {
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(lastUsedEvery)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				if err := share(context.Background()); err != nil {
					log.Warn("sharing keys' last use failed", zap.Error(err))
				}
			}
		}
	}()
	return func() error {
		close(stop)
		<-done
		// Redis being away at shutdown costs the last 30 s of last_used,
		// not a failed Close.
		if err := share(context.Background()); err != nil {
			log.Warn("sharing keys' last use at shutdown failed", zap.Error(err))
		}
		return nil
	}
}

// SyncLastUsed shares this instance's keys' latest use with the cluster
// now (it also runs every 30 s, and at Close). Without cluster mode it
// does nothing.
func (g *Gateway) SyncLastUsed(ctx context.Context) error {
	if g.lastUsed == nil {
		return nil
	}
	seen := make(map[string]time.Time)
	for id, a := range g.chain.Settings().KeyActivities() {
		if t := a.LastSeen(); !t.IsZero() { // a key never used costs nothing here
			seen[id] = t
		}
	}
	return g.lastUsed.Sync(ctx, seen)
}
