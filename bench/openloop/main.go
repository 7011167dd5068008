// Command openloop measures trendgate against nginx and a minimal Go server
// (minimal.go: the ceiling Go itself sets on this host) the way real clients
// load a server: requests arrive at a fixed rate whether or not earlier ones
// were answered (an open loop: lean.go's generator, or vegeta's library with
// -gen vegeta), and what counts is the latency at that rate and the CPU
// each server spends per request.
//
// It starts everything itself on 127.0.0.1 (the demo upstream, two
// `trendgate serve` processes, plain and HTTPS, from generated configs,
// nginx with the proxy_cache config of nginx.conf.tmpl, and the minimal
// server, all sharing one self-signed certificate), warms the caches, then
// for each protocol (plain HTTP/1.1, HTTPS/1.1, HTTP/2; the minimal server
// has no HTTP/2, and in its event-loop form, epoll.go, plain HTTP/1.1
// only) and each endpoint (a small series, the topics list, a
// week's series) steps the rate up, measuring the servers in turn at each
// rate. A server is stepped no further once its p99 reaches -knee (10 ms) or
// it answers an error; its knee is the highest rate before that. Each step
// prints p50/p90/p99/max, errors, and the CPU time of the server's processes
// per request (utime+stime from /proc/PID/stat over the step, nginx's
// workers included), with the load generator's own CPU and the whole host's
// busy CPU so that a loaded host shows in the figures, and for the Go
// servers what their runtime did over the step (runtime.go). At the end it
// prints each server's knee and trendgate's p99 over the others' at every
// step.
//
// Run it from the module root (it builds ./cmd/trendgate unless -bin is
// given); nginx must be installed:
//
//	go run ./bench/openloop
//	go run ./bench/openloop -protos h2 -endpoints list -rates 4000 -duration 30s -pprof /tmp/prof
//	go run ./bench/openloop -closed    # closed loop: wrk and h2load, req/s
//
// Everything it starts is stopped on exit, on an error and on Ctrl-C; every
// step is bounded by -duration (plus at most the 10 s request timeout) and
// the whole run by -timeout.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"math"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"trendgate/auth"
)

// serverNames are the servers -servers may name.
var serverNames = []string{"nginx", "minimal", "minimal-full", "minimal-epoll", "trendgate", "trendgate-loops", "trendgate-goroutines", "trendgate-b"}

func main() {
	if len(os.Args) > 1 && os.Args[1] == minimalCommand {
		// It serves until the bench stops it: it returns only on a failure.
		fmt.Fprintln(os.Stderr, "openloop minimal-server:", runMinimal(os.Args[2:]))
		os.Exit(1)
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "openloop:", err)
		os.Exit(1)
	}
}

type options struct {
	bin, nginx     string
	binB           string // a second trendgate build, measured as "trendgate-b"
	loopsB         bool   // trendgate-b on event loops, as trendgate-loops
	nginxWorkers   int
	servers        []string
	protos         []protocol
	endpoints      []string
	rates          []int
	duration       time.Duration
	warmup, pause  time.Duration
	conns          int
	knee           time.Duration
	pprofDir       string
	traceDir       string
	timeout        time.Duration
	keep           bool
	closed         bool
	closedDuration time.Duration
	rounds         int
	streams        int
	gen            string // "lean" or "vegeta"
	genProcs       int
}

func parseOptions() (options, error) {
	var (
		o                                   options
		servers, protos, endpointList, rate string
	)
	flag.StringVar(&o.bin, "bin", "", "trendgate binary (default: build ./cmd/trendgate into a temporary directory)")
	flag.StringVar(&o.binB, "bin-b", "", "a second trendgate binary, measured as the server \"trendgate-b\" (name it in -servers) beside the first: an A/B of two builds in one run")
	flag.BoolVar(&o.loopsB, "loops-b", false, "serve trendgate-b's HTTP/1.1 on -nginx-workers event loops, as trendgate-loops: an A/B of two builds' loops")
	flag.StringVar(&o.nginx, "nginx", "", "nginx binary (default: nginx on PATH, or /usr/sbin/nginx)")
	flag.IntVar(&o.nginxWorkers, "nginx-workers", runtime.NumCPU(), "nginx worker_processes")
	flag.StringVar(&servers, "servers", "nginx,minimal,trendgate", "servers to measure, in this order at each rate (the order alternates step by step): nginx, minimal (the minimal Go server, HTTP/1.1 only), minimal-full (the same with trendgate's header fields), minimal-epoll (the same answers from event loops as nginx's workers, -nginx-workers of them; plain HTTP/1.1 only), trendgate (its default configuration: HTTP/1.1, plain and over TLS, and HTTP/2 between its frames, on event loops, one per CPU), trendgate-loops (trendgate with server.event_loops at -nginx-workers), trendgate-goroutines (trendgate with server.event_loops 0, a goroutine per connection), trendgate-b")
	flag.StringVar(&protos, "protos", "h1,https,h2", "protocols: h1 (plain HTTP/1.1), https (HTTP/1.1 over TLS), h2 (HTTP/2 over TLS)")
	flag.StringVar(&endpointList, "endpoints", "small,list,series", "endpoints: small (bitcoin's hourly series over 44 fixed hours, 18 KB), list (the topics list, 58 KB), series (bitcoin's hourly week, 72 KB)")
	flag.StringVar(&rate, "rates", "1000,2000,4000,6000,8000,10000,12000", "request rates per second, stepped up in this order")
	flag.DurationVar(&o.duration, "duration", 4*time.Second, "length of one measured step")
	flag.DurationVar(&o.warmup, "warmup", time.Second, "unmeasured load at the first rate before each server's first step of an endpoint")
	flag.DurationVar(&o.pause, "pause", 500*time.Millisecond, "idle time between steps")
	flag.IntVar(&o.conns, "conns", 64, "keep-alive connections per server (HTTP/2: requests go round-robin over them, as several streams when they queue)")
	flag.DurationVar(&o.knee, "knee", 10*time.Millisecond, "p99 at or above which a server is past its knee and stepped no further")
	flag.StringVar(&o.pprofDir, "pprof", "", "write a CPU profile of each Go server (trendgate, minimal) over each of its steps into this directory")
	flag.StringVar(&o.traceDir, "trace", "", "write an execution trace of each Go server (trendgate, minimal) over each of its steps into this directory (go tool trace), and sum each up under its step: user and system-call time per request, runnable waits, stalls")
	flag.DurationVar(&o.timeout, "timeout", 15*time.Minute, "bound on the whole run")
	flag.BoolVar(&o.keep, "keep", false, "keep the work directory (configs, logs) and print its path")
	flag.BoolVar(&o.closed, "closed", false, "closed loop instead: wrk (HTTP/1.1) and h2load (HTTP/2), -conns connections, req/s per server")
	flag.DurationVar(&o.closedDuration, "closed-duration", 8*time.Second, "length of one closed-loop run")
	flag.IntVar(&o.rounds, "rounds", 0, "rounds of the whole run, interleaved (default 3 closed loop, 1 open loop); the summary averages them")
	flag.IntVar(&o.genProcs, "gen-procs", 1, "GOMAXPROCS of this process, the generator (not of the servers it starts): 1, as wrk -t1 in the closed loop, spares the servers the hand-offs between its threads; 0 leaves the runtime's default")
	flag.IntVar(&o.streams, "streams", 10, "closed loop: h2load streams per connection (-m)")
	flag.StringVar(&o.gen, "gen", "lean", "open-loop generator: lean (lean.go: prepared requests on raw connections, less CPU a request) or vegeta (vegeta's library over Go's HTTP client, as before 2026-11-28)")
	flag.Parse()
	if flag.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q", flag.Arg(0))
	}
	for _, s := range strings.Split(servers, ",") {
		if !slices.Contains(serverNames, s) {
			return o, fmt.Errorf("-servers: unknown server %q (%s)", s, strings.Join(serverNames, ", "))
		}
		if s == "trendgate-b" && o.binB == "" {
			return o, errors.New("-servers: trendgate-b needs -bin-b")
		}
		o.servers = append(o.servers, s)
	}
	for _, p := range strings.Split(protos, ",") {
		pr := protocol(p)
		if pr != h1 && pr != https && pr != h2 {
			return o, fmt.Errorf("-protos: unknown protocol %q (h1, https, h2)", p)
		}
		o.protos = append(o.protos, pr)
	}
	for _, e := range strings.Split(endpointList, ",") {
		if _, ok := endpoints[e]; !ok {
			return o, fmt.Errorf("-endpoints: unknown endpoint %q (small, list, series)", e)
		}
		o.endpoints = append(o.endpoints, e)
	}
	for _, r := range strings.Split(rate, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(r))
		if err != nil || n <= 0 {
			return o, fmt.Errorf("-rates: %q is not a positive rate", r)
		}
		o.rates = append(o.rates, n)
	}
	if o.gen != "lean" && o.gen != "vegeta" {
		return o, fmt.Errorf("-gen: unknown generator %q (lean, vegeta)", o.gen)
	}
	if o.pprofDir != "" && o.traceDir != "" {
		return o, errors.New("-pprof and -trace: one at a time (a trace with a profile running measures the profiler)")
	}
	if o.rounds == 0 {
		o.rounds = 1
		if o.closed {
			o.rounds = 3
		}
	}
	if o.conns < 1 || o.duration <= 0 || o.rounds < 0 {
		return o, errors.New("-conns and -duration must be positive")
	}
	return o, nil
}

func run() error {
	o, err := parseOptions()
	if err != nil {
		return err
	}
	if o.genProcs > 0 {
		runtime.GOMAXPROCS(o.genProcs)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()

	var nginxBin string
	if slices.Contains(o.servers, "nginx") {
		if nginxBin, err = findNginx(o.nginx); err != nil {
			return err
		}
	}
	dir, err := os.MkdirTemp("", "openloop")
	if err != nil {
		return err
	}
	// nginx's workers (an unprivileged user when run as root) must reach
	// the cache below dir.
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	if o.keep {
		defer fmt.Fprintln(os.Stderr, "work directory kept:", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	if o.bin == "" {
		o.bin = filepath.Join(dir, "trendgate")
		build := exec.CommandContext(ctx, "go", "build", "-o", o.bin, "./cmd/trendgate")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			return fmt.Errorf("build ./cmd/trendgate (run from the module root, or give -bin): %w", err)
		}
	}

	e, servers, stopAll, err := startAll(ctx, o, dir, nginxBin)
	defer stopAll()
	if err != nil {
		return err
	}
	printHeader(o)
	if o.closed {
		return runClosed(ctx, o, e, servers)
	}
	results, err := runOpen(ctx, o, e, servers)
	printSummary(o, results)
	printRatios(o, results)
	return err
}

// startAll starts the upstream and the servers o names; stopAll stops
// whatever was started, also after an error.
func startAll(ctx context.Context, o options, dir, nginxBin string) (*env, []*server, func(), error) {
	var started []interface{ stop() }
	stopAll := func() {
		for i := len(started) - 1; i >= 0; i-- {
			started[i].stop()
		}
	}
	e := &env{dir: dir}
	var err error
	if e.upstreamKey, err = auth.Generate(); err != nil {
		return nil, nil, stopAll, err
	}
	if e.clientKey, err = auth.Generate(); err != nil {
		return nil, nil, stopAll, err
	}
	if e.certFile, e.keyFile, e.pool, err = writeCert(dir); err != nil {
		return nil, nil, stopAll, err
	}
	e.probe = &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: e.pool}}}
	up, err := startUpstream(ctx, e, o.bin)
	if err != nil {
		return nil, nil, stopAll, err
	}
	started = append(started, up)
	var servers []*server
	for _, name := range o.servers {
		var s *server
		switch name {
		case "nginx":
			s, err = startNginx(ctx, e, nginxBin, o.nginxWorkers)
		case "minimal", "minimal-full", "minimal-epoll":
			loops := 0
			if name == "minimal-epoll" {
				loops = o.nginxWorkers
			}
			var self string
			if self, err = os.Executable(); err == nil {
				s, err = startMinimal(ctx, e, self, name, loops)
			}
		case "trendgate-b":
			loops := ""
			if o.loopsB {
				loops = strconv.Itoa(o.nginxWorkers)
			}
			s, err = startTrendgate(ctx, e, name, o.binB, loops)
		case "trendgate-loops":
			s, err = startTrendgate(ctx, e, name, o.bin, strconv.Itoa(o.nginxWorkers))
		case "trendgate-goroutines":
			s, err = startTrendgate(ctx, e, name, o.bin, "0")
		default:
			s, err = startTrendgate(ctx, e, name, o.bin, "")
		}
		if err != nil {
			return nil, nil, stopAll, err
		}
		started = append(started, s)
		servers = append(servers, s)
	}
	return e, servers, stopAll, nil
}

// runOpen runs the open-loop steps and returns every step's result.
func runOpen(ctx context.Context, o options, e *env, servers []*server) ([]result, error) {
	var results []result
	for round := range o.rounds {
		if o.rounds > 1 {
			fmt.Printf("# round %d of %d\n", round+1, o.rounds)
		}
		for _, pr := range o.protos {
			var serving []*server
			for _, s := range servers {
				if s.serves(pr) {
					serving = append(serving, s)
				}
			}
			clients := make([]*http.Client, len(serving))
			for i := range serving {
				clients[i] = newClient(pr, o.conns, e.pool)
			}
			for _, ep := range o.endpoints {
				rs, err := runEndpoint(ctx, o, e, serving, clients, pr, ep, round)
				results = append(results, rs...)
				if err != nil {
					return results, err
				}
			}
			for _, c := range clients {
				c.CloseIdleConnections()
			}
		}
	}
	return results, nil
}

// runEndpoint warms every server for one protocol and endpoint, then steps
// the rate up, the servers in turn, until each is past its knee or the
// rates run out. round (from 0) names the profile files of later rounds.
func runEndpoint(ctx context.Context, o options, e *env, servers []*server, clients []*http.Client,
	pr protocol, ep string, round int) ([]result, error) {
	sizes := map[int]bool{}
	loads := make([]loader, len(servers))
	for i, s := range servers {
		url := s.baseURL(pr) + endpoints[ep]
		size, err := warm(ctx, clients[i], pr, o.conns, url, e.clientKey)
		if err != nil {
			return nil, fmt.Errorf("warm %s %s: %w", s.name, pr, err)
		}
		sizes[size] = true
		load, closeLoad, err := newLoader(o, e, clients[i], pr, url)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", s.name, pr, err)
		}
		defer closeLoad()
		loads[i] = load
		if o.warmup > 0 {
			if _, err := load(ctx, o.rates[0], o.warmup, nil); err != nil {
				return nil, err
			}
		}
		fmt.Printf("# %s %s %s: %d-byte body from its cache, %d connections warm\n", pr, ep, s.name, size, o.conns)
	}
	// The answers hold the upstream's generation time, so copies fetched at
	// different moments may differ by a few bytes; more is another answer.
	lo, hi := math.MaxInt, 0
	for n := range sizes {
		lo, hi = min(lo, n), max(hi, n)
	}
	if hi-lo > hi/100 {
		fmt.Printf("# WARNING: the servers' bodies differ in size (%v): they do not send the same answer\n", sizes)
	}
	var results []result
	done := make([]bool, len(servers))
	for i, rate := range o.rates {
		for j := range servers {
			k := j
			if i%2 == 1 { // alternate who goes first
				k = len(servers) - 1 - j
			}
			if done[k] {
				continue
			}
			r, err := measure(ctx, o, e, servers[k], loads[k], pr, ep, rate, round)
			if err != nil {
				return results, err
			}
			printResult(r)
			results = append(results, r)
			done[k] = r.overKnee(o.knee)
			sleep(ctx, o.pause)
		}
		if !slices.Contains(done, false) {
			break
		}
	}
	return results, nil
}

// measure runs one step against s, with a CPU profile when -pprof is set
// (or a trace with -trace), one file per step and round.
func measure(ctx context.Context, o options, e *env, s *server, load loader, pr protocol, ep string, rate, round int) (result, error) {
	cpu, err := startCPU(s.pids(pr), s.name == "nginx")
	if err != nil {
		return result{}, err
	}
	var before runtimeReading
	if s.admin(pr) != "" {
		if before, err = readRuntime(e.probe, s.admin(pr)); err != nil {
			return result{}, err
		}
	}
	var profiled func() error
	var traceFile string
	if dir, kind := o.pprofDir, "profile"; (dir != "" || o.traceDir != "") && s.pprof {
		if dir == "" {
			dir, kind = o.traceDir, "trace"
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return result{}, err
		}
		name := fmt.Sprintf("%s-%s-%s-%d", s.name, string(pr), ep, rate)
		if round > 0 {
			name += fmt.Sprintf("-round%d", round+1) // the first round's keep the plain name
		}
		file := filepath.Join(dir, name+"."+kind)
		profiled = profileStep(s.admin(pr), kind, o.duration, file)
		if kind == "trace" {
			traceFile = file
		}
	}
	r, err := load(ctx, rate, o.duration, cpu)
	r.server, r.proto, r.endpoint, r.round = s.name, pr, ep, round
	if err == nil && s.admin(pr) != "" {
		var after runtimeReading
		if after, err = readRuntime(e.probe, s.admin(pr)); err == nil {
			r.runtime = after.since(before)
		}
	}
	if profiled != nil {
		if perr := profiled(); perr != nil && err == nil {
			err = fmt.Errorf("profile: %w", perr)
		}
	}
	if traceFile != "" && err == nil {
		if r.trace, err = readTraceFile(traceFile); err != nil {
			err = fmt.Errorf("trace %s: %w", traceFile, err)
		}
	}
	return r, err
}

// loader runs one step of load at rate for d; cpu, when not nil, is
// stopped when the last request is answered.
type loader func(ctx context.Context, rate int, d time.Duration, cpu *cpuMeter) (result, error)

// newLoader returns o.gen's loader for requests to url over pr, and what
// closes its connections.
func newLoader(o options, e *env, c *http.Client, pr protocol, url string) (loader, func(), error) {
	if o.gen == "vegeta" {
		return func(ctx context.Context, rate int, d time.Duration, cpu *cpuMeter) (result, error) {
			return step(ctx, c, url, e.clientKey, rate, d, cpu)
		}, func() {}, nil
	}
	lc, err := newLeanClient(pr, url, e.clientKey, o.conns, &tls.Config{RootCAs: e.pool})
	if err != nil {
		return nil, nil, err
	}
	return func(ctx context.Context, rate int, d time.Duration, cpu *cpuMeter) (result, error) {
		return leanStep(ctx, lc, rate, d, cpu)
	}, lc.close, nil
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
