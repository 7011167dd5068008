package certs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"trendgate/internal/clock"
	"trendgate/internal/redisconn"
)

// ErrLockNotHeld is returned by RedisStorage.Unlock for a name this storage
// did not lock.
var ErrLockNotHeld = errors.New("certs: redis storage: lock not held by this instance")

var _ certmagic.Storage = (*RedisStorage)(nil)

// RedisStorageOptions configure a RedisStorage. Prefix is required; every
// other zero value picks the default named on the field.
type RedisStorageOptions struct {
	// Prefix starts every Redis key, e.g. "tg:certs:". Required.
	Prefix string
	// LockTTL is how long a lock outlives an instance that died holding it;
	// a holder refreshes it every LockTTL/3. 0 means 30s; less than 3ms is
	// refused.
	LockTTL time.Duration
	// LockPoll is how often a blocked Lock retries; 0 means 1s.
	LockPoll time.Duration
	// Clock stamps KeyInfo.Modified; nil means clock.Real{}. Lock expiry,
	// refresh and polling run on Redis time and real timers.
	Clock clock.Clock
	// Logger receives lost-lock warnings; nil means zap.NewNop().
	Logger *zap.Logger
}

// RedisStorage is a certmagic.Storage on Redis, so that gateway instances
// share certificates, ACME accounts and challenge tokens, and only one of
// them obtains or renews a certificate at a time.
//
// Layout under Prefix: "f:<key>" is a hash holding a file's value (field v)
// and modification time in Unix nanoseconds (field m); "idx" is a sorted set
// of every file key, scored 0 so that a lexicographic range finds a
// directory's contents; "lock:<name>" holds a lock owner's random token with
// a TTL. Directories are implicit. Delete's Lua script touches keys it does
// not declare, so the layout needs a single Redis (not Redis Cluster).
//
// Build one with NewRedisStorage; the zero value is not usable. Close stops
// lock refreshes and releases held locks.
type RedisStorage struct {
	rdb     redis.UniversalClient
	prefix  string
	index   string
	ttl     time.Duration
	poll    time.Duration
	clk     clock.Clock
	log     *zap.Logger
	mu      sync.Mutex           // guards held
	held    map[string]*heldLock // lock name → the lock this instance holds
	closing chan struct{}        // closed by Close; ends blocked Lock calls
	once    sync.Once            // closes closing
}

// heldLock is one acquired lock and its refresh goroutine, which Unlock or
// Close stops (cancel, then wait for done).
type heldLock struct {
	token  string
	cancel context.CancelFunc
	done   chan struct{}
}

// StoragePrefix returns the key prefix of the certificate storage under
// the gateway's redis.prefix: "<prefix>certs:" on a single Redis (the keys
// earlier versions wrote), "<prefix>{certs}:" on a Redis Cluster, where
// the hash tag puts every file, the index and the locks in one slot (the
// delete script touches files it finds in the index).
func StoragePrefix(prefix string, cluster bool) string {
	if cluster {
		return prefix + "{certs}:"
	}
	return prefix + "certs:"
}

// NewRedisStorage returns a RedisStorage on rdb. It does not contact Redis.
func NewRedisStorage(rdb redis.UniversalClient, opts RedisStorageOptions) (*RedisStorage, error) {
	if rdb == nil {
		return nil, errors.New("certs: redis storage: nil redis client")
	}
	if opts.Prefix == "" {
		return nil, errors.New("certs: redis storage: empty key prefix")
	}
	if opts.LockTTL == 0 {
		opts.LockTTL = 30 * time.Second
	}
	if opts.LockTTL < 3*time.Millisecond {
		return nil, fmt.Errorf("certs: redis storage: lock ttl %v is below 3ms", opts.LockTTL)
	}
	if opts.LockPoll <= 0 {
		opts.LockPoll = time.Second
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	return &RedisStorage{
		rdb: rdb, prefix: opts.Prefix, index: opts.Prefix + "idx",
		ttl: opts.LockTTL, poll: opts.LockPoll, clk: opts.Clock, log: opts.Logger,
		held: make(map[string]*heldLock), closing: make(chan struct{}),
	}, nil
}

func (s *RedisStorage) fileKey(key string) string  { return s.prefix + "f:" + key }
func (s *RedisStorage) lockKey(name string) string { return s.prefix + "lock:" + name }

// under returns the lexicographic range of index members below dir
// ("a" covers "a/…" but not "ab"); dir "" covers everything.
func under(dir string) (lo, hi string) {
	if dir == "" {
		return "-", "+"
	}
	return "[" + dir + "/", "(" + dir + "0" // '0' is the byte after '/'
}

// Store writes value at key, creating or replacing it.
func (s *RedisStorage) Store(ctx context.Context, key string, value []byte) error {
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, s.fileKey(key), "v", value, "m", strconv.FormatInt(s.clk.Now().UnixNano(), 10))
		p.ZAdd(ctx, s.index, redis.Z{Member: key})
		return nil
	})
	if err != nil {
		return fmt.Errorf("certs: redis storage: store %s: %w", key, err)
	}
	return nil
}

// Load returns the value at key, or an error wrapping fs.ErrNotExist.
func (s *RedisStorage) Load(ctx context.Context, key string) ([]byte, error) {
	b, err := s.rdb.HGet(ctx, s.fileKey(key), "v").Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("certs: redis storage: load %s: %w", key, fs.ErrNotExist)
	}
	if err != nil {
		return nil, fmt.Errorf("certs: redis storage: load %s: %w", key, err)
	}
	return b, nil
}

// deleteScript removes a file and everything below it as a directory.
// KEYS[1] index; ARGV[1] file-key prefix, ARGV[2] key, ARGV[3..4] the
// lexicographic range below key.
var deleteScript = redis.NewScript(`
redis.call('DEL', ARGV[1] .. ARGV[2])
redis.call('ZREM', KEYS[1], ARGV[2])
local below = redis.call('ZRANGEBYLEX', KEYS[1], ARGV[3], ARGV[4])
for _, m in ipairs(below) do redis.call('DEL', ARGV[1] .. m) end
if #below > 0 then redis.call('ZREMRANGEBYLEX', KEYS[1], ARGV[3], ARGV[4]) end
return #below
`)

// Delete removes key and, if key is a directory, everything below it. A
// missing key is not an error.
func (s *RedisStorage) Delete(ctx context.Context, key string) error {
	lo, hi := under(key)
	if err := deleteScript.Run(ctx, s.rdb, []string{s.index}, s.prefix+"f:", key, lo, hi).Err(); err != nil {
		return fmt.Errorf("certs: redis storage: delete %s: %w", key, err)
	}
	return nil
}

// Exists reports whether key is a file or a directory. A Redis error
// reports false.
func (s *RedisStorage) Exists(ctx context.Context, key string) bool {
	file, dir, _, _, err := s.stat(ctx, key)
	return err == nil && (file || dir)
}

// stat reads what Exists and Stat need in one round trip.
func (s *RedisStorage) stat(ctx context.Context, key string) (file, dir bool, size int64, modified time.Time, err error) {
	lo, hi := under(key)
	var fields *redis.SliceCmd
	var children *redis.StringSliceCmd
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		fields = p.HMGet(ctx, s.fileKey(key), "v", "m")
		children = p.ZRangeArgs(ctx, redis.ZRangeArgs{Key: s.index, Start: lo, Stop: hi, ByLex: true, Count: 1})
		return nil
	})
	if err != nil {
		return false, false, 0, time.Time{}, fmt.Errorf("certs: redis storage: stat %s: %w", key, err)
	}
	vals := fields.Val()
	if v, ok := vals[0].(string); ok {
		file, size = true, int64(len(v))
		if m, ok := vals[1].(string); ok {
			if ns, perr := strconv.ParseInt(m, 10, 64); perr == nil {
				modified = time.Unix(0, ns).UTC()
			}
		}
	}
	return file, len(children.Val()) > 0, size, modified, nil
}

// Stat describes key, or returns an error wrapping fs.ErrNotExist.
func (s *RedisStorage) Stat(ctx context.Context, key string) (certmagic.KeyInfo, error) {
	file, dir, size, modified, err := s.stat(ctx, key)
	switch {
	case err != nil:
		return certmagic.KeyInfo{}, err
	case file:
		return certmagic.KeyInfo{Key: key, Modified: modified, Size: size, IsTerminal: true}, nil
	case dir:
		return certmagic.KeyInfo{Key: key, IsTerminal: false}, nil
	}
	return certmagic.KeyInfo{}, fmt.Errorf("certs: redis storage: stat %s: %w", key, fs.ErrNotExist)
}

// List returns the keys below dir, sorted: only its direct children (files
// and directories) unless recursive, which also walks subdirectories and
// lists them together with their files. An empty or missing dir returns an
// error wrapping fs.ErrNotExist.
func (s *RedisStorage) List(ctx context.Context, dir string, recursive bool) ([]string, error) {
	lo, hi := under(dir)
	members, err := s.rdb.ZRangeArgs(ctx, redis.ZRangeArgs{Key: s.index, Start: lo, Stop: hi, ByLex: true}).Result()
	if err != nil {
		return nil, fmt.Errorf("certs: redis storage: list %s: %w", dir, err)
	}
	if len(members) == 0 {
		return nil, fmt.Errorf("certs: redis storage: list %s: %w", dir, fs.ErrNotExist)
	}
	base := ""
	if dir != "" {
		base = dir + "/"
	}
	seen := make(map[string]bool, len(members))
	var out []string
	add := func(k string) {
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	for _, m := range members {
		rest := strings.TrimPrefix(m, base)
		if !recursive {
			child, _, _ := strings.Cut(rest, "/")
			add(base + child)
			continue
		}
		for i := 0; i < len(rest); i++ { // every intermediate directory
			if rest[i] == '/' {
				add(base + rest[:i])
			}
		}
		add(m)
	}
	slices.Sort(out)
	return out, nil
}

// Lock acquires the named lock, blocking until it is free (or its holder's
// TTL ran out), ctx is done or the storage is closed. While held, a
// goroutine owned by this storage extends the TTL every LockTTL/3 until
// Unlock or Close.
func (s *RedisStorage) Lock(ctx context.Context, name string) error {
	token, err := newToken()
	if err != nil {
		return err
	}
	key := s.lockKey(name)
	var timer *time.Timer
	for {
		ok, err := s.rdb.SetNX(ctx, key, token, s.ttl).Result()
		if err != nil {
			return fmt.Errorf("certs: redis storage: lock %s: %w", name, err)
		}
		if ok {
			break
		}
		if timer == nil {
			timer = time.NewTimer(s.poll)
			defer timer.Stop()
		} else {
			timer.Reset(s.poll)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("certs: redis storage: lock %s: %w", name, ctx.Err())
		case <-s.closing:
			return fmt.Errorf("certs: redis storage: lock %s: storage closed", name)
		case <-timer.C:
		}
	}
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	h := &heldLock{token: token, cancel: cancel, done: make(chan struct{})}
	s.mu.Lock()
	s.held[name] = h
	s.mu.Unlock()
	go s.keepAlive(rctx, name, h)
	return nil
}

// keepAlive extends a held lock's TTL until ctx is canceled or the lock
// turns out to be lost.
func (s *RedisStorage) keepAlive(ctx context.Context, name string, h *heldLock) {
	defer close(h.done)
	t := time.NewTicker(s.ttl / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		ok, err := s.refresh(ctx, name, h.token)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("certs: lock refresh failed", zap.String("lock", name), zap.Error(err))
			}
			continue // the TTL still has two thirds left; try again next tick
		}
		if !ok {
			s.log.Warn("certs: lock lost (expired or taken over)", zap.String("lock", name))
			return
		}
	}
}

// refreshScript extends the lock's TTL if token still owns it.
var refreshScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
`)

// refresh extends the named lock's TTL to LockTTL if token owns it.
func (s *RedisStorage) refresh(ctx context.Context, name, token string) (bool, error) {
	n, err := refreshScript.Run(ctx, s.rdb, []string{s.lockKey(name)}, token, s.ttl.Milliseconds()).Int()
	if err != nil {
		return false, fmt.Errorf("certs: redis storage: refresh %s: %w", name, err)
	}
	return n == 1, nil
}

// unlockScript deletes the lock only if token still owns it.
var unlockScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
`)

// Unlock releases a lock taken by Lock on this storage. It never deletes a
// lock another instance took over after this one's TTL ran out (that is
// logged). Unlocking a name this storage does not hold returns
// ErrLockNotHeld.
func (s *RedisStorage) Unlock(ctx context.Context, name string) error {
	s.mu.Lock()
	h, ok := s.held[name]
	delete(s.held, name)
	s.mu.Unlock()
	if !ok {
		return fmt.Errorf("%w: %s", ErrLockNotHeld, name)
	}
	return s.release(ctx, name, h)
}

// release stops h's refresh goroutine and deletes the lock if h owns it.
func (s *RedisStorage) release(ctx context.Context, name string, h *heldLock) error {
	h.cancel()
	<-h.done
	n, err := unlockScript.Run(ctx, s.rdb, []string{s.lockKey(name)}, h.token).Int()
	if err != nil {
		return fmt.Errorf("certs: redis storage: unlock %s: %w", name, err)
	}
	if n == 0 {
		s.log.Warn("certs: lock was lost before unlock", zap.String("lock", name))
	}
	return nil
}

// Close ends blocked Lock calls, stops every refresh goroutine and releases
// the locks this storage still holds. It does not close the Redis client.
func (s *RedisStorage) Close() error {
	s.once.Do(func() { close(s.closing) })
	s.mu.Lock()
	held := s.held
	s.held = make(map[string]*heldLock)
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), redisconn.CertReleaseTimeout)
	defer cancel()
	var errs []error
	for name, h := range held {
		if err := s.release(ctx, name, h); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// newToken returns a random lock owner token.
func newToken() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("certs: redis storage: token: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}
