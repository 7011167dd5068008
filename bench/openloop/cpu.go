package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTick is the unit of /proc's CPU times (USER_HZ, 100 on Linux).
const clockTick = 10 * time.Millisecond

// procCPU returns the user+system CPU time of pid so far, from
// /proc/PID/stat, with that of its live children when children is set
// (nginx's workers do the work; its master only supervises).
func procCPU(pid int, children bool) (time.Duration, error) {
	total, _, err := statCPU(pid)
	if err != nil || !children {
		return total, err
	}
	kids, err := childrenOf(pid)
	if err != nil {
		return 0, err
	}
	for _, k := range kids {
		if t, _, err := statCPU(k); err == nil {
			total += t
		}
	}
	return total, nil
}

// childrenOf returns the live child processes of pid.
func childrenOf(pid int) ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var kids []int
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if _, ppid, err := statCPU(child); err == nil && ppid == pid {
			kids = append(kids, child)
		}
	}
	return kids, nil
}

// statCPU reads utime+stime and the parent pid from /proc/PID/stat.
func statCPU(pid int) (cpu time.Duration, ppid int, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces:
	// the fields that follow start after the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state): ppid is field 4, utime 14, stime 15.
	if len(f) < 13 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f)+2)
	}
	ppid, err = strconv.Atoi(f[1])
	if err != nil {
		return 0, 0, err
	}
	utime, err := strconv.ParseInt(f[11], 10, 64)
	if err != nil {
		return 0, 0, err
	}
	stime, err := strconv.ParseInt(f[12], 10, 64)
	if err != nil {
		return 0, 0, err
	}
	return time.Duration(utime+stime) * clockTick, ppid, nil
}

// threads returns, summed over every thread of pid so far, the context
// switches (voluntary and not, from /proc/PID/task/*/status) and the time
// spent runnable waiting for a CPU (the kernel's run queue, from
// /proc/PID/task/*/schedstat). Each time a thread sleeps (in epoll_wait,
// a futex) and is woken counts one switch, so per request they show the
// wake-ups and hand-offs between threads a server pays; the run-queue
// wait shows how long the host kept the server's threads off its CPUs
// when they had work. A thread that ends takes its counts with it.
func threads(pid int) (switches int64, runDelay time.Duration, err error) {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return 0, 0, err
	}
	for _, t := range tasks {
		dir := fmt.Sprintf("/proc/%d/task/%s/", pid, t.Name())
		b, err := os.ReadFile(dir + "status")
		if err != nil {
			continue // the thread ended
		}
		for _, line := range strings.Split(string(b), "\n") {
			k, v, ok := strings.Cut(line, ":")
			if ok && (k == "voluntary_ctxt_switches" || k == "nonvoluntary_ctxt_switches") {
				c, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				if err != nil {
					return 0, 0, err
				}
				switches += c
			}
		}
		// schedstat: time on a CPU, time waiting for one, timeslices (ns).
		b, err = os.ReadFile(dir + "schedstat")
		if err != nil {
			continue
		}
		f := strings.Fields(string(b))
		if len(f) < 2 {
			return 0, 0, fmt.Errorf("%sschedstat: %q", dir, b)
		}
		d, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			return 0, 0, err
		}
		runDelay += time.Duration(d)
	}
	return switches, runDelay, nil
}

// hostBusy returns the CPU time all processors spent neither idle nor in
// I/O wait so far (from /proc/stat), to show how loaded the host was.
func hostBusy() (time.Duration, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return 0, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	var busy int64
	for i, v := range f[1:] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, err
		}
		if i != 3 && i != 4 && i < 8 { // idle, iowait; guest times are already in user
			busy += n
		}
	}
	return time.Duration(busy) * clockTick, nil
}

// cpuMeter measures the CPU time of a server's processes, of this process
// (the load generator) and of the whole host over one step, and the
// server's threads' switches and run-queue wait.
type cpuMeter struct {
	pids               []int
	children           bool
	server, self, host time.Duration
	switches           int64
	runDelay           time.Duration
}

func startCPU(pids []int, children bool) (*cpuMeter, error) {
	m := &cpuMeter{pids: pids, children: children}
	var err error
	m.server, m.self, m.host, err = m.read()
	if err == nil {
		m.switches, m.runDelay, err = m.countThreads()
	}
	return m, err
}

// countThreads sums threads over the server's processes (with nginx's
// workers when children is set).
func (m *cpuMeter) countThreads() (switches int64, runDelay time.Duration, err error) {
	for _, pid := range m.pids {
		pids := []int{pid}
		if m.children {
			kids, err := childrenOf(pid)
			if err != nil {
				return 0, 0, err
			}
			pids = append(pids, kids...)
		}
		for _, p := range pids {
			n, d, err := threads(p)
			if err != nil {
				return 0, 0, err
			}
			switches += n
			runDelay += d
		}
	}
	return switches, runDelay, nil
}

func (m *cpuMeter) read() (server, self, host time.Duration, err error) {
	for _, pid := range m.pids {
		t, err := procCPU(pid, m.children)
		if err != nil {
			return 0, 0, 0, err
		}
		server += t
	}
	if self, err = procCPU(os.Getpid(), false); err != nil {
		return 0, 0, 0, err
	}
	host, err = hostBusy()
	return server, self, host, err
}

// stopped is what a cpuMeter measured over its step.
type stopped struct {
	server, self, host time.Duration // CPU time
	switches           int64         // the server's threads' context switches
	runDelay           time.Duration // their wait for a CPU (0 when a thread that ended took more than the others added)
}

// stop returns what was used since startCPU.
func (m *cpuMeter) stop() (stopped, error) {
	s, g, h, err := m.read()
	if err != nil {
		return stopped{}, err
	}
	n, d, err := m.countThreads()
	return stopped{server: s - m.server, self: g - m.self, host: h - m.host,
		switches: n - m.switches, runDelay: max(0, d-m.runDelay)}, err
}
