package gateway

import (
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"trendgate/api"
	"trendgate/cache"
	"trendgate/internal/clock"
	"trendgate/proxy"
	"trendgate/upstream"
)

// snapshots saves the local cache tier to cache.persist_path when the
// process drains and loads it when it starts (see docs/restarts.md).
type snapshots struct {
	log *zap.Logger
	clk clock.Clock
	// local is the in-process cache tier; nil: nothing to save or load.
	local *cache.Local
	// persist is the cache configuration at start, whose persist_path
	// and persist_max_bytes a reload does not change.
	persist cache.Config
	// origin ties the snapshot to upstream.base_url (at start); key
	// authenticates it (cache.persist_key_env; nil: off).
	origin string
	key    []byte
	// purgeBus tells whether the cluster purged while this instance was
	// down; nil without cluster mode.
	purgeBus *cache.PurgeBus
	// settings returns the settings in force.
	settings func() *proxy.Settings
}

// load fills the local cache tier from cache.persist_path (off when
// empty) before the gateway serves. Nothing about the file is fatal: a
// missing file is a cold start, and a foreign, corrupt or truncated one is
// logged, left in place for inspection (the next drain replaces it) and
// ignored. A file that loads is removed, so a crash later cannot bring
// back entries purged since; the next drain writes a new one.
func (s *snapshots) load(cc cache.Config) {
	path := cc.PersistPath
	if path == "" || s.local == nil {
		return
	}
	log := s.log.Named("cache")
	origin, ok := s.snapshotOrigin()
	if !ok {
		log.Warn("cache snapshot not loaded: the cluster's purge generation is unknown (Redis unreachable), "+
			"so purges made while this instance was down cannot be ruled out; starting cold", zap.String("path", path))
		return
	}
	stats, err := s.local.LoadSnapshot(path, cache.SnapshotOptions{
		MaxBytes:   cc.PersistBound(),
		MaxStale:   cc.MaxStale,
		Now:        s.clk.Now(),
		Origin:     origin,
		Revalidate: s.revalidate,
		Key:        s.key,
		ParseKey:   s.settings().Routes().ParseKey,
	})
	switch {
	case errors.Is(err, fs.ErrNotExist):
		log.Info("no cache snapshot to load; starting cold", zap.String("path", path))
		return
	case err != nil:
		log.Warn("cache snapshot ignored; starting cold", zap.String("path", path), zap.Error(err))
		return
	}
	log.Info("cache snapshot loaded", zap.String("path", path), zap.Int("entries", stats.Entries),
		zap.Int64("bytes", stats.Bytes), zap.Any("dropped", stats.Dropped))
	if err := os.Remove(path); err != nil {
		log.Warn("cache snapshot loaded but not removed", zap.String("path", path), zap.Error(err))
	}
}

// save writes the local tier to cache.persist_path (as it was at
// start; off when empty). Serve calls it while draining, once the
// listeners have stopped and background refreshes have ended. A failure is
// logged: the gateway then simply starts cold next time.
func (s *snapshots) save() {
	path := s.persist.PersistPath
	if path == "" || s.local == nil {
		return
	}
	log := s.log.Named("cache")
	origin, _ := s.snapshotOrigin() // unknown: saved under an origin no load matches
	stats, err := s.local.SaveSnapshot(path, cache.SnapshotOptions{
		MaxBytes: s.persist.PersistBound(),
		MaxStale: s.settings().Config().Cache.MaxStale,
		Now:      s.clk.Now(),
		Origin:   origin,
		Key:      s.key,
	})
	if err != nil {
		log.Error("cache snapshot not written; the next start will be cold", zap.String("path", path), zap.Error(err))
		return
	}
	log.Info("cache snapshot written", zap.String("path", path), zap.Int("entries", stats.Entries),
		zap.Int64("bytes", stats.Bytes), zap.Any("dropped", stats.Dropped))
}

// snapshotOrigin is the Origin of the cache snapshot: the upstream and,
// in cluster mode, the purge generation, so that a snapshot saved before a
// purge made by another instance (while this one was down) is not loaded.
// ok is false in cluster mode while the generation is unknown (Redis
// unreachable): a snapshot is then saved under an origin no load matches,
// and none is loaded.
func (s *snapshots) snapshotOrigin() (origin string, ok bool) {
	if s.purgeBus == nil {
		return s.origin, true
	}
	gen, ok := s.purgeBus.Generation()
	if !ok {
		return s.origin + "|purge generation unknown", false
	}
	return s.origin + "|purge generation " + strconv.FormatInt(gen, 10), true
}

// revalidate is the snapshot's judge of each entry (cache.SnapshotOptions.
// Revalidate): the file's checksums catch accidents, not edits, so nothing
// it says about an entry is taken on trust. A 200 body must pass the
// upstream validation again and, where the body echoes its request
// (config.topic, config.bucket), match the entry's key; a 404 carries no
// body. Freshness is today's configuration applied to the entry's fetch
// time, whatever the file stored.
func (s *snapshots) revalidate(e *cache.Entry, q api.Request) (time.Time, error) {
	negative := e.Status == http.StatusNotFound
	switch e.Status {
	case http.StatusNotFound:
		if len(e.Body) != 0 {
			return time.Time{}, errors.New("a 404 entry with a body")
		}
	default:
		chk, err := upstream.CheckBody(q.Endpoint, e.Body)
		if err != nil {
			return time.Time{}, err
		}
		if chk.Topic != "" && !strings.EqualFold(chk.Topic, q.Topic) {
			return time.Time{}, fmt.Errorf("body answers topic %q, key is for %q", chk.Topic, q.Topic)
		}
		if chk.Bucket != "" && q.Endpoint == api.EndpointSeries && chk.Bucket != q.Bucket {
			return time.Time{}, fmt.Errorf("body has bucket %q, key is for %q", chk.Bucket, q.Bucket)
		}
		if chk.Generated != 0 && e.Generated != 0 && chk.Generated != e.Generated {
			return time.Time{}, errors.New("generated time differs from the body's")
		}
		negative = chk.Empty
	}
	return s.settings().FreshUntil(q, negative, e.Fetched), nil
}

// minPersistKey is the shortest key cache.persist_key_env may hold.
const minPersistKey = 32

// persistKeyFrom reads the snapshot's HMAC key from the environment
// variable cache.persist_key_env names (nil when it names none).
func persistKeyFrom(cc cache.Config, getenv func(string) string) ([]byte, error) {
	if cc.PersistKeyEnv == "" {
		return nil, nil
	}
	k := getenv(cc.PersistKeyEnv)
	if len(k) < minPersistKey {
		return nil, fmt.Errorf("cache.persist_key_env: $%s is unset or shorter than %d bytes", cc.PersistKeyEnv, minPersistKey)
	}
	return []byte(k), nil
}
