package cache

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"trendgate/internal/breaker"
	"trendgate/internal/clock"
	"trendgate/internal/redisconn"
)

// Defaults of RedisStoreOptions.
const (
	// DefaultRedisPrefix starts every cache key in Redis.
	DefaultRedisPrefix = "tg:c:"
	// DefaultRedisMaxEntryBytes bounds one encoded entry.
	DefaultRedisMaxEntryBytes = 8 << 20
)

// RedisStoreOptions configures a RedisStore. The zero value uses every
// default.
type RedisStoreOptions struct {
	// Prefix starts every key the store writes (default "tg:c:"): entries
	// live under Prefix+"e:"+key, topic indexes under Prefix+"t:"+topic.
	Prefix string
	// Timeout bounds each Redis command (default 50ms).
	Timeout time.Duration
	// MaxEntryBytes bounds an encoded entry, written or read (default 8 MiB).
	MaxEntryBytes int
	// MaxStale is the retention after FreshUntil used for the PX backstop
	// (default 24h; New overrides it with Config.MaxStale).
	MaxStale time.Duration
	// Clock computes the PX backstop (nil: the real clock).
	Clock clock.Clock
	// Breaker guards the client: while it is open every operation is a
	// miss or a no-op at once, without waiting on Redis. nil builds one of
	// the store's own (dependency "redis-cache").
	Breaker *breaker.Breaker
}

// RedisStore is the shared tier: entries encoded with a schema version and
// their canonical key, validated on every read, stored with a PX backstop of
// the time until FreshUntil+MaxStale. Redis errors are misses, never
// failures, and are counted. Use NewRedisStore; the zero value is not usable.
type RedisStore struct {
	rdb       redis.UniversalClient
	prefix    string
	timeout   time.Duration
	maxBytes  int
	retention atomic.Int64 // time.Duration kept after FreshUntil
	clk       clock.Clock
	m         *Metrics
	br        *breaker.Breaker
}

var (
	_ Store      = (*RedisStore)(nil)
	_ TopicIndex = (*RedisStore)(nil)
	_ Retainer   = (*RedisStore)(nil)
)

// NewRedisStore returns a shared tier on client. A nil m gets an
// unregistered Metrics.
func NewRedisStore(client redis.UniversalClient, opts RedisStoreOptions, m *Metrics) (*RedisStore, error) {
	if client == nil {
		return nil, errors.New("cache: redis store: nil client")
	}
	if opts.Timeout < 0 || opts.MaxEntryBytes < 0 || opts.MaxStale < 0 {
		return nil, errors.New("cache: redis store: negative timeout, max entry bytes or max stale")
	}
	s := &RedisStore{
		rdb:      client,
		prefix:   cmp(opts.Prefix, DefaultRedisPrefix),
		timeout:  cmp(opts.Timeout, redisconn.CommandTimeout),
		maxBytes: cmp(opts.MaxEntryBytes, DefaultRedisMaxEntryBytes),
		clk:      opts.Clock,
		m:        orNew(m),
		br:       opts.Breaker,
	}
	if s.clk == nil {
		s.clk = clock.Real{}
	}
	if s.br == nil {
		s.br = breaker.New("redis-cache", breaker.Config{}, breaker.Options{Clock: s.clk})
	}
	s.retention.Store(int64(cmp(opts.MaxStale, DefaultConfig().MaxStale)))
	return s, nil
}

// cmp returns v, or def when v is the zero value.
func cmp[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

func (s *RedisStore) entryKey(key string) string   { return s.prefix + "e:" + key }
func (s *RedisStore) topicKey(topic string) string { return s.prefix + "t:" + topic }

// Get reads and validates key's entry. Errors, oversized or undecodable
// entries, other schema versions and key mismatches are misses.
func (s *RedisStore) Get(ctx context.Context, key string) (*Entry, bool) {
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var b []byte
	missing := false
	ran, err := s.br.Do(ctx, func() (err error) {
		b, err = s.rdb.Get(cctx, s.entryKey(key)).Bytes()
		if errors.Is(err, redis.Nil) {
			missing, err = true, nil
		}
		return err
	})
	switch {
	case !ran || err != nil:
		s.m.sharedError.Inc()
		return nil, false
	case missing:
		s.m.sharedMiss.Inc()
		return nil, false
	case err != nil:
		s.m.sharedError.Inc()
		return nil, false
	case len(b) > s.maxBytes:
		s.m.sharedInvalid.Inc()
		return nil, false
	}
	e, err := decodeEntry(b)
	if err != nil || e.Key != key {
		s.m.sharedInvalid.Inc()
		return nil, false
	}
	s.m.sharedHit.Inc()
	return e, true
}

// Set writes e with a PX of the time until FreshUntil+MaxStale and indexes
// its key under its topic. Oversized entries and entries already past their
// retention are not written; errors are counted and dropped.
func (s *RedisStore) Set(ctx context.Context, e *Entry) {
	if e == nil || e.Key == "" {
		return
	}
	ttl := e.FreshUntil.Add(time.Duration(s.retention.Load())).Sub(s.clk.Now())
	if ttl < time.Millisecond {
		return
	}
	b := encodeEntry(e)
	if len(b) > s.maxBytes {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	px := strconv.FormatInt(ttl.Milliseconds(), 10)
	tk := s.topicKey(e.Topic)
	ran, err := s.br.Do(ctx, func() error {
		_, err := s.rdb.Pipelined(cctx, func(p redis.Pipeliner) error {
			p.Do(cctx, "set", s.entryKey(e.Key), b, "px", px)
			// One script, so a connection cut between the SADD and the
			// PEXPIREs cannot leave an index without expiry. (Pipelined
			// scripts cannot fall back from EVALSHA; it is short, and only
			// misses write.)
			p.Eval(cctx, indexScript, []string{tk}, e.Key, px)
			return nil
		})
		return err
	})
	if !ran || err != nil {
		s.m.sharedError.Inc()
	}
}

// indexScript adds ARGV[1] to the topic index KEYS[1] and makes the index
// live as long as its longest-lived entry (PX ARGV[2] when it has no TTL or
// a shorter one).
const indexScript = `
redis.call('SADD', KEYS[1], ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2], 'NX')
redis.call('PEXPIRE', KEYS[1], ARGV[2], 'GT')
return 1
`

// Delete removes key's entry (its topic index may keep naming it).
func (s *RedisStore) Delete(ctx context.Context, key string) {
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	ran, err := s.br.Do(ctx, func() error { return s.rdb.Del(cctx, s.entryKey(key)).Err() })
	if !ran || err != nil {
		s.m.sharedError.Inc()
	}
}

// Clear removes every entry and topic index under the prefix (leases are
// left alone), on every master of a cluster.
func (s *RedisStore) Clear(ctx context.Context) {
	clear := func(ctx context.Context, c redis.UniversalClient) error {
		for _, pattern := range []string{s.prefix + "e:*", s.prefix + "t:*"} {
			if err := s.unlinkAll(ctx, c, pattern); err != nil {
				return err
			}
		}
		return nil
	}
	var err error
	if cc, ok := s.rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return clear(ctx, c) })
	} else {
		err = clear(ctx, s.rdb)
	}
	if err != nil {
		s.m.sharedError.Inc()
	}
}

// unlinkAll scans c for pattern and unlinks what it finds, one bounded
// batch at a time. Each key is its own UNLINK, pipelined: on a cluster
// node one UNLINK of keys in different slots fails with CROSSSLOT.
func (s *RedisStore) unlinkAll(ctx context.Context, c redis.UniversalClient, pattern string) error {
	var cursor uint64
	for {
		cctx, cancel := context.WithTimeout(ctx, s.timeout)
		keys, next, err := c.Scan(cctx, cursor, pattern, 512).Result()
		if err == nil && len(keys) > 0 {
			_, err = c.Pipelined(cctx, func(p redis.Pipeliner) error {
				for _, k := range keys {
					p.Unlink(cctx, k)
				}
				return nil
			})
		}
		cancel()
		if err != nil {
			return err
		}
		if cursor = next; cursor == 0 {
			return nil
		}
	}
}

// TopicKeys returns the keys indexed under topic (possibly including keys
// whose entries have expired or been deleted).
func (s *RedisStore) TopicKeys(ctx context.Context, topic string) []string {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	keys, err := s.rdb.SMembers(ctx, s.topicKey(topic)).Result()
	if err != nil {
		s.m.sharedError.Inc()
		return nil
	}
	return keys
}

// SetRetention sets how long after FreshUntil entries are kept.
func (s *RedisStore) SetRetention(maxStale time.Duration) { s.retention.Store(int64(maxStale)) }

// Lease is a short cross-instance lock on one key, so that one instance in a
// cluster fetches it while the others wait for the shared tier.
type Lease interface {
	// Acquire tries to take key's lease for ttl. ok reports whether it was
	// taken; release (non-nil when ok) gives it back early. A non-nil err
	// means the lease service failed and the caller should just go on.
	Acquire(ctx context.Context, key string, ttl time.Duration) (release func(), ok bool, err error)
}

// releaseScript deletes the lease only if it still holds our token.
var releaseScript = redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) end return 0`)

// redisLease is a Lease on SET NX PX with a random token.
type redisLease struct {
	rdb     redis.UniversalClient
	prefix  string
	timeout time.Duration
	br      *breaker.Breaker
}

// errLeaseBreaker is Acquire's error while the breaker keeps Redis out of
// use: the caller goes on without a lease, at once.
var errLeaseBreaker = errors.New("cache: lease: redis unavailable (breaker open)")

var _ Lease = (*redisLease)(nil)

// NewRedisLease returns a Lease stored in Redis under prefix+key (prefix ""
// means "tg:c:l:"), each command bounded by timeout (<= 0 means 50ms) and
// guarded by br, the breaker of client's other users (nil: one of its own,
// dependency "redis"). Releasing compares the token, so an expired lease
// taken over by another instance is never deleted by the old holder.
func NewRedisLease(client redis.UniversalClient, prefix string, timeout time.Duration, br *breaker.Breaker) Lease {
	if prefix == "" {
		prefix = DefaultRedisPrefix + "l:"
	}
	if timeout <= 0 {
		timeout = redisconn.CommandTimeout
	}
	if br == nil {
		br = breaker.New("redis", breaker.Config{}, breaker.Options{})
	}
	return &redisLease{rdb: client, prefix: prefix, timeout: timeout, br: br}
}

// Acquire takes the lease with SET NX PX.
func (l *redisLease) Acquire(ctx context.Context, key string, ttl time.Duration) (func(), bool, error) {
	var raw [16]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return nil, false, fmt.Errorf("cache: lease token: %w", err)
	}
	token := hex.EncodeToString(raw[:])
	k := l.prefix + key
	cctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	var ok bool
	ran, err := l.br.Do(ctx, func() (err error) {
		ok, err = l.rdb.SetNX(cctx, k, token, max(ttl, time.Millisecond)).Result()
		return err
	})
	if !ran {
		return nil, false, errLeaseBreaker
	}
	if err != nil {
		return nil, false, fmt.Errorf("cache: lease acquire: %w", err)
	}
	if !ok {
		return nil, false, nil
	}
	release := func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.timeout)
		defer cancel()
		_ = releaseScript.Run(rctx, l.rdb, []string{k}, token).Err() // expiry covers a failure
	}
	return release, true, nil
}
