package redistest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// clusterWait bounds every wait on the cluster's processes.
const clusterWait = 30 * time.Second

// Cluster is a private Redis Cluster of three primaries (no replicas) on
// loopback ports, started by StartCluster for one test and killed when the
// test ends. Its data is not persisted: a node that is stopped and started
// again keeps its slots (nodes.conf) but comes back empty.
type Cluster struct {
	t         testing.TB
	dir       string
	opts      ClusterOptions
	ports     []int
	announced []string // the client address each node tells clients about

	mu    sync.Mutex // guards procs
	procs []*node    // one per port; nil while that node is stopped
}

// node is one running redis-server process.
type node struct {
	cmd    *exec.Cmd
	exited chan struct{} // closed once the process has exited and been reaped
}

// ClusterOptions configures StartClusterWith. The zero value is what
// StartCluster uses: no persistence, clients talk to the nodes directly.
type ClusterOptions struct {
	// Persist turns on the append-only file with fsync on every write, so
	// a node killed with SIGKILL comes back with every write it answered.
	Persist bool
	// Relay, when set, is called once per node with the node's address
	// and returns the address of a relay in front of it (started by the
	// caller); the node announces the relay's port, so cluster clients
	// (which follow the cluster's own slot map) reach it only through the
	// relay. The cluster bus stays direct.
	Relay func(target string) (addr string)
}

// StartCluster starts three redis-server processes with cluster mode on,
// joins them with `redis-cli --cluster create` (slots split evenly) and
// waits until every node reports cluster_state:ok. It skips the test when
// redis-server or redis-cli is missing, or fails it when CI=true.
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	return StartClusterWith(t, ClusterOptions{})
}

// StartClusterWith is StartCluster with options.
func StartClusterWith(t testing.TB, o ClusterOptions) *Cluster {
	t.Helper()
	for _, bin := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(bin); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("redistest: %s not installed and CI=true: %v", bin, err)
			}
			t.Skipf("redistest: Redis Cluster tests need %s: %v", bin, err)
		}
	}
	c := &Cluster{t: t, dir: t.TempDir(), opts: o}
	t.Cleanup(c.stopAll)
	for range 3 {
		p := freeClusterPort(t, c.ports)
		a := "127.0.0.1:" + strconv.Itoa(p)
		if o.Relay != nil {
			a = o.Relay(a)
		}
		c.ports = append(c.ports, p)
		c.announced = append(c.announced, a)
		c.procs = append(c.procs, nil)
	}
	for i := range c.ports {
		c.Start(i)
	}
	args := []string{"--cluster", "create"}
	args = append(args, c.announced...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), clusterWait)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput(); err != nil {
		t.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}
	c.WaitOK()
	return c
}

// freeClusterPort returns a loopback port that is free together with its
// cluster bus port (port + 10000), and is none of taken, the ports the
// cluster's other nodes will have: nothing holds a port between this
// check and the node's start, so two nodes given one port would both
// seem to start, one process answering for two nodes. Both lie below
// 32768, outside Linux's ephemeral range, so no listener on a random port
// (another test's server) takes them meanwhile either; another test's
// cluster may, which the node's start finds (awaitPing).
func freeClusterPort(t testing.TB, taken []int) int {
	t.Helper()
	for range 200 {
		p := 20000 + rand.IntN(2768)
		if slices.Contains(taken, p) {
			continue
		}
		a, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			continue
		}
		b, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p+10000))
		_ = a.Close()
		if err != nil {
			continue
		}
		_ = b.Close()
		return p
	}
	t.Fatal("redistest: no free port pair for a cluster node")
	return 0
}

// Addrs returns the nodes' host:port addresses.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.ports))
	for i, p := range c.ports {
		out[i] = "127.0.0.1:" + strconv.Itoa(p)
	}
	return out
}

// URL returns a redis.url naming every node as clients reach it (through
// the relays, when there are), in the form go-redis's ParseClusterURL
// reads: redis://first?addr=second&addr=third.
func (c *Cluster) URL() string {
	a := c.announced
	return "redis://" + a[0] + "?addr=" + strings.Join(a[1:], "&addr=")
}

// Client returns a cluster client on every node (through the relays, when
// there are), closed when the test ends.
func (c *Cluster) Client() *redis.ClusterClient {
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.announced, DialTimeout: time.Second})
	c.t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// Start (re)starts node i on its port, and waits until it answers PING.
func (c *Cluster) Start(i int) {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.procs[i] != nil {
		return
	}
	port := strconv.Itoa(c.ports[i])
	args := []string{"--port", port, "--bind", "127.0.0.1",
		"--cluster-enabled", "yes", "--cluster-config-file", "nodes-" + port + ".conf",
		"--cluster-node-timeout", "2000", "--dir", c.dir, "--save", "",
		"--logfile", filepath.Join(c.dir, "redis-"+port+".log")}
	if c.opts.Persist {
		args = append(args, "--appendonly", "yes", "--appendfsync", "always",
			"--appendfilename", "appendonly-"+port+".aof", "--appenddirname", "aof-"+port)
	} else {
		args = append(args, "--appendonly", "no")
	}
	if c.opts.Relay != nil {
		_, aport, _ := net.SplitHostPort(c.announced[i])
		args = append(args, "--cluster-announce-ip", "127.0.0.1", "--cluster-announce-port", aport,
			"--cluster-announce-bus-port", strconv.Itoa(c.ports[i]+10000))
	}
	cmd := exec.Command("redis-server", args...)
	if err := cmd.Start(); err != nil {
		c.t.Fatalf("redistest: start redis-server on %s: %v", port, err)
	}
	n := &node{cmd: cmd, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(n.exited) }()
	c.procs[i] = n
	switch err := awaitPing("127.0.0.1:"+port, cmd.Process.Pid, clusterWait, n.exited); {
	case errors.Is(err, errExited):
		c.procs[i] = nil
		log, _ := os.ReadFile(filepath.Join(c.dir, "redis-"+port+".log"))
		c.t.Fatalf("redistest: redis-server on %s exited at start (port taken?); its log:\n%s", port, log)
	case err != nil:
		c.t.Fatalf("redistest: redis-server on %s: %v", port, err)
	}
}

// Stop kills node i (SIGKILL: no shutdown, no save) and reaps it.
func (c *Cluster) Stop(i int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := c.procs[i]; n != nil {
		_ = n.cmd.Process.Kill()
		<-n.exited
		c.procs[i] = nil
	}
}

func (c *Cluster) stopAll() {
	for i := range c.procs {
		c.Stop(i)
	}
}

// WaitOK polls every node until each reports cluster_state:ok and knows
// all 16384 slots, failing the test after a bound.
func (c *Cluster) WaitOK() {
	c.t.Helper()
	deadline := time.Now().Add(clusterWait)
	for {
		err := c.check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("redistest: cluster not ready within %s: %v", clusterWait, err)
		}
		time.Sleep(50 * time.Millisecond) // polling the cluster's own convergence
	}
}

func (c *Cluster) check() error {
	for _, a := range c.Addrs() {
		rc := redis.NewClient(&redis.Options{Addr: a, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		info, err := rc.ClusterInfo(ctx).Result()
		cancel()
		_ = rc.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", a, err)
		}
		if !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_slots_ok:16384") {
			return fmt.Errorf("%s: not ready", a)
		}
	}
	return nil
}
