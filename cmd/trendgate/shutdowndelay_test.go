package main

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"trendgate/auth"
	"trendgate/demo"
	"trendgate/internal/testing/syncbuf"
)

// delayConfig serves plain HTTP on public and the admin routes on their own
// listener, with server.shutdown_delay and server.shutdown_timeout set.
const delayConfig = `server:
  listen: %[1]s
  shutdown_delay: %[2]s
  shutdown_timeout: 2s
admin:
  listen: %[3]s
log:
  level: info
upstream:
  base_url: %[4]s
  api_key: upstream-test-credential
keys:
  - id: load
    sha256: %[5]s
    plan: full
    per_second: 1000000000
    burst: 1000000000
    daily: 1000000000000
    monthly: 1000000000000
`

// TestServeShutdownDelay runs "trendgate serve" as a child process, sends
// it requests at a fixed rate, each on a new connection, and sends SIGTERM.
// With server.shutdown_delay 3s, every request sent during the delay must
// be answered 200 (none refused), /readyz must answer 503 from 50 ms after
// the signal on, new connections 0.5, 1.5 and 2.5 s after SIGTERM
// must be answered 200 while /readyz answers 503, and the process must
// then exit with status 0. Without the delay (the regression of issue 42)
// a new connection 0.5 s after SIGTERM is refused. A second SIGTERM ends
// the delay at once.
//
// It uses real time: the process under test runs on the wall clock and a
// real signal. The load is bounded (one request every 50 ms for 3 s).
func TestServeShutdownDelay(t *testing.T) {
	up, err := demo.New(demo.Options{APIKey: "upstream-test-credential"})
	if err != nil {
		t.Fatal(err)
	}
	upSrv := httptest.NewServer(up)
	t.Cleanup(func() { up.Close(); upSrv.Close() })

	tests := []struct {
		name  string
		delay time.Duration
		// twice sends a second SIGTERM once /readyz answers 503, which
		// must end the delay at once.
		twice bool
	}{
		{"delay 3s", 3 * time.Second, false},
		{"no delay", 0, false},
		{"second signal skips an hour's delay", time.Hour, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			key, err := auth.Generate()
			if err != nil {
				t.Fatal(err)
			}
			public, admin := freeLoopbackPort(t), freeLoopbackPort(t)
			cfgFile := filepath.Join(t.TempDir(), "trendgate.yaml")
			yaml := fmt.Sprintf(delayConfig, public, tc.delay, admin, upSrv.URL, auth.Digest(key))
			if err := os.WriteFile(cfgFile, []byte(yaml), 0o600); err != nil {
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
				if t.Failed() {
					t.Logf("trendgate serve's log:\n%s", logs.String())
				}
			})

			// Every request on a new connection, as a load balancer that
			// picks a backend per connection would send it.
			client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
			get := func(url, bearer string) (int, error) {
				req, err := http.NewRequest(http.MethodGet, url, nil)
				if err != nil {
					return 0, err
				}
				if bearer != "" {
					req.Header.Set("Authorization", "Bearer "+bearer)
				}
				resp, err := client.Do(req)
				if err != nil {
					return 0, err
				}
				resp.Body.Close()
				return resp.StatusCode, nil
			}
			api := "http://" + public + "/api4/public/topics/list/v1"
			readyz := "http://" + admin + "/readyz"
			awaitReady(t, get, readyz, exited)
			if status, err := get(api, key); status != http.StatusOK {
				t.Fatalf("GET before SIGTERM: %d, %v; want 200", status, err)
			}

			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			signalled := time.Now()
			if tc.twice {
				deadline := time.Now().Add(10 * time.Second)
				for status, _ := get(readyz, ""); status != http.StatusServiceUnavailable; status, _ = get(readyz, "") {
					if time.Now().After(deadline) {
						t.Fatalf("/readyz not 503 within 10s of SIGTERM: %d", status)
					}
					time.Sleep(20 * time.Millisecond) // polling a child process
				}
				if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
					t.Fatal(err)
				}
				awaitExit(t, exited, 10*time.Second)
				if !strings.Contains(logs.String(), "the rest of server.shutdown_delay skipped") {
					t.Error("no skip log line")
				}
				return
			}
			if tc.delay == 0 {
				time.Sleep(500 * time.Millisecond) // real time of the process under test
				if status, err := get(api, key); err == nil {
					t.Errorf("GET 0.5 s after SIGTERM without a delay: %d; want the connection refused (the listener is closed)", status)
				}
				awaitExit(t, exited, 5*time.Second)
				return
			}

			// The load: one request every 50 ms, from 50 ms after the
			// signal (its delivery takes a moment) until 0.3 s before the
			// delay ends, and /readyz with each; 0.5, 1.5 and 2.5 s are
			// among its times.
			const every = 50 * time.Millisecond
			var sent, failed, readyDuring int
			for at := every; at < tc.delay-300*time.Millisecond; at += every {
				time.Sleep(time.Until(signalled.Add(at)))
				if time.Since(signalled) > tc.delay-200*time.Millisecond {
					break // running late on a busy host: past the delay's end, the listeners close
				}
				sent++
				if status, err := get(api, key); status != http.StatusOK {
					failed++
					t.Errorf("GET %v after SIGTERM: %d, %v; want 200 during server.shutdown_delay", time.Since(signalled).Round(time.Millisecond), status, err)
				}
				if status, err := get(readyz, ""); status != http.StatusServiceUnavailable {
					readyDuring++
					t.Errorf("/readyz %v after SIGTERM: %d, %v; want 503", time.Since(signalled).Round(time.Millisecond), status, err)
				}
			}
			t.Logf("%d requests during the delay, %d failed; /readyz other than 503: %d", sent, failed, readyDuring)
			if sent < 10 {
				t.Errorf("only %d requests during the delay; want the load to cover it", sent)
			}

			// The delay, then the drain (shutdown_timeout 2s, nothing in
			// flight), then the exit.
			awaitExit(t, exited, tc.delay+5*time.Second)
			if took := time.Since(signalled); took < tc.delay {
				t.Errorf("exited %v after SIGTERM; want not before server.shutdown_delay %v", took, tc.delay)
			}
			if !strings.Contains(logs.String(), "still serving for server.shutdown_delay") {
				t.Error("no shutdown_delay log line")
			}
		})
	}
}

// awaitReady polls /readyz (bounded) until it answers 200, failing the
// test if the child exits first.
func awaitReady(t *testing.T, get func(url, bearer string) (int, error), readyz string, exited <-chan error) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		status, err := get(readyz, "")
		if status == http.StatusOK {
			return
		}
		select {
		case werr := <-exited:
			t.Fatalf("trendgate serve exited during start: %v", werr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not 200 within 30s: %d, %v", readyz, status, err)
		}
		if _, ok := err.(net.Error); err != nil && !ok && !strings.Contains(err.Error(), "connection refused") {
			t.Fatalf("%s: %v", readyz, err)
		}
		time.Sleep(20 * time.Millisecond) // polling a child process, not waiting for time to pass
	}
}

// awaitExit waits up to limit for the child to exit, which must be with
// status 0.
func awaitExit(t *testing.T, exited <-chan error, limit time.Duration) {
	t.Helper()
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("trendgate serve after SIGTERM: %v; want exit status 0", err)
		}
	case <-time.After(limit): // only ends a broken test
		t.Fatalf("trendgate serve still running %v after SIGTERM", limit)
	}
}
