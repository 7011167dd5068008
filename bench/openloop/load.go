package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// protocol is how the load generator talks to a server.
type protocol string

const (
	h1    protocol = "h1"    // plain HTTP/1.1
	https protocol = "https" // HTTP/1.1 over TLS
	h2    protocol = "h2"    // HTTP/2 over TLS
)

func (p protocol) String() string {
	switch p {
	case h1:
		return "HTTP/1.1"
	case https:
		return "HTTPS/1.1"
	}
	return "HTTP/2"
}

// endpoints are the measured requests: a small answer (a topic's hourly
// series over smallHours fixed hours, about 18 KB from the demo upstream),
// the topics list (58 KB) and a topic's hourly series over the default
// week (72 KB).
var endpoints = targets(time.Now())

// smallHours is how many hours the small answer spans. Its window is
// fixed when the run starts, so every server and round is sent the same
// bytes at any time of day. An interval would not do: the upstream starts
// interval=1d at the previous UTC midnight, so its answer grows through
// the day (10 KB to 19 KB).
const smallHours = 44

// targets returns the endpoints' request targets for a run started at
// now: the small answer ends at the last full hour.
func targets(now time.Time) map[string]string {
	end := now.Truncate(time.Hour)
	start := end.Add(-smallHours * time.Hour)
	return map[string]string{
		"small":  fmt.Sprintf("/api4/public/topic/bitcoin/time-series/v1?bucket=hour&start=%d&end=%d", start.Unix(), end.Unix()),
		"list":   "/api4/public/topics/list/v1",
		"series": "/api4/public/topic/bitcoin/time-series/v1",
	}
}

// roundRobin spreads requests over single-connection HTTP/2 transports, so
// that an HTTP/2 run uses conns connections as the HTTP/1.1 runs do (Go's
// transport would put every stream on one connection).
type roundRobin struct {
	next atomic.Uint64
	rts  []*http.Transport
}

func (r *roundRobin) RoundTrip(req *http.Request) (*http.Response, error) {
	return r.rts[r.next.Add(1)%uint64(len(r.rts))].RoundTrip(req)
}

func (r *roundRobin) CloseIdleConnections() {
	for _, t := range r.rts {
		t.CloseIdleConnections()
	}
}

// newClient returns the client for one server and protocol: conns
// keep-alive connections, the bench certificate trusted, no gzip asked.
func newClient(pr protocol, conns int, pool *x509.CertPool) *http.Client {
	const timeout = 10 * time.Second
	if pr == h2 {
		rr := &roundRobin{}
		for range conns {
			t := &http.Transport{
				TLSClientConfig:    &tls.Config{RootCAs: pool},
				DisableCompression: true,
				MaxConnsPerHost:    1,
				Protocols:          new(http.Protocols),
			}
			t.Protocols.SetHTTP2(true) // HTTP/2 only: ALPN h2
			rr.rts = append(rr.rts, t)
		}
		return &http.Client{Transport: rr, Timeout: timeout}
	}
	tr := &http.Transport{
		MaxConnsPerHost:     conns,
		MaxIdleConnsPerHost: conns,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
		TLSNextProto:        map[string]func(string, *tls.Conn) http.RoundTripper{}, // HTTP/1.1 only
		TLSClientConfig:     &tls.Config{RootCAs: pool, NextProtos: []string{"http/1.1"}},
	}
	return &http.Client{Transport: tr, Timeout: timeout}
}

// warm opens the client's connections (conns requests at once, so that
// the pool fills) and checks that url answers 200 on the expected protocol,
// and then from the cache. It returns the body size.
func warm(ctx context.Context, c *http.Client, pr protocol, conns int, url, key string) (int, error) {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
		size  int
	)
	for round := 0; round < 2; round++ { // the first round may fill the cache
		for range conns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				n, _, err := get(ctx, c, pr, url, key)
				mu.Lock()
				defer mu.Unlock()
				if err != nil && first == nil {
					first = err
				}
				size = n
			}()
		}
		wg.Wait()
		if first != nil {
			return 0, first
		}
	}
	_, hit, err := get(ctx, c, pr, url, key)
	if err != nil {
		return 0, err
	}
	if !hit {
		return 0, fmt.Errorf("%s: not answered from the cache after two rounds of requests", url)
	}
	return size, nil
}

// cacheHit reports whether a response says it came from the cache:
// nginx's X-Cache-Status (see nginx.conf.tmpl) or trendgate's Cache-Status.
func cacheHit(h http.Header) bool {
	return h.Get("X-Cache-Status") == "HIT" || strings.HasPrefix(h.Get("Cache-Status"), "trendgate; hit")
}

// get sends one request and checks its status and protocol; it returns
// the body's size and whether the answer came from the cache.
func get(ctx context.Context, c *http.Client, pr protocol, url, key string) (size int, hit bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, false, err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := c.Do(req)
	if err != nil {
		return 0, false, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, false, fmt.Errorf("%s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return 0, false, fmt.Errorf("%s: status %s: %.200s", url, resp.Status, body)
	}
	wantMajor := 1
	if pr == h2 {
		wantMajor = 2
	}
	if resp.ProtoMajor != wantMajor {
		return 0, false, fmt.Errorf("%s: answered over %s, want %s", url, resp.Proto, pr)
	}
	return len(body), cacheHit(resp.Header), nil
}

// result is what one step measured.
type result struct {
	server            string
	proto             protocol
	endpoint          string
	rate              int
	round             int // from 0
	requests, errors  uint64
	firstError        string
	p50, p90, p99, mx time.Duration
	serverCPU         time.Duration // the server's processes over the step
	genCPU            time.Duration // this process (the load generator)
	hostCPU           time.Duration // the whole host, all processors
	switches          int64         // the server's threads' context switches
	runDelay          time.Duration // the server's threads' wait for a CPU
	elapsed           time.Duration
	runtime           runtimeStep // the Go runtime's work over the step (Go servers)
	trace             traceStep   // what its execution trace says (-trace, Go servers)
}

// cpuPerRequest is the server's CPU time per answered request.
func (r result) cpuPerRequest() time.Duration {
	if r.requests == 0 {
		return 0
	}
	return r.serverCPU / time.Duration(r.requests)
}

// stopCPU stops cpu (nil: no meter) and keeps what it measured over the
// step.
func (r *result) stopCPU(cpu *cpuMeter) error {
	if cpu == nil {
		return nil
	}
	used, err := cpu.stop()
	if err != nil {
		return fmt.Errorf("cpu time: %w", err)
	}
	r.serverCPU, r.genCPU, r.hostCPU, r.switches, r.runDelay = used.server, used.self, used.host, used.switches, used.runDelay
	return nil
}

// overKnee reports whether the step is past the knee: p99 at or above knee,
// or any error.
func (r result) overKnee(knee time.Duration) bool {
	return r.p99 >= knee || r.errors > 0
}

// step sends requests to url at a constant rate for d (open loop: each
// request leaves at its time whether or not earlier ones were answered) and
// measures latency and the CPU time of the server's processes.
func step(ctx context.Context, c *http.Client, url, key string, rate int, d time.Duration, cpu *cpuMeter) (result, error) {
	target := vegeta.Target{Method: http.MethodGet, URL: url, Header: http.Header{"Authorization": {"Bearer " + key}}}
	atk := vegeta.NewAttacker(
		vegeta.Client(c),
		vegeta.MaxBody(0), // drain the body without keeping it
		vegeta.Workers(64),
		vegeta.MaxWorkers(20000),
	)
	stop := context.AfterFunc(ctx, func() { atk.Stop() })
	defer stop()
	var (
		m     vegeta.Metrics
		res   result
		began = time.Now()
	)
	for r := range atk.Attack(vegeta.NewStaticTargeter(target), vegeta.Rate{Freq: rate, Per: time.Second}, d, "") {
		m.Add(r)
		if r.Error != "" {
			res.errors++
			if res.firstError == "" {
				res.firstError = r.Error
			}
		}
	}
	m.Close()
	res.elapsed = time.Since(began)
	if err := res.stopCPU(cpu); err != nil {
		return res, err
	}
	if err := ctx.Err(); err != nil {
		return res, err
	}
	res.rate, res.requests = rate, m.Requests
	res.p50, res.p90, res.p99, res.mx = m.Latencies.P50, m.Latencies.P90, m.Latencies.P99, m.Latencies.Max
	return res, nil
}

// profileStep fetches a CPU profile or an execution trace (kind "profile"
// or "trace") of d from a trendgate admin listener into file while a step
// runs; the returned func waits for it.
func profileStep(admin, kind string, d time.Duration, file string) func() error {
	done := make(chan error, 1)
	go func() {
		done <- func() error {
			secs := max(1, int(d/time.Second))
			resp, err := http.Get(fmt.Sprintf("%s/debug/pprof/%s?seconds=%d", admin, kind, secs))
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return errors.New("pprof: " + resp.Status)
			}
			f, err := os.Create(file)
			if err != nil {
				return err
			}
			if _, err := io.Copy(f, resp.Body); err != nil {
				f.Close()
				return err
			}
			return f.Close()
		}()
	}()
	return func() error { return <-done }
}
