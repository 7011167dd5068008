// Command scale measures what a key costs a trendgate gateway as the
// number of configured keys grows: for each configuration (by default 100,
// 10,000 and 100,000 keys, each its own account, and 100,000 keys in
// 10,000 accounts) it generates the file, starts `trendgate serve` on
// 127.0.0.1 and reports
//
//   - the time until /readyz answers 200, and resident memory at rest
//     (VmRSS of /proc/PID/status after -settle);
//   - how long a SIGHUP reload takes to be applied (until the gateway logs
//     "config reloaded"), with the file unchanged and with one key added,
//     and the CPU time it costs;
//   - key creation through the admin key API (POST /keys): median and max
//     of -creates creates, one after another;
//   - first use: -first-use never-used keys each making their first
//     request, one after another: total time, p50/p99/max, how many
//     answered 200;
//   - disk writes (write_bytes of /proc/PID/io) over -idle with no traffic
//     after those first uses;
//   - cached hits at -rate requests a second for -dur (open loop, over
//     -conns keep-alive connections, spread over the keys used above): p50,
//     p99, max, CPU time per hit (utime+stime of /proc/PID/stat over the
//     load divided by the hits) and the disk writes meanwhile;
//   - the size of one /metrics scrape after that load, and how long
//     `trendgate keys usage` (every key) takes, or why it fails;
//   - `trendgate config check` of the file with a YAML syntax mistake on
//     its last line;
//   - with -cluster, two instances on the Redis at -redis (a unique key
//     prefix, deleted afterwards): the answer to a key created on one, and
//     the time until the other accepts the key.
//
// It prints a markdown table (one column per configuration) and writes the
// figures to a JSON file. The secrets of the keys are generated at run time
// (the file holds only their digests); the upstream is the demo upstream,
// served from this process. Run it from the module root (it builds
// ./cmd/trendgate unless -bin is given):
//
//	go run ./bench/scale
//	go run ./bench/scale -keys 100,10000 -rate 500 -dur 3s -first-use 200 -step-timeout 10s   # under a minute
//
// Every step is bounded (a step that cannot finish in time says "failed:"
// and why in its cell, and the run goes on) and everything it starts is
// stopped when it ends, fails or gets Ctrl-C; children also get SIGKILL
// should the bench itself die.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"trendgate/auth"
	"trendgate/demo"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		os.Exit(1)
	}
}

type options struct {
	bin          string
	setups       []setup
	settle       time.Duration
	rate, conns  int
	dur, warmup  time.Duration
	idle         time.Duration
	firstUse     int
	creates      int
	startTimeout time.Duration
	stepTimeout  time.Duration
	firstTimeout time.Duration
	cluster      bool
	redisAddr    string
	redisTimeout string
	jsonPath     string
	keep         bool
}

func parseOptions(args []string) (options, error) {
	var (
		o    options
		keys string
	)
	fs := flag.NewFlagSet("scale", flag.ContinueOnError)
	fs.StringVar(&o.bin, "bin", "", "trendgate binary (default: build ./cmd/trendgate into the work directory)")
	fs.StringVar(&keys, "keys", "100,10000,100000,100000/10000", "configurations: N (N keys, each its own account) or N/A (N keys in A accounts), comma-separated")
	fs.DurationVar(&o.settle, "settle", 2*time.Second, "wait after /readyz before reading RSS at rest, and after the first uses before measuring idle writes")
	fs.IntVar(&o.rate, "rate", 2000, "requests a second of the cached-hit load")
	fs.DurationVar(&o.dur, "dur", 10*time.Second, "length of the measured cached-hit load")
	fs.DurationVar(&o.warmup, "warmup", time.Second, "unmeasured load at -rate before it")
	fs.IntVar(&o.conns, "conns", 32, "keep-alive connections of the load")
	fs.DurationVar(&o.idle, "idle", 0, "idle time over which disk writes are measured (0: -dur)")
	fs.IntVar(&o.firstUse, "first-use", 2000, "never-used keys that make their first request (at most the configuration's keys)")
	fs.IntVar(&o.creates, "creates", 20, "keys created through POST /keys")
	fs.DurationVar(&o.startTimeout, "start-timeout", 3*time.Minute, "bound on a gateway's start")
	fs.DurationVar(&o.stepTimeout, "step-timeout", time.Minute, "bound on one reload, all the key creates together, the /metrics scrape, config check and the cluster step")
	fs.DurationVar(&o.firstTimeout, "first-use-timeout", 2*time.Minute, "bound on all the first uses of one configuration")
	fs.BoolVar(&o.cluster, "cluster", false, "also measure two instances in cluster mode on -redis")
	fs.StringVar(&o.redisAddr, "redis", "127.0.0.1:6379", "Redis for -cluster (database 0 and 1, under a key prefix of its own, deleted at the end)")
	fs.StringVar(&o.redisTimeout, "redis-timeout", "", "redis.timeout of the cluster instances (empty: the gateway's default)")
	fs.StringVar(&o.jsonPath, "json", "", "JSON file for the figures (default: scale-<time>.json in the system's temporary directory)")
	fs.BoolVar(&o.keep, "keep", false, "keep the work directory (configurations, logs) and print its path")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	var err error
	if o.setups, err = parseSetups(keys); err != nil {
		return o, err
	}
	if o.rate < 1 || o.conns < 1 || o.dur <= 0 || o.firstUse < 0 || o.creates < 0 {
		return o, errors.New("-rate, -conns and -dur must be positive, -first-use and -creates not negative")
	}
	if o.idle <= 0 {
		o.idle = o.dur
	}
	if o.jsonPath == "" {
		o.jsonPath = filepath.Join(os.TempDir(), "scale-"+time.Now().UTC().Format("20060102T150405Z")+".json")
	}
	return o, nil
}

func run() error {
	o, err := parseOptions(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	dir, err := os.MkdirTemp("", "scale")
	if err != nil {
		return err
	}
	if o.keep {
		defer fmt.Fprintln(os.Stderr, "scale: work directory kept:", dir)
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

	// The upstream lives in this process: only the gateway is measured,
	// and nearly every measured request is a cache hit anyway.
	e := &env{o: o, dir: dir}
	if e.upstreamKey, err = auth.Generate(); err != nil {
		return err
	}
	if e.adminToken, err = auth.Generate(); err != nil {
		return err
	}
	up, err := demo.New(demo.Options{APIKey: e.upstreamKey})
	if err != nil {
		return err
	}
	defer up.Close()
	var stopUp func()
	if e.upstreamURL, stopUp, err = up.ServeLoopback(); err != nil {
		return err
	}
	defer stopUp()
	if o.cluster {
		var id [6]byte
		_, _ = rand.Read(id[:])
		e.redisPrefix = "tgscale:" + hex.EncodeToString(id[:]) + ":"
	}

	rep := &report{Date: time.Now().UTC(), Host: hostFacts(), Options: map[string]string{}}
	rep.Options["args"] = strings.Join(os.Args[1:], " ")
	rep.Options["bin"] = o.bin
	for _, s := range o.setups {
		col := newColumn(s)
		rep.Columns = append(rep.Columns, col)
		if ctx.Err() != nil {
			break
		}
		e.measure(ctx, s, col)
	}
	rep.markdown(os.Stdout)
	if err := rep.writeJSON(o.jsonPath); err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "scale: figures written to", o.jsonPath)
	if ctx.Err() != nil {
		return errors.New("interrupted")
	}
	return nil
}

// hostFacts describes the host for the report: the commit measured (of
// the working directory), CPUs, load average at the start, kernel.
func hostFacts() map[string]string {
	h := map[string]string{"cpus": fmt.Sprint(runtime.NumCPU()), "go": runtime.Version()}
	if out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output(); err == nil {
		h["commit"] = strings.TrimSpace(string(out))
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		h["loadavg"] = strings.Join(strings.Fields(string(b))[:3], " ")
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		h["kernel"] = strings.TrimSpace(string(b))
	}
	return h
}

// env is what every configuration's measurement shares.
type env struct {
	o           options
	dir         string
	upstreamURL string
	upstreamKey string
	adminToken  string
	redisPrefix string // -cluster: the prefix of every Redis key of this run
}

// childEnv is the environment the generated files read their secrets from.
func (e *env) childEnv() []string {
	return []string{envAdminToken + "=" + e.adminToken, envUpstreamKey + "=" + e.upstreamKey}
}

// newClient returns a client with conns keep-alive connections to one
// host and a bound on each request.
func newClient(conns int, timeout time.Duration) *http.Client {
	return &http.Client{Timeout: timeout, Transport: &http.Transport{
		MaxConnsPerHost:     conns,
		MaxIdleConnsPerHost: conns,
		DisableCompression:  true,
	}}
}
