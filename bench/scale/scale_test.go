package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"trendgate/auth"
	"trendgate/config"
)

func TestParseSetups(t *testing.T) {
	tests := []struct {
		in      string
		want    []setup
		wantErr bool
	}{
		{in: "100", want: []setup{{keys: 100}}},
		{in: "100, 10000,100000/10000", want: []setup{{keys: 100}, {keys: 10000}, {keys: 100000, accounts: 10000}}},
		{in: "0", wantErr: true},
		{in: "10/20", wantErr: true}, // more accounts than keys
		{in: "10/x", wantErr: true},
		{in: "", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := parseSetups(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("parseSetups(%q) error = %v; want error %v", tc.in, err, tc.wantErr)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("parseSetups(%q) = %v; want %v", tc.in, got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("parseSetups(%q)[%d] = %v; want %v", tc.in, i, got[i], tc.want[i])
				}
			}
		})
	}
}

// TestRenderedFileLoads checks that the generated files are configurations
// the gateway accepts, with the keys and accounts asked for; that a key
// appended by the reload step is one more valid key; and that the file
// config check gets is refused for a syntax mistake on its last line.
func TestRenderedFileLoads(t *testing.T) {
	t.Setenv(envAdminToken, "bench-admin-token")
	t.Setenv(envUpstreamKey, "bench-upstream-key")
	for _, s := range []setup{{keys: 30}, {keys: 30, accounts: 7}} {
		t.Run(s.name(), func(t *testing.T) {
			ks, err := newKeySet(s)
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			g := gatewayFile{
				listen: "127.0.0.1:1", admin: "127.0.0.1:2", upstream: "http://127.0.0.1:3",
				statePath: filepath.Join(dir, "state"), keysFile: filepath.Join(dir, "keys.yaml"),
			}
			file := ks.render(g)
			path := filepath.Join(dir, "trendgate.yaml")
			if err := writeFile(path, file); err != nil {
				t.Fatal(err)
			}
			cfg, err := config.Load(path)
			if err != nil {
				t.Fatalf("config.Load: %v", err)
			}
			if got := len(cfg.Keys); got != s.keys {
				t.Errorf("keys = %d; want %d", got, s.keys)
			}
			if got := len(cfg.Accounts); got != s.accounts {
				t.Errorf("accounts = %d; want %d", got, s.accounts)
			}
			if got, want := cfg.Keys[5].SHA256, auth.Digest(ks.secrets[5]); got != want {
				t.Errorf("keys[5].sha256 = %s; want the digest of its secret %s", got, want)
			}
			if strings.Contains(string(file), ks.secrets[5]) {
				t.Error("the file holds a secret; want only digests")
			}

			added := append(append([]byte(nil), file...), ks.keyLines("reload-added", "a secret")...)
			if err := writeFile(path, added); err != nil {
				t.Fatal(err)
			}
			cfg, err = config.Load(path)
			if err != nil {
				t.Fatalf("config.Load with a key appended: %v", err)
			}
			if got, want := cfg.Keys[len(cfg.Keys)-1].ID, "reload-added"; got != want {
				t.Errorf("last key = %s; want %s", got, want)
			}

			if err := writeFile(path, breakLastLine(file)); err != nil {
				t.Fatal(err)
			}
			_, err = config.Load(path)
			lastLine := strings.Count(strings.TrimRight(string(file), "\n"), "\n") + 1
			if want := fmt.Sprintf("line %d:", lastLine); err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("config.Load of the broken file: %v; want a syntax error naming its last line (%q)", err, want)
			}
		})
	}
}

func TestProcReaders(t *testing.T) {
	cpu, err := parseStatCPU("4242 (a (tricky) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 30 0 0 20 0 1 0")
	if err != nil {
		t.Fatal(err)
	}
	if want := 280 * clockTick; cpu != want {
		t.Errorf("parseStatCPU = %s; want %s", cpu, want)
	}
	rss, err := procField("Name:\tx\nVmRSS:\t   2048 kB\n", "VmRSS", 1024)
	if err != nil || rss != 2048*1024 {
		t.Errorf("procField(VmRSS) = %d, %v; want %d", rss, err, 2048*1024)
	}
	if _, err := procField("rchar: 1\n", "write_bytes", 1); err == nil {
		t.Error("procField of a missing line: no error")
	}
	// This process's own files parse (the bench reads its children's).
	if _, err := procRSS(os.Getpid()); err != nil {
		t.Errorf("procRSS(self): %v", err)
	}
	if _, err := procWrites(os.Getpid()); err != nil {
		t.Errorf("procWrites(self): %v", err)
	}
	if _, err := procCPU(os.Getpid()); err != nil {
		t.Errorf("procCPU(self): %v", err)
	}
}

func TestLogTime(t *testing.T) {
	got, err := logTime(`{"level":"info","ts":"2026-11-27T11:04:14.599Z","msg":"config reloaded","keys":100}`)
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Date(2026, 11, 27, 11, 4, 14, 599e6, time.UTC); !got.Equal(want) {
		t.Errorf("logTime = %s; want %s", got, want)
	}
	if _, err := logTime(`{"msg":"no time"}`); err == nil {
		t.Error("logTime of a line without ts: no error")
	}
}

func TestQuantile(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 100; i++ {
		d = append(d, time.Duration(i))
	}
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 50}, {0.99, 99}, {1, 100}, {0, 1}} {
		if got := quantile(d, tc.q); got != tc.want {
			t.Errorf("quantile(1..100, %v) = %d; want %d", tc.q, got, tc.want)
		}
	}
}

// TestCPUTraceUntil checks that the CPU time read back for an instant is
// that of the first sample at or after it.
func TestCPUTraceUntil(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	tr := &cpuTrace{samples: []cpuSample{
		{t0, 100 * clockTick},
		{t0.Add(10 * time.Millisecond), 103 * clockTick},
		{t0.Add(20 * time.Millisecond), 110 * clockTick},
	}}
	for _, tc := range []struct {
		at   time.Time
		want time.Duration
	}{
		{t0, 0},
		{t0.Add(5 * time.Millisecond), 3 * clockTick},
		{t0.Add(10 * time.Millisecond), 3 * clockTick},
		{t0.Add(time.Second), 10 * clockTick}, // past the last sample: all of it
	} {
		got, err := tr.until(tc.at)
		if err != nil || got != tc.want {
			t.Errorf("until(%s) = %s, %v; want %s", tc.at.Sub(t0), got, err, tc.want)
		}
	}
}
