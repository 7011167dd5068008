package keystore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.yaml.in/yaml/v3"

	"trendgate/auth"
	"trendgate/config"
	"trendgate/internal/atomicfile"
	"trendgate/internal/clock"
)

// PollEvery is how often a cluster instance asks Redis whether the Doc
// changed: an edit made on one instance is in force on every other within
// this, plus one Redis round trip. One HGET per instance per interval
// costs nothing Redis notices; pub/sub would tell sooner, but a message
// sent while an instance reconnects is lost, and the poll is needed anyway
// to find out.
const PollEvery = 500 * time.Millisecond

// editBudget bounds how long an edit keeps being redone after losing
// races to other instances' edits. It is a time, not a count: an instance
// that has to fetch the newer Doc before each try is slower than the one
// that just won, so under a burst of edits it can lose many times in a
// row, but the burst is finite and the edit lands once it is over.
const editBudget = 5 * time.Second

// ErrUnavailable wraps what keeps an edit from being stored: Redis
// unreachable in cluster mode, the keys file not writable. Nothing changed.
var ErrUnavailable = errors.New("keys store unavailable")

// ErrReadOnly is returned by an edit on a Store with neither a keys file
// nor Redis: there is nowhere to keep the change.
var ErrReadOnly = errors.New("keys_file is not set, so keys made through the API would be lost at restart: set keys_file (or run in cluster mode) to use the key API")

// Options configure a Store.
type Options struct {
	// Path is the keys file; empty means none (then an edit needs Redis).
	Path string
	// Redis, when set, holds the Doc shared by a cluster's instances.
	Redis redis.UniversalClient
	// Prefix starts the Redis key ("<prefix>{keys}:doc").
	Prefix string
	// Timeout bounds each Redis command; 0 means 1 s.
	Timeout time.Duration
	// Clock stamps edits; nil means clock.Real{}.
	Clock clock.Clock
	// Log receives what goes wrong in the background; nil means none.
	Log *zap.Logger
	// Base returns the configuration file's settings in force, which
	// edits are made against; required.
	Base func() *config.Config
	// Check is asked whether a Doc fits this instance (it builds the keys
	// and accounts in force from it) before an edit stores the Doc; its
	// error refuses the edit as Invalid.
	Check func(*Doc) error
	// OnChange is called with each newer Doc: an edit's, or one another
	// instance stored. Calls are serialized with each other and with
	// Reload's apply, under the Store's lock (so they must not call the
	// Store).
	OnChange func(*Doc)
}

// Store holds the Doc of one instance. It is safe for concurrent use.
type Store struct {
	o   Options
	key string

	mu  sync.Mutex // serializes edits, polls and reloads; guards doc
	doc *Doc

	stop chan struct{}
	done chan struct{}
}

// Open reads the keys file (a missing file is an empty Doc) and, in
// cluster mode, meets Redis: the newer of the two Docs wins, so an empty
// Redis gets the file's. Redis out of reach is not an error: the file's
// Doc serves and the polls catch up. A keys file that does not parse is.
func Open(ctx context.Context, o Options) (*Store, error) {
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	if o.Timeout <= 0 {
		o.Timeout = time.Second
	}
	s := &Store{o: o, key: o.Prefix + "{keys}:doc", doc: &Doc{}}
	if o.Path != "" {
		d, err := Load(o.Path)
		if err != nil {
			return nil, err
		}
		s.doc = d
	}
	if o.Redis != nil {
		if err := s.Poll(ctx); err != nil {
			o.Log.Warn("keys: the shared keys in Redis are out of reach; serving the keys file's until they are back", zap.Error(err))
		}
	}
	return s, nil
}

// Doc returns the Doc in force. It must not be modified.
func (s *Store) Doc() *Doc {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.doc
}

// Start polls Redis every PollEvery until Close; without Redis it does
// nothing.
func (s *Store) Start() {
	if s.o.Redis == nil || s.stop != nil {
		return
	}
	s.stop, s.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(s.done)
		t := time.NewTicker(PollEvery)
		defer t.Stop()
		failing := false
		for {
			select {
			case <-s.stop:
				return
			case <-t.C:
				err := s.Poll(context.Background())
				if err != nil && !failing {
					s.o.Log.Warn("keys: polling the shared keys failed; the keys in force stay as they are", zap.Error(err))
				}
				if err == nil && failing {
					s.o.Log.Info("keys: polling the shared keys works again")
				}
				failing = err != nil
			}
		}
	}()
}

// Close stops the polls.
func (s *Store) Close() error {
	if s.stop != nil {
		close(s.stop)
		<-s.done
		s.stop = nil
	}
	return nil
}

// Reload hands apply the Doc to lay over a reloaded configuration file:
// on a single instance the keys file read again (an operator may have
// edited it by hand), in cluster mode the Doc in force (Redis holds the
// Doc; the file is only its copy). apply runs under the Store's lock, so
// no edit or poll comes between; the Doc read becomes the one in force
// only if apply returns nil. A keys file that does not parse is an error,
// and apply is not called.
func (s *Store) Reload(apply func(*Doc) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.doc
	if s.o.Path != "" && s.o.Redis == nil {
		var err error
		if d, err = Load(s.o.Path); err != nil {
			return err
		}
	}
	if err := apply(d); err != nil {
		return err
	}
	s.doc = d
	return nil
}

// Poll brings the Doc in force up to Redis's, or Redis's up to this
// instance's when Redis holds an older one (it restarted empty, or the
// Doc expired). Without Redis it does nothing.
func (s *Store) Poll(ctx context.Context) error {
	if s.o.Redis == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	v, err := s.remoteVersion(ctx)
	if err != nil {
		return err
	}
	switch {
	case v > s.doc.Version:
		d, err := s.remote(ctx)
		if err != nil {
			return err
		}
		s.adopt(d)
	case v < s.doc.Version:
		if _, err := s.swap(ctx, v, s.doc); err != nil {
			return err
		}
		s.o.Log.Info("keys: Redis held an older copy of the shared keys; this instance's is written back",
			zap.Int64("redis_version", v), zap.Int64("version", s.doc.Version))
	}
	return nil
}

// Create makes a key from nk with a fresh secret and returns the key
// stored and the secret, the only time it is seen.
func (s *Store) Create(ctx context.Context, nk NewKey) (Key, string, error) {
	secret, err := auth.Generate()
	if err != nil {
		return Key{}, "", err
	}
	d, err := s.edit(ctx, create(nk, auth.Digest(secret)))
	if err != nil {
		return Key{}, "", err
	}
	return d.Keys[len(d.Keys)-1], secret, nil
}

// Revoke takes key id out of force and returns when.
func (s *Store) Revoke(ctx context.Context, id string) (time.Time, error) {
	now := s.o.Clock.Now().UTC().Truncate(time.Second)
	_, err := s.edit(ctx, revoke(id))
	return now, err
}

// Rotate makes a new key in key id's account, newID or the next free
// "<id>-r<n>", and ends key id overlap from now. It returns the new key,
// its secret and the old key's end.
func (s *Store) Rotate(ctx context.Context, id, newID string, overlap time.Duration) (Rotation, string, error) {
	secret, err := auth.Generate()
	if err != nil {
		return Rotation{}, "", err
	}
	var r Rotation
	_, err = s.edit(ctx, rotate(id, newID, overlap, auth.Digest(secret), &r))
	return r, secret, err
}

// PatchAccount changes account id's overrides.
func (s *Store) PatchAccount(ctx context.Context, id string, p AccountPatch) error {
	_, err := s.edit(ctx, patchAccount(id, p))
	return err
}

// edit runs e on the latest Doc and stores the result as the next
// version: under the lock on a single instance, or with a compare-and-set
// in Redis, redone on the newer Doc when another instance's edit came
// first. The Doc in force changes only once the new one is stored.
func (s *Store) edit(ctx context.Context, e edit) (*Doc, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.o.Redis != nil:
		return s.editShared(ctx, e)
	case s.o.Path != "":
		next, err := s.next(s.doc, e)
		if err != nil {
			return nil, err
		}
		if err := Save(s.o.Path, next); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		s.doc = next
		s.changed()
		return next, nil
	default:
		return nil, ErrReadOnly
	}
}

// editShared is edit in cluster mode. A lost race costs one fetch of the
// newer Doc and a short random pause, so that instances editing at once
// do not keep colliding in step. The Docs fetched on the way are not put
// in force one by one (each would rewrite the keys file and rebuild the
// keys): only the last one is, once the edit is stored or given up.
func (s *Store) editShared(ctx context.Context, e edit) (*Doc, error) {
	ctx, cancel := context.WithTimeout(ctx, editBudget)
	defer cancel()
	latest := s.doc
	defer func() { s.adopt(latest) }()
	for try := 0; ; try++ {
		v, err := s.remoteVersion(ctx)
		if err != nil {
			return nil, err
		}
		// The version the swap expects Redis to hold: the one just read,
		// or the newer Doc's once fetched. Below this instance's version,
		// Redis lost the Doc (a restart, the TTL); the edit then stores
		// this instance's Doc, edited, as Poll would have written it back.
		from := v
		if v > latest.Version {
			if latest, err = s.remote(ctx); err != nil {
				return nil, err
			}
			from = latest.Version
		}
		next, err := s.next(latest, e)
		if err != nil {
			return nil, err
		}
		won, err := s.swap(ctx, from, next)
		if err != nil {
			return nil, err
		}
		if won {
			latest = next
			return next, nil
		}
		pause := time.Duration(rand.Int64N(int64(min(try+1, 20)) * int64(time.Millisecond)))
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: other edits kept coming first; try again", ErrUnavailable)
		case <-time.After(pause):
		}
	}
}

// next is e applied to cur, checked, as the version after cur's.
func (s *Store) next(cur *Doc, e edit) (*Doc, error) {
	next, err := e(cur, s.o.Base(), s.o.Clock.Now())
	if err != nil {
		return nil, err
	}
	next.Version = cur.Version + 1
	if s.o.Check != nil {
		if err := s.o.Check(next); err != nil {
			return nil, &Error{Kind: Invalid, Msg: err.Error()}
		}
	}
	return next, nil
}

// adopt makes d, newer than the Doc in force, the one in force, and
// keeps its copy in the keys file.
func (s *Store) adopt(d *Doc) {
	if d.Version <= s.doc.Version {
		return
	}
	s.doc = d
	if s.o.Path != "" {
		if err := Save(s.o.Path, d); err != nil {
			s.o.Log.Error("keys: the copy of the shared keys could not be written to keys_file; Redis still holds them", zap.Error(err))
		}
	}
	s.changed()
}

func (s *Store) changed() {
	if s.o.OnChange != nil {
		s.o.OnChange(s.doc)
	}
}

// sharedTTL is how long Redis keeps the shared Doc after its last edit.
// Like every key trendgate writes, it expires; every instance holds the
// Doc in memory (and in keys_file) and writes it back at its next poll
// once Redis has lost it (see Poll), so an expiry costs nothing.
const sharedTTL = 30 * 24 * time.Hour

// casScript sets the Doc if the stored version is ARGV[1] and answers -1,
// else answers the stored version. KEYS: the hash. ARGV: expected
// version, new version, the Doc, the TTL in ms.
var casScript = redis.NewScript(`
local v = tonumber(redis.call('HGET', KEYS[1], 'version') or '0')
if v ~= tonumber(ARGV[1]) then return v end
redis.call('HSET', KEYS[1], 'version', ARGV[2], 'doc', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return -1
`)

// swap stores d in Redis if Redis still holds version from; it reports
// whether it did.
func (s *Store) swap(ctx context.Context, from int64, d *Doc) (bool, error) {
	b, err := encode(d)
	if err != nil {
		return false, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.o.Timeout)
	defer cancel()
	n, err := casScript.Run(ctx, s.o.Redis, []string{s.key}, from, d.Version, b, sharedTTL.Milliseconds()).Int64()
	if err != nil {
		return false, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return n == -1, nil
}

func (s *Store) remoteVersion(ctx context.Context) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, s.o.Timeout)
	defer cancel()
	v, err := s.o.Redis.HGet(ctx, s.key, "version").Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return v, nil
}

func (s *Store) remote(ctx context.Context) (*Doc, error) {
	ctx, cancel := context.WithTimeout(ctx, s.o.Timeout)
	defer cancel()
	vals, err := s.o.Redis.HMGet(ctx, s.key, "version", "doc").Result()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	str, _ := vals[1].(string)
	d, err := decode([]byte(str))
	if err != nil {
		return nil, fmt.Errorf("keys: the shared keys in Redis (%s) do not parse: %w", s.key, err)
	}
	vs, _ := vals[0].(string)
	if v, _ := strconv.ParseInt(vs, 10, 64); v != d.Version {
		return nil, fmt.Errorf("keys: the shared keys in Redis (%s) say version %d in a hash of version %s", s.key, d.Version, vs)
	}
	return d, nil
}

// fileHeader starts every keys file.
const fileHeader = "# trendgate keys file: the keys and account changes made through the admin key API.\n" +
	"# Written by trendgate (docs/accounts.md); change it through the API or `trendgate keys`.\n"

// Load reads the keys file at path; a missing file is an empty Doc.
func Load(path string) (*Doc, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return &Doc{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("keys_file: %w", err)
	}
	d, err := decode(b)
	if err != nil {
		return nil, fmt.Errorf("keys_file %s: %w", path, err)
	}
	return d, nil
}

// Save writes d to the keys file at path atomically, mode 0600.
func Save(path string, d *Doc) error {
	b, err := encode(d)
	if err != nil {
		return err
	}
	if err := atomicfile.Write(path, append([]byte(fileHeader), b...), 0o600); err != nil {
		return fmt.Errorf("keys_file: %w", err)
	}
	return nil
}

func encode(d *Doc) ([]byte, error) {
	return yaml.Marshal(d)
}

// decode parses a Doc strictly: an unknown field is an error.
func decode(b []byte) (*Doc, error) {
	d := &Doc{}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(d); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return d, nil
}
