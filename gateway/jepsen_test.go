package gateway_test

import (
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"trendgate/auth"
	"trendgate/config"
	"trendgate/gateway/gatewaytest"
	"trendgate/internal/testing/redistest"
	"trendgate/limits"
)

// chaosRelay is a loopback TCP relay in front of one Redis node that, while
// on, delays some chunks in either direction (by up to maxDelay, longer
// than redis.timeout: a command may run in Redis while its client has
// already given up, or reach Redis after that) and resets some
// connections. Order within a connection is kept, as TCP keeps it.
type chaosRelay struct {
	ln       net.Listener
	target   string
	on       atomic.Bool
	delayP   float64       // share of chunks delayed
	maxDelay time.Duration // upper bound of one delay
	resetP   float64       // share of chunks that reset the connection instead

	delayed, resets atomic.Int64 // what was injected, for the log
	forwarded       atomic.Int64 // chunks forwarded from client to server

	wg    sync.WaitGroup // the accept loop and the pipes
	mu    sync.Mutex     // guards conns
	conns []net.Conn     // every open connection, closed by close
}

// newChaosRelay relays to target until the test ends; chaos starts off.
func newChaosRelay(t testing.TB, target string) *chaosRelay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &chaosRelay{ln: ln, target: target, delayP: 0.04, maxDelay: 250 * time.Millisecond, resetP: 0.003}
	r.wg.Add(1)
	go r.accept()
	t.Cleanup(r.close)
	return r
}

func (r *chaosRelay) addr() string { return r.ln.Addr().String() }

func (r *chaosRelay) accept() {
	defer r.wg.Done()
	for {
		client, err := r.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.DialTimeout("tcp", r.target, time.Second)
		if err != nil { // the node is down: the client sees a reset
			_ = client.Close()
			continue
		}
		r.mu.Lock()
		r.conns = append(r.conns, client, server)
		r.mu.Unlock()
		r.wg.Add(2)
		go r.pipe(server, client, &r.forwarded)
		go r.pipe(client, server, nil)
	}
}

// pipe copies src to dst chunk by chunk, injecting faults while on, and
// counts the chunks in count when it is not nil.
func (r *chaosRelay) pipe(dst, src net.Conn, count *atomic.Int64) {
	defer r.wg.Done()
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && r.on.Load() {
			switch x := rand.Float64(); {
			case x < r.resetP:
				r.resets.Add(1)
				return
			case x < r.resetP+r.delayP:
				r.delayed.Add(1)
				// The injected fault itself: this chunk arrives late.
				time.Sleep(rand.N(r.maxDelay))
			}
		}
		if n > 0 {
			if count != nil {
				count.Add(1)
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil { // EOF or a closed connection: close both ends
			return
		}
	}
}

func (r *chaosRelay) close() {
	_ = r.ln.Close()
	r.mu.Lock()
	for _, c := range r.conns {
		_ = c.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
}

// jepsenKey is one API key of the workload and what it was delivered.
type jepsenKey struct {
	id        string
	secret    string
	delivered atomic.Int64 // cost units of every 2xx the clients received
}

// TestClusterJepsenQuotaExactlyOnce: three gateways share one Redis (and,
// in the second run, one 3-primary Redis Cluster) through relays that
// delay and reset traffic at random, with delays beyond redis.timeout, so
// admissions run in Redis after their caller gave up, arrive late, or
// never arrive. Mid-run Redis (a cluster node) is killed with SIGKILL and
// restarted; it keeps an fsynced append-only file, so it loses no write it
// answered. Clients record every 2xx they receive. Once the faults stop
// and the journals are replayed, every key's daily and monthly counters
// equal the units delivered to it, exactly.
func TestClusterJepsenQuotaExactlyOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("fault-injection workload (about 25 s); skipped with -short")
	}
	t.Run("redis", func(t *testing.T) {
		srv := redistest.StartServer(t, true)
		relay := newChaosRelay(t, srv.Addr())
		runJepsen(t, gatewaytest.ClusterOptions{Addr: relay.addr()}, []*chaosRelay{relay},
			func() { srv.Stop() }, func() { srv.Start() })
	})
	t.Run("redis cluster", func(t *testing.T) {
		var relays []*chaosRelay
		rc := redistest.StartClusterWith(t, redistest.ClusterOptions{Persist: true, Relay: func(target string) string {
			r := newChaosRelay(t, target)
			relays = append(relays, r)
			return r.addr()
		}})
		runJepsen(t, gatewaytest.ClusterOptions{Redis: rc}, relays,
			func() { rc.Stop(0) }, func() { rc.Start(0); rc.WaitOK() })
	})
}

// Workload bounds, per phase: before the kill, while Redis is down, after
// the restart.
const (
	jepsenWorkers       = 6
	jepsenPhaseRequests = 1500
	jepsenPhaseTime     = 4 * time.Second
)

func runJepsen(t *testing.T, o gatewaytest.ClusterOptions, relays []*chaosRelay, kill, restart func()) {
	keys := []*jepsenKey{{id: "team-full"}, {id: "team-limited"}, {id: "jepsen-small"}, {id: "jepsen-fast"}}
	small, fast := int64(150), 40.0
	extra := []*jepsenKey{keys[2], keys[3]}
	for _, k := range extra {
		k.secret = gatewaytest.NewKey(t)
	}
	o.Mutate = func(cfg *config.Config) {
		cfg.Redis.Timeout = 100 * time.Millisecond
		pl := cfg.Plans["full"]
		pl.Policy = limits.Policy{PerSecond: 200, Burst: 400, Daily: 1_000_000, Monthly: 10_000_000}
		cfg.Plans["full"] = pl
		cfg.Keys = append(cfg.Keys,
			config.Key{ID: keys[2].id, SHA256: auth.Digest(keys[2].secret), Plan: "full", Daily: &small},
			config.Key{ID: keys[3].id, SHA256: auth.Digest(keys[3].secret), Plan: "full", PerSecond: &fast})
	}
	c := gatewaytest.NewCluster(t, o)
	keys[0].secret, keys[1].secret = c.Full, c.Limited
	topics := plainTopics(c.Up.Topics(), 6)
	type target struct {
		path string
		cost int64
	}
	var targets []target
	targets = append(targets, target{listTarget, 1})
	for _, tp := range topics {
		targets = append(targets, target{fmt.Sprintf(seriesFmt, tp), 1}, target{fmt.Sprintf(whatsupFmt, tp), 5})
	}

	var mu sync.Mutex // guards statuses
	statuses := map[string]int{}
	record := func(k *jepsenKey, tg target, r gatewaytest.Result) {
		if r.Status >= 200 && r.Status < 300 {
			k.delivered.Add(tg.cost)
		}
		mu.Lock()
		statuses[strings.TrimSpace(fmt.Sprint(r.Status, " ", r.Code))]++
		mu.Unlock()
	}
	// The gateways' clock runs about 10× faster than the wall clock while
	// the workload runs, so breakers that open probe Redis again within
	// the phase and entries go stale and refresh.
	var sent atomic.Int64
	phase := func(name string) {
		stop := make(chan struct{})
		var ticks sync.WaitGroup
		ticks.Add(1)
		go func() {
			defer ticks.Done()
			tk := time.NewTicker(20 * time.Millisecond)
			defer tk.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tk.C:
					c.Clock.Advance(200 * time.Millisecond)
				}
			}
		}()
		limit := sent.Load() + jepsenPhaseRequests
		deadline := time.Now().Add(jepsenPhaseTime)
		var wg sync.WaitGroup
		for range jepsenWorkers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for sent.Add(1) <= limit && time.Now().Before(deadline) {
					k := keys[rand.IntN(len(keys))]
					tg := targets[rand.IntN(len(targets))]
					r := c.Send(rand.IntN(len(c.Nodes)), tg.path, k.secret)
					if r.Err != nil {
						t.Errorf("%s: transport error: %v", name, r.Err)
						return
					}
					record(k, tg, r)
				}
			}()
		}
		wg.Wait()
		close(stop)
		ticks.Wait()
		sent.Store(limit)
		t.Logf("phase %s: statuses so far %v", name, statuses)
	}

	setChaos := func(on bool) {
		for _, r := range relays {
			r.on.Store(on)
		}
	}
	setChaos(true)
	phase("faults")
	kill()
	phase("redis killed")
	restart()
	phase("restarted")
	setChaos(false)

	// Settle: past every breaker's back-off, one request per node and key
	// lets each breaker probe Redis and close, which wakes the journal
	// replay; repeat until every journal is empty.
	drained := gatewaytest.WaitFor(func() bool {
		c.Clock.Advance(31 * time.Second)
		for i := range c.Nodes {
			for _, k := range keys {
				record(k, targets[0], c.Send(i, targets[0].path, k.secret))
			}
		}
		for _, h := range c.Nodes {
			if gatewaytest.Metric(t, h.Gateway.Registry(), "trendgate_limits_journal_entries") != 0 {
				return false
			}
		}
		return true
	})
	if !drained {
		t.Fatalf("the quota journals were not replayed within %s", gatewaytest.RedisWait)
	}

	var fallbacks float64
	for _, h := range c.Nodes {
		fallbacks += gatewaytest.Metric(t, h.Gateway.Registry(), "trendgate_limits_redis_fallbacks_total")
	}
	var delayed, resets int64
	for _, r := range relays {
		delayed, resets = delayed+r.delayed.Load(), resets+r.resets.Load()
	}
	t.Logf("statuses %v; limiter fallbacks %v; relays delayed %d chunks and reset %d connections", statuses, fallbacks, delayed, resets)
	if fallbacks == 0 {
		t.Errorf("no limiter fallback happened: the faults did not reach the limiter")
	}
	for s, n := range statuses {
		if !strings.HasPrefix(s, "200") && !strings.HasPrefix(s, "429") {
			t.Errorf("status %q answered %d times; want only 200 and 429 (Redis faults must not fail requests)", s, n)
		}
	}
	for _, k := range keys {
		want := k.delivered.Load()
		for _, kind := range []string{"d", "m"} {
			if got := c.SumQuotaCounters(kind, k.id); got != want {
				t.Errorf("key %s: %s counters hold %d units; want %d (units delivered)", k.id, map[string]string{"d": "daily", "m": "monthly"}[kind], got, want)
			}
		}
		t.Logf("key %s: %d units delivered", k.id, want)
	}
}
