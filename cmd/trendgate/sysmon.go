package main

import (
	"fmt"
	"os"
	"strings"
	"syscall"

	"go.uber.org/zap"
)

// The Go runtime's monitor thread (sysmon) sleeps deeply whenever every P
// is idle, and the first system call after that wakes it with a futex;
// it then polls every 20 µs for a millisecond before it backs off again.
// A gateway serving a few thousand requests a second goes idle between
// most of them, so it pays that wake-up and those polls per request: on
// the open-loop bench (docs/performance.md, "the runtime's monitor
// thread") 10–46 % of its CPU per request and about half its context
// switches. While GODEBUG's schedtrace is set, sysmon never sleeps deeply
// (it has a trace to print on time) and backs off to its 10 ms tick
// instead. At the longest period, 2^31-1 ms (24.8 days), the trace is one
// line on stderr 24.8 days after the host booted (at start, on a host up
// longer) and every 24.8 days after that. The runtime reads schedtrace
// only when the process starts, so the commands that serve run themselves
// again with it set. The price is the 10 ms tick while idle, about 0.5 %
// of one CPU. golang/go#18236 asks the runtime for a real setting.

// steadySysmon is the GODEBUG setting that keeps sysmon out of deep sleep.
const steadySysmon = "schedtrace=2147483647"

// steadySysmonEnv returns environ with steadySysmon added to GODEBUG and
// whether that changed anything. It changes nothing when GODEBUG already
// sets schedtrace: GODEBUG=schedtrace=0 keeps the runtime's default.
func steadySysmonEnv(environ []string) ([]string, bool) {
	out := make([]string, 0, len(environ)+1)
	godebug := ""
	for _, kv := range environ {
		if v, ok := strings.CutPrefix(kv, "GODEBUG="); ok {
			godebug = v
			continue
		}
		out = append(out, kv)
	}
	if godebugSets(godebug, "schedtrace") {
		return environ, false
	}
	if godebug != "" {
		godebug += ","
	}
	return append(out, "GODEBUG="+godebug+steadySysmon), true
}

// godebugSets reports whether the GODEBUG value v sets key.
func godebugSets(v, key string) bool {
	for field := range strings.SplitSeq(v, ",") {
		if k, _, ok := strings.Cut(field, "="); ok && strings.TrimSpace(k) == key {
			return true
		}
	}
	return false
}

// serves reports whether args (without the program name) run a gateway:
// serve, or demo mode (no command), but not a request for help or the
// version.
func serves(args []string) bool {
	if len(args) > 0 && args[0] == "serve" {
		return true
	}
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		return false
	}
	for _, a := range args {
		switch a {
		case "-h", "-help", "--help", "-version", "--version":
			return false
		}
	}
	return true
}

// reexecWithSteadySysmon runs this binary again, in this process, with
// steadySysmon in GODEBUG. It returns only when it does not: nil when
// GODEBUG already sets schedtrace, else the reason the exec failed, after
// which the process goes on with the runtime's default.
func reexecWithSteadySysmon() error {
	env, changed := steadySysmonEnv(os.Environ())
	if !changed {
		return nil
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("runtime monitor: cannot find this binary to run it with GODEBUG=%s: %w", steadySysmon, err)
	}
	if err := syscall.Exec(exe, os.Args, env); err != nil {
		return fmt.Errorf("runtime monitor: running %s again with GODEBUG=%s: %w", exe, steadySysmon, err)
	}
	return nil // not reached
}

// logSysmon says at start which way the runtime's monitor thread runs.
func logSysmon(getenv func(string) string, log *zap.Logger) {
	godebug := getenv("GODEBUG")
	switch {
	case strings.Contains(","+godebug+",", ","+steadySysmon+","):
		log.Info("runtime monitor: steady (no deep sleep between requests)", zap.String("godebug", godebug))
	case godebugSets(godebug, "schedtrace"):
		log.Info("runtime monitor: schedtrace set by GODEBUG", zap.String("godebug", godebug))
	default:
		log.Info("runtime monitor: the runtime's default (deep sleep when idle, woken per request)")
	}
}
