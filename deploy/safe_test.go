package deploy_test

import (
	"os"
	"path/filepath"
	"strconv"
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

// TestDockerRunExample: the `docker run` example of docs/deploy.md
// ("Docker") is the safe setup too: its config (the YAML block there)
// passes config.Parse and checkSafe, with the state files on the volume
// the command mounts and its delay and drain within --stop-timeout.
func TestDockerRunExample(t *testing.T) {
	src, err := os.ReadFile("../docs/deploy.md")
	if err != nil {
		t.Fatal(err)
	}
	_, docker, ok := strings.Cut(string(src), "\n## Docker\n")
	if !ok {
		t.Fatal(`docs/deploy.md has no "## Docker" section`)
	}
	docker, _, _ = strings.Cut(docker, "\n## ")
	block := func(lang string) string {
		_, rest, ok := strings.Cut(docker, "```"+lang+"\n")
		if !ok {
			t.Fatalf("no %s block in the Docker section", lang)
		}
		body, _, _ := strings.Cut(rest, "```")
		return body
	}
	var run string
	for rest := docker; ; {
		_, after, ok := strings.Cut(rest, "```sh\n")
		if !ok {
			break
		}
		body, tail, _ := strings.Cut(after, "```")
		if strings.Contains(body, "docker run") {
			run = strings.ReplaceAll(body, "\\\n", " ")
		}
		rest = tail
	}
	if run == "" {
		t.Fatal("no docker run command in the Docker section")
	}
	var dirs []string
	var stop time.Duration
	args := strings.Fields(run)
	for i, a := range args {
		switch {
		case a == "-v" && i+1 < len(args):
			if parts := strings.Split(args[i+1], ":"); len(parts) == 2 {
				dirs = append(dirs, parts[1]) // writable (no :ro)
			}
		case a == "--stop-timeout" && i+1 < len(args):
			n, err := strconv.Atoi(args[i+1])
			if err != nil {
				t.Fatalf("--stop-timeout %q: %v", args[i+1], err)
			}
			stop = time.Duration(n) * time.Second
		}
	}
	env := map[string]string{"TRENDGATE_UPSTREAM_KEY": "upstream-credential", "TRENDGATE_ADMIN_TOKEN": "admin-token"}
	cfg, err := config.Parse([]byte(block("yaml")), func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatalf("the Docker section's config: %v", err)
	}
	checkSafe(t, cfg, dirs, stop)
}
