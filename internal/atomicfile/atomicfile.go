// Package atomicfile replaces a file whole: a reader of the path finds the
// complete old content or the complete new one, never a mix, and a crash
// at any point leaves one of the two. It is the one file writer of the
// gateway for files that must never be seen half written (the cache
// snapshot, the state file, the keys file).
package atomicfile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// ErrNotDurable is wrapped by the error of a write whose new file is in
// place at path but whose directory could not be synced, so the rename
// itself might not survive a power cut. A caller for whom the file in
// place is enough may treat it as success.
var ErrNotDurable = errors.New("atomicfile: directory not synced")

// Write stores b at path with mode perm, as WriteFunc does.
func Write(path string, b []byte, perm os.FileMode) error {
	return WriteFunc(path, perm, func(w io.Writer) error {
		_, err := w.Write(b)
		return err
	})
}

// WriteFunc stores at path, with mode perm, what write writes to the
// writer it is given: it writes a temporary file in the same directory,
// syncs it, renames it over path and syncs the directory, so that the
// rename itself survives a power cut. An error from write, or any failure
// before the rename, leaves the previous file as it was and no temporary
// file behind; write's error is returned as it is. A failed directory sync
// returns an error wrapping ErrNotDurable with the new file in place.
func WriteFunc(path string, perm os.FileMode, write func(io.Writer) error) error {
	p, err := Create(path, perm)
	if err != nil {
		return err
	}
	if err := write(p.f); err != nil {
		p.Abort()
		return err
	}
	return p.Commit()
}

// Pending is a replacement of a file, written under a temporary name in
// the same directory until Commit puts it in place (as WriteFunc does) or
// Abort drops it. It lets a caller write most of the new content without
// holding a lock and add, under the lock, what changed meanwhile before
// the swap. It is not safe for concurrent use.
type Pending struct {
	f         *os.File
	path, dir string
}

// Create starts a replacement of path with mode perm.
func Create(path string, perm os.FileMode) (*Pending, error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return nil, err
	}
	if err := f.Chmod(perm); err != nil {
		_ = f.Close()
		_ = os.Remove(f.Name())
		return nil, err
	}
	return &Pending{f: f, path: path, dir: dir}, nil
}

// Write appends b to the new content.
func (p *Pending) Write(b []byte) (int, error) { return p.f.Write(b) }

// Sync flushes what was written so far to the disk, so that Commit has
// only the rest to sync.
func (p *Pending) Sync() error { return p.f.Sync() }

// Commit syncs the new file, renames it over the path and syncs the
// directory. Any failure before the rename leaves the previous file as it
// was and removes the temporary one; a failed directory sync returns an
// error wrapping ErrNotDurable with the new file in place.
func (p *Pending) Commit() error {
	tmp := p.f.Name()
	err := p.f.Sync()
	if cerr := p.f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, p.path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return err
	}
	d, err := os.Open(p.dir)
	if err == nil {
		err = d.Sync()
		_ = d.Close()
	}
	if err != nil {
		return fmt.Errorf("%w: %w", ErrNotDurable, err)
	}
	return nil
}

// Abort drops the new file; the previous one stays as it was.
func (p *Pending) Abort() {
	_ = p.f.Close()
	_ = os.Remove(p.f.Name())
}
