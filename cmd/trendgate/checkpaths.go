package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"trendgate/config"
	"trendgate/state"
)

// checkWritablePaths reports, for config check, every file the gateway
// must be able to write at start but cannot: state.path and keys_file,
// each with its setting and whether its directory is missing, not a
// directory or not writable. serve refuses to start on each of them, so a
// check that passed would promise a start that fails (a systemd
// ExecStartPre of config check, a CI step). cache.persist_path is not
// here: a gateway that cannot save its cache still serves, and config
// check only warns about it.
// Each error names the file being checked (file) first.
func checkWritablePaths(file string, cfg *config.Config) (failed map[string]bool, err error) {
	failed = map[string]bool{}
	var errs []error
	for _, f := range []struct{ setting, path string }{
		{"state.path", cfg.State.Path},
		{"keys_file", cfg.KeysFile},
	} {
		if f.path == "" {
			continue
		}
		if err := checkWritable(f.path); err != nil {
			failed[f.setting] = true
			errs = append(errs, fmt.Errorf("%s: %s: %w", file, f.setting, err))
		}
	}
	return failed, errors.Join(errs...)
}

// checkWritable says why a file could not be written at path.
func checkWritable(path string) error {
	dir := filepath.Dir(path)
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("the directory %s of %s does not exist (create it, writable by the gateway's user)", dir, path)
	case err != nil:
		return fmt.Errorf("the directory %s of %s: %w", dir, path, err)
	case !fi.IsDir():
		return fmt.Errorf("%s (the directory of %s) is not a directory", dir, path)
	}
	if err := state.CheckPath(path); err != nil {
		return fmt.Errorf("%s cannot be written: %w", path, err)
	}
	return nil
}

// warningOf reports whether w is the warning of one of the settings in
// failed (config.Warnings starts each with its setting).
func warningOf(w string, failed map[string]bool) bool {
	setting, _, _ := strings.Cut(w, ":")
	return failed[setting]
}
