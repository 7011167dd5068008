package activity

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// LastUsed shares when each key was last used among the instances of a
// cluster, through one Redis hash (key id → unix seconds). It is cheap by
// construction: requests never touch Redis; each instance's Sync writes,
// in one script run, only the keys seen since its last Sync, and keeps the
// later of its time and the hash's. Build it with NewLastUsed; it is safe
// for concurrent use.
type LastUsed struct {
	rdb     redis.UniversalClient
	key     string
	timeout time.Duration

	mu     sync.Mutex       // guards synced
	synced map[string]int64 // key id → unix seconds this instance last wrote
}

// lastUsedTTL is how long the hash lives after the last Sync: a key
// unused that long is reported as never used.
const lastUsedTTL = 90 * 24 * time.Hour

// NewLastUsed returns a LastUsed on rdb under "<prefix>{keys}:last_used"
// (one hash tag, so one slot on a Redis Cluster); timeout bounds each
// command (0 means 1 s).
func NewLastUsed(rdb redis.UniversalClient, prefix string, timeout time.Duration) *LastUsed {
	if timeout <= 0 {
		timeout = time.Second
	}
	return &LastUsed{rdb: rdb, key: prefix + "{keys}:last_used", timeout: timeout, synced: make(map[string]int64)}
}

// syncScript sets each field to the later of its value and the given one.
// KEYS: the hash. ARGV: ttl ms, then pairs of key id, unix seconds.
var syncScript = redis.NewScript(`
for i = 2, #ARGV, 2 do
  local old = tonumber(redis.call('HGET', KEYS[1], ARGV[i]) or '0')
  if tonumber(ARGV[i + 1]) > old then redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return 1
`)

// Sync writes the times in seen (key id → this instance's latest request
// of the key; zero times are skipped) that are later, at second
// resolution, than what this instance wrote before. Nothing new writes
// nothing.
func (l *LastUsed) Sync(ctx context.Context, seen map[string]time.Time) error {
	args := []any{lastUsedTTL.Milliseconds()}
	l.mu.Lock()
	fresh := make(map[string]int64)
	for id, t := range seen {
		if s := t.Unix(); !t.IsZero() && s > l.synced[id] {
			fresh[id] = s
			args = append(args, id, s)
		}
	}
	l.mu.Unlock()
	if len(fresh) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	if err := syncScript.Run(ctx, l.rdb, []string{l.key}, args...).Err(); err != nil {
		return fmt.Errorf("activity: last used: %w", err)
	}
	l.mu.Lock()
	for id, s := range fresh {
		l.synced[id] = max(l.synced[id], s)
	}
	l.mu.Unlock()
	return nil
}

// Read returns the cluster-wide last use of each of ids that has one, as
// of every instance's latest Sync.
func (l *LastUsed) Read(ctx context.Context, ids []string) (map[string]time.Time, error) {
	out := make(map[string]time.Time, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	vals, err := l.rdb.HMGet(ctx, l.key, ids...).Result()
	if err != nil {
		return nil, fmt.Errorf("activity: last used: %w", err)
	}
	for i, v := range vals {
		s, ok := v.(string)
		if !ok {
			continue
		}
		if n, err := strconv.ParseInt(s, 10, 64); err == nil && n > 0 {
			out[ids[i]] = time.Unix(n, 0).UTC()
		}
	}
	return out, nil
}
