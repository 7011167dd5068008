package cache

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"trendgate/api"
)

// TestSnapshotFreshnessNotFromFile is issue 30's "pinned until 2100": an
// entry saved with a FreshUntil far in the future is loaded fresh only as
// long as today's rules (Revalidate) say, from its fetch time.
func TestSnapshotFreshnessNotFromFile(t *testing.T) {
	pinned := entry("v2|whatsup|bitcoin", "bitcoin", t0.Add(-time.Minute), 0, `{"summary":"up"}`)
	pinned.FreshUntil = time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)
	path := filepath.Join(t.TempDir(), "cache.snap")
	if _, err := writeSnapshot(path, []*Entry{pinned}, SnapshotOptions{MaxBytes: 1 << 20, MaxStale: time.Hour, Now: t0, Origin: testOrigin}); err != nil {
		t.Fatal(err)
	}
	l := newTestLocal(t)
	opts := snapOpts(t0)
	if _, err := l.LoadSnapshot(path, opts); err != nil {
		t.Fatal(err)
	}
	got, ok := l.Get(t.Context(), pinned.Key)
	if !ok {
		t.Fatal("entry not loaded")
	}
	if want := pinned.Fetched.Add(time.Hour); !got.FreshUntil.Equal(want) {
		t.Errorf("FreshUntil = %v; want %v (fetched + today's 1h), never the file's 2100", got.FreshUntil, want)
	}
}

// TestSnapshotRevalidateDrops: an entry Revalidate refuses is left out,
// counted as DropInvalid, and the rest load.
func TestSnapshotRevalidateDrops(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cache.snap")
	if _, err := writeSnapshot(path, sampleEntries(), snapOpts(t0)); err != nil {
		t.Fatal(err)
	}
	opts := snapOpts(t0)
	keep := opts.Revalidate
	opts.Revalidate = func(e *Entry, q api.Request) (time.Time, error) {
		if q.Endpoint == api.EndpointTSV {
			return time.Time{}, errors.New("not a TSV body")
		}
		return keep(e, q)
	}
	l := newTestLocal(t)
	stats, err := l.LoadSnapshot(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	if stats.Dropped[DropInvalid] != 1 || stats.Entries != len(sampleEntries())-1 {
		t.Errorf("stats %+v; want 1 dropped as invalid, the rest loaded", stats)
	}
}

// TestSnapshotHMAC: with a key, a file saved under it loads; one saved
// under another key, without one, or edited after the save is refused
// whole; and a file with an HMAC is refused by a load without a key.
func TestSnapshotHMAC(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	save := func(t *testing.T, k []byte) string {
		t.Helper()
		path := filepath.Join(t.TempDir(), "cache.snap")
		opts := snapOpts(t0)
		opts.Key = k
		if _, err := writeSnapshot(path, sampleEntries(), opts); err != nil {
			t.Fatal(err)
		}
		return path
	}
	load := func(path string, k []byte) error {
		opts := snapOpts(t0)
		opts.Key = k
		l, err := NewLocal(1<<20, nil)
		if err != nil {
			return err
		}
		defer l.Close()
		_, err = l.LoadSnapshot(path, opts)
		return err
	}
	if err := load(save(t, key), key); err != nil {
		t.Errorf("same key: %v; want loaded", err)
	}
	if err := load(save(t, []byte("another key, not the one in use")), key); !errors.Is(err, ErrInvalidSnapshot) {
		t.Errorf("another key: %v; want ErrInvalidSnapshot", err)
	}
	if err := load(save(t, nil), key); !errors.Is(err, ErrInvalidSnapshot) {
		t.Errorf("no HMAC: %v; want ErrInvalidSnapshot", err)
	}
	if err := load(save(t, key), nil); !errors.Is(err, ErrInvalidSnapshot) {
		t.Errorf("HMAC but no key to check it: %v; want ErrInvalidSnapshot", err)
	}
	edited := save(t, key)
	b, _ := os.ReadFile(edited)
	b[len(b)/2] ^= 1
	if err := os.WriteFile(edited, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := load(edited, key); !errors.Is(err, ErrInvalidSnapshot) {
		t.Errorf("edited: %v; want ErrInvalidSnapshot", err)
	}
}
