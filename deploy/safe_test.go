package deploy_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"trendgate/config"
)

// stateFiles are the files a gateway writes to outlive a restart
// (docs/restarts.md), by setting: every shipped example sets all three.
func stateFiles(cfg *config.Config) map[string]string {
	return map[string]string{
		"state.path":         cfg.State.Path,
		"keys_file":          cfg.KeysFile,
		"cache.persist_path": cfg.Cache.PersistPath,
	}
}

// checkSafe checks a shipped example's config for the safe setup (issue
// 42): state.path, keys_file and cache.persist_path set, each under one of
// the writable directories dirs (a volume, a StateDirectory), no warning
// from config check (but the ones about those files' directories, which
// exist only where the gateway runs: `config check` there fails on them),
// a shutdown delay, and a stop timeout (stop) above the delay plus the
// drain.
func checkSafe(t *testing.T, cfg *config.Config, dirs []string, stop time.Duration) {
	t.Helper()
	for setting, p := range stateFiles(cfg) {
		if p == "" {
			t.Errorf("%s is empty: the example must keep it across restarts", setting)
			continue
		}
		under := false
		for _, d := range dirs {
			under = under || strings.HasPrefix(filepath.Clean(p), filepath.Clean(d)+"/")
		}
		if !under {
			t.Errorf("%s %q is not under a writable directory that outlives the process (%v)", setting, p, dirs)
		}
	}
	for _, w := range cfg.Warnings() {
		setting, _, _ := strings.Cut(w, ":")
		if p, ok := stateFiles(cfg)[setting]; ok && p != "" {
			continue // its directory is checked above, and where it runs
		}
		t.Errorf("config check warns: %s", w)
	}
	if cfg.Server.ShutdownDelay <= 0 {
		t.Error("server.shutdown_delay is 0: a restart refuses new connections at once")
	}
	if min := cfg.Server.ShutdownDelay + cfg.Server.ShutdownTimeout; stop <= min {
		t.Errorf("stop timeout %v: want more than server.shutdown_delay + server.shutdown_timeout (%v), with time for the last writes", stop, min)
	}
}
