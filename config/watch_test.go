package config

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// reload is one onChange call.
type reload struct {
	cfg *Config
	err error
}

// waitReload returns the next onChange call. The timeout only guards
// against a hang; the test drives Run through Trigger, not through time.
func waitReload(t *testing.T, ch <-chan reload) reload {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no onChange call after Trigger")
		return reload{}
	}
}

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestWatcherTrigger(t *testing.T) {
	path := filepath.Join(t.TempDir(), "trendgate.yaml")
	writeFile(t, path, "server:\n  listen: 127.0.0.1:8001\n")
	ch := make(chan reload, 4)
	// An hour-long interval: every reload below comes from Trigger.
	w := NewWatcher(path, time.Hour, nil, func(c *Config, err error) { ch <- reload{c, err} })
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); w.Run(ctx) }()
	defer func() { cancel(); wg.Wait() }()

	steps := []struct {
		name       string
		text       string // "" keeps the file as it is
		wantListen string // "" wants an error
	}{
		{"changed file", "server:\n  listen: 127.0.0.1:8002\n", "127.0.0.1:8002"},
		{"unchanged file still reloads on Trigger", "", "127.0.0.1:8002"},
		{"broken file", "server:\n  listen: [\n", ""},
		{"invalid file", "log:\n  level: loud\n", ""},
		{"fixed file", "server:\n  listen: 127.0.0.1:8003\n", "127.0.0.1:8003"},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			if st.text != "" {
				writeFile(t, path, st.text)
			}
			w.Trigger()
			r := waitReload(t, ch)
			if st.wantListen == "" {
				if r.err == nil || r.cfg != nil {
					t.Fatalf("onChange(%v, %v); want (nil, error)", r.cfg, r.err)
				}
				return
			}
			if r.err != nil {
				t.Fatalf("onChange error = %v; want nil", r.err)
			}
			if got := r.cfg.Server.Listen; got != st.wantListen {
				t.Errorf("server.listen = %q; want %q", got, st.wantListen)
			}
		})
	}
}

func TestWatcherTriggerBeforeRun(t *testing.T) {
	path := filepath.Join(t.TempDir(), "trendgate.yaml")
	writeFile(t, path, "")
	ch := make(chan reload, 1)
	w := NewWatcher(path, 0, nil, func(c *Config, err error) { ch <- reload{c, err} })
	w.Trigger()
	w.Trigger() // merged with the first
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	if r := waitReload(t, ch); r.err != nil || r.cfg == nil {
		t.Fatalf("onChange(%v, %v); want a config", r.cfg, r.err)
	}
	cancel()
	<-done
	if len(ch) != 0 {
		t.Errorf("two Triggers before Run caused %d extra reloads; want 0", len(ch))
	}
}

// TestWatcherPoll drives the polling check directly: it must reload only
// when the content changed, not when the file was merely touched.
func TestWatcherPoll(t *testing.T) {
	path := filepath.Join(t.TempDir(), "trendgate.yaml")
	writeFile(t, path, "server:\n  listen: 127.0.0.1:8001\n")
	var calls []reload
	w := NewWatcher(path, time.Hour, nil, func(c *Config, err error) { calls = append(calls, reload{c, err}) })
	touch := func(t *testing.T, d time.Duration) {
		t.Helper()
		at := time.Now().Add(d)
		if err := os.Chtimes(path, at, at); err != nil {
			t.Fatal(err)
		}
	}

	steps := []struct {
		name      string
		change    func(t *testing.T)
		wantCalls int
		wantErr   bool
	}{
		{"nothing changed", func(*testing.T) {}, 0, false},
		{"touched, same content", func(t *testing.T) { touch(t, time.Minute) }, 0, false},
		{"new content", func(t *testing.T) {
			writeFile(t, path, "server:\n  listen: 127.0.0.1:8009\n")
			touch(t, 2*time.Minute)
		}, 1, false},
		{"removed", func(t *testing.T) {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		}, 1, true},
		{"still removed: reported once", func(*testing.T) {}, 0, false},
		{"back again", func(t *testing.T) { writeFile(t, path, "") }, 1, false},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			calls = nil
			st.change(t)
			w.check(false)
			if len(calls) != st.wantCalls {
				t.Fatalf("onChange calls = %d; want %d", len(calls), st.wantCalls)
			}
			if st.wantCalls == 1 && (calls[0].err != nil) != st.wantErr {
				t.Errorf("onChange error = %v; want error %v", calls[0].err, st.wantErr)
			}
		})
	}
}

// TestWatcherLeavesReportingToOnChange is a regression test: a refused
// reload was logged twice, by the watcher and by serve's onChange. With an
// onChange the watcher logs nothing; without one it logs each outcome.
func TestWatcherLeavesReportingToOnChange(t *testing.T) {
	for _, withCallback := range []bool{true, false} {
		path := filepath.Join(t.TempDir(), "trendgate.yaml")
		writeFile(t, path, "server:\n  listen: 127.0.0.1:8001\n")
		core, logs := observer.New(zap.DebugLevel)
		calls := 0
		var onChange func(*Config, error)
		if withCallback {
			onChange = func(*Config, error) { calls++ }
		}
		w := NewWatcher(path, 0, zap.New(core), onChange)
		writeFile(t, path, "server:\n  listn: 127.0.0.1:8002\n")
		w.check(true)
		writeFile(t, path, "server:\n  listen: 127.0.0.1:8003\n")
		w.check(true)
		want := 0
		if !withCallback {
			want = 2
		}
		if got := logs.Len(); got != want {
			t.Errorf("with onChange %v: %d watcher log lines; want %d", withCallback, got, want)
		}
		if withCallback && calls != 2 {
			t.Errorf("onChange called %d times; want 2", calls)
		}
	}
}
