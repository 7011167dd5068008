package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// serverWait bounds the wait for a private server to answer.
const serverWait = 15 * time.Second

// Server is a private redis-server subprocess on a loopback port, for a
// test that stops, kills, pauses or restarts it (the shared Redis at Addr
// is for everything else). StartServer starts it; it is killed when the
// test ends.
type Server struct {
	t      testing.TB
	port   int
	args   []string
	cmd    *exec.Cmd     // nil while stopped
	exited chan struct{} // closed once cmd has exited and been reaped
}

// StartServer starts a private redis-server on a free loopback port and
// waits until it answers. Without the redis-server binary the test is
// skipped, or failed when CI=true. Without persist nothing is kept on
// disk, so a restarted server comes back empty; with persist it keeps an
// append-only file, fsynced on every write, in a test directory, so a
// SIGKILL loses no write it answered and a restart brings them back.
func StartServer(t testing.TB, persist bool) *Server {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("redistest: redis-server not installed and CI=true: %v", err)
		}
		t.Skipf("redistest: test needs the redis-server binary, skipping: %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	s := &Server{t: t, port: port, args: []string{"--save", "", "--appendonly", "no"}}
	if persist {
		s.args = []string{"--save", "", "--appendonly", "yes", "--appendfsync", "always", "--dir", t.TempDir()}
	}
	t.Cleanup(s.Stop)
	s.Start()
	return s
}

// Addr is the server's host:port.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// Start launches the process (again, after Stop) on the same port and
// waits, bounded, until it answers PING.
func (s *Server) Start() {
	s.t.Helper()
	s.cmd = exec.Command("redis-server", append([]string{"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1"}, s.args...)...)
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("redistest: start redis-server: %v", err)
	}
	cmd, exited := s.cmd, make(chan struct{})
	s.exited = exited
	go func() { _ = cmd.Wait(); close(exited) }()
	if err := awaitPing(s.Addr(), cmd.Process.Pid, serverWait, exited); err != nil {
		s.t.Fatalf("redistest: redis-server on port %d: %v", s.port, err)
	}
}

// errExited is awaitPing's error when the process exited before answering.
var errExited = errors.New("exited before answering")

// awaitPing polls addr with PING until it answers, the process whose exit
// closes exited is gone, or wait has passed. Once addr answers, the
// server's process id must be pid: a redis-server that cannot bind its
// port exits at once, and another one already on that port (a node of the
// same cluster given the same port, another test's server) would answer
// in its place, which is an error, not a start.
func awaitPing(addr string, pid int, wait time.Duration, exited <-chan struct{}) error {
	rc := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer rc.Close()
	deadline := time.Now().Add(wait)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := rc.Ping(ctx).Err()
		var info string
		if err == nil {
			info, err = rc.Info(ctx, "server").Result()
		}
		cancel()
		if err == nil {
			if got, ok := infoField(info, "process_id"); !ok || got != strconv.Itoa(pid) {
				return fmt.Errorf("%s is answered by process %q, not by the redis-server started (pid %d): port taken", addr, got, pid)
			}
			return nil
		}
		select {
		case <-exited:
			return errExited
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no answer within %s: %w", wait, err)
		}
		time.Sleep(10 * time.Millisecond) // polling a subprocess, not waiting for time to pass
	}
}

// infoField returns the value of field in the text of an INFO reply.
func infoField(info, field string) (string, bool) {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimRight(line, "\r\n"), field+":"); ok {
			return v, true
		}
	}
	return "", false
}

// Stop kills the process and reaps it; stopping twice is harmless.
func (s *Server) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.exited
	s.cmd = nil
}

// Signal sends sig to the running process (SIGSTOP and SIGCONT hang and
// resume it).
func (s *Server) Signal(sig os.Signal) error {
	if s.cmd == nil || s.cmd.Process == nil {
		return os.ErrProcessDone
	}
	return s.cmd.Process.Signal(sig)
}
