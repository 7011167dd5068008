package keystore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"trendgate/auth"
	"trendgate/config"
	"trendgate/internal/clock"
	"trendgate/internal/redisconn"
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
// that has to fetch the newer records before each try is slower than the
// one that just won, so under a burst of edits it can lose many times in
// a row, but the burst is finite and the edit lands once it is over.
const editBudget = 5 * time.Second

// DefaultRetention is how long the id of a revoked key stays taken when
// Options.Retention is 0 (config: revoked_key_retention).
const DefaultRetention = 400 * 24 * time.Hour

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
	// Prefix starts the Redis keys ("<prefix>{keys}:doc", "…:log").
	Prefix string
	// Timeout bounds each Redis command; 0 means 1 s.
	Timeout time.Duration
	// Retention is how long the id of a revoked key stays taken (its
	// tombstone is kept); 0 means DefaultRetention.
	Retention time.Duration
	// Clock stamps edits; nil means clock.Real{}.
	Clock clock.Clock
	// Log receives what goes wrong in the background; nil means none.
	Log *zap.Logger
	// Base returns the configuration file's settings in force, which
	// edits are made against; required.
	Base func() *config.Config
	// Check is asked whether next, the Doc after the edit p, fits this
	// instance before the edit is stored; its error refuses the edit as
	// Invalid. Its commit, called once the edit is stored, puts next in
	// force (OnChange is not called for it). Nil accepts every edit, and
	// then OnChange is called.
	Check func(next *Doc, p *Patch) (commit func(), err error)
	// OnChange is called with each newer Doc another instance stored (or
	// an edit's, without Check), with the patches that lead to it from the
	// Doc in force before, or nil when they are not known (a snapshot was
	// read). Calls are serialized with each other, with edits and with
	// Reload's apply, under the Store's lock (so they must not call the
	// Store).
	OnChange func(d *Doc, ps []*Patch)
}

// Store holds the Doc of one instance. It is safe for concurrent use.
type Store struct {
	o     Options
	rules rules
	keys  redisKeys

	mu      sync.Mutex // serializes edits, polls and reloads; guards doc, file and pending
	doc     *Doc
	file    *file           // the keys file; nil without one
	pending []pendingRevoke // revocations denied here while Redis was out of reach (pending.go)

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
		o.Timeout = redisconn.KeyStoreTimeout
	}
	if o.Retention <= 0 {
		o.Retention = DefaultRetention
	}
	s := &Store{o: o, rules: rules{retention: o.Retention}, keys: newRedisKeys(o.Prefix), doc: &Doc{}}
	if o.Path != "" {
		f, d, err := openFile(o.Path)
		if err != nil {
			return nil, err
		}
		if f.torn {
			o.Log.Warn("keys: the last record of keys_file was cut short (a crash while writing it) and is left out; the file is written whole at the next change",
				zap.String("keys_file", o.Path))
		}
		s.file, s.doc = f, d
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

// Retention is how long the id of a revoked key stays taken.
func (s *Store) Retention() time.Duration { return s.o.Retention }

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
// on a single instance the keys file read again when it changed since
// this Store last wrote it (an operator may have edited it by hand), in
// cluster mode the Doc in force (Redis holds the Doc; the file is only
// its copy). apply runs under the Store's lock, so no edit or poll comes
// between; the Doc read becomes the one in force only if apply returns
// nil. A keys file that does not parse is an error, and apply is not
// called.
func (s *Store) Reload(apply func(*Doc) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	d, f := s.doc, s.file
	if f != nil && s.o.Redis == nil && f.changed() {
		var err error
		if f, d, err = openFile(s.o.Path); err != nil {
			return err
		}
	}
	if err := apply(s.view(d)); err != nil {
		return err
	}
	s.doc, s.file = d, f
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
	if err := s.sync(ctx); err != nil {
		return err
	}
	return s.flushPending(ctx)
}

// sync is Poll under the lock.
func (s *Store) sync(ctx context.Context) error {
	v, err := s.remoteVersion(ctx)
	if err != nil {
		return err
	}
	switch {
	case v > s.doc.Version:
		d, ps, err := s.fetch(ctx, v)
		if err != nil {
			return err
		}
		s.adopt(d, ps)
	case v < s.doc.Version:
		if _, err := s.putSnapshot(ctx, v, s.doc); err != nil {
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
	p, err := s.edit(ctx, s.rules.create(nk, auth.Digest(secret)))
	if err != nil {
		return Key{}, "", err
	}
	return p.Keys[0], secret, nil
}

// Revoke takes key id out of force and returns when; by is the id of the
// admin token that asked, kept with the tombstone.
//
// In cluster mode with Redis out of reach, the key is denied on this
// instance at once and the revocation is stored when Redis is back: the
// error then wraps ErrPending (see pending.go).
func (s *Store) Revoke(ctx context.Context, id, by string) (time.Time, error) {
	p, err := s.edit(ctx, s.rules.revoke(id, by))
	if errors.Is(err, ErrUnavailable) && s.o.Redis != nil {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.revokeLocally(id, by, err)
	}
	if err != nil {
		return time.Time{}, err
	}
	if len(p.Keys) > 0 {
		return *p.Keys[0].Revoked, nil
	}
	return *p.ConfigKeys[0].Revoked, nil
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
	_, err = s.edit(ctx, s.rules.rotate(id, newID, overlap, auth.Digest(secret), &r))
	return r, secret, err
}

// CreateAccount makes the account na.
func (s *Store) CreateAccount(ctx context.Context, na NewAccount) error {
	_, err := s.edit(ctx, s.rules.createAccount(na))
	return err
}

// DeleteAccount takes away account id, made through the API, once no key
// in force names it; it returns when.
func (s *Store) DeleteAccount(ctx context.Context, id string) (time.Time, error) {
	p, err := s.edit(ctx, s.rules.deleteAccount(id))
	if err != nil {
		return time.Time{}, err
	}
	return *p.Accounts[0].Deleted, nil
}

// PatchAccount changes account id's overrides.
func (s *Store) PatchAccount(ctx context.Context, id string, p AccountPatch) error {
	_, err := s.edit(ctx, s.rules.patchAccount(id, p))
	return err
}

// edit runs e on the latest Doc and stores its patch as the next version:
// appended to the keys file on a single instance, or in cluster mode
// stored in Redis with a compare-and-set, redone on the newer Doc when
// another instance's edit came first. The Doc in force changes only once
// the patch is stored.
func (s *Store) edit(ctx context.Context, e edit) (*Patch, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.o.Redis != nil:
		return s.editShared(ctx, e)
	case s.file != nil:
		p, next, commit, err := s.next(e)
		if err != nil {
			return nil, err
		}
		if next, err = s.write(next, p); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		s.doc = next
		commit()
		return p, nil
	default:
		return nil, ErrReadOnly
	}
}

// editShared is edit in cluster mode. A lost race costs one fetch of the
// newer records and a short random pause, so that instances editing at
// once do not keep colliding in step.
func (s *Store) editShared(ctx context.Context, e edit) (*Patch, error) {
	ctx, cancel := context.WithTimeout(ctx, editBudget)
	defer cancel()
	for try := 0; ; try++ {
		if err := s.sync(ctx); err != nil {
			return nil, err
		}
		p, next, commit, err := s.next(e)
		if err != nil {
			return nil, err
		}
		won, err := s.putRecord(ctx, s.doc.Version, p)
		if err != nil {
			return nil, err
		}
		if won {
			s.doc = s.keepCopy(next, p)
			commit()
			s.compactShared(ctx)
			return p, nil
		}
		pause := time.Duration(rand.Int64N(int64(min(try+1, 20)) * int64(time.Millisecond)))
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: other edits kept coming first; try again", ErrUnavailable)
		case <-time.After(pause):
		}
	}
}

// next is e applied to the Doc in force and checked: its patch, the Doc
// after it, and what puts that Doc in force.
func (s *Store) next(e edit) (*Patch, *Doc, func(), error) {
	return s.nextAt(e, s.doc, s.doc.Version+1)
}

// nextAt is e applied to cur and checked, as version v.
func (s *Store) nextAt(e edit, cur *Doc, v int64) (*Patch, *Doc, func(), error) {
	p, err := e(cur, s.o.Base(), s.o.Clock.Now())
	if err != nil {
		return nil, nil, nil, err
	}
	p.Version = v
	next := cur.with(p)
	commit := func() { s.changed([]*Patch{p}) }
	if s.o.Check != nil {
		if commit, err = s.o.Check(next, p); err != nil {
			return nil, nil, nil, &Error{Kind: Invalid, Msg: err.Error()}
		}
	}
	return p, next, commit, nil
}

// adopt makes d, newer than the Doc in force and reached from it by ps
// (nil: not known), the one in force, and keeps its copy in the keys file.
func (s *Store) adopt(d *Doc, ps []*Patch) {
	if d.Version <= s.doc.Version {
		return
	}
	s.doc = s.keepCopy(d, ps...)
	s.changed(ps)
}

// keepCopy writes d, reached by ps, to the keys file, if any, logging a
// failure: in cluster mode Redis holds the Doc, the file is its copy. It
// returns the Doc to keep in force (see write).
func (s *Store) keepCopy(d *Doc, ps ...*Patch) *Doc {
	if s.file == nil {
		return d
	}
	kept, err := s.write(d, ps...)
	if err != nil {
		s.o.Log.Error("keys: the copy of the shared keys could not be written to keys_file; Redis still holds them", zap.Error(err))
		return d
	}
	return kept
}

// write stores d in the keys file: ps appended when they lead to it from
// what the file holds, else (or when the file has grown to
// compactEvery records, or needs a whole write) d whole, less the
// tombstones past the retention. It returns the Doc written: d, or d
// pruned, which puts the same keys and accounts in force.
func (s *Store) write(d *Doc, ps ...*Patch) (*Doc, error) {
	f := s.file
	if len(ps) == 0 || ps[0].Version != f.version+1 || f.records+len(ps) > compactEvery || f.whole {
		pruned := d.prune(s.o.Base(), s.o.Clock.Now(), s.o.Retention)
		if err := f.snapshot(pruned); err != nil {
			return nil, err
		}
		return pruned, nil
	}
	if err := f.append(ps); err != nil {
		return nil, err
	}
	return d, nil
}

func (s *Store) changed(ps []*Patch) {
	if s.o.OnChange == nil {
		return
	}
	if len(s.pending) > 0 {
		ps = nil // the keys denied here must stay denied: a whole rebuild
	}
	s.o.OnChange(s.view(s.doc), ps)
}

// Encode is d as the keys file's snapshot record and Redis's snapshot
// hold it (JSON).
func Encode(d *Doc) ([]byte, error) { return jsonEncode(d) }

// versionString is v as a Redis field name.
func versionString(v int64) string { return strconv.FormatInt(v, 10) }
