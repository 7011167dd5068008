package keystore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"trendgate/internal/redisconn"
)

// In cluster mode the Doc lives in two Redis hashes that share a hash tag
// (one slot of a Redis Cluster): "<prefix>{keys}:doc" holds the version
// and a snapshot of the Doc at some version (snap, snap_version), and
// "<prefix>{keys}:log" one field per edit since, named by the version it
// made, holding its Patch. An edit stores its patch and the new version
// in one script, if the version is still the one it was made against;
// another instance's poll sees the version move and reads the patches
// it lacks. Every compactEvery patches the instance whose edit reached
// that many folds them into a new snapshot; an instance too far behind
// (or finding a patch gone) reads the snapshot and the patches after it.

// redisKeys are the names of the two hashes.
type redisKeys struct {
	doc, log string
}

func newRedisKeys(prefix string) redisKeys {
	return redisKeys{doc: prefix + "{keys}:doc", log: prefix + "{keys}:log"}
}

// sharedTTL is how long Redis keeps the shared Doc after its last edit.
// Like every key trendgate writes, it expires; every instance holds the
// Doc in memory (and in keys_file) and writes it back at its next poll
// once Redis has lost it (see Poll), so an expiry costs nothing.
const sharedTTL = 30 * 24 * time.Hour

// recordScript stores an edit: if the version is ARGV[1], it sets it to
// ARGV[2], stores the patch ARGV[3] under field ARGV[2] of the log and
// answers -1; else it answers the version. ARGV[4] is the TTL in ms.
var recordScript = redis.NewScript(`
local v = tonumber(redis.call('HGET', KEYS[1], 'version') or '0')
if v ~= tonumber(ARGV[1]) then return v end
redis.call('HSET', KEYS[1], 'version', ARGV[2])
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
redis.call('PEXPIRE', KEYS[2], ARGV[4])
return -1
`)

// snapshotScript stores a whole Doc: if the version is ARGV[1], it
// replaces both hashes with the snapshot ARGV[3] at version ARGV[2] and
// answers -1; else it answers the version. ARGV[4] is the TTL in ms.
var snapshotScript = redis.NewScript(`
local v = tonumber(redis.call('HGET', KEYS[1], 'version') or '0')
if v ~= tonumber(ARGV[1]) then return v end
redis.call('DEL', KEYS[1], KEYS[2])
redis.call('HSET', KEYS[1], 'version', ARGV[2], 'snap', ARGV[3], 'snap_version', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return -1
`)

// putRecord stores p, made against version from; it reports whether it
// did. A command that fails (a timeout may still have run it) is followed
// by a read of what the log holds at p's version, so that the answer is
// true: stored, not stored, or, when Redis cannot say, an error that
// says the outcome is not known.
func (s *Store) putRecord(ctx context.Context, from int64, p *Patch) (bool, error) {
	b, err := json.Marshal(p)
	if err != nil {
		return false, err
	}
	cctx, cancel := context.WithTimeout(ctx, s.o.Timeout)
	n, err := recordScript.Run(cctx, s.o.Redis, []string{s.keys.doc, s.keys.log}, from, p.Version, b, sharedTTL.Milliseconds()).Int64()
	cancel()
	if err == nil {
		return n == -1, nil
	}
	// A fresh deadline: ctx may be what ran out.
	vctx, vcancel := context.WithTimeout(context.Background(), s.o.Timeout)
	defer vcancel()
	got, verr := s.o.Redis.HGet(vctx, s.keys.log, versionString(p.Version)).Result()
	switch {
	case verr == nil && got == string(b):
		return true, nil
	case verr == nil || errors.Is(verr, redis.Nil):
		return false, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return false, fmt.Errorf("%w: %v; whether the change was stored is not known (it was not applied here; "+
		"if it was stored, every instance applies it within a second: check with GET /keys/{id})", ErrUnavailable, err)
}

// putSnapshot stores d whole if Redis still holds version from; it
// reports whether it did.
func (s *Store) putSnapshot(ctx context.Context, from int64, d *Doc) (bool, error) {
	b, err := json.Marshal(d)
	if err != nil {
		return false, err
	}
	ctx, cancel := context.WithTimeout(ctx, max(s.o.Timeout, redisconn.SnapshotTimeout))
	defer cancel()
	n, err := snapshotScript.Run(ctx, s.o.Redis, []string{s.keys.doc, s.keys.log}, from, d.Version, b, sharedTTL.Milliseconds()).Int64()
	if err != nil {
		return false, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return n == -1, nil
}

// compactShared folds the log into a new snapshot once it holds
// compactEvery patches after the snapshot. It runs after an edit was
// stored and answered for; a failure only leaves the log longer.
func (s *Store) compactShared(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.o.Timeout)
	sv, err := s.o.Redis.HGet(ctx, s.keys.doc, "snap_version").Int64()
	cancel()
	if err != nil && !errors.Is(err, redis.Nil) {
		return
	}
	if s.doc.Version-sv < compactEvery {
		return
	}
	d := s.doc.prune(s.o.Base(), s.o.Clock.Now(), s.o.Retention)
	if _, err := s.putSnapshot(context.WithoutCancel(ctx), s.doc.Version, d); err != nil {
		s.o.Log.Warn("keys: folding the shared keys' log into a snapshot failed; it is tried again after the next change", zap.Error(err))
	}
}

func (s *Store) remoteVersion(ctx context.Context) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, s.o.Timeout)
	defer cancel()
	v, err := s.o.Redis.HGet(ctx, s.keys.doc, "version").Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return v, nil
}

// fetch reads the Doc at version v (or newer) from Redis: the patches
// after the Doc in force when the log has them all, else the snapshot and
// the patches after it. ps are the patches from the Doc in force, nil
// when the snapshot was read.
func (s *Store) fetch(ctx context.Context, v int64) (*Doc, []*Patch, error) {
	if v-s.doc.Version <= compactEvery {
		ps, err := s.patches(ctx, s.doc.Version, v)
		if err != nil {
			return nil, nil, err
		}
		if ps != nil {
			d := s.doc.clone()
			r := newReplay(d)
			for _, p := range ps {
				r.apply(p)
			}
			return d, ps, nil
		}
	}
	ctx, cancel := context.WithTimeout(ctx, max(s.o.Timeout, redisconn.SnapshotTimeout))
	defer cancel()
	vals, err := s.o.Redis.HMGet(ctx, s.keys.doc, "version", "snap", "snap_version", "doc").Result()
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	snap, _ := vals[1].(string)
	if snap == "" {
		snap, _ = vals[3].(string) // written before the log: the Doc whole
	}
	d, err := decodeDoc([]byte(snap))
	if err != nil {
		return nil, nil, fmt.Errorf("keys: the shared keys in Redis (%s) do not parse: %w", s.keys.doc, err)
	}
	vs, _ := vals[0].(string)
	top, _ := strconv.ParseInt(vs, 10, 64)
	if top > d.Version {
		ps, err := s.patches(ctx, d.Version, top)
		if err != nil {
			return nil, nil, err
		}
		if ps == nil {
			return nil, nil, fmt.Errorf("%w: the shared keys' log changed while it was read; the next poll reads it again", ErrUnavailable)
		}
		r := newReplay(d)
		for _, p := range ps {
			r.apply(p)
		}
	}
	return d, nil, nil
}

// patches reads the patches of versions from+1 to to; nil (and no error)
// when the log lacks one of them.
func (s *Store) patches(ctx context.Context, from, to int64) ([]*Patch, error) {
	fields := make([]string, 0, to-from)
	for v := from + 1; v <= to; v++ {
		fields = append(fields, versionString(v))
	}
	ctx, cancel := context.WithTimeout(ctx, s.o.Timeout)
	defer cancel()
	vals, err := s.o.Redis.HMGet(ctx, s.keys.log, fields...).Result()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	out := make([]*Patch, 0, len(vals))
	for i, v := range vals {
		str, ok := v.(string)
		if !ok {
			return nil, nil
		}
		p := &Patch{}
		dec := json.NewDecoder(strings.NewReader(str))
		dec.DisallowUnknownFields()
		if err := dec.Decode(p); err != nil || p.Version != from+1+int64(i) {
			return nil, fmt.Errorf("keys: the shared keys' record %s in Redis (%s) does not parse", fields[i], s.keys.log)
		}
		out = append(out, p)
	}
	return out, nil
}
