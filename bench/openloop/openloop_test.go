package main

import (
	"bufio"
	"bytes"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"trendgate/auth"
	"trendgate/config"
	"trendgate/gateway/gatewaytest"
)

// Output as wrk 4.1 and h2load 1.52 print it (trimmed).
const (
	wrkOutput = `Running 8s test @ https://127.0.0.1:40123/api4/public/topics/list/v1
  1 threads and 64 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     2.10ms    1.02ms  20.11ms   90.12%
  160432 requests in 8.00s, 8.63GB read
  Non-2xx or 3xx responses: 12
Requests/sec:  20053.71
Transfer/sec:      1.08GB
`
	h2loadOutput = `finished in 8.00s, 25004.50 req/s, 1.35GB/s
requests: 200036 total, 200100 started, 200036 done, 200030 succeeded, 6 failed, 6 errored, 0 timeout
status codes: 200030 2xx, 0 3xx, 0 4xx, 0 5xx
`
)

func TestParseClosed(t *testing.T) {
	for _, tc := range []struct {
		pr       protocol
		out      string
		rate     float64
		failures int
	}{
		{https, wrkOutput, 20053.71, 12},
		{h2, h2loadOutput, 25004.50, 6},
	} {
		rate, errs, err := parseClosed(tc.pr, tc.out)
		if err != nil || rate != tc.rate || errs != tc.failures {
			t.Errorf("%s: parseClosed = %v, %d, %v; want %v, %d, nil", tc.pr, rate, errs, err, tc.rate, tc.failures)
		}
	}
	if _, _, err := parseClosed(h1, "unable to connect to 127.0.0.1:1 Connection refused"); err == nil {
		t.Error("parseClosed of a failed wrk run: no error")
	}
}

// TestStatCPU reads this test process's own /proc entry: its parent is
// the go tool's process and its CPU time grows while it works (reading
// /proc in a loop).
func TestStatCPU(t *testing.T) {
	before, ppid, err := statCPU(os.Getpid())
	if err != nil {
		t.Skipf("no /proc here: %v", err)
	}
	if ppid != os.Getppid() {
		t.Errorf("ppid = %d; want %d", ppid, os.Getppid())
	}
	// Work until the next clock tick is charged (bounded: on a host too
	// busy to give this process 10 ms of CPU in 10 s, the test fails).
	after := before
	for start := time.Now(); after <= before && err == nil && time.Since(start) < 10*time.Second; {
		after, _, err = statCPU(os.Getpid())
	}
	if err != nil || after <= before {
		t.Errorf("CPU time %v then %v (%v); want it to grow", before, after, err)
	}
	if n, d, err := threads(os.Getpid()); err != nil || n <= 0 || d < 0 {
		t.Errorf("switches = %d, run-queue wait %v, %v; want some switches", n, d, err)
	}
}

func TestCacheHit(t *testing.T) {
	for _, tc := range []struct {
		name, value string
		hit         bool
	}{
		{"X-Cache-Status", "HIT", true},
		{"X-Cache-Status", "MISS", false},
		{"Cache-Status", "trendgate; hit", true},
		{"Cache-Status", "trendgate; fwd=miss; stored", false},
		{"Cache-Status", "", false},
	} {
		h := http.Header{}
		h.Set(tc.name, tc.value)
		if got := cacheHit(h); got != tc.hit {
			t.Errorf("cacheHit(%s: %q) = %v; want %v", tc.name, tc.value, got, tc.hit)
		}
	}
}

func TestMedianAndMean(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		var d []time.Duration
		for _, x := range v {
			d = append(d, time.Duration(x)*time.Millisecond)
		}
		return d
	}
	for _, tc := range []struct {
		in           []time.Duration
		median, mean time.Duration
	}{
		{ms(3), 3 * time.Millisecond, 3 * time.Millisecond},
		{ms(120, 5, 6), 6 * time.Millisecond, 131 * time.Millisecond / 3},
		{ms(8, 2, 4, 6), 5 * time.Millisecond, 5 * time.Millisecond},
	} {
		in := slices.Clone(tc.in)
		if got := medianOf(in); got != tc.median {
			t.Errorf("medianOf(%v) = %v; want %v", tc.in, got, tc.median)
		}
		if !slices.Equal(in, tc.in) {
			t.Errorf("medianOf reordered its input: %v", in)
		}
		if got := meanOf(in); got != tc.mean {
			t.Errorf("meanOf(%v) = %v; want %v", tc.in, got, tc.mean)
		}
	}
}

// TestFullHeadMatchesTrendgate: the minimal-full server's head has the
// fields trendgate sends on a cached hit for a key on the bench's plan (no
// limits, so no RateLimit fields), and each value has the same length but
// for the id's counter and Age, which grow. A field trendgate adds or
// drops fails it.
func TestFullHeadMatchesTrendgate(t *testing.T) {
	h := gatewaytest.New(t, func(c *config.Config) {
		c.Plans["bench"] = config.Plan{Endpoints: []string{"list", "series"}, DataMode: "full"}
		c.Keys[0].Plan = "bench"
	})
	target := targets(gatewaytest.Now)["small"]
	h.Get(target, h.Full) // fills the cache
	resp, body := h.Get(target, h.Full)
	if resp.StatusCode != http.StatusOK || !cacheHit(resp.Header) {
		t.Fatalf("second request: %d, Cache-Status %q; want a 200 hit", resp.StatusCode, resp.Header.Get("Cache-Status"))
	}

	head := "HTTP/1.1 200 OK\r\nContent-Type: " + resp.Header.Get("Content-Type") +
		"\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\nCache-Status: trendgate; hit\r\n" +
		fullHeadFields(gatewaytest.Now) + "\r\n"
	mr, err := http.ReadResponse(bufio.NewReader(strings.NewReader(head)), nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, got := range resp.Header {
		want, ok := mr.Header[name]
		switch {
		case !ok:
			t.Errorf("trendgate sends %s: %q; the minimal-full head has no such field", name, got)
		case name != "X-Request-Id" && name != "Age" && len(want[0]) != len(got[0]):
			t.Errorf("%s: minimal-full sends %q, trendgate %q (lengths differ)", name, want[0], got[0])
		}
	}
	for name, v := range mr.Header {
		if _, ok := resp.Header[name]; !ok {
			t.Errorf("the minimal-full head has %s: %q; trendgate sends no such field", name, v)
		}
	}
}

// TestSmallAnswerIsAFixedWindow: the small answer's target names a window
// of smallHours that ends at the last full hour, the same for any time in
// that hour, so its bytes do not change with the time of day (an
// interval, which the upstream counts from a midnight, would).
func TestSmallAnswerIsAFixedWindow(t *testing.T) {
	for _, now := range []time.Time{
		time.Date(2026, 11, 28, 23, 59, 59, 0, time.UTC),
		time.Date(2026, 11, 29, 0, 0, 1, 0, time.UTC),
		time.Date(2026, 11, 29, 13, 30, 0, 0, time.UTC),
	} {
		target := targets(now)["small"]
		if got := targets(now.Truncate(time.Hour))["small"]; got != target {
			t.Errorf("at %s: %q; at the start of the hour: %q", now, target, got)
		}
		i := strings.IndexByte(target, '?')
		if i < 0 {
			t.Fatalf("at %s: %q has no query", now, target)
		}
		q, err := url.ParseQuery(target[i+1:])
		if err != nil {
			t.Fatal(err)
		}
		if q.Get("interval") != "" || q.Get("bucket") != "hour" {
			t.Errorf("at %s: %q: want hourly buckets and no interval", now, target)
		}
		start, err1 := strconv.ParseInt(q.Get("start"), 10, 64)
		end, err2 := strconv.ParseInt(q.Get("end"), 10, 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("at %s: %q: start and end must be Unix seconds", now, target)
		}
		if want := now.Truncate(time.Hour).Unix(); end != want {
			t.Errorf("at %s: end %d, want %d (the last full hour)", now, end, want)
		}
		if end-start != smallHours*3600 {
			t.Errorf("at %s: the window is %d s, want %d", now, end-start, smallHours*3600)
		}
	}
}

// TestPairRounds checks the paired interval against figures worked by
// hand: ratios 1.1, 1.2 and 1.0 have a geometric mean of 1.097 and, with
// t = 4.303 for two degrees of freedom, an interval of 0.875–1.376. A
// round one server did not measure, or measured as 0, is not paired.
func TestPairRounds(t *testing.T) {
	ms := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }
	a := map[int]time.Duration{0: ms(1.1), 1: ms(1.2), 2: ms(1.0), 3: ms(5), 4: ms(2)}
	b := map[int]time.Duration{0: ms(1), 1: ms(1), 2: ms(1), 4: 0}
	p, ok := pairRounds(a, b)
	if !ok {
		t.Fatal("pairRounds: no interval from three pairs")
	}
	near := func(x, want float64) bool { return math.Abs(x-want) < 5e-4 }
	if p.n != 3 || p.higher != 2 || !near(p.ratio, 1.0970) || !near(p.lo, 0.8746) || !near(p.hi, 1.3759) {
		t.Errorf("pairRounds = %+v; want ratio 1.0970 (0.8746–1.3759), 2 of 3 higher", p)
	}
	if _, ok := pairRounds(map[int]time.Duration{0: ms(1), 1: ms(2)}, map[int]time.Duration{0: ms(1)}); ok {
		t.Error("pairRounds gave an interval from one pair")
	}
	// Identical rounds: no spread, an interval of the ratio alone.
	if p, _ := pairRounds(map[int]time.Duration{0: ms(2), 1: ms(2)}, map[int]time.Duration{0: ms(1), 1: ms(1)}); !near(p.lo, 2) || !near(p.hi, 2) || p.higher != 2 {
		t.Errorf("pairRounds of equal rounds = %+v; want 2 (2–2), 2 of 2 higher", p)
	}
}

// TestMinimalEpoll: the minimal server's event loops answer keep-alive
// requests as its goroutines do: two heads sent in one write, a head in
// two writes, an answer larger than the socket takes at once (so the loop
// waits for room and then reads again), with and without a second head
// behind it, a refused key and an unknown target; and stopping the server
// closes every connection.
func TestMinimalEpoll(t *testing.T) {
	const key = "tg_example_key_for_the_epoll_test"
	big := append([]byte("HTTP/1.1 200 OK\r\nContent-Length: 8388608\r\n\r\n"), make([]byte, 8<<20)...)
	small := []byte("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nsmall")
	s := &minimal{keys: map[string]bool{auth.Digest(key): true}, answers: map[string][]byte{"/big": big, "/small": small}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	procs := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(procs) }) // serveEpoll raises it
	served := make(chan error, 1)
	go func() { served <- s.serveEpoll(ln, 2) }()

	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// A bound, not a wait: a broken loop fails the test instead of hanging it.
	if err := c.SetDeadline(time.Now().Add(20 * time.Second)); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	head := func(target, k string) string {
		return "GET " + target + " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + k + "\r\n\r\n"
	}
	send := func(parts ...string) {
		t.Helper()
		for _, p := range parts {
			if _, err := io.WriteString(c, p); err != nil {
				t.Fatal(err)
			}
		}
	}
	expect := func(want []byte) {
		t.Helper()
		got := make([]byte, len(want))
		if _, err := io.ReadFull(br, got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("answer %.60q…, want %.60q…", got, want)
		}
	}
	send(head("/small", key) + head("/small", "tg_wrong"))
	expect(small)
	expect(minimalUnauthorized)
	whole := head("/small", key)
	send(whole[:20], whole[20:])
	expect(small)
	send(head("/big", key))
	expect(big)
	send(head("/big", key) + head("/small", key)) // the second waits for the first's room
	expect(big)
	expect(small)
	send(head("/nothing", key))
	expect(minimalNotFound)
	send(head("/small", key))
	expect(small)

	ln.Close()
	if err := <-served; err == nil {
		t.Error("serveEpoll returned no error when its listener closed")
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("after the server stopped, the connection read %v; want EOF", err)
	}
}
