package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"trendgate/internal/rtmetrics"
)

// A tail is traced to its cause by what the Go runtime did during the step:
// how many collections ran, the CPU the collector took (and the part of it
// that was assist work charged to request goroutines), the longest
// stop-the-world pause and the longest wait for every thread to stop for
// one (a thread the kernel keeps off its CPU makes that long), and how
// long runnable goroutines waited for a thread (runtime/metrics
// /sched/latencies). Both Go contenders serve these
// at /debug/pprof/runtime-metrics on their admin listener (package
// rtmetrics); the bench reads them before and after each step.

const runtimePath = "/debug/pprof/runtime-metrics"

type runtimeReading map[string]rtmetrics.Sample

// runtimeStep is what the runtime did over a step.
type runtimeStep struct {
	known            bool
	gcCycles         float64
	gcCPU, assist    time.Duration
	pauseMax         time.Duration // upper bound of the longest pause's bucket
	stopMax          time.Duration // the same for the longest time to stop the world, which the pause includes
	schedP99, schedM time.Duration // p99 and max wait for a thread (bucket upper bounds)
	allocs           float64       // bytes allocated
	live, goal       float64       // the live heap and the heap goal at the end, bytes
}

// readRuntime reads admin's runtime metrics.
func readRuntime(c *http.Client, admin string) (runtimeReading, error) {
	resp, err := c.Get(admin + runtimePath)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s%s: %s", admin, runtimePath, resp.Status)
	}
	var r runtimeReading
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return nil, fmt.Errorf("%s%s: %w", admin, runtimePath, err)
	}
	return r, nil
}

// since returns what the runtime did between before and r.
func (r runtimeReading) since(before runtimeReading) runtimeStep {
	value := func(name string) float64 {
		a, b := r[name], before[name]
		if a.Value == nil || b.Value == nil {
			return 0
		}
		return *a.Value - *b.Value
	}
	s := runtimeStep{known: true,
		gcCycles: value("/gc/cycles/total:gc-cycles"),
		gcCPU:    seconds(value("/cpu/classes/gc/total:cpu-seconds")),
		assist:   seconds(value("/cpu/classes/gc/mark/assist:cpu-seconds")),
	}
	s.allocs = value("/gc/heap/allocs:bytes")
	if v := r["/gc/heap/live:bytes"].Value; v != nil {
		s.live = *v
	}
	if v := r["/gc/heap/goal:bytes"].Value; v != nil {
		s.goal = *v
	}
	_, s.pauseMax = quantile(before["/sched/pauses/total/gc:seconds"], r["/sched/pauses/total/gc:seconds"], 0.99)
	_, s.stopMax = quantile(before["/sched/pauses/stopping/gc:seconds"], r["/sched/pauses/stopping/gc:seconds"], 0.99)
	s.schedP99, s.schedM = quantile(before["/sched/latencies:seconds"], r["/sched/latencies:seconds"], 0.99)
	return s
}

func seconds(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }

// quantile returns the upper bound of the bucket holding quantile q of the
// observations made between two readings of one histogram, and that of
// the highest bucket any of them fell in.
func quantile(before, after rtmetrics.Sample, q float64) (atQ, largest time.Duration) {
	if len(after.Counts) == 0 || len(before.Counts) != len(after.Counts) {
		return 0, 0
	}
	delta := make([]uint64, len(after.Counts))
	var total uint64
	for i := range delta {
		delta[i] = after.Counts[i] - before.Counts[i]
		total += delta[i]
	}
	if total == 0 {
		return 0, 0
	}
	upper := func(i int) time.Duration {
		if i+1 == len(after.Buckets)-1 && after.Buckets[i+1] > 1e300 { // +Inf: the bucket's floor is all we know
			return seconds(after.Buckets[i])
		}
		return seconds(after.Buckets[i+1])
	}
	var seen uint64
	for i, n := range delta {
		seen += n
		if atQ == 0 && n > 0 && float64(seen) >= q*float64(total) {
			atQ = upper(i)
		}
		if n > 0 {
			largest = upper(i)
		}
	}
	return atQ, largest
}
