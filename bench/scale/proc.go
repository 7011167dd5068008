package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// process is a child process the bench started and stops.
type process struct {
	name   string
	cmd    *exec.Cmd
	exited chan struct{}
	log    string // file holding its stdout and stderr
}

// start runs argv with its output in dir/name.log and env added to this
// process's environment. The child gets SIGKILL if the bench dies first,
// so nothing it starts outlives it.
func start(dir, name string, env []string, argv ...string) (*process, error) {
	logPath := filepath.Join(dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, exited: make(chan struct{}), log: logPath}
	go func() {
		_ = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

func (p *process) pid() int { return p.cmd.Process.Pid }

// alive reports whether the process has not exited yet.
func (p *process) alive() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// stop sends SIGTERM and, after grace, SIGKILL; it waits for the exit.
func (p *process) stop(grace time.Duration) {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// tail returns the last lines of the process's log, for error messages.
func (p *process) tail() string {
	b, _ := os.ReadFile(p.log)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	return strings.Join(lines, "\n")
}

// countLog returns how many lines of the process's log contain msg (a
// JSON log line's "msg":"..." member, say).
func (p *process) countLog(msg string) (int, error) {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return 0, err
	}
	return strings.Count(string(b), msg), nil
}

// waitLog polls the log until a line containing one of msgs appears past
// the before[i] lines with msgs[i] seen earlier, the process exits or ctx
// ends. It returns the index of the msg seen and its line.
func (p *process) waitLog(ctx context.Context, msgs []string, before []int) (int, string, error) {
	for {
		b, err := os.ReadFile(p.log)
		if err != nil {
			return -1, "", err
		}
		seen := make([]int, len(msgs))
		for _, line := range strings.Split(string(b), "\n") {
			for i, m := range msgs {
				if strings.Contains(line, m) {
					if seen[i] == before[i] {
						return i, line, nil
					}
					seen[i]++
				}
			}
		}
		select {
		case <-p.exited:
			return -1, "", fmt.Errorf("%s exited:\n%s", p.name, p.tail())
		case <-ctx.Done():
			return -1, "", ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// logTime returns the time a JSON log line was written (its "ts" member,
// ISO 8601 with milliseconds), which is when the event happened: the log
// reaches the file up to a second later (it is buffered).
func logTime(line string) (time.Time, error) {
	var l struct {
		TS string `json:"ts"`
	}
	if err := json.Unmarshal([]byte(line), &l); err != nil {
		return time.Time{}, fmt.Errorf("log line: %w", err)
	}
	for _, layout := range []string{"2006-01-02T15:04:05.000Z0700", time.RFC3339Nano} {
		if t, err := time.Parse(layout, l.TS); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("log line: unknown time %q", l.TS)
}

// clockTick is the unit of /proc's CPU times (USER_HZ, 100 on Linux).
const clockTick = 10 * time.Millisecond

// procCPU returns the user+system CPU time of pid so far, from
// /proc/PID/stat.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseStatCPU(string(b))
}

// parseStatCPU reads utime+stime (fields 14 and 15) from a /proc/PID/stat
// line. The command name (field 2) is in parentheses and may hold spaces:
// the fields that follow start after the last ')'.
func parseStatCPU(s string) (time.Duration, error) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, errors.New("/proc/PID/stat: no command name")
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state): utime is field 14, stime 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/PID/stat: %d fields", len(f)+2)
	}
	utime, err := strconv.ParseInt(f[11], 10, 64)
	if err != nil {
		return 0, err
	}
	stime, err := strconv.ParseInt(f[12], 10, 64)
	if err != nil {
		return 0, err
	}
	return time.Duration(utime+stime) * clockTick, nil
}

// procRSS returns the resident set size of pid in bytes (VmRSS of
// /proc/PID/status).
func procRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	return procField(string(b), "VmRSS", 1024)
}

// procWrites returns the bytes pid caused to be sent to the storage layer
// so far (write_bytes of /proc/PID/io): what reaches the disk, not what
// write(2) was asked to write.
func procWrites(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return 0, err
	}
	return procField(string(b), "write_bytes", 1)
}

// procField finds "name: value [kB]" in a /proc file's text and returns
// value × unit.
func procField(text, name string, unit int64) (int64, error) {
	for _, line := range strings.Split(text, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || k != name {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			break
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", name, err)
		}
		return n * unit, nil
	}
	return 0, fmt.Errorf("no %s line", name)
}

// cpuTrace samples a process's CPU time every 10 ms (the resolution of
// /proc's CPU times), so that the CPU spent up to an instant learnt later
// (a log line's time) can be read back.
type cpuTrace struct {
	pid     int
	done    chan struct{}
	stopped chan struct{}
	samples []cpuSample // owned by the sampling goroutine until stopped closes
	err     error
}

type cpuSample struct {
	at  time.Time
	cpu time.Duration
}

func startCPUTrace(pid int) *cpuTrace {
	t := &cpuTrace{pid: pid, done: make(chan struct{}), stopped: make(chan struct{})}
	t.sample()
	go func() {
		defer close(t.stopped)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-t.done:
				t.sample()
				return
			case <-tick.C:
				t.sample()
			}
		}
	}()
	return t
}

func (t *cpuTrace) sample() {
	c, err := procCPU(t.pid)
	if err != nil {
		if t.err == nil {
			t.err = err
		}
		return
	}
	t.samples = append(t.samples, cpuSample{time.Now(), c})
}

// stop ends the sampling and waits for it.
func (t *cpuTrace) stop() {
	close(t.done)
	<-t.stopped
}

// until returns the CPU time spent from the first sample to the first
// sample taken at or after at (after stop).
func (t *cpuTrace) until(at time.Time) (time.Duration, error) {
	if t.err != nil {
		return 0, t.err
	}
	if len(t.samples) == 0 {
		return 0, errors.New("no CPU sample")
	}
	first := t.samples[0]
	for _, s := range t.samples {
		if !s.at.Before(at) {
			return s.cpu - first.cpu, nil
		}
	}
	return t.samples[len(t.samples)-1].cpu - first.cpu, nil
}
