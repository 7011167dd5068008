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
func WriteFunc(path string, perm os.FileMode, write func(io.Writer) error) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	if err = f.Chmod(perm); err != nil {
		return err
	}
	if err = write(f); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp, path); err != nil {
		return err
	}
	d, derr := os.Open(dir)
	if derr == nil {
		derr = d.Sync()
		_ = d.Close()
	}
	if derr != nil {
		return fmt.Errorf("%w: %w", ErrNotDurable, derr)
	}
	return nil
}
