package main

import (
	"fmt"
	"maps"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"
)

// printHeader names the host and the run's settings, so that figures pasted
// elsewhere carry where and how they were taken.
func printHeader(o options) {
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("# openloop %s: %d CPUs (%s), load average %s\n",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), runtime.NumCPU(), cpuModel(), strings.Join(strings.Fields(string(load))[:3], " "))
	if o.closed {
		fmt.Printf("# closed loop: %d connections, %s per run, %d rounds, h2load -m %d\n", o.conns, o.closedDuration, o.rounds, o.streams)
		return
	}
	fmt.Printf("# open loop (%s generator): %d keep-alive connections per server, %s per step, knee: p99 < %s and no errors\n",
		o.gen, o.conns, o.duration, o.knee)
	fmt.Println("# cpu/req: the server's processes' CPU time per request; cs/req: their threads' context switches per request;")
	fmt.Println("# rq/req: how long the server's threads waited for a CPU (the kernel's run queue) per request;")
	fmt.Println("# gen/req: this load generator's CPU per request; host: busy CPUs of the whole host during the step")
	fmt.Println("# Go servers (runtime/metrics over the step): gc: collections; gc/req: the collector's CPU per request (assists in it);")
	fmt.Println("# pause: the longest stop-the-world pause of the collector, as the runtime counts it (until the stopping thread, having restarted the others, reads the clock); stop: the longest time its threads took to stop for one (part of the pause);")
	fmt.Println("# sched99, schedmax: how long runnable goroutines waited for a thread;")
	fmt.Println("# B/req: bytes allocated per request; live/goal: the live heap and the collector's goal at the step's end, MB")
	fmt.Printf("%-9s %-6s %6s %-11s %7s %7s %7s %7s %8s %6s %8s %6s %8s %8s %5s %4s %8s %8s %7s %7s %8s %8s %6s %11s\n",
		"proto", "ep", "rate", "server", "sent", "p50ms", "p90ms", "p99ms", "maxms", "errors", "cpu/req", "cs/req", "rq/req", "gen/req", "host",
		"gc", "gc/req", "assist", "pause", "stop", "sched99", "schedmax", "B/req", "live/goal")
}

// cpuModel returns the processor's model name from /proc/cpuinfo.
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d)/float64(time.Millisecond)) }

func us(d time.Duration) string { return fmt.Sprintf("%.1fµs", float64(d)/float64(time.Microsecond)) }

func printResult(r result) {
	gen := time.Duration(0)
	if r.requests > 0 {
		gen = r.genCPU / time.Duration(r.requests)
	}
	host := 0.0
	if r.elapsed > 0 {
		host = float64(r.hostCPU) / float64(r.elapsed)
	}
	cs, rq := 0.0, time.Duration(0)
	if r.requests > 0 {
		cs = float64(r.switches) / float64(r.requests)
		rq = r.runDelay / time.Duration(r.requests)
	}
	fmt.Printf("%-9s %-6s %6d %-11s %7d %7s %7s %7s %8s %6d %8s %6.2f %8s %8s %5.2f",
		r.proto, r.endpoint, r.rate, r.server, r.requests, ms(r.p50), ms(r.p90), ms(r.p99), ms(r.mx),
		r.errors, us(r.cpuPerRequest()), cs, us(rq), us(gen), host)
	if rt := r.runtime; rt.known && r.requests > 0 {
		n := time.Duration(r.requests)
		fmt.Printf(" %4.0f %8s %8s %7s %7s %8s %8s %6.0f %5.1f/%5.1f", rt.gcCycles, us(rt.gcCPU/n), us(rt.assist/n), ms(rt.pauseMax), ms(rt.stopMax), ms(rt.schedP99), ms(rt.schedM),
			rt.allocs/float64(r.requests), rt.live/1e6, rt.goal/1e6)
	}
	fmt.Println()
	if r.trace.known {
		fmt.Printf("#   trace: %s\n", r.trace)
	}
	if r.firstError != "" {
		fmt.Printf("#   first error: %.200s\n", r.firstError)
	}
}

// printSummary prints each server's knee per protocol and endpoint: the
// highest rate measured below the knee with no lower rate over it.
func printSummary(o options, results []result) {
	if len(results) == 0 {
		return
	}
	fmt.Printf("\n# knee (highest rate with p99 < %s and no errors, every lower rate too)\n", o.knee)
	for _, pr := range o.protos {
		for _, ep := range o.endpoints {
			var parts []string
			for _, s := range o.servers {
				knee, measured, past := 0, false, false
				for _, r := range results {
					if r.proto != pr || r.endpoint != ep || r.server != s {
						continue
					}
					measured = true
					if r.overKnee(o.knee) {
						past = true
					} else if !past {
						knee = r.rate
					}
				}
				if !measured {
					continue
				}
				switch {
				case !past:
					parts = append(parts, fmt.Sprintf("%s ≥ %d/s (never past it)", s, knee))
				case knee == 0:
					parts = append(parts, fmt.Sprintf("%s < %d/s", s, o.rates[0]))
				default:
					parts = append(parts, fmt.Sprintf("%s %d/s", s, knee))
				}
			}
			if len(parts) > 0 {
				fmt.Printf("%-9s %-6s %s\n", pr, ep, strings.Join(parts, ", "))
			}
		}
	}
}

// printRatios prints, at every protocol, endpoint and rate, trendgate's
// p99 over each other server's, so that a tail shows at every step, not
// only past a knee: by the mean of the rounds' p99s and, with three rounds
// or more, by their median and paired by round.
func printRatios(o options, results []result) {
	byRound := map[ratioAt]map[int]time.Duration{}
	for _, r := range results {
		k := ratioAt{r.proto, r.endpoint, r.rate, r.server}
		if byRound[k] == nil {
			byRound[k] = map[int]time.Duration{}
		}
		byRound[k][r.round] = r.p99
	}
	printRatiosBy(o, byRound, "mean", meanOf)
	if o.rounds >= 3 {
		// One round in which the host stalled one server decides a cell
		// under the mean; the median of three or more rounds does not.
		printRatiosBy(o, byRound, "median", medianOf)
		printPairedRatios(o, byRound)
	}
}

// printPairedRatios prints trendgate's p99 over each other server's at
// every step, paired by round: the geometric mean of the rounds' ratios,
// its 95 % confidence interval and in how many rounds trendgate's p99 was
// the higher. The servers of one step and round run back to back, so
// pairing them takes out most of what the host did between rounds; an
// interval that holds a bar says the run cannot tell on which side of it
// the step lies.
func printPairedRatios(o options, byRound map[ratioAt]map[int]time.Duration) {
	fmt.Printf("\n# p99 ratios paired by round: geometric mean of the rounds' ratios (95 %% interval; rounds trendgate's p99 was the higher)\n")
	trendgateSteps(o, func(own ratioAt, others []string) {
		mine := byRound[own]
		if len(mine) == 0 {
			return
		}
		line := fmt.Sprintf("%-9s %-6s %6d %-11s", own.pr, own.ep, own.rate, own.server)
		for _, other := range others {
			at := own
			at.server = other
			if p, ok := pairRounds(mine, byRound[at]); ok {
				line += fmt.Sprintf("   %s %.2f× (%.2f–%.2f; %d of %d)", other, p.ratio, p.lo, p.hi, p.higher, p.n)
			}
		}
		fmt.Println(line)
	})
}

// paired is one server's p99 over another's across the rounds that
// measured both (pairRounds).
type paired struct {
	ratio, lo, hi float64 // geometric mean of the rounds' ratios, and its 95 % interval
	n, higher     int     // rounds paired; rounds whose ratio was over 1
}

// pairRounds pairs a's and b's p99s by round, skipping rounds either did
// not measure (a server past its knee stops stepping up) or measured as 0.
// The interval is Student's t on the logarithms of the ratios, which are
// what a slow host multiplies; it needs two pairs.
func pairRounds(a, b map[int]time.Duration) (paired, bool) {
	var logs []float64
	var p paired
	for round, x := range a {
		y, ok := b[round]
		if !ok || x <= 0 || y <= 0 {
			continue
		}
		logs = append(logs, math.Log(float64(x)/float64(y)))
		if x > y {
			p.higher++
		}
	}
	p.n = len(logs)
	if p.n < 2 {
		return paired{}, false
	}
	var mean float64
	for _, l := range logs {
		mean += l
	}
	mean /= float64(p.n)
	var ss float64
	for _, l := range logs {
		ss += (l - mean) * (l - mean)
	}
	half := t975(p.n-1) * math.Sqrt(ss/float64(p.n-1)/float64(p.n))
	p.ratio, p.lo, p.hi = math.Exp(mean), math.Exp(mean-half), math.Exp(mean+half)
	return p, true
}

// t975 is Student's t distribution's 0.975 quantile for df degrees of
// freedom; past 30 the normal's 1.96, which it nears.
func t975(df int) float64 {
	table := [...]float64{12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
		2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
		2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042}
	if df >= 1 && df <= len(table) {
		return table[df-1]
	}
	return 1.96
}

// ratioAt is one step of one server, over the rounds.
type ratioAt struct {
	pr     protocol
	ep     string
	rate   int
	server string
}

// printRatiosBy prints trendgate's p99 over each other server's at every
// step, each server's p99 over the rounds summed up by stat.
func printRatiosBy(o options, byRound map[ratioAt]map[int]time.Duration, name string, stat func([]time.Duration) time.Duration) {
	of := func(k ratioAt) (time.Duration, bool) {
		if len(byRound[k]) == 0 {
			return 0, false
		}
		return stat(slices.Collect(maps.Values(byRound[k]))), true
	}
	fmt.Printf("\n# p99 ratios (%s p99 of %d round(s)): trendgate's over each other server's, at every step measured\n", name, o.rounds)
	trendgateSteps(o, func(own ratioAt, others []string) {
		mine, ok := of(own)
		if !ok {
			return
		}
		line := fmt.Sprintf("%-9s %-6s %6d %-11s p99 %7sms", own.pr, own.ep, own.rate, own.server, ms(mine))
		for _, other := range others {
			at := own
			at.server = other
			if p, ok := of(at); ok && p > 0 {
				line += fmt.Sprintf("   %s %sms (%.2f×)", other, ms(p), float64(mine)/float64(p))
			}
		}
		fmt.Println(line)
	})
}

// trendgateSteps calls f at every step of each trendgate contender in
// the run, in the report's order, with the other servers to set it
// against.
func trendgateSteps(o options, f func(own ratioAt, others []string)) {
	for _, tg := range []string{"trendgate", "trendgate-loops", "trendgate-goroutines", "trendgate-b"} {
		if !slices.Contains(o.servers, tg) {
			continue
		}
		var others []string
		for _, s := range o.servers {
			if s != tg {
				others = append(others, s)
			}
		}
		for _, pr := range o.protos {
			for _, ep := range o.endpoints {
				for _, rate := range o.rates {
					f(ratioAt{pr, ep, rate, tg}, others)
				}
			}
		}
	}
}

func meanOf(d []time.Duration) time.Duration {
	var sum time.Duration
	for _, x := range d {
		sum += x
	}
	return sum / time.Duration(len(d))
}

// medianOf returns the middle value of d (the mean of the two middle
// ones for an even count); d is not changed.
func medianOf(d []time.Duration) time.Duration {
	s := slices.Sorted(slices.Values(d))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
