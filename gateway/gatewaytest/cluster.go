package gatewaytest

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

// SharedRedis is the Redis the cluster tests share with other test runs;
// every test works under its own random prefix there.
const SharedRedis = "127.0.0.1:6379"

// RedisWait bounds every wait on Redis (start-up, replay) in these tests.
const RedisWait = 15 * time.Second

// RequireRedis skips the test when no Redis answers at addr, unless CI is
// "true": there the cluster tests must run, so it fails instead.
func RequireRedis(t *testing.T, addr string) {
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

// PerMinute counts the calls by UTC minute window (unix minute).
func (l *callLog) PerMinute() map[int64]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[int64]int)
	for _, t := range l.at {
		out[t.Unix()/60]++
	}
	return out
}

// Cluster is several gateways, each with its own gateway.New and real
// servers on random loopback ports, sharing one Redis, one fake clock and
// one recording demo upstream.
type Cluster struct {
	T        *testing.T
	Clock    *clock.Fake
	Up       *demo.Server
	Calls    *callLog
	Nodes    []*Harness
	addr     string             // host:port of the single Redis ("" on a Redis Cluster)
	Redis    *redistest.Cluster // the Redis Cluster, or nil
	Prefix   string             // redis.prefix of every node: "tg:test:<random>:"
	counters redis.UniversalClient
	Full     string // a full-plan key (key id "team-full")
	Limited  string // a limited-plan key (key id "team-limited")
}

// ClusterOptions configures newCluster. The zero value is three instances
// on the shared Redis with the default config.
type ClusterOptions struct {
	Instances int                   // 0 means 3
	Addr      string                // Redis host:port; "" means sharedRedis
	Redis     *redistest.Cluster    // a Redis Cluster to use instead of addr
	Mutate    func(*config.Config)  // applied to each instance's config
	Demo      func(o *demo.Options) // applied to the demo upstream's options
	Start     time.Time             // the fake clock's start; zero means the real time
}

// NewCluster starts the demo upstream and the gateways. The fake clock
// starts at the real time unless o.start says otherwise, so the gateways'
// UTC windows agree with the windows Redis computes from its own TIME. When the test ends, after
// every gateway is closed, it checks that every key the test created
// under its prefix carries a TTL and deletes them.
func NewCluster(t *testing.T, o ClusterOptions) *Cluster {
	t.Helper()
	if o.Instances == 0 {
		o.Instances = 3
	}
	if o.Addr == "" && o.Redis == nil {
		o.Addr = SharedRedis
		RequireRedis(t, o.Addr)
	}
	var rnd [6]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		t.Fatal(err)
	}
	if o.Start.IsZero() {
		o.Start = time.Now().UTC()
	}
	c := &Cluster{
		T:      t,
		Clock:  clock.NewFake(o.Start),
		Calls:  &callLog{},
		addr:   o.Addr,
		Redis:  o.Redis,
		Prefix: "tg:test:" + hex.EncodeToString(rnd[:]) + ":",
	}
	if o.Redis != nil {
		c.counters = redis.NewClusterClient(&redis.ClusterOptions{Addrs: o.Redis.Addrs(), MaxRetries: -1})
	} else {
		c.counters = redis.NewClient(&redis.Options{Addr: o.Addr, DB: 0, MaxRetries: -1})
	}
	// Registered first, so it runs last: after every gateway has stopped.
	t.Cleanup(func() {
		c.CheckTTLs(false)
		c.deleteKeys()
		_ = c.counters.Close()
	})

	dopts := demo.Options{Clock: c.Clock, APIKey: UpstreamKey}
	if o.Demo != nil {
		o.Demo(&dopts)
	}
	up, err := demo.New(dopts)
	if err != nil {
		t.Fatal(err)
	}
	c.Up = up
	upSrv := httptest.NewServer(c.Calls.wrap(up))
	t.Cleanup(func() { up.Close(); upSrv.Close() })

	c.Full, c.Limited = NewKey(t), NewKey(t)
	for range o.Instances {
		cfg := BaseConfig(upSrv.URL, c.Full, c.Limited)
		noAccess := false
		cfg.Log.Access = &noAccess                 // the logs keep only what went wrong
		cfg.Redis.URL = "redis://" + o.Addr + "/0" // cache tier: DB 1
		if o.Redis != nil {
			cfg.Redis.URL = o.Redis.URL() // cache tier: the same cluster, under <prefix>c:
		}
		cfg.Redis.Prefix = c.Prefix
		// The exactness these tests assert holds only while Redis answers
		// within redis.timeout: a command that times out falls back to the
		// local share for that request. The default 50ms is exceeded on a
		// loaded test machine under -race, so the tests allow 1s (an outage
		// is still detected at once: connections are refused).
		cfg.Redis.Timeout = time.Second
		if o.Mutate != nil {
			o.Mutate(cfg)
		}
		h := serveHarness(t, c.Clock, up, upSrv, cfg, c.Full, c.Limited)
		// Runs before serve's cleanup: a connection the transport dialed
		// but never used would otherwise hold Shutdown for 5 s (net/http
		// waits that long for a first request on a new connection).
		t.Cleanup(h.Client.CloseIdleConnections)
		c.Nodes = append(c.Nodes, h)
	}
	return c
}

// Result is one response as a concurrent caller saw it.
type Result struct {
	Node   int
	Status int
	Code   string // the JSON error code, for errors
	Cache  string // Cache-Status
	Retry  string // Retry-After
	Err    error
}

// Send performs one GET of target with key on node i. It never calls
// t.Fatal, so it may run on any goroutine.
func (c *Cluster) Send(i int, target, key string) Result {
	h := c.Nodes[i]
	res := Result{Node: i}
	req, err := http.NewRequest(http.MethodGet, h.Base+target, nil)
	if err != nil {
		res.Err = err
		return res
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := h.Client.Do(req)
	if err != nil {
		res.Err = err
		return res
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		res.Err = err
		return res
	}
	res.Status = resp.StatusCode
	res.Cache = resp.Header.Get("Cache-Status")
	res.Retry = resp.Header.Get("Retry-After")
	if resp.StatusCode >= 400 {
		if _, rest, ok := strings.Cut(string(body), `"code":"`); ok {
			res.Code, _, _ = strings.Cut(rest, `"`)
		}
	}
	return res
}

// Burst sends n requests for target at once, request j to node j mod
// Instances, and returns every result.
func (c *Cluster) Burst(n int, target, key string) []Result {
	out := make([]Result, n)
	var wg sync.WaitGroup
	for j := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[j] = c.Send(j%len(c.Nodes), target, key)
		}()
	}
	wg.Wait()
	for _, r := range out {
		if r.Err != nil {
			c.T.Fatalf("node %d: %v", r.Node, r.Err)
		}
	}
	return out
}

// Tally counts results by status and error code ("200", "429 rate_limited").
func Tally(rs []Result) map[string]int {
	out := make(map[string]int)
	for _, r := range rs {
		k := strconv.Itoa(r.Status)
		if r.Code != "" {
			k += " " + r.Code
		}
		out[k]++
	}
	return out
}

// RedisNow returns Redis's own TIME, which its windows are computed from.
func (c *Cluster) RedisNow() time.Time {
	c.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	now, err := c.counters.Time(ctx).Result()
	if err != nil {
		c.T.Fatalf("redis TIME: %v", err)
	}
	return now.UTC()
}

// QuotaCounter reads the shared daily ("d", YYYYMMDD) or monthly ("m",
// YYYYMM) quota counter of keyID in the window containing Redis's now;
// 0 when it does not exist.
func (c *Cluster) QuotaCounter(kind, keyID string) int64 {
	c.T.Helper()
	now := c.RedisNow()
	window := now.Format("20060102")
	if kind == "m" {
		window = now.Format("200601")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	// The limiter's key layout (limits.Redis.dayKey and monthKey).
	key := c.Prefix + "q:" + kind + ":" + keyID + ":" + window
	if c.Redis != nil {
		key = c.Prefix + "{" + keyID + "}:q:" + kind + ":" + window
	}
	n, err := c.counters.Get(ctx, key).Int64()
	if err == redis.Nil {
		return 0
	}
	if err != nil {
		c.T.Fatalf("read quota counter: %v", err)
	}
	return n
}

// keyCounts are the keys found under a test's prefix.
type keyCounts struct {
	Counters int // limits, quotas, budget, leases, replay markers, admission records
	Cache    int // shared cache entries and topic indexes
}

// keySpace is one place the test's keys may live: a database of the
// single Redis or one primary of the Redis Cluster.
type keySpace struct {
	name   string
	Client *redis.Client
	cache  func(key string) bool // whether key belongs to the cache tier
}

// KeySpaces opens a client per place (the caller closes them): DB 0
// (counters) and DB 1 (cache tier) of the single Redis, or every primary
// of the cluster, where the cache tier is told apart by its <prefix>c:.
func (c *Cluster) KeySpaces() []keySpace {
	if c.Redis != nil {
		var out []keySpace
		for _, a := range c.Redis.Addrs() {
			out = append(out, keySpace{name: a, Client: redis.NewClient(&redis.Options{Addr: a, MaxRetries: -1}),
				cache: func(k string) bool { return strings.HasPrefix(k, c.Prefix+"c:") }})
		}
		return out
	}
	return []keySpace{
		{"db 0", redis.NewClient(&redis.Options{Addr: c.addr, DB: 0, MaxRetries: -1}), func(string) bool { return false }},
		{"db 1", redis.NewClient(&redis.Options{Addr: c.addr, DB: 1, MaxRetries: -1}), func(string) bool { return true }},
	}
}

// CheckTTLs scans the test's prefix in every key space and reports every
// key without a TTL. Keys that expire between the scan and the TTL read
// are skipped. With want set, finding no key of a kind is an error too
// (the test must have created both).
func (c *Cluster) CheckTTLs(want bool) keyCounts {
	c.T.Helper()
	var kc keyCounts
	for _, ks := range c.KeySpaces() {
		rc := ks.Client
		for _, k := range ScanAll(c.T, rc, c.Prefix+"*") {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			ttl, err := rc.PTTL(ctx, k).Result()
			cancel()
			switch {
			case err != nil:
				c.T.Errorf("PTTL %s (%s): %v", k, ks.name, err)
			case ttl == -2: // go-redis reports a missing key as -2ns
				// expired since the scan
			case ttl < 0: // -1ns: no TTL. (0 is a key expiring within the millisecond.)
				c.T.Errorf("key %s (%s) has no TTL (PTTL %v); every key must expire", k, ks.name, ttl)
			case ks.cache(k):
				kc.Cache++
			default:
				kc.Counters++
			}
		}
		_ = rc.Close()
	}
	if want && (kc.Counters == 0 || kc.Cache == 0) {
		c.T.Errorf("keys with a TTL under %s: %d counters, %d cache; want both > 0", c.Prefix, kc.Counters, kc.Cache)
	}
	return kc
}

// deleteKeys removes everything under the test's prefix in every key space.
func (c *Cluster) deleteKeys() {
	for _, ks := range c.KeySpaces() {
		rc := ks.Client
		for _, k := range ScanAll(c.T, rc, c.Prefix+"*") {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if err := rc.Del(ctx, k).Err(); err != nil {
				c.T.Errorf("delete test key (%s): %v", ks.name, err)
			}
			cancel()
		}
		_ = rc.Close()
	}
}

// ScanAll returns every key matching pattern, each once, with a bounded
// SCAN loop. SCAN may return a key more than once (when the keyspace is
// resized between two calls, as keys expiring shrink it), so a sum over
// its results would count those twice.
func ScanAll(t *testing.T, rc *redis.Client, pattern string) []string {
	t.Helper()
	var keys []string
	seen := make(map[string]bool)
	var cursor uint64
	for range 100_000 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		batch, next, err := rc.Scan(ctx, cursor, pattern, 1000).Result()
		cancel()
		if err != nil {
			t.Errorf("scan %s: %v", pattern, err)
			return keys
		}
		for _, k := range batch {
			if !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
		if cursor = next; cursor == 0 {
			return keys
		}
	}
	t.Errorf("scan %s did not finish", pattern)
	return keys
}

// Metric sums the samples of the named metric family in reg whose labels
// include every name/value pair given; 0 when none.
func Metric(t *testing.T, reg prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	sum, _ := promtest.Sum(t, reg, name, labels...)
	return sum
}

// WaitFor polls cond every 10ms until it holds or redisWait passes; it
// reports whether cond held.
func WaitFor(cond func() bool) bool {
	deadline := time.Now().Add(RedisWait)
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
	Slow  atomic.Bool
	delay time.Duration
	wg    sync.WaitGroup // the accept loop and the relays
	mu    sync.Mutex     // guards conns
	conns []net.Conn     // every open connection, closed by close
}

// NewSlowLink relays to target until the test ends.
func NewSlowLink(t *testing.T, target string, delay time.Duration) *slowLink {
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

func (l *slowLink) Addr() string { return l.ln.Addr().String() }

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
					if l.Slow.Load() {
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

// SumQuotaCounters adds up every daily ("d") or monthly ("m") counter of
// keyID, whatever its window (a run near midnight may charge two days).
func (c *Cluster) SumQuotaCounters(kind, keyID string) int64 {
	c.T.Helper()
	pattern := c.Prefix + "q:" + kind + ":" + keyID + ":*"
	if c.Redis != nil {
		pattern = c.Prefix + "{" + keyID + "}:q:" + kind + ":*"
	}
	var sum int64
	for _, ks := range c.KeySpaces() {
		for _, k := range ScanAll(c.T, ks.Client, pattern) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			n, err := ks.Client.Get(ctx, k).Int64()
			cancel()
			if err != nil && err != redis.Nil {
				c.T.Errorf("GET %s: %v", k, err)
			}
			sum += n
		}
		_ = ks.Client.Close()
	}
	return sum
}
