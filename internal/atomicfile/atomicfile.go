// Package atomicfile replaces a file whole: a reader of the path finds the
// complete old content or the complete new one, never a mix, and a crash
// at any point leaves one of the two.
package atomicfile

import (
	"fmt"
	"os"
	"path/filepath"
)

// Write stores b at path with mode perm: it writes a temporary file in the
// same directory, syncs it, renames it over path and syncs the directory,
// so that the rename itself survives a power cut. A failed Write leaves
// the previous file as it was and no temporary file behind.
func Write(path string, b []byte, perm os.FileMode) (err error) {
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
	if _, err = f.Write(b); err != nil {
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
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync directory: %w", err)
	}
	defer d.Close()
	if err = d.Sync(); err != nil {
		return fmt.Errorf("sync directory: %w", err)
	}
	return nil
}
