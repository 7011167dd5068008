package keystore

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"trendgate/config"
	"trendgate/internal/clock"
)

// TestKeysFileLog checks the keys file's life: records appended one per
// edit, a torn last record (a crash mid-append) left out and the file
// then written whole, a file of the YAML form read and turned into a log,
// compaction after compactEvery records, and tombstones past the
// retention dropped by it.
func TestKeysFileLog(t *testing.T) {
	cfg := base(t)
	clk := clock.NewFake(t0)
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "keys.yaml")
	opts := Options{Path: path, Clock: clk, Base: func() *config.Config { return cfg }, Retention: 48 * time.Hour}
	s, err := Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	lines := func() int {
		b, _ := os.ReadFile(path)
		return bytes.Count(b, []byte{'\n'}) - strings.Count(fileHeader, "\n")
	}
	for _, id := range []string{"a1", "a2", "a3"} {
		if _, _, err := s.Create(ctx, NewKey{ID: id, Account: "acme"}); err != nil {
			t.Fatal(err)
		}
	}
	if n := lines(); n != 3 {
		t.Fatalf("after 3 creates the file holds %d records; want 3 (a snapshot, then appends)", n)
	}
	if _, err := s.Revoke(ctx, "a2", "alice"); err != nil {
		t.Fatal(err)
	}

	// A crash mid-append: half a record at the end.
	b, _ := os.ReadFile(path)
	if err := os.WriteFile(path, append(b, []byte("0123abcd {\"patch\":{\"vers")...), 0o600); err != nil {
		t.Fatal(err)
	}
	s2, err := Open(ctx, opts)
	if err != nil {
		t.Fatalf("opening a file with a torn last record: %v", err)
	}
	if d := s2.Doc(); d.Version != 4 || d.apiKey("a2").Revoked == nil || d.apiKey("a2").RevokedBy != "alice" {
		t.Fatalf("after the torn record: version %d, a2 %+v", d.Version, d.apiKey("a2"))
	}
	if _, _, err := s2.Create(ctx, NewKey{ID: "a4", Account: "acme"}); err != nil {
		t.Fatal(err)
	}
	if n := lines(); n != 1 {
		t.Fatalf("the write after a torn record holds %d records; want the file whole (1 snapshot)", n)
	}
	// A record damaged in the middle is not a torn end: refused.
	b, _ = os.ReadFile(path)
	if _, _, err := s2.Create(ctx, NewKey{ID: "a5", Account: "acme"}); err != nil {
		t.Fatal(err)
	}
	good, _ := os.ReadFile(path)
	bad := append([]byte{}, good...)
	bad[len(b)+12] ^= 1 // inside the record after the snapshot
	bad = append(bad, good[len(b):]...)
	if err := os.WriteFile(path, bad, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(ctx, opts); err == nil || !strings.Contains(err.Error(), "record") {
		t.Fatalf("a damaged record before the end: %v; want an error naming the record", err)
	}
	if err := os.WriteFile(path, good, 0o600); err != nil {
		t.Fatal(err)
	}

	// The YAML form of earlier versions reads as a snapshot.
	legacy := "# trendgate keys file\nversion: 2\nkeys:\n  - id: old\n    sha256: " + digest(t) + "\n    account: acme\n    created: 2026-11-01T00:00:00Z\n"
	if err := os.WriteFile(path, []byte(legacy), 0o600); err != nil {
		t.Fatal(err)
	}
	s3, err := Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if k, ok := s3.Doc().Key(cfg, "old"); !ok || k.Account != "acme" {
		t.Fatalf("the YAML file's key: %+v %v", k, ok)
	}
	if _, err := s3.Revoke(ctx, "old", "bob"); err != nil {
		t.Fatal(err)
	}
	if n := lines(); n != 1 {
		t.Fatalf("the first write after a YAML file holds %d records; want 1 snapshot", n)
	}

	// Compaction: past the retention, the tombstone of "old" is dropped
	// when the file is written whole.
	clk.Advance(72 * time.Hour)
	i := 0
	for ; lines() <= compactEvery; i++ { // a snapshot and compactEvery records
		if _, _, err := s3.Create(ctx, NewKey{ID: "c" + itoa(i), Account: "acme"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := s3.Create(ctx, NewKey{ID: "c" + itoa(i), Account: "acme"}); err != nil {
		t.Fatal(err)
	}
	if n := lines(); n != 1 {
		t.Fatalf("after %d records the file holds %d; want it compacted", compactEvery, n)
	}
	d, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if d.apiKey("old") != nil {
		t.Fatal("a tombstone past the retention survived the compaction")
	}
	if d.Version != s3.Doc().Version {
		t.Fatalf("file version %d, in force %d", d.Version, s3.Doc().Version)
	}
}

// itoa is i in letters, for key ids.
func itoa(i int) string {
	return string(rune('a'+i%26)) + string(rune('a'+i/26%26)) + string(rune('a'+i/676%26))
}
