package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"golang.org/x/exp/trace"
)

// With -trace, each Go server's execution trace of a step is read back
// and summed up on one line under the step's result, so that a tail can
// be put down to its cause without opening the trace:
//
//   - What one request costs its connection goroutine: a "run" is the
//     time from the goroutine starting to run until it parks on the network
//     again, having made at least two system calls on the way (a read that
//     returned a request and the write of its answer; a wake-up that only
//     finds nothing to read is not a request). Its user time is the run
//     less its system calls; both are medians over the step's runs.
//   - How long connection goroutines (those that park on the network)
//     waited runnable before a thread ran them: p90 and p99.
//   - Stalls: the time a P was held by a thread that emitted no event for
//     over stallGap while some goroutine was runnable. Either the thread
//     was off the CPU (the host gave it to another process) or it ran one
//     stretch of code that long; both hold up whatever waits behind it.
//
// golang.org/x/exp/trace is the Go team's reader of execution traces (the
// standard library keeps its own internal); nothing else in the module
// imports it.

// stallGap is the silence on a held P that counts as a stall.
const stallGap = time.Millisecond

// traceStep is what a step's execution trace says (see above).
type traceStep struct {
	known                 bool
	runs                  int
	user, syscalls        time.Duration // medians per run
	runP50, runP90        time.Duration
	waitP90, waitP99      time.Duration
	stalled, longestStall time.Duration
	stalls                int
}

// readTraceFile sums up the execution trace in file.
func readTraceFile(file string) (traceStep, error) {
	f, err := os.Open(file)
	if err != nil {
		return traceStep{}, err
	}
	defer f.Close()
	return readTrace(f)
}

// goRun is a goroutine's run in progress: since its start, the time it
// spent in user code and in system calls so far.
type goRun struct {
	start, mark    trace.Time // mark: the last transition counted
	running        bool       // in user code since mark (else in a system call, or waiting)
	user, syscalls time.Duration
	calls          int
}

// readTrace sums up an execution trace read from r.
func readTrace(r io.Reader) (traceStep, error) {
	tr, err := trace.NewReader(r)
	if err != nil {
		return traceStep{}, err
	}
	var (
		runs                   = map[trace.GoID]*goRun{}
		runnableSince          = map[trace.GoID]trace.Time{}
		waits                  = map[trace.GoID][]time.Duration{}
		network                = map[trace.GoID]bool{}
		procHeld               = map[trace.ProcID]bool{}
		procLast               = map[trace.ProcID]trace.Time{}
		users, calls, runTimes []time.Duration
		s                      = traceStep{known: true}
	)
	for {
		ev, err := tr.ReadEvent()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return traceStep{}, err
		}
		t := ev.Time()
		if p := ev.Proc(); p != trace.NoProc {
			if last, ok := procLast[p]; ok && procHeld[p] && len(runnableSince) > 0 {
				if gap := t.Sub(last); gap > stallGap {
					s.stalls++
					s.stalled += gap
					s.longestStall = max(s.longestStall, gap)
				}
			}
			procLast[p] = t
		}
		if ev.Kind() != trace.EventStateTransition {
			continue
		}
		st := ev.StateTransition()
		switch st.Resource.Kind {
		case trace.ResourceProc:
			_, to := st.Proc()
			p := st.Resource.Proc()
			procHeld[p] = to == trace.ProcRunning
			procLast[p] = t
		case trace.ResourceGoroutine:
			g := st.Resource.Goroutine()
			from, to := st.Goroutine()
			run := runs[g]
			if run != nil { // close the stretch that ends here
				d := t.Sub(run.mark)
				switch {
				case run.running:
					run.user += d
				case from == trace.GoSyscall:
					run.syscalls += d
				}
				run.mark, run.running = t, false
			}
			if from == trace.GoRunnable {
				if since, ok := runnableSince[g]; ok {
					waits[g] = append(waits[g], t.Sub(since))
					delete(runnableSince, g)
				}
			}
			switch to {
			case trace.GoRunnable:
				runnableSince[g] = t
			case trace.GoRunning:
				if run == nil {
					run = &goRun{start: t}
					runs[g] = run
				}
				run.mark, run.running = t, true
			case trace.GoSyscall:
				if run != nil {
					run.calls++
				}
			case trace.GoWaiting:
				if st.Reason == "network" && run != nil {
					network[g] = true
					if run.calls >= 2 {
						users = append(users, run.user)
						calls = append(calls, run.syscalls)
						runTimes = append(runTimes, t.Sub(run.start))
					}
					delete(runs, g)
				}
			case trace.GoNotExist:
				delete(runs, g)
				delete(runnableSince, g)
			}
		}
	}
	var connWaits []time.Duration
	for g := range network {
		connWaits = append(connWaits, waits[g]...)
	}
	s.runs = len(users)
	s.user, s.syscalls = percentile(users, 0.5), percentile(calls, 0.5)
	s.runP50, s.runP90 = percentile(runTimes, 0.5), percentile(runTimes, 0.9)
	s.waitP90, s.waitP99 = percentile(connWaits, 0.9), percentile(connWaits, 0.99)
	return s, nil
}

// percentile returns quantile q of ds (sorting ds), or 0 for none.
func percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[min(len(ds)-1, int(float64(len(ds))*q))]
}

// String is the step's trace line.
func (s traceStep) String() string {
	return fmt.Sprintf("%d request runs: user %s, system calls %s (medians), run p50 %s p90 %s; "+
		"connection goroutines runnable p90 %s p99 %s; stalls over %s: %d, %s in all, longest %sms",
		s.runs, us(s.user), us(s.syscalls), us(s.runP50), us(s.runP90),
		us(s.waitP90), us(s.waitP99), stallGap, s.stalls, ms(s.stalled)+"ms", ms(s.longestStall))
}
