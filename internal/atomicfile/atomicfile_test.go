package atomicfile

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// dirNames lists the names in dir, so a test can see a temporary file
// left behind.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

func TestWriteReplaces(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	for _, content := range []string{"old", "new content"} {
		if err := Write(path, []byte(content), 0o600); err != nil {
			t.Fatalf("Write(%q) = %v", content, err)
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != content {
			t.Fatalf("after Write(%q): read %q, %v; want %q", content, got, err, content)
		}
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != 0o600 {
		t.Errorf("mode = %v; want 0600", got)
	}
	if got := dirNames(t, dir); len(got) != 1 || got[0] != "f" {
		t.Errorf("directory holds %q; want only f (no temporary file)", got)
	}
}

func TestWriteFuncFailureKeepsOldFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	if err := Write(path, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err := WriteFunc(path, 0o600, func(w io.Writer) error {
		_, _ = io.WriteString(w, "half of the new")
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("WriteFunc = %v; want the write function's error", err)
	}
	if got, _ := os.ReadFile(path); string(got) != "old" {
		t.Errorf("after a failed write the file holds %q; want %q", got, "old")
	}
	if got := dirNames(t, dir); len(got) != 1 || got[0] != "f" {
		t.Errorf("directory holds %q; want only f (no temporary file)", got)
	}
}

// TestPending: until Commit the path holds the old content, whatever was
// written to the replacement in parts; Commit puts all the parts in place
// and Abort leaves the old file and no temporary one.
func TestPending(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	if err := Write(path, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	read := func() string {
		t.Helper()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}

	dropped, err := Create(path, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dropped.Write([]byte("never")); err != nil {
		t.Fatal(err)
	}
	dropped.Abort()
	if got := read(); got != "old" {
		t.Errorf("after Abort the file holds %q; want %q", got, "old")
	}
	if got := dirNames(t, dir); len(got) != 1 {
		t.Errorf("after Abort the directory holds %q; want only f", got)
	}

	p, err := Create(path, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	for _, part := range []string{"snapshot", "+record"} {
		if _, err := p.Write([]byte(part)); err != nil {
			t.Fatal(err)
		}
		if err := p.Sync(); err != nil {
			t.Fatal(err)
		}
		if got := read(); got != "old" {
			t.Errorf("before Commit the file holds %q; want %q", got, "old")
		}
	}
	if err := p.Commit(); err != nil {
		t.Fatal(err)
	}
	if got := read(); got != "snapshot+record" {
		t.Errorf("after Commit the file holds %q; want both parts", got)
	}
	if got := dirNames(t, dir); len(got) != 1 || got[0] != "f" {
		t.Errorf("after Commit the directory holds %q; want only f", got)
	}
}

func TestWriteMissingDirectory(t *testing.T) {
	path := filepath.Join(t.TempDir(), "missing", "f")
	if err := Write(path, []byte("x"), 0o600); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Write into a missing directory = %v; want fs.ErrNotExist", err)
	}
}

// TestOneWriter holds the rule that this package is the only atomic file
// writer: no other non-test file of the module both syncs a file and
// renames one into place.
func TestOneWriter(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root not found at %s: %v", root, err)
	}
	self := filepath.Join(root, "internal", "atomicfile")
	var checked int
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path == self || strings.HasPrefix(d.Name(), ".") && path != root {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		checked++
		src := string(b)
		if strings.Contains(src, "os.Rename(") && strings.Contains(src, ".Sync()") {
			rel, _ := filepath.Rel(root, path)
			t.Errorf("%s syncs and renames files itself; use atomicfile.WriteFunc", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 100 {
		t.Fatalf("checked %d Go files under %s; want the whole module", checked, root)
	}
}
