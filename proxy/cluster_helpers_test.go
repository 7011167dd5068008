package proxy_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"trendgate/config"
	"trendgate/demo"
	"trendgate/internal/clock"
	"trendgate/internal/testing/promtest"
	"trendgate/internal/testing/redistest"
)

// sharedRedis is the Redis the cluster tests share with other test runs;
// every test works under its own random prefix there.
const sharedRedis = "127.0.0.1:6379"

// redisWait bounds every wait on Redis (start-up, replay) in these tests.
const redisWait = 15 * time.Second

// requireRedis skips the test when no Redis answers at addr, unless CI is
// "true": there the cluster tests must run, so it fails instead.
func requireRedis(t *testing.T, addr string) {
	t.Helper()
	redistest.Client(t, addr)
}

// callLog records the wall-clock arrival time of every upstream API call,
// so calls can be grouped into the Redis TIME minute windows the shared
// budget counts in (Redis and the test run on the same host).
type callLog struct {
	mu sync.Mutex  // guards at
	at []time.Time // arrival times, in order
}

func (l *callLog) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l.mu.Lock()
		l.at = append(l.at, time.Now())
		l.mu.Unlock()
		next.ServeHTTP(w, r)
	})
}

// perMinute counts the calls by UTC minute window (unix minute).
func (l *callLog) perMinute() map[int64]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[int64]int)
	for _, t := range l.at {
		out[t.Unix()/60]++
	}
	return out
}

// cluster is several gateways, each with its own proxy.New and real
// servers on random loopback ports, sharing one Redis, one fake clock and
// one recording demo upstream.
type cluster struct {
	t        *testing.T
	clk      *clock.Fake
	up       *demo.Server
	calls    *callLog
	nodes    []*harness
	addr     string             // host:port of the single Redis ("" on a Redis Cluster)
	rc       *redistest.Cluster // the Redis Cluster, or nil
	prefix   string             // redis.prefix of every node: "tg:test:<random>:"
	counters redis.UniversalClient
	full     string // a full-plan key (key id "team-full")
	limited  string // a limited-plan key (key id "team-limited")
}

// clusterOptions configures newCluster. The zero value is three instances
// on the shared Redis with the default config.
type clusterOptions struct {
	instances int                   // 0 means 3
	addr      string                // Redis host:port; "" means sharedRedis
	rc        *redistest.Cluster    // a Redis Cluster to use instead of addr
	mutate    func(*config.Config)  // applied to each instance's config
	demo      func(o *demo.Options) // applied to the demo upstream's options
	start     time.Time             // the fake clock's start; zero means the real time
}

// newCluster starts the demo upstream and the gateways. The fake clock
// starts at the real time unless o.start says otherwise, so the gateways'
// UTC windows agree with the windows Redis computes from its own TIME. When the test ends, after
// every gateway is closed, it checks that every key the test created
// under its prefix carries a TTL and deletes them.
func newCluster(t *testing.T, o clusterOptions) *cluster {
	t.Helper()
	if o.instances == 0 {
		o.instances = 3
	}
	if o.addr == "" && o.rc == nil {
		o.addr = sharedRedis
		requireRedis(t, o.addr)
	}
	var rnd [6]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		t.Fatal(err)
	}
	if o.start.IsZero() {
		o.start = time.Now().UTC()
	}
	c := &cluster{
		t:      t,
		clk:    clock.NewFake(o.start),
		calls:  &callLog{},
		addr:   o.addr,
		rc:     o.rc,
		prefix: "tg:test:" + hex.EncodeToString(rnd[:]) + ":",
	}
	if o.rc != nil {
		c.counters = redis.NewClusterClient(&redis.ClusterOptions{Addrs: o.rc.Addrs(), MaxRetries: -1})
	} else {
		c.counters = redis.NewClient(&redis.Options{Addr: o.addr, DB: 0, MaxRetries: -1})
	}
	// Registered first, so it runs last: after every gateway has stopped.
	t.Cleanup(func() {
		c.checkTTLs(false)
		c.deleteKeys()
		_ = c.counters.Close()
	})

	dopts := demo.Options{Clock: c.clk, APIKey: upstreamKey}
	if o.demo != nil {
		o.demo(&dopts)
	}
	up, err := demo.New(dopts)
	if err != nil {
		t.Fatal(err)
	}
	c.up = up
	upSrv := httptest.NewServer(c.calls.wrap(up))
	t.Cleanup(func() { up.Close(); upSrv.Close() })

	c.full, c.limited = newKey(t), newKey(t)
	for range o.instances {
		cfg := baseConfig(upSrv.URL, c.full, c.limited)
		noAccess := false
		cfg.Log.Access = &noAccess                 // the logs keep only what went wrong
		cfg.Redis.URL = "redis://" + o.addr + "/0" // cache tier: DB 1
		if o.rc != nil {
			cfg.Redis.URL = o.rc.URL() // cache tier: the same cluster, under <prefix>c:
		}
		cfg.Redis.Prefix = c.prefix
		// The exactness these tests assert holds only while Redis answers
		// within redis.timeout: a command that times out falls back to the
		// local share for that request. The default 50ms is exceeded on a
		// loaded test machine under -race, so the tests allow 1s (an outage
		// is still detected at once: connections are refused).
		cfg.Redis.Timeout = time.Second
		if o.mutate != nil {
			o.mutate(cfg)
		}
		h := serveHarness(t, c.clk, up, upSrv, cfg, c.full, c.limited)
		// Runs before serve's cleanup: a connection the transport dialed
		// but never used would otherwise hold Shutdown for 5 s (net/http
		// waits that long for a first request on a new connection).
		t.Cleanup(h.client.CloseIdleConnections)
		c.nodes = append(c.nodes, h)
	}
	return c
}

// result is one response as a concurrent caller saw it.
type result struct {
	node   int
	status int
	code   string // the JSON error code, for errors
	cache  string // Cache-Status
	retry  string // Retry-After
	err    error
}

// send performs one GET of target with key on node i. It never calls
// t.Fatal, so it may run on any goroutine.
func (c *cluster) send(i int, target, key string) result {
	h := c.nodes[i]
	res := result{node: i}
	req, err := http.NewRequest(http.MethodGet, h.base+target, nil)
	if err != nil {
		res.err = err
		return res
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := h.client.Do(req)
	if err != nil {
		res.err = err
		return res
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		res.err = err
		return res
	}
	res.status = resp.StatusCode
	res.cache = resp.Header.Get("Cache-Status")
	res.retry = resp.Header.Get("Retry-After")
	if resp.StatusCode >= 400 {
		if _, rest, ok := strings.Cut(string(body), `"code":"`); ok {
			res.code, _, _ = strings.Cut(rest, `"`)
		}
	}
	return res
}

// burst sends n requests for target at once, request j to node j mod
// instances, and returns every result.
func (c *cluster) burst(n int, target, key string) []result {
	out := make([]result, n)
	var wg sync.WaitGroup
	for j := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[j] = c.send(j%len(c.nodes), target, key)
		}()
	}
	wg.Wait()
	for _, r := range out {
		if r.err != nil {
			c.t.Fatalf("node %d: %v", r.node, r.err)
		}
	}
	return out
}

// tally counts results by status and error code ("200", "429 rate_limited").
func tally(rs []result) map[string]int {
	out := make(map[string]int)
	for _, r := range rs {
		k := strconv.Itoa(r.status)
		if r.code != "" {
			k += " " + r.code
		}
		out[k]++
	}
	return out
}

// redisNow returns Redis's own TIME, which its windows are computed from.
func (c *cluster) redisNow() time.Time {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	now, err := c.counters.Time(ctx).Result()
	if err != nil {
		c.t.Fatalf("redis TIME: %v", err)
	}
	return now.UTC()
}

// quotaCounter reads the shared daily ("d", YYYYMMDD) or monthly ("m",
// YYYYMM) quota counter of keyID in the window containing Redis's now;
// 0 when it does not exist.
func (c *cluster) quotaCounter(kind, keyID string) int64 {
	c.t.Helper()
	now := c.redisNow()
	window := now.Format("20060102")
	if kind == "m" {
		window = now.Format("200601")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	// The limiter's key layout (limits.Redis.dayKey and monthKey).
	key := c.prefix + "q:" + kind + ":" + keyID + ":" + window
	if c.rc != nil {
		key = c.prefix + "{" + keyID + "}:q:" + kind + ":" + window
	}
	n, err := c.counters.Get(ctx, key).Int64()
	if err == redis.Nil {
		return 0
	}
	if err != nil {
		c.t.Fatalf("read quota counter: %v", err)
	}
	return n
}

// keyCounts are the keys found under a test's prefix.
type keyCounts struct {
	counters int // limits, quotas, budget, leases, replay markers, admission records
	cache    int // shared cache entries and topic indexes
}

// keySpace is one place the test's keys may live: a database of the
// single Redis or one primary of the Redis Cluster.
type keySpace struct {
	name   string
	client *redis.Client
	cache  func(key string) bool // whether key belongs to the cache tier
}

// keySpaces opens a client per place (the caller closes them): DB 0
// (counters) and DB 1 (cache tier) of the single Redis, or every primary
// of the cluster, where the cache tier is told apart by its <prefix>c:.
func (c *cluster) keySpaces() []keySpace {
	if c.rc != nil {
		var out []keySpace
		for _, a := range c.rc.Addrs() {
			out = append(out, keySpace{name: a, client: redis.NewClient(&redis.Options{Addr: a, MaxRetries: -1}),
				cache: func(k string) bool { return strings.HasPrefix(k, c.prefix+"c:") }})
		}
		return out
	}
	return []keySpace{
		{"db 0", redis.NewClient(&redis.Options{Addr: c.addr, DB: 0, MaxRetries: -1}), func(string) bool { return false }},
		{"db 1", redis.NewClient(&redis.Options{Addr: c.addr, DB: 1, MaxRetries: -1}), func(string) bool { return true }},
	}
}

// checkTTLs scans the test's prefix in every key space and reports every
// key without a TTL. Keys that expire between the scan and the TTL read
// are skipped. With want set, finding no key of a kind is an error too
// (the test must have created both).
func (c *cluster) checkTTLs(want bool) keyCounts {
	c.t.Helper()
	var kc keyCounts
	for _, ks := range c.keySpaces() {
		rc := ks.client
		for _, k := range scanAll(c.t, rc, c.prefix+"*") {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			ttl, err := rc.PTTL(ctx, k).Result()
			cancel()
			switch {
			case err != nil:
				c.t.Errorf("PTTL %s (%s): %v", k, ks.name, err)
			case ttl == -2: // go-redis reports a missing key as -2ns
				// expired since the scan
			case ttl <= 0:
				c.t.Errorf("key %s (%s) has no TTL (PTTL %v); every key must expire", k, ks.name, ttl)
			case ks.cache(k):
				kc.cache++
			default:
				kc.counters++
			}
		}
		_ = rc.Close()
	}
	if want && (kc.counters == 0 || kc.cache == 0) {
		c.t.Errorf("keys with a TTL under %s: %d counters, %d cache; want both > 0", c.prefix, kc.counters, kc.cache)
	}
	return kc
}

// deleteKeys removes everything under the test's prefix in every key space.
func (c *cluster) deleteKeys() {
	for _, ks := range c.keySpaces() {
		rc := ks.client
		for _, k := range scanAll(c.t, rc, c.prefix+"*") {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if err := rc.Del(ctx, k).Err(); err != nil {
				c.t.Errorf("delete test key (%s): %v", ks.name, err)
			}
			cancel()
		}
		_ = rc.Close()
	}
}

// scanAll returns every key matching pattern, with a bounded SCAN loop.
func scanAll(t *testing.T, rc *redis.Client, pattern string) []string {
	t.Helper()
	var keys []string
	var cursor uint64
	for range 100_000 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		batch, next, err := rc.Scan(ctx, cursor, pattern, 1000).Result()
		cancel()
		if err != nil {
			t.Errorf("scan %s: %v", pattern, err)
			return keys
		}
		keys = append(keys, batch...)
		if cursor = next; cursor == 0 {
			return keys
		}
	}
	t.Errorf("scan %s did not finish", pattern)
	return keys
}

// metric sums the samples of the named metric family in reg whose labels
// include every name/value pair given; 0 when none.
func metric(t *testing.T, reg prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	sum, _ := promtest.Sum(t, reg, name, labels...)
	return sum
}

// waitFor polls cond every 10ms until it holds or redisWait passes; it
// reports whether cond held.
func waitFor(cond func() bool) bool {
	deadline := time.Now().Add(redisWait)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond) // polling background work, not waiting for time to pass
	}
	return true
}

// slowLink is a loopback TCP relay in front of a Redis that, while slow is
// set, holds every reply for delay: commands reach Redis and run at once,
// but their answers arrive after the client's timeout.
type slowLink struct {
	ln    net.Listener
	slow  atomic.Bool
	delay time.Duration
	wg    sync.WaitGroup // the accept loop and the relays
	mu    sync.Mutex     // guards conns
	conns []net.Conn     // every open connection, closed by close
}

// newSlowLink relays to target until the test ends.
func newSlowLink(t *testing.T, target string, delay time.Duration) *slowLink {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &slowLink{ln: ln, delay: delay}
	l.wg.Add(1)
	go l.accept(target)
	t.Cleanup(l.close)
	return l
}

func (l *slowLink) addr() string { return l.ln.Addr().String() }

func (l *slowLink) track(c net.Conn) {
	l.mu.Lock()
	l.conns = append(l.conns, c)
	l.mu.Unlock()
}

func (l *slowLink) accept(target string) {
	defer l.wg.Done()
	for {
		client, err := l.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", target)
		if err != nil {
			_ = client.Close()
			continue
		}
		l.track(client)
		l.track(server)
		l.wg.Add(2)
		go func() { defer l.wg.Done(); _, _ = io.Copy(server, client) }()
		go func() {
			defer l.wg.Done()
			buf := make([]byte, 32<<10)
			for {
				n, err := server.Read(buf)
				if n > 0 {
					if l.slow.Load() {
						time.Sleep(l.delay) // injected network latency
					}
					if _, werr := client.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		}()
	}
}

// close stops accepting, closes every connection and waits for the relays.
func (l *slowLink) close() {
	_ = l.ln.Close()
	l.mu.Lock()
	for _, c := range l.conns {
		_ = c.Close()
	}
	l.mu.Unlock()
	l.wg.Wait()
}
