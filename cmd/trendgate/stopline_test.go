package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"trendgate/internal/testing/syncbuf"
)

// stopConfig serves plain HTTP on %[1]s, admin off, in front of an
// upstream that is never called.
const stopConfig = `server:
  listen: %[1]s
  shutdown_timeout: 2s
admin:
  listen: "off"
upstream:
  base_url: http://127.0.0.1:9
  api_key: upstream-test-credential
`

// lastLogLine decodes the last JSON line of logs.
func lastLogLine(t *testing.T, logs string) map[string]any {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(logs), "\n")
	var m map[string]any
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &m); err != nil {
		t.Fatalf("last log line %q: %v\nlog:\n%s", lines[len(lines)-1], err, logs)
	}
	return m
}

// checkUptime checks that the stop line's uptime is a duration with its
// unit (the logger encodes every duration that way).
func checkUptime(t *testing.T, line map[string]any) {
	t.Helper()
	s, ok := line["uptime"].(string)
	if !ok {
		t.Fatalf("uptime %v (%T); want a duration string with its unit", line["uptime"], line["uptime"])
	}
	if _, err := time.ParseDuration(s); err != nil {
		t.Errorf("uptime %q: %v", s, err)
	}
}

// TestServeLogsStopLine: whatever ends "trendgate serve", its last log
// line says so: a signal (run as a child process, to send it a real
// SIGTERM) or an error (here a listen address already taken).
func TestServeLogsStopLine(t *testing.T) {
	t.Run("signal", func(t *testing.T) {
		addr := freeLoopbackPort(t)
		cfgFile := filepath.Join(t.TempDir(), "trendgate.yaml")
		if err := os.WriteFile(cfgFile, fmt.Appendf(nil, stopConfig, addr), 0o600); err != nil {
			t.Fatal(err)
		}
		logs := &syncbuf.Buffer{}
		cmd := exec.Command(os.Args[0], "serve", "-config", cfgFile, "-watch", "0")
		cmd.Env = append(os.Environ(), childEnv+"=1")
		cmd.Stdout, cmd.Stderr = logs, logs
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		t.Cleanup(func() {
			if cmd.ProcessState == nil {
				_ = cmd.Process.Kill()
				<-exited
			}
		})
		deadline := time.Now().Add(30 * time.Second)
		for {
			conn, err := net.DialTimeout("tcp", addr, time.Second)
			if err == nil {
				conn.Close()
				break
			}
			select {
			case werr := <-exited:
				t.Fatalf("trendgate serve exited during start: %v\n%s", werr, logs.String())
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("trendgate serve did not listen on %s within 30s", addr)
			}
			time.Sleep(20 * time.Millisecond) // polling a child process, not waiting for time to pass
		}
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("exit after SIGTERM: %v; want status 0", err)
			}
		case <-time.After(30 * time.Second): // only ends a broken test
			t.Fatal("trendgate serve still running 30s after SIGTERM")
		}
		line := lastLogLine(t, logs.String())
		if line["msg"] != "stopped" || line["level"] != "info" || line["reason"] != "terminated signal received" {
			t.Errorf("last log line %v; want msg stopped, level info, reason \"terminated signal received\"", line)
		}
		checkUptime(t, line)
	})

	t.Run("error", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		cfgFile := filepath.Join(t.TempDir(), "trendgate.yaml")
		if err := os.WriteFile(cfgFile, fmt.Appendf(nil, stopConfig, ln.Addr()), 0o600); err != nil {
			t.Fatal(err)
		}
		var stdout, stderr syncbuf.Buffer
		err = run([]string{"serve", "-config", cfgFile, "-watch", "0"}, strings.NewReader(""), &stdout, &stderr)
		var opErr *net.OpError
		if !errors.As(err, &opErr) {
			t.Fatalf("serve on a taken address: %v; want a listen error", err)
		}
		line := lastLogLine(t, stderr.String())
		if line["msg"] != "stopped" || line["level"] != "error" || line["reason"] != "error" || !strings.Contains(fmt.Sprint(line["error"]), "address already in use") {
			t.Errorf("last log line %v; want msg stopped, level error, reason error and the listen error", line)
		}
		checkUptime(t, line)
	})
}
