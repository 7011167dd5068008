// Command memflood measures how much memory a trendgate process takes for a
// given cache.max_bytes. It runs the demo upstream in its own process, starts
// a built `trendgate serve` as a child process on loopback, floods it with
// distinct cache keys (or replays large entries through every variant), and
// reads the child's /proc/PID/status (VmHWM, VmRSS) and /metrics. It prints
// peak resident memory, heap in use, cache and variant bytes, evictions,
// misses per second and the ratio of peak RSS to max_bytes, and exits 1 when
// a request was not answered 200 or, with -check, when peak RSS exceeds
// 1.25 × max_bytes + 48 MiB.
//
// Run it from the module root (it builds ./cmd/trendgate unless -bin is
// given):
//
//	go run ./bench/memflood -scenario flood -max-bytes 134217728
//	go run ./bench/memflood -scenario replay -max-bytes 268435456
//
// Both scenarios are bounded: -requests caps the request count and -timeout
// the wall time.
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/template"
	"time"

	"trendgate/auth"
	"trendgate/demo"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "memflood:", err)
		os.Exit(1)
	}
}

type options struct {
	bin         string
	scenario    string
	maxBytes    int64
	memLimit    int64
	goMemLimit  string
	requests    int
	topics      int
	concurrency int
	gzip        bool
	passes      int
	timeout     time.Duration
	heapProfile string
	profileAt   time.Duration
	check       bool
}

func run() error {
	var o options
	flag.StringVar(&o.bin, "bin", "", "trendgate binary to run (default: build ./cmd/trendgate into a temporary directory)")
	flag.StringVar(&o.scenario, "scenario", "flood", "flood: distinct one-week hourly series; replay: interval=all series as full and limited, identity and gzip")
	flag.Int64Var(&o.maxBytes, "max-bytes", 128<<20, "cache.max_bytes of the gateway under test")
	flag.Int64Var(&o.memLimit, "memory-limit", 0, "server.memory_limit of the gateway under test (0: derived)")
	flag.StringVar(&o.goMemLimit, "gomemlimit", "", "GOMEMLIMIT for the gateway process (empty: unset)")
	flag.IntVar(&o.requests, "requests", 40000, "flood: number of distinct requests (at most)")
	flag.IntVar(&o.topics, "topics", 300, "topics used (flood: 300; replay: 150 is the issue's probe)")
	flag.IntVar(&o.concurrency, "concurrency", 32, "concurrent clients")
	flag.BoolVar(&o.gzip, "gzip", true, "flood: send Accept-Encoding: gzip")
	flag.IntVar(&o.passes, "passes", 2, "replay: passes over the four variants of every URL")
	flag.DurationVar(&o.timeout, "timeout", 10*time.Minute, "bound on the whole run")
	flag.StringVar(&o.heapProfile, "heapprofile", "", "write the gateway's heap profile (admin /debug/pprof/heap) to this file at the end (or at -heapprofile-at)")
	flag.DurationVar(&o.profileAt, "heapprofile-at", 0, "take the -heapprofile this long into the load instead of at the end, without forcing a collection")
	flag.BoolVar(&o.check, "check", false, "exit 1 when peak RSS exceeds 1.25 × max_bytes + 48 MiB")
	flag.Parse()
	if o.scenario != "flood" && o.scenario != "replay" {
		return fmt.Errorf("unknown -scenario %q", o.scenario)
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()

	if o.bin == "" {
		dir, err := os.MkdirTemp("", "memflood")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		o.bin = filepath.Join(dir, "trendgate")
		build := exec.CommandContext(ctx, "go", "build", "-o", o.bin, "./cmd/trendgate")
		build.Stderr = os.Stderr
		if err := build.Run(); err != nil {
			return fmt.Errorf("build: %w", err)
		}
	}

	// The upstream lives in this process; only the gateway is measured.
	upKey, err := auth.Generate()
	if err != nil {
		return err
	}
	up, err := demo.New(demo.Options{APIKey: upKey, Topics: max(o.topics, 300)})
	if err != nil {
		return err
	}
	defer up.Close()
	upURL, stopUp, err := up.ServeLoopback()
	if err != nil {
		return err
	}
	defer stopUp()

	gw, err := startGateway(ctx, o, upURL, upKey)
	if err != nil {
		return err
	}
	defer gw.stop()

	topics := up.Topics()[:o.topics]
	urls := plan(o, topics, time.Now())
	sampler := gw.sample(ctx)
	start := time.Now()
	profiled := make(chan error, 1)
	if o.heapProfile != "" && o.profileAt > 0 {
		go func() { // ends after one fetch; run waits for it below
			select {
			case <-time.After(o.profileAt):
				profiled <- gw.fetch("/debug/pprof/heap", o.heapProfile)
			case <-ctx.Done():
				profiled <- ctx.Err()
			}
		}()
	}
	res := gw.load(ctx, urls, o.concurrency)
	elapsed := time.Since(start)
	peak := sampler()
	if ctx.Err() != nil {
		return fmt.Errorf("timed out after %s (%d of %d requests done)", o.timeout, res.done.Load(), len(urls))
	}
	m, err := gw.metrics()
	if err != nil {
		return err
	}
	switch {
	case o.heapProfile != "" && o.profileAt > 0:
		if err := <-profiled; err != nil {
			return fmt.Errorf("heap profile: %w", err)
		}
	case o.heapProfile != "":
		if err := gw.fetch("/debug/pprof/heap?gc=1", o.heapProfile); err != nil {
			return err
		}
	}
	st, err := procStatus(gw.cmd.Process.Pid)
	if err != nil {
		return err
	}
	bound := o.maxBytes*5/4 + 48<<20
	misses := m["trendgate_cache_requests_total"+`{outcome="miss"}`]
	fmt.Printf("scenario=%s max_bytes=%d (%.0f MiB) memory_limit=%d GOMEMLIMIT=%q requests=%d concurrency=%d gzip=%v\n",
		o.scenario, o.maxBytes, mib(o.maxBytes), o.memLimit, o.goMemLimit, len(urls), o.concurrency, o.gzip)
	fmt.Printf("status: %d × 200, %d other (first: %s)\n", res.ok.Load(), res.bad.Load(), res.firstBad())
	fmt.Printf("elapsed %.1fs, misses/s %.0f, requests/s %.0f\n", elapsed.Seconds(), misses/elapsed.Seconds(), float64(len(urls))/elapsed.Seconds())
	fmt.Printf("peak RSS (VmHWM) %.1f MiB = %.2f × max_bytes; final RSS %.1f MiB; bound 1.25 × max_bytes + 48 MiB = %.1f MiB\n",
		mib(st.hwm), float64(st.hwm)/float64(o.maxBytes), mib(st.rss), mib(bound))
	fmt.Printf("heap in use: peak %.1f MiB, final %.1f MiB; cache bytes %.1f MiB, variant bytes %.1f MiB, entries %.0f, evictions %.0f\n",
		mib(int64(peak.heapInuse)), mib(int64(m["go_memstats_heap_inuse_bytes"])),
		mib(int64(m["trendgate_cache_bytes"])), mib(int64(m["trendgate_cache_variant_bytes"])),
		m["trendgate_cache_entries"], m["trendgate_cache_evictions_total"])
	if res.bad.Load() > 0 {
		return errors.New("some requests were not answered 200")
	}
	if o.check && st.hwm > bound {
		return fmt.Errorf("peak RSS %.1f MiB exceeds the bound %.1f MiB", mib(st.hwm), mib(bound))
	}
	return nil
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

// request is one planned client request.
type request struct {
	path    string
	limited bool
	gzip    bool
}

// plan returns the requests of the scenario. flood: o.requests distinct
// one-week hourly windows, topic by topic, each window shifted one more
// hour back in time. replay: every topic's interval=all hourly series,
// first as full identity, then each of full/limited × identity/gzip,
// o.passes times.
func plan(o options, topics []string, now time.Time) []request {
	var reqs []request
	esc := url.PathEscape
	if o.scenario == "flood" {
		end := now.Truncate(time.Hour).Add(-time.Hour).Unix()
		for i := 0; i < o.requests; i++ {
			t := topics[i%len(topics)]
			e := end - int64(i/len(topics))*3600
			reqs = append(reqs, request{
				path: fmt.Sprintf("/api4/public/topic/%s/time-series/v1?bucket=hour&start=%d&end=%d", esc(t), e-7*24*3600, e),
				gzip: o.gzip,
			})
		}
		return reqs
	}
	for _, t := range topics {
		reqs = append(reqs, request{path: "/api4/public/topic/" + esc(t) + "/time-series/v1?bucket=hour&interval=all"})
	}
	first := len(reqs)
	for p := 0; p < o.passes; p++ {
		for _, v := range []request{{}, {gzip: true}, {limited: true}, {limited: true, gzip: true}} {
			for _, r := range reqs[:first] {
				reqs = append(reqs, request{path: r.path, limited: v.limited, gzip: v.gzip})
			}
		}
	}
	return reqs
}

// gateway is the trendgate child process under test.
type gateway struct {
	cmd                 *exec.Cmd
	dir                 string
	public, admin       string
	fullKey, limitedKey string
	client              *http.Client
	exited              chan struct{}
}

var configTemplate = template.Must(template.New("cfg").Parse(`server:
  listen: {{.Public}}
{{- if .MemLimit}}
  memory_limit: {{.MemLimit}}
{{- end}}
admin:
  listen: {{.Admin}}
  pprof: true
log:
  level: info
  access: false
upstream:
  base_url: {{.Upstream}}
  api_key: {{.UpKey}}
cache:
  max_bytes: {{.MaxBytes}}
plans:
  full:
    per_second: 1000000
    burst: 1000000
    endpoints: [list, whatsup, series, tsv]
    data_mode: full
  limited:
    per_second: 1000000
    burst: 1000000
    endpoints: [list, whatsup, series, tsv]
    data_mode: limited
    fields:
      list: [topic, title, topic_rank, topic_rank_1h_previous, topic_rank_24h_previous, num_contributors, num_posts]
      whatsup: [summary]
      series: [time, contributors_active, contributors_created, posts_active, posts_created, interactions, sentiment, spam]
      tsv: [interactions, posts_active, contributors_active, sentiment]
keys:
  - id: bench-full
    sha256: {{.FullDigest}}
    plan: full
  - id: bench-limited
    sha256: {{.LimitedDigest}}
    plan: limited
`))

// freePort returns a loopback address that was free a moment ago (the
// child binds it next; a collision makes the start fail, not mismeasure).
func freePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func startGateway(ctx context.Context, o options, upstreamURL, upKey string) (*gateway, error) {
	g := &gateway{exited: make(chan struct{})}
	var err error
	if g.fullKey, err = auth.Generate(); err != nil {
		return nil, err
	}
	if g.limitedKey, err = auth.Generate(); err != nil {
		return nil, err
	}
	if g.public, err = freePort(); err != nil {
		return nil, err
	}
	if g.admin, err = freePort(); err != nil {
		return nil, err
	}
	if g.dir, err = os.MkdirTemp("", "memflood-gw"); err != nil {
		return nil, err
	}
	var cfg bytes.Buffer
	if err := configTemplate.Execute(&cfg, map[string]any{
		"Public": g.public, "Admin": g.admin, "MemLimit": o.memLimit, "Upstream": upstreamURL, "UpKey": upKey,
		"MaxBytes": o.maxBytes, "FullDigest": auth.Digest(g.fullKey), "LimitedDigest": auth.Digest(g.limitedKey),
	}); err != nil {
		return nil, err
	}
	path := filepath.Join(g.dir, "trendgate.yaml")
	if err := os.WriteFile(path, cfg.Bytes(), 0o600); err != nil {
		return nil, err
	}
	g.cmd = exec.Command(o.bin, "serve", "-config", path, "-watch", "0")
	g.cmd.Env = os.Environ()
	if o.goMemLimit != "" {
		g.cmd.Env = append(g.cmd.Env, "GOMEMLIMIT="+o.goMemLimit)
	}
	logs, err := g.cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := g.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { // echoes the gateway's startup and warning lines; ends with the child
		sc := bufio.NewScanner(logs)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			if line := sc.Text(); strings.Contains(line, "memory limit") || strings.Contains(line, `"level":"error"`) {
				fmt.Fprintln(os.Stderr, "gateway:", line)
			}
		}
		_ = g.cmd.Wait()
		close(g.exited)
	}()
	g.client = &http.Client{Transport: &http.Transport{
		MaxIdleConnsPerHost: o.concurrency,
		DisableCompression:  true, // the gzip body is what the gateway sends; read it as is
	}, Timeout: time.Minute}
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := g.client.Get("http://" + g.admin + "/healthz")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return g, nil
			}
		}
		select {
		case <-g.exited:
			g.stop()
			return nil, errors.New("the gateway exited during start")
		case <-ctx.Done():
			g.stop()
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			g.stop()
			return nil, errors.New("the gateway did not answer /healthz within 20s")
		}
	}
}

// stop sends SIGTERM, waits up to 10s, then kills the child.
func (g *gateway) stop() {
	if g.cmd != nil && g.cmd.Process != nil {
		_ = g.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-g.exited:
		case <-time.After(10 * time.Second):
			_ = g.cmd.Process.Kill()
			<-g.exited
		}
	}
	_ = os.RemoveAll(g.dir)
}

// results counts the answers of a load.
type results struct {
	done, ok, bad atomic.Int64
	mu            sync.Mutex // guards first
	first         string     // the first non-200 answer
}

func (r *results) firstBad() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.first == "" {
		return "none"
	}
	return r.first
}

// load sends reqs from n concurrent clients, each request once, in order.
func (g *gateway) load(ctx context.Context, reqs []request, n int) *results {
	res := &results{}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= len(reqs) {
					return
				}
				g.do(ctx, reqs[i], res)
			}
		})
	}
	wg.Wait()
	return res
}

func (g *gateway) do(ctx context.Context, rq request, res *results) {
	defer res.done.Add(1)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+g.public+rq.path, nil)
	if err != nil {
		res.fail(err.Error())
		return
	}
	key := g.fullKey
	if rq.limited {
		key = g.limitedKey
	}
	req.Header.Set("Authorization", "Bearer "+key)
	if rq.gzip {
		req.Header.Set("Accept-Encoding", "gzip")
	}
	resp, err := g.client.Do(req)
	if err != nil {
		res.fail(err.Error())
		return
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		res.fail(rq.path + ": " + resp.Status)
		return
	}
	res.ok.Add(1)
}

func (r *results) fail(what string) {
	r.bad.Add(1)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.first == "" {
		r.first = what
	}
}

// peaks are the highest values seen while sampling.
type peaks struct{ heapInuse float64 }

// sample polls the gateway's heap in use every 250ms until the returned
// func is called, which returns the peaks.
func (g *gateway) sample(ctx context.Context) func() peaks {
	var p peaks
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // owned by sample's caller: ends when stop is closed
		defer close(done)
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				if m, err := g.metrics(); err == nil {
					p.heapInuse = max(p.heapInuse, m["go_memstats_heap_inuse_bytes"])
				}
			}
		}
	}()
	return func() peaks {
		close(stop)
		<-done
		return p
	}
}

// metrics scrapes the admin /metrics into name{labels} → value.
func (g *gateway) metrics() (map[string]float64, error) {
	resp, err := g.client.Get("http://" + g.admin + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	m := make(map[string]float64)
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name, val, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		if v, err := strconv.ParseFloat(val, 64); err == nil {
			m[name] = v
		}
	}
	return m, sc.Err()
}

// fetch saves an admin route's body to path.
func (g *gateway) fetch(route, path string) error {
	resp, err := g.client.Get("http://" + g.admin + route)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", route, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// status is what procStatus reads from /proc/PID/status, in bytes.
type status struct{ hwm, rss int64 }

func procStatus(pid int) (status, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return status{}, err
	}
	var s status
	for _, line := range strings.Split(string(b), "\n") {
		name, val, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(val)
		if len(f) != 2 || f[1] != "kB" {
			continue
		}
		n, _ := strconv.ParseInt(f[0], 10, 64)
		switch name {
		case "VmHWM":
			s.hwm = n << 10
		case "VmRSS":
			s.rss = n << 10
		}
	}
	return s, nil
}
