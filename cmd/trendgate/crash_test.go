package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"trendgate/auth"
	"trendgate/demo"
)

// TestKillKeepsQuotas is issue 30's crash test, on the real process: the
// gateway binary is built, started on loopback with a state file and
// driven by concurrent clients; it is killed with SIGKILL mid-load,
// restarted on the same file, and the quota counters it comes back with
// are compared with the 2xx responses the clients received:
//
//   - never fewer (a crash forgets no unit a customer was charged for),
//   - at most the reservation ahead (1% of the quota) plus the requests in
//     flight at the kill more (docs/restarts.md, "The crash bound"),
//   - and a key that had spent its quota is still refused.
func TestKillKeepsQuotas(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills the trendgate binary; skipped with -short")
	}
	dir := t.TempDir()
	bin := buildTrendgate(t, dir)

	up, err := demo.New(demo.Options{APIKey: "upstream-test-credential"})
	if err != nil {
		t.Fatal(err)
	}
	upSrv := httptest.NewServer(up)
	t.Cleanup(func() { upSrv.Close(); up.Close() })

	prod, team := mustKey(t), mustKey(t)
	const prodDaily, teamDaily, workers = 20000, 30, 8
	public, admin := freePort(t), freePort(t)
	cfgPath := filepath.Join(dir, "trendgate.yaml")
	cfg := fmt.Sprintf(`server:
  listen: %s
admin:
  listen: %s
log:
  level: warn
  access: false
upstream:
  base_url: %s
  api_key: upstream-test-credential
state:
  path: %s
  flush_interval: 1s
keys:
  - id: acme-prod
    sha256: %s
    plan: full
    per_second: 100000
    burst: 100000
    daily: %d
    monthly: 400000
  - id: analytics-team
    sha256: %s
    plan: full
    per_second: 100000
    burst: 100000
    daily: %d
`, public, admin, upSrv.URL, filepath.Join(dir, "state"), auth.Digest(prod), prodDaily, auth.Digest(team), teamDaily)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	url := "http://" + public + "/api4/public/topics/list/v1"
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: workers}}
	defer client.CloseIdleConnections()

	first := startTrendgate(t, bin, cfgPath, admin)
	// serve ran itself again with the steady runtime monitor (sysmon.go),
	// in the same process, which the kill below stops.
	if env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", first.cmd.Process.Pid)); err == nil &&
		!bytes.Contains(env, []byte("GODEBUG="+steadySysmon)) {
		t.Errorf("the serving process's environment has no GODEBUG=%s:\n%s", steadySysmon, bytes.ReplaceAll(env, []byte{0}, []byte{'\n'}))
	}
	if got := statuses(t, client, url, team, teamDaily+5); got[200] != teamDaily || got[429] != 5 {
		t.Fatalf("analytics-team before the kill: %v; want %d × 200 and 5 × 429", got, teamDaily)
	}

	// Load: workers send requests until the kill; the one whose answer is
	// the killAt-th 2xx kills the process while the others are in flight.
	const killAt, maxPerWorker = 3000, 5000
	var delivered atomic.Int64
	var killOnce sync.Once
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range maxPerWorker {
				status, err := get(client, url, prod)
				if err != nil {
					return // the process is gone
				}
				if status != http.StatusOK {
					t.Errorf("acme-prod under load: status %d", status)
					return
				}
				if delivered.Add(1) >= killAt {
					killOnce.Do(first.kill)
				}
			}
		})
	}
	wg.Wait()
	killOnce.Do(first.kill) // in case the load ended first (it should not)
	got := delivered.Load()
	if got < killAt {
		t.Fatalf("only %d responses delivered before the load ended; want %d", got, killAt)
	}
	client.CloseIdleConnections()

	startTrendgate(t, bin, cfgPath, admin)
	if st := statuses(t, client, url, team, 1); st[429] != 1 {
		t.Errorf("analytics-team after the kill: %v; want still refused (its 30 were spent)", st)
	}
	used := dailyUsed(t, client, url, prod, prodDaily)
	// The reservation ahead (1% of the quota), the cost of a request that
	// waited for it, and the requests reserved but not delivered.
	bound := got + prodDaily/100 + 1 + workers
	t.Logf("acme-prod: %d responses delivered before the kill; %d units counted after the restart (bound %d)", got, used, bound)
	if used < got {
		t.Errorf("acme-prod after the kill: %d units counted; want at least the %d delivered", used, got)
	}
	if used > bound {
		t.Errorf("acme-prod after the kill: %d units counted; want at most %d (delivered %d + 1%% of %d + 1 + %d in flight)", used, bound, got, prodDaily, workers)
	}
}

// buildTrendgate builds this command into dir.
func buildTrendgate(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "trendgate")
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to build the binary: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, goBin, "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// process is a running trendgate.
type process struct {
	t    *testing.T
	cmd  *exec.Cmd
	done chan error
}

// startTrendgate runs `trendgate serve cfg` and waits, bounded, for its
// admin listener's /readyz to answer 200. It is killed when the test ends.
func startTrendgate(t *testing.T, bin, cfg, admin string) *process {
	t.Helper()
	cmd := exec.Command(bin, "serve", cfg, "-watch", "0")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &process{t: t, cmd: cmd, done: make(chan error, 1)}
	var logs syncLines
	go logs.collect(stderr)
	go func() { p.done <- cmd.Wait() }()
	t.Cleanup(p.kill)

	deadline := time.Now().Add(60 * time.Second)
	c := &http.Client{Timeout: time.Second}
	defer c.CloseIdleConnections()
	for {
		select {
		case err := <-p.done:
			p.done <- err
			t.Fatalf("trendgate exited before it was ready: %v\n%s", err, logs.String())
		default:
		}
		if resp, err := c.Get("http://" + admin + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("trendgate not ready within 60s\n%s", logs.String())
		}
		runtime.Gosched()
		time.Sleep(20 * time.Millisecond) // between polls, not to wait for time
	}
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *process) kill() {
	if p.cmd.ProcessState != nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	err := <-p.done
	p.done <- err
}

func get(c *http.Client, url, key string) (int, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return 0, err // not delivered whole
	}
	return resp.StatusCode, nil
}

func statuses(t *testing.T, c *http.Client, url, key string, n int) map[int]int {
	t.Helper()
	got := map[int]int{}
	for range n {
		st, err := get(c, url, key)
		if err != nil {
			t.Fatal(err)
		}
		got[st]++
	}
	return got
}

var dailyRemaining = regexp.MustCompile(`"daily";r=(\d+);`)

// dailyUsed sends one request and reads, from its RateLimit field, the
// units used before it.
func dailyUsed(t *testing.T, c *http.Client, url, key string, daily int64) int64 {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	m := dailyRemaining.FindStringSubmatch(resp.Header.Get("Ratelimit"))
	if resp.StatusCode != http.StatusOK || m == nil {
		t.Fatalf("status %d, RateLimit %q", resp.StatusCode, resp.Header.Get("Ratelimit"))
	}
	r, _ := strconv.ParseInt(m[1], 10, 64)
	return daily - r - 1
}

func mustKey(t *testing.T) string {
	t.Helper()
	k, err := auth.Generate()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// freePort returns a loopback address whose port was free a moment ago.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// syncLines collects a process's output for failure messages.
type syncLines struct {
	mu  sync.Mutex
	buf []byte
}

func (s *syncLines) collect(r io.Reader) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		s.mu.Lock()
		if len(s.buf) < 64<<10 {
			s.buf = append(append(s.buf, sc.Bytes()...), '\n')
		}
		s.mu.Unlock()
	}
}

func (s *syncLines) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return string(s.buf)
}
