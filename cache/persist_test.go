package cache

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"trendgate/api"
)

// testOrigin is the upstream the test snapshots are written for.
const testOrigin = "https://lunarcrush.com"

// snapOpts are the limits the tests save and load with, at now. Their
// Revalidate is "today's config": the lifetimes sampleEntries were built
// with, by key (0 for any other key: stale at once).
func snapOpts(now time.Time) SnapshotOptions {
	return SnapshotOptions{MaxBytes: 1 << 20, MaxStale: 24 * time.Hour, Now: now, Origin: testOrigin,
		Revalidate: lifetimesOf(sampleEntries())}
}

// lifetimesOf returns a Revalidate that gives each key the freshness
// lifetime its entry in es had, counted from the loaded entry's fetch time.
func lifetimesOf(es []*Entry) func(*Entry, api.Request) (time.Time, error) {
	ttl := make(map[string]time.Duration, len(es))
	for _, e := range es {
		ttl[e.Key] = e.FreshUntil.Sub(e.Fetched)
	}
	return func(e *Entry, _ api.Request) (time.Time, error) { return e.Fetched.Add(ttl[e.Key]), nil }
}

func newTestLocal(t *testing.T) *Local {
	t.Helper()
	l, err := NewLocal(1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	return l
}

// sampleEntries are entries of every endpoint with canonical keys, fetched
// a minute apart before t0 (the first is the newest).
func sampleEntries() []*Entry {
	es := []*Entry{
		entry("v2|list", "", t0.Add(-1*time.Minute), 10*time.Minute, `{"data":[{"topic":"bitcoin"}]}`),
		entry("v2|whatsup|bitcoin", "bitcoin", t0.Add(-2*time.Minute), time.Hour, `{"summary":"up"}`),
		entry("v2|series|#ai|hour|1w||", "#ai", t0.Add(-3*time.Minute), 10*time.Minute, `{"data":[]}`),
		entry("v2|series|ai agents|day||1763164800|1763683200", "ai agents", t0.Add(-4*time.Minute), time.Hour, `{"data":[{"time":1}]}`),
		entry("v2|tsv|$btc|sentiment", "$btc", t0.Add(-5*time.Minute), 15*time.Minute, "time\tsentiment\n"),
		entry("v2|whatsup|nosuchtopic", "nosuchtopic", t0.Add(-6*time.Minute), time.Minute, `{"error":"not found"}`),
	}
	es[5].Status = 404
	es[1].Generated = 1763806000
	return es
}

// TestSnapshotRoundTrip: what one tier saves, another loads, field for
// field, from a 0600 file, with no temporary file left behind.
func TestSnapshotRoundTrip(t *testing.T) {
	src := newTestLocal(t)
	want := sampleEntries()
	for _, e := range want {
		src.Set(t.Context(), e)
	}
	path := filepath.Join(t.TempDir(), "cache.snap")
	saved, err := src.SaveSnapshot(path, snapOpts(t0))
	if err != nil {
		t.Fatal(err)
	}
	if saved.Entries != len(want) || len(saved.Dropped) != 0 {
		t.Fatalf("save: got %+v; want %d entries, none dropped", saved, len(want))
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 || fi.Size() != saved.Bytes {
		t.Errorf("file: mode %v size %d; want 0600 and %d bytes", fi.Mode().Perm(), fi.Size(), saved.Bytes)
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".*")); len(left) != 0 {
		t.Errorf("files left beside the snapshot: %v", left)
	}

	dst := newTestLocal(t)
	loaded, err := dst.LoadSnapshot(path, snapOpts(t0.Add(time.Minute)))
	if err != nil {
		t.Fatal(err)
	}
	if loaded.Entries != len(want) || len(loaded.Dropped) != 0 {
		t.Fatalf("load: got %+v; want %d entries, none dropped", loaded, len(want))
	}
	for _, w := range want {
		got, ok := dst.Get(t.Context(), w.Key)
		if !ok {
			t.Errorf("%q: not loaded", w.Key)
			continue
		}
		if !sameEntry(got, w) {
			t.Errorf("%q: got %+v; want %+v", w.Key, got, w)
		}
	}
	if got := dst.TopicKeys(t.Context(), "bitcoin"); len(got) != 1 || got[0] != "v2|whatsup|bitcoin" {
		t.Errorf("topic index after load: got %v; want [v2|whatsup|bitcoin]", got)
	}
}

// saveSample writes sampleEntries to a snapshot and returns its path and
// bytes.
func saveSample(t *testing.T) (string, []byte) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "cache.snap")
	if _, err := writeSnapshot(path, sampleEntries(), snapOpts(t0)); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return path, data
}

// TestSnapshotRejectsBadFiles: a file that is foreign, of another version,
// corrupt or truncated anywhere loads nothing and says why.
func TestSnapshotRejectsBadFiles(t *testing.T) {
	path, good := saveSample(t)
	headerLen := len(appendHeader(nil, t0, testOrigin))
	flip := func(i int) []byte {
		b := bytes.Clone(good)
		b[i] ^= 0x40
		return b
	}
	tests := []struct {
		name string
		data []byte
		want string // in the error
	}{
		{"empty file", nil, "header"},
		{"foreign file", []byte(`{"entries":[]}` + strings.Repeat(" ", 64)), "not a trendgate cache snapshot"},
		{"other format version", flip(len(snapshotMagic)), "format version"},
		{"other entry schema", flip(len(snapshotMagic) + 1), "entry schema version"},
		{"header bit flipped", flip(len(snapshotMagic) + 3), "header: checksum mismatch"},
		{"written for another upstream", otherOrigin(t), "written for another upstream"},
		{"entry body bit flipped", flip(len(good) / 2), "checksum mismatch"},
		{"record length corrupt", flip(headerLen + 1), "record 0"},
		{"unknown tag", flip(headerLen), "unknown tag"},
		{"trailer count wrong", fixTrailer(good, 5), "trailer counts 5 records, file has 6"},
		{"bytes after the trailer", append(bytes.Clone(good), 0), "bytes after the trailer"},
	}
	// Truncated at every length: no prefix of a snapshot is one.
	for n := range len(good) {
		tests = append(tests, struct {
			name string
			data []byte
			want string
		}{"truncated to " + strconv.Itoa(n) + " bytes", good[:n], ""})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.WriteFile(path, tc.data, 0o600); err != nil {
				t.Fatal(err)
			}
			l := newTestLocal(t)
			stats, err := l.LoadSnapshot(path, snapOpts(t0))
			if !errors.Is(err, ErrInvalidSnapshot) {
				t.Fatalf("got %v; want an error wrapping ErrInvalidSnapshot", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q; want it to contain %q", err, tc.want)
			}
			if l.Len() != 0 || stats.Entries != 0 {
				t.Errorf("loaded %d entries (stats %+v) from a bad file; want none", l.Len(), stats)
			}
		})
	}
}

// otherOrigin is a sound snapshot of sampleEntries written for another
// upstream.
func otherOrigin(t *testing.T) []byte {
	t.Helper()
	path := filepath.Join(t.TempDir(), "other.snap")
	opts := snapOpts(t0)
	opts.Origin = "http://127.0.0.1:18080"
	if _, err := writeSnapshot(path, sampleEntries(), opts); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// fixTrailer rewrites a snapshot's trailer (the last 6 bytes for a small
// count) to claim count records, with a valid checksum.
func fixTrailer(good []byte, count uint64) []byte {
	b := bytes.Clone(good[:len(good)-6])
	tr := binary.AppendUvarint([]byte{tagTrailer}, count)
	tr = binary.BigEndian.AppendUint32(tr, crc32.Checksum(tr, crcTable))
	return append(b, tr...)
}

// TestSnapshotDropsEntries: entries of a sound file that must not be served
// are left out one by one, each for its reason, and the rest load.
func TestSnapshotDropsEntries(t *testing.T) {
	now := t0
	ok := entry("v2|whatsup|bitcoin", "bitcoin", now.Add(-time.Minute), time.Hour, `{"summary":"up"}`)
	tests := []struct {
		name   string
		e      *Entry
		reason string
	}{
		{"tampered key: not canonical", entry("v2|whatsup|Bitcoin", "bitcoin", now, time.Hour, "{}"), DropKey},
		{"tampered key: other version", entry("v0|whatsup|bitcoin", "bitcoin", now, time.Hour, "{}"), DropKey},
		{"tampered key: window bound not canonical", entry("v2|series|bitcoin|hour||1763164802|1763805600", "bitcoin", now, time.Hour, "{}"), DropKey},
		{"topic differs from the key's", entry("v2|whatsup|ethereum", "bitcoin", now, time.Hour, "{}"), DropKey},
		{"status never cached", func() *Entry { e := entry("v2|whatsup|eth", "eth", now, time.Hour, "{}"); e.Status = 500; return e }(), DropStatus},
		{"fetched in the future", entry("v2|whatsup|sol", "sol", now.Add(time.Minute), time.Hour, "{}"), DropFetched},
		{"fetch time unknown", func() *Entry {
			e := entry("v2|whatsup|ada", "ada", now, time.Hour, "{}")
			e.Fetched = time.Time{}
			return e
		}(), DropFetched},
		{"past max stale", entry("v2|whatsup|doge", "doge", now.Add(-26*time.Hour), time.Hour, "{}"), DropExpired},
		{"exactly at max stale", entry("v2|whatsup|xrp", "xrp", now.Add(-25*time.Hour), time.Hour, "{}"), DropExpired},
		{"duplicate key", entry("v2|whatsup|bitcoin", "bitcoin", now.Add(-2*time.Minute), time.Hour, `{"summary":"old"}`), DropDuplicate},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "cache.snap")
			// Written as an older instance (or an editor) might have: save
			// does not judge keys.
			if _, err := writeSnapshot(path, []*Entry{ok, tc.e}, SnapshotOptions{MaxBytes: 1 << 20, MaxStale: 100 * time.Hour, Now: now, Origin: testOrigin}); err != nil {
				t.Fatal(err)
			}
			l := newTestLocal(t)
			stats, err := l.LoadSnapshot(path, snapOpts(now))
			if err != nil {
				t.Fatal(err)
			}
			if stats.Entries != 1 || stats.Dropped[tc.reason] != 1 || len(stats.Dropped) != 1 {
				t.Errorf("stats: got %+v; want 1 entry and 1 dropped for %q", stats, tc.reason)
			}
			if got, found := l.Get(t.Context(), ok.Key); !found || !sameEntry(got, ok) {
				t.Errorf("the sound entry: got %+v, %v; want it loaded as saved", got, found)
			}
			if tc.e.Key != ok.Key {
				if _, found := l.Get(t.Context(), tc.e.Key); found {
					t.Errorf("%q was loaded; want it dropped", tc.e.Key)
				}
			}
		})
	}
}

// TestSnapshotSaveSkipsExpired: entries that could not be served any more
// are not written.
func TestSnapshotSaveSkipsExpired(t *testing.T) {
	l := newTestLocal(t)
	l.Set(t.Context(), entry("v2|list", "", t0.Add(-30*time.Hour), time.Hour, "{}"))
	l.Set(t.Context(), entry("v2|whatsup|bitcoin", "bitcoin", t0, time.Hour, "{}"))
	stats, err := l.SaveSnapshot(filepath.Join(t.TempDir(), "s"), snapOpts(t0))
	if err != nil {
		t.Fatal(err)
	}
	if stats.Entries != 1 || stats.Dropped[DropExpired] != 1 {
		t.Errorf("stats: got %+v; want 1 entry written and 1 expired left out", stats)
	}
}

// TestSnapshotSizeBound: the file never exceeds MaxBytes, the newest
// entries are the ones kept, and a load under a smaller bound keeps the
// newest that fit.
func TestSnapshotSizeBound(t *testing.T) {
	l := newTestLocal(t)
	body := strings.Repeat("x", 1000)
	topics := []string{"a1", "a2", "a3", "a4", "a5", "a6", "a7", "a8", "a9", "b1"}
	for i, tp := range topics { // a1 is the newest
		l.Set(t.Context(), entry("v2|whatsup|"+tp, tp, t0.Add(-time.Duration(i)*time.Minute), time.Hour, body))
	}
	const bound = 4500 // room for four ~1040-byte records plus header and trailer
	path := filepath.Join(t.TempDir(), "cache.snap")
	saved, err := l.SaveSnapshot(path, SnapshotOptions{MaxBytes: bound, MaxStale: time.Hour, Now: t0, Origin: testOrigin})
	if err != nil {
		t.Fatal(err)
	}
	if saved.Entries != 4 || saved.Dropped[DropBound] != 6 || saved.Bytes > bound {
		t.Fatalf("save: got %+v; want 4 entries, 6 dropped for the bound, at most %d bytes", saved, bound)
	}
	loaded := newTestLocal(t)
	stats, err := loaded.LoadSnapshot(path, SnapshotOptions{MaxBytes: 2200, MaxStale: time.Hour, Now: t0, Origin: testOrigin})
	if err != nil {
		t.Fatal(err)
	}
	if stats.Entries != 2 || stats.Dropped[DropBound] != 2 {
		t.Fatalf("load under a smaller bound: got %+v; want 2 loaded, 2 dropped for the bound", stats)
	}
	for i, tp := range topics {
		_, found := loaded.Get(t.Context(), "v2|whatsup|"+tp)
		if want := i < 2; found != want {
			t.Errorf("%s loaded: got %v; want %v (the newest two)", tp, found, want)
		}
	}
}

// TestSnapshotFailedSaveKeepsOldFile: a save that cannot complete leaves
// the previous snapshot in place and no temporary file.
func TestSnapshotFailedSaveKeepsOldFile(t *testing.T) {
	path, good := saveSample(t)
	l := newTestLocal(t)
	l.Set(t.Context(), entry("v2|list", "", t0, time.Hour, "{}"))
	if _, err := l.SaveSnapshot(path, SnapshotOptions{MaxBytes: 0, Now: t0}); err == nil {
		t.Fatal("save with MaxBytes 0: got nil error")
	}
	// A directory where the file should be: the rename fails.
	dirPath := filepath.Join(filepath.Dir(path), "isdir")
	if err := os.Mkdir(dirPath, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dirPath, "x"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := l.SaveSnapshot(dirPath, snapOpts(t0)); err == nil {
		t.Fatal("save over a non-empty directory: got nil error")
	}
	if data, _ := os.ReadFile(path); !bytes.Equal(data, good) {
		t.Error("the previous snapshot changed")
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".*")); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

// TestCheckPersistPath: what config check reports about persist_path.
func TestCheckPersistPath(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, path string
		want       string // "" for no error
	}{
		{"writable directory", filepath.Join(dir, "cache.snap"), ""},
		{"existing snapshot", file, ""},
		{"missing directory", filepath.Join(dir, "nope", "cache.snap"), "no such file or directory"},
		{"path is a directory", dir, "is a directory"},
		{"parent is a file", filepath.Join(file, "cache.snap"), "is not a directory"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckPersistPath(tc.path)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("got %v; want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("got %v; want an error containing %q", err, tc.want)
			}
		})
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".*")); len(left) != 0 {
		t.Errorf("probe files left: %v", left)
	}
}

// BenchmarkSnapshot saves and loads a local tier of 10,000 entries with
// 4 KiB bodies (about 41 MB of snapshot), as a drain and a start would.
func BenchmarkSnapshot(b *testing.B) {
	const n = 10_000
	body := bytes.Repeat([]byte("x"), 4<<10)
	src, err := NewLocal(256<<20, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer src.Close()
	for i := range n {
		tp := "t" + strconv.Itoa(i)
		src.Set(b.Context(), entry("v2|whatsup|"+tp, tp, t0.Add(-time.Duration(i)*time.Millisecond), time.Hour, string(body)))
	}
	opts := SnapshotOptions{MaxBytes: 256 << 20, MaxStale: 24 * time.Hour, Now: t0, Origin: testOrigin}
	path := filepath.Join(b.TempDir(), "cache.snap")

	b.Run("save", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if s, err := src.SaveSnapshot(path, opts); err != nil || s.Entries != n {
				b.Fatalf("save: %+v %v", s, err)
			}
		}
	})
	b.Run("load", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			b.StopTimer()
			dst, err := NewLocal(256<<20, nil)
			if err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			if s, err := dst.LoadSnapshot(path, opts); err != nil || s.Entries != n {
				b.Fatalf("load: %+v %v", s, err)
			}
			b.StopTimer()
			dst.Close()
			b.StartTimer()
		}
	})
}
