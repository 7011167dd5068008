package keystore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"trendgate/auth"
	"trendgate/config"
	"trendgate/internal/clock"
	"trendgate/internal/testing/redistest"
)

var t0 = time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)

// base is a configuration file with one account of two keys and one key
// that is an account of its own.
func base(t *testing.T) *config.Config {
	t.Helper()
	cfg := config.Default()
	daily := int64(500)
	cfg.Accounts = []config.Account{{ID: "acme", Plan: "full", Daily: &daily}}
	solo := int64(70)
	cfg.Keys = []config.Key{
		{ID: "acme-web", SHA256: digest(t), Account: "acme"},
		{ID: "acme-batch", SHA256: digest(t), Account: "acme"},
		{ID: "solo", SHA256: digest(t), Plan: "limited", Daily: &solo},
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

func digest(t *testing.T) string {
	t.Helper()
	k, err := auth.Generate()
	if err != nil {
		t.Fatal(err)
	}
	return auth.Digest(k)
}

// open is a single-instance Store on a keys file in a fresh directory,
// whose Check validates the result against cfg.
func open(t *testing.T, cfg *config.Config, clk clock.Clock) *Store {
	t.Helper()
	path := filepath.Join(t.TempDir(), "keys.yaml")
	s, err := Open(context.Background(), Options{Path: path, Clock: clk, Base: func() *config.Config { return cfg },
		Check: func(d *Doc, _ *Patch) (func(), error) { return func() {}, d.Apply(cfg).Validate() }})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func kindOf(err error) Kind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return 0
}

func keyOf(cfg *config.Config, id string) (config.Key, bool) {
	for _, k := range cfg.Keys {
		if k.ID == id {
			return k, true
		}
	}
	return config.Key{}, false
}

func TestCreateRevokeRotateApply(t *testing.T) {
	cfg := base(t)
	clk := clock.NewFake(t0)
	s := open(t, cfg, clk)
	ctx := context.Background()

	k, secret, err := s.Create(ctx, NewKey{ID: "acme-ci", Account: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	if auth.Digest(secret) != k.SHA256 || auth.CheckFormat(secret) != nil {
		t.Fatalf("the secret %q is not the key stored (digest %s)", secret[:6], k.SHA256)
	}
	eff := s.Doc().Apply(cfg)
	got, ok := keyOf(eff, "acme-ci")
	if !ok || got.Account != "acme" || got.Created == nil || !got.Created.Equal(t0) {
		t.Fatalf("created key in force = %+v, %v", got, ok)
	}
	if len(eff.Accounts) != 1 || *eff.Accounts[0].Daily != 500 {
		t.Fatalf("accounts = %+v; creating a key in a configured account must leave it as it is", eff.Accounts)
	}

	// Revoke a file key: gone from the keys in force, the file untouched.
	if _, err := s.Revoke(ctx, "acme-batch", "tester"); err != nil {
		t.Fatal(err)
	}
	if _, ok := keyOf(s.Doc().Apply(cfg), "acme-batch"); ok {
		t.Fatal("a revoked key of the file is still in force")
	}
	if _, ok := keyOf(cfg, "acme-batch"); !ok {
		t.Fatal("Apply modified the configuration it was given")
	}
	if _, err := s.Revoke(ctx, "acme-batch", "tester"); kindOf(err) != UnknownKey {
		t.Fatalf("revoking twice: %v, want UnknownKey", err)
	}
	// A revoked key's id stays taken while the file has it.
	if _, _, err := s.Create(ctx, NewKey{ID: "acme-batch", Account: "acme"}); kindOf(err) != Taken {
		t.Fatalf("reusing a revoked file key's id: %v, want Taken", err)
	}

	// Rotate the key that is an account of its own: the account is
	// written out, with the key's quota, and both keys share it.
	clk.Advance(time.Hour)
	var r Rotation
	r, _, err = s.Rotate(ctx, "solo", "", 2*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if r.New.ID != "solo-r1" || r.New.Account != "solo" || !r.OldEnd.Equal(t0.Add(3*time.Hour)) {
		t.Fatalf("rotation = %+v", r)
	}
	eff = s.Doc().Apply(cfg)
	if err := eff.Validate(); err != nil {
		t.Fatalf("after the rotation the configuration does not validate: %v", err)
	}
	old, _ := keyOf(eff, "solo")
	if old.Account != "solo" || old.Daily != nil || old.Expires == nil || !old.Expires.Equal(r.OldEnd) {
		t.Fatalf("old key after rotation = %+v", old)
	}
	var acct *config.Account
	for i := range eff.Accounts {
		if eff.Accounts[i].ID == "solo" {
			acct = &eff.Accounts[i]
		}
	}
	if acct == nil || acct.Plan != "limited" || acct.Daily == nil || *acct.Daily != 70 {
		t.Fatalf("account written out of key solo = %+v; want plan limited, daily 70", acct)
	}
	// Revoking the old key leaves the account, and the new key, in force.
	if _, err := s.Revoke(ctx, "solo", "tester"); err != nil {
		t.Fatal(err)
	}
	if err := s.Doc().Apply(cfg).Validate(); err != nil {
		t.Fatalf("after revoking a rotated key: %v", err)
	}
	// A second rotation of the new key picks the next free id.
	r, _, err = s.Rotate(ctx, "solo-r1", "", 0)
	if err != nil || r.New.ID != "solo-r2" || !r.OldEnd.Equal(clk.Now().UTC()) {
		t.Fatalf("second rotation = %+v, %v", r, err)
	}

	// The file holds it all, without a secret, and reads back the same.
	back, err := Load(s.o.Path)
	if err != nil {
		t.Fatal(err)
	}
	if back.Version != s.Doc().Version || back.Version != 5 {
		t.Fatalf("file version %d, in force %d; want 5 edits", back.Version, s.Doc().Version)
	}
	b, _ := os.ReadFile(s.o.Path)
	if strings.Contains(string(b), secret) || strings.Contains(string(b), auth.Prefix) {
		t.Fatal("the keys file holds a secret")
	}
	if fi, _ := os.Stat(s.o.Path); fi.Mode().Perm() != 0o600 {
		t.Fatalf("keys file mode %v, want 0600", fi.Mode().Perm())
	}
}

func TestEditsRefuseBadInput(t *testing.T) {
	cfg := base(t)
	clk := clock.NewFake(t0)
	s := open(t, cfg, clk)
	ctx := context.Background()
	past := t0.Add(-time.Minute)
	future := t0.Add(time.Hour)
	for _, tc := range []struct {
		name string
		nk   NewKey
		want Kind
	}{
		{"unknown account", NewKey{ID: "x1", Account: "nobody"}, UnknownAccount},
		{"id taken by a file key", NewKey{ID: "acme-web", Account: "acme"}, Taken},
		{"bad id", NewKey{ID: "has space", Account: "acme"}, Invalid},
		{"expiry in the past", NewKey{ID: "x2", Account: "acme", Expires: &past}, Invalid},
		{"not_before after expires", NewKey{ID: "x3", Account: "acme", NotBefore: &future, Expires: &future}, Invalid},
		{"a plan unlike the account's", NewKey{ID: "x4", Account: "acme", Plan: "limited"}, Invalid},
		{"no account and no plan", NewKey{ID: "x5"}, Invalid},
		{"unknown plan", NewKey{ID: "x6", Plan: "gold"}, Invalid},
		// A key outside account acme may not take its id.
		{"an account's id", NewKey{ID: "acme", Plan: "full"}, Taken},
		{"the id .", NewKey{ID: ".", Account: "acme"}, Invalid},
		{"the id ..", NewKey{ID: "..", Account: "acme"}, Invalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := s.Create(ctx, tc.nk)
			if kindOf(err) != tc.want {
				t.Fatalf("Create(%+v) = %v, want kind %d", tc.nk, err, tc.want)
			}
		})
	}
	if s.Doc().Version != 0 {
		t.Fatalf("refused edits stored version %d", s.Doc().Version)
	}
	if _, err := os.Stat(s.o.Path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("refused edits wrote the keys file: %v", err)
	}
	if _, _, err := s.Rotate(ctx, "nobody", "", time.Hour); kindOf(err) != UnknownKey {
		t.Fatalf("rotating an unknown key: %v", err)
	}
	if _, _, err := s.Rotate(ctx, "acme-web", "acme-batch", time.Hour); kindOf(err) != Taken {
		t.Fatalf("rotating to a taken id: %v", err)
	}
	neg := int64(-1)
	if err := s.PatchAccount(ctx, "acme", AccountPatch{Daily: Field[int64]{Set: true, Value: &neg}}); kindOf(err) != Invalid {
		t.Fatalf("a negative daily quota: %v", err)
	}
	if err := s.PatchAccount(ctx, "nobody", AccountPatch{}); kindOf(err) != UnknownAccount {
		t.Fatalf("patching an unknown account: %v", err)
	}
}

func TestPatchAccountAndUndo(t *testing.T) {
	cfg := base(t)
	s := open(t, cfg, clock.NewFake(t0))
	ctx := context.Background()
	d := int64(20000)
	if err := s.PatchAccount(ctx, "acme", AccountPatch{Daily: Field[int64]{Set: true, Value: &d}}); err != nil {
		t.Fatal(err)
	}
	if a := s.Doc().Apply(cfg).Accounts[0]; *a.Daily != 20000 {
		t.Fatalf("daily after patch = %d", *a.Daily)
	}
	// null returns to the configured value.
	if err := s.PatchAccount(ctx, "acme", AccountPatch{Daily: Field[int64]{Set: true}}); err != nil {
		t.Fatal(err)
	}
	if a := s.Doc().Apply(cfg).Accounts[0]; *a.Daily != 500 {
		t.Fatalf("daily after undo = %d, want the file's 500", *a.Daily)
	}
	// A patch of a key's own account writes the account out.
	if err := s.PatchAccount(ctx, "solo", AccountPatch{Daily: Field[int64]{Set: true, Value: &d}}); err != nil {
		t.Fatal(err)
	}
	eff := s.Doc().Apply(cfg)
	if err := eff.Validate(); err != nil {
		t.Fatal(err)
	}
	if k, _ := keyOf(eff, "solo"); k.Account != "solo" {
		t.Fatalf("key solo after its account's patch = %+v", k)
	}
}

func TestReloadReadsTheFile(t *testing.T) {
	cfg := base(t)
	s := open(t, cfg, clock.NewFake(t0))
	if _, _, err := s.Create(context.Background(), NewKey{ID: "acme-ci", Account: "acme"}); err != nil {
		t.Fatal(err)
	}
	// Another Store on the same file (the next process) finds the key.
	s2, err := Open(context.Background(), Options{Path: s.o.Path, Base: func() *config.Config { return cfg }})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := keyOf(s2.Doc().Apply(cfg), "acme-ci"); !ok {
		t.Fatal("a key created before a restart is gone after it")
	}
	// A file that does not parse refuses the reload and keeps the Doc.
	if err := os.WriteFile(s.o.Path, []byte("version: 1\nkeys: [{id: a, colour: red}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	called := false
	if err := s.Reload(func(*Doc) error { called = true; return nil }); err == nil || called {
		t.Fatalf("Reload of a damaged file = %v (apply called %v)", err, called)
	}
	if s.Doc().Version != 1 {
		t.Fatalf("the Doc in force changed to version %d", s.Doc().Version)
	}
}

func TestReadOnlyWithoutAPlace(t *testing.T) {
	cfg := base(t)
	s, err := Open(context.Background(), Options{Base: func() *config.Config { return cfg }})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Create(context.Background(), NewKey{ID: "x", Account: "acme"}); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("Create without keys_file or Redis = %v, want ErrReadOnly", err)
	}
}

// TestConcurrentEditsLoseNothing runs many creates at once, on one Store
// and, through Redis, on several instances: every key is there in the
// end, on every instance.
func TestConcurrentEditsLoseNothing(t *testing.T) {
	cfg := base(t)
	t.Run("single", func(t *testing.T) {
		s := open(t, cfg, clock.NewFake(t0))
		createAll(t, []*Store{s}, 24)
		if got := len(s.Doc().Keys); got != 24 {
			t.Fatalf("%d keys after 24 concurrent creates", got)
		}
		back, _ := Load(s.o.Path)
		if len(back.Keys) != 24 {
			t.Fatalf("keys file holds %d keys", len(back.Keys))
		}
	})
	t.Run("redis", func(t *testing.T) {
		rdb := redistest.Client(t, redistest.Addr)
		prefix := redistest.Prefix(t, rdb)
		var stores []*Store
		for range 3 {
			s, err := Open(context.Background(), Options{Redis: rdb, Prefix: prefix, Path: filepath.Join(t.TempDir(), "keys.yaml"),
				Base: func() *config.Config { return cfg }})
			if err != nil {
				t.Fatal(err)
			}
			stores = append(stores, s)
		}
		createAll(t, stores, 30)
		for i, s := range stores {
			if err := s.Poll(context.Background()); err != nil {
				t.Fatal(err)
			}
			if got := len(s.Doc().Keys); got != 30 || s.Doc().Version != 30 {
				t.Fatalf("instance %d: %d keys at version %d after 30 concurrent creates", i, got, s.Doc().Version)
			}
		}
	})
}

func createAll(t *testing.T, stores []*Store, n int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, err := stores[i%len(stores)].Create(context.Background(), NewKey{ID: fmt.Sprintf("k%02d", i), Account: "acme"})
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

// TestRedisLosesTheDocAndGetsItBack: Redis restarted empty (it keeps
// nothing on disk); the next poll writes the instance's Doc back, and a
// new instance with an empty keys file then reads it from Redis.
func TestRedisLosesTheDocAndGetsItBack(t *testing.T) {
	cfg := base(t)
	rdb := redistest.Client(t, redistest.Addr)
	prefix := redistest.Prefix(t, rdb)
	ctx := context.Background()
	var changes []int64
	a, err := Open(ctx, Options{Redis: rdb, Prefix: prefix, Path: filepath.Join(t.TempDir(), "keys.yaml"),
		Base: func() *config.Config { return cfg }, OnChange: func(d *Doc, _ []*Patch) { changes = append(changes, d.Version) }})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.Create(ctx, NewKey{ID: "acme-ci", Account: "acme"}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Revoke(ctx, "acme-web", "tester"); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Del(ctx, prefix+"{keys}:doc").Err(); err != nil {
		t.Fatal(err)
	}
	if err := a.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	if v, _ := rdb.HGet(ctx, prefix+"{keys}:doc", "version").Int64(); v != 2 {
		t.Fatalf("Redis holds version %d after the poll, want 2 written back", v)
	}
	if ttl := rdb.PTTL(ctx, prefix+"{keys}:doc").Val(); ttl <= 0 {
		t.Fatalf("the shared Doc has no TTL (%v)", ttl)
	}
	newInstanceSeesCreateAndRevoke(t, rdb, prefix, cfg)
	if fmt.Sprint(changes) != "[1 2]" {
		t.Fatalf("OnChange saw versions %v, want [1 2]", changes)
	}
}

// TestEditAfterRedisLostTheDoc: Redis restarted empty and no poll has run
// yet. An edit is stored at once, on top of the instance's Doc, instead of
// waiting for a version Redis no longer holds.
func TestEditAfterRedisLostTheDoc(t *testing.T) {
	cfg := base(t)
	rdb := redistest.Client(t, redistest.Addr)
	prefix := redistest.Prefix(t, rdb)
	ctx := context.Background()
	a, err := Open(ctx, Options{Redis: rdb, Prefix: prefix, Path: filepath.Join(t.TempDir(), "keys.yaml"),
		Base: func() *config.Config { return cfg }})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.Create(ctx, NewKey{ID: "acme-ci", Account: "acme"}); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Del(ctx, prefix+"{keys}:doc").Err(); err != nil {
		t.Fatal(err)
	}
	edit, cancel := context.WithTimeout(ctx, time.Second) // well under editBudget
	defer cancel()
	if _, err := a.Revoke(edit, "acme-web", "tester"); err != nil {
		t.Fatalf("an edit after Redis lost the Doc: %v", err)
	}
	if v, _ := rdb.HGet(ctx, prefix+"{keys}:doc", "version").Int64(); v != 2 {
		t.Fatalf("Redis holds version %d, want 2", v)
	}
	newInstanceSeesCreateAndRevoke(t, rdb, prefix, cfg)
}

// newInstanceSeesCreateAndRevoke opens a new instance, with an empty keys
// file, on the Doc in Redis and checks that key acme-ci was created and
// acme-web revoked there.
func newInstanceSeesCreateAndRevoke(t *testing.T, rdb redis.UniversalClient, prefix string, cfg *config.Config) {
	t.Helper()
	b, err := Open(context.Background(), Options{Redis: rdb, Prefix: prefix, Path: filepath.Join(t.TempDir(), "keys.yaml"),
		Base: func() *config.Config { return cfg }})
	if err != nil {
		t.Fatal(err)
	}
	eff := b.Doc().Apply(cfg)
	if _, ok := keyOf(eff, "acme-ci"); !ok {
		t.Fatal("a new instance does not see the created key acme-ci")
	}
	if _, ok := keyOf(eff, "acme-web"); ok {
		t.Fatal("a new instance sees the revoked key acme-web")
	}
}
