package deploy_test

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"trendgate/config"
)

const (
	unitFile    = "systemd/trendgate.service"
	acmeExample = "systemd/config.acme.yaml"
)

// unit is a systemd unit file: section → key → values in order (a key may
// repeat).
type unit map[string]map[string][]string

func readUnit(t *testing.T, path string) unit {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	u, section := unit{}, ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = line[1 : len(line)-1]
			u[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Fatalf("%s:%d: not KEY=VALUE in a section: %q", path, n, line)
			}
			u[section][k] = append(u[section][k], v)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return u
}

// last is the value in force for key (the last one written), or "".
func (u unit) last(section, key string) string {
	vs := u[section][key]
	if len(vs) == 0 {
		return ""
	}
	return vs[len(vs)-1]
}

// TestSystemdUnit checks the hardened unit and the ACME example it runs:
// the hardening docs/deploy.md promises is there, the example config passes
// trendgate's validation, binds the privileged ports the unit's one
// capability allows, keeps its state in the unit's StateDirectory, and
// fits the unit's memory and stop timeout. With systemd-analyze
// installed, systemd itself verifies the unit too.
func TestSystemdUnit(t *testing.T) {
	u := readUnit(t, unitFile)
	for key, want := range map[string]string{
		"ProtectSystem":          "strict",
		"NoNewPrivileges":        "yes",
		"CapabilityBoundingSet":  "CAP_NET_BIND_SERVICE",
		"AmbientCapabilities":    "CAP_NET_BIND_SERVICE",
		"ProtectHome":            "yes",
		"PrivateTmp":             "yes",
		"PrivateDevices":         "yes",
		"RestrictSUIDSGID":       "yes",
		"MemoryDenyWriteExecute": "yes",
		"ConfigurationDirectory": "trendgate",
		"StateDirectory":         "trendgate",
	} {
		if got := u.last("Service", key); got != want {
			t.Errorf("%s=%q; want %q", key, got, want)
		}
	}
	if u.last("Service", "DynamicUser") != "yes" && u.last("Service", "User") == "" {
		t.Error("neither DynamicUser=yes nor a dedicated User=")
	}
	const cfgPath = "/etc/trendgate/config.yaml"
	if got, want := u.last("Service", "ExecStart"), "/usr/local/bin/trendgate serve -config "+cfgPath; got != want {
		t.Errorf("ExecStart=%q; want %q", got, want)
	}
	if u.last("Install", "WantedBy") == "" {
		t.Error("no [Install] WantedBy=: systemctl enable would do nothing")
	}

	data, err := os.ReadFile(acmeExample)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"TRENDGATE_UPSTREAM_KEY": "upstream-credential", "TRENDGATE_ADMIN_TOKEN": "admin-token"}
	cfg, err := config.Parse(data, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatalf("%s: %v", acmeExample, err)
	}
	if cfg.TLS.Mode != config.TLSModeACME {
		t.Errorf("tls.mode %q; want acme", cfg.TLS.Mode)
	}
	for setting, addr := range map[string]string{"server.listen": cfg.Server.Listen, "tls.http_listen": cfg.TLS.HTTPListen} {
		if port := listenPort(t, setting, addr); port >= 1024 {
			t.Errorf("%s %q: the example is about ports 80 and 443", setting, addr)
		}
	}
	state := "/var/lib/" + u.last("Service", "StateDirectory") + "/"
	for setting, p := range map[string]string{"tls.acme.storage": cfg.TLS.ACME.Storage, "cache.persist_path": cfg.Cache.PersistPath, "state.path": cfg.State.Path, "keys_file": cfg.KeysFile} {
		if !strings.HasPrefix(filepath.Clean(p)+"/", state) {
			t.Errorf("%s %q is not under %s, the only directory ProtectSystem=strict leaves writable", setting, p, state)
		}
	}
	mem := u.last("Service", "MemoryMax")
	n, err := strconv.ParseInt(strings.TrimSuffix(mem, "M"), 10, 64)
	if err != nil || !strings.HasSuffix(mem, "M") {
		t.Fatalf("MemoryMax=%q: want NM", mem)
	}
	if rule := cfg.Cache.MaxBytes + cfg.Cache.MaxBytes/4 + 48<<20; n<<20 < rule {
		t.Errorf("MemoryMax=%s is under the sizing rule (docs/operations.md) for cache.max_bytes %d: %d bytes", mem, cfg.Cache.MaxBytes, rule)
	}
	stop, err := time.ParseDuration(u.last("Service", "TimeoutStopSec"))
	if err != nil {
		t.Errorf("TimeoutStopSec=%s: %v", u.last("Service", "TimeoutStopSec"), err)
	}
	checkSafe(t, cfg, []string{state}, stop)

	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Log("systemd-analyze not installed; the unit was checked by the rules above only")
		return
	}
	// systemd-analyze verify wants ExecStart's binary to exist: point the
	// unit at a binary that does.
	trueBin, err := exec.LookPath("true")
	if err != nil {
		t.Skip("no true binary")
	}
	raw, err := os.ReadFile(unitFile)
	if err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(t.TempDir(), "trendgate.service")
	if err := os.WriteFile(tmp, []byte(strings.ReplaceAll(string(raw), "/usr/local/bin/trendgate", trueBin)), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, analyze, "verify", tmp).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}
