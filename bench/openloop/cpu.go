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
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		t, ppid, err := statCPU(child)
		if err == nil && ppid == pid {
			total += t
		}
	}
	return total, nil
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
// (the load generator) and of the whole host over one step.
type cpuMeter struct {
	pids               []int
	children           bool
	server, self, host time.Duration
}

func startCPU(pids []int, children bool) (*cpuMeter, error) {
	m := &cpuMeter{pids: pids, children: children}
	var err error
	m.server, m.self, m.host, err = m.read()
	return m, err
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

// stop returns the CPU used since startCPU.
func (m *cpuMeter) stop() (server, self, host time.Duration, err error) {
	s, g, h, err := m.read()
	return s - m.server, g - m.self, h - m.host, err
}
