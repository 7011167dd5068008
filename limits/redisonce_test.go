package limits

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"trendgate/internal/clock"
	"trendgate/internal/testing/redistest"
)

// backend is one kind of Redis the limiter runs on: the shared single
// instance or a private three-primary Redis Cluster.
type backend struct {
	name   string
	client func(t *testing.T) (redis.UniversalClient, string) // client and a fresh prefix
}

// backends lists both. The cluster is started once per test that asks.
func backends() []backend {
	return []backend{
		{"single", func(t *testing.T) (redis.UniversalClient, string) {
			c := redisOrSkip(t, sharedRedis)
			return c, testPrefix(t, c)
		}},
		{"cluster", func(t *testing.T) (redis.UniversalClient, string) {
			cl := redistest.StartCluster(t)
			return cl.Client(), "tg:test:"
		}},
	}
}

// readCounter reads an integer key through any client; 0 when missing.
func readCounter(t *testing.T, c redis.UniversalClient, key string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	n, err := c.Get(ctx, key).Int64()
	if err == redis.Nil {
		return 0
	}
	if err != nil {
		t.Fatalf("GET %s: %v", key, err)
	}
	return n
}

// TestRedisAdmissionChargedOnce runs the same admission id through the
// scripts in the orders a timeout, a retry, a refund and a journal replay
// can produce, and checks the daily counter ends at what was delivered.
// Before admission ids, a script that ran but answered late was charged
// again by the fallback's journal (TestClusterSlowRedisChargesOnce).
func TestRedisAdmissionChargedOnce(t *testing.T) {
	const cost = 3
	p := Policy{Daily: 100, Monthly: 1000}
	type step func(t *testing.T, r *Redis, id string)
	admit := func(t *testing.T, r *Redis, id string) {
		d, err := r.admitRedis(context.Background(), Subject{Key: "k"}, id, p, cost)
		if err != nil || !d.Allowed {
			t.Fatalf("admit %s: %+v %v", id, d, err)
		}
	}
	settleAt := func(want, assume int64) step {
		return func(t *testing.T, r *Redis, id string) {
			w := windowAt(time.Now())
			err := r.settle(context.Background(), "k", settlement{admission: id, day: w.day, month: w.month,
				wantDay: want, wantMonth: want, assumeDay: assume, assumeMonth: assume})
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	tests := []struct {
		name  string
		steps []step
		want  int64 // day and month counters at the end
	}{
		{"admitted once", []step{admit}, cost},
		{"retried admission charges once", []step{admit, admit}, cost},
		{"late reply then replay at the fallback's reservation", []step{admit, settleAt(cost, 0)}, cost},
		{"replay twice", []step{admit, settleAt(cost, 0), settleAt(cost, 0)}, cost},
		{"never ran: the replay charges", []step{settleAt(cost, 0)}, cost},
		{"replay first, then the late script", []step{settleAt(cost, 0), admit}, cost},
		{"refused by the fallback: a script that ran is undone", []step{admit, settleAt(0, 0)}, 0},
		{"refund retried", []step{admit, settleAt(0, cost), settleAt(0, cost)}, 0},
		{"refund, then a replay of the refund", []step{admit, settleAt(0, cost), settleAt(0, 0)}, 0},
		{"caller gone before the script: nothing, even when it runs late", []step{settleAt(0, 0), admit}, 0},
	}
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			c, prefix := b.client(t)
			r, _ := newLimiterOn(t, c, RedisOptions{Prefix: prefix, Timeout: 10 * time.Second}, clock.Real{})
			for _, tc := range tests {
				t.Run(tc.name, func(t *testing.T) {
					id := r.instance + "." + strings.ReplaceAll(tc.name, " ", "_")
					w := windowAt(time.Now())
					before := [2]int64{readCounter(t, c, r.dayKey("k", w.day)), readCounter(t, c, r.monthKey("k", w.month))}
					for _, s := range tc.steps {
						s(t, r, id)
					}
					got := [2]int64{readCounter(t, c, r.dayKey("k", w.day)) - before[0], readCounter(t, c, r.monthKey("k", w.month)) - before[1]}
					if got != [2]int64{tc.want, tc.want} {
						t.Errorf("charged (day, month): got %v; want %d each", got, tc.want)
					}
					ttl, err := c.PTTL(context.Background(), r.admissionKey("k", id)).Result()
					if err != nil || ttl <= 0 || ttl > r.opts.AdmissionWindow {
						t.Errorf("admission record TTL: got %v %v; want in (0, %s]", ttl, err, r.opts.AdmissionWindow)
					}
				})
			}
		})
	}
}

// TestRedisKeyLayout pins the key names: the single-Redis names earlier
// versions wrote (a running deployment keeps its counters), and on a
// cluster the {account id} hash tag first in every key of one account (its
// counters and all its keys' buckets), so a script's keys share a slot.
func TestRedisKeyLayout(t *testing.T) {
	single := &Redis{opts: RedisOptions{Prefix: "tg:"}, instance: "i1"}
	tagged := &Redis{opts: RedisOptions{Prefix: "tg:"}, instance: "i1", tagged: true}
	tests := []struct {
		name        string
		key         func(r *Redis) string
		single, tag string
	}{
		{"rate", func(r *Redis) string { return r.rateKey(Subject{Key: "team-a"}) }, "tg:rl:team-a", "tg:{team-a}:rl"},
		{"rate in an account", func(r *Redis) string { return r.rateKey(Subject{Key: "web", Account: "acme"}) }, "tg:rl:web", "tg:{acme}:rl:web"},
		{"day", func(r *Redis) string { return r.dayKey("team-a", 20260105) }, "tg:q:d:team-a:20260105", "tg:{team-a}:q:d:20260105"},
		{"month", func(r *Redis) string { return r.monthKey("team-a", 202601) }, "tg:q:m:team-a:202601", "tg:{team-a}:q:m:202601"},
		{"admission", func(r *Redis) string { return r.admissionKey("team-a", "i1.7") }, "tg:a:team-a:i1.7", "tg:{team-a}:a:i1.7"},
		{"marker", func(r *Redis) string { return r.markerKey("team-a", 9) }, "tg:j:team-a:i1:9", "tg:{team-a}:j:i1:9"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.key(single); got != tc.single {
				t.Errorf("single: got %q; want %q", got, tc.single)
			}
			if got := tc.key(tagged); got != tc.tag {
				t.Errorf("cluster: got %q; want %q", got, tc.tag)
			}
		})
	}
}

// TestRedisClusterExactAcrossInstances: three limiters, each with its own
// cluster client, share one 3-primary Redis Cluster. For twelve key ids
// (spread over the primaries by their hash tags) a daily quota of 7 admits
// exactly 7 of 12 requests sent round-robin, and a burst of 5 at a rate of
// 0.001/s admits exactly 5.
func TestRedisClusterExactAcrossInstances(t *testing.T) {
	cl := redistest.StartCluster(t)
	var lims []*Redis
	for range 3 {
		r, _ := newLimiterOn(t, cl.Client(), RedisOptions{Prefix: "tg:", Timeout: 10 * time.Second}, clock.Real{})
		lims = append(lims, r)
	}
	ctx := context.Background()
	tests := []struct {
		name string
		p    Policy
		want int
	}{
		{"daily quota", Policy{Daily: 7, Monthly: 100}, 7},
		{"burst", Policy{PerSecond: 0.001, Burst: 5}, 5},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			nodes := map[string]bool{}
			for k := range 12 {
				key := tc.name[:1] + "-key-" + string(rune('a'+k))
				admitted := 0
				for i := range 12 {
					d, err := lims[i%3].Admit(ctx, Subject{Key: key}, tc.p, 1)
					if err != nil {
						t.Fatal(err)
					}
					if d.fallback {
						t.Fatalf("%s: a decision came from the fallback: Redis Cluster failed", key)
					}
					if d.Allowed {
						admitted++
					}
				}
				if admitted != tc.want {
					t.Errorf("%s: admitted %d of 12; want %d", key, admitted, tc.want)
				}
				if tc.p.Daily > 0 {
					w := windowAt(time.Now())
					if got := readCounter(t, lims[0].rdb.(redis.UniversalClient), lims[0].dayKey(key, w.day)); got != int64(tc.want) {
						t.Errorf("%s: day counter %d; want %d", key, got, tc.want)
					}
				}
				slot, err := lims[0].rdb.(*redis.ClusterClient).ClusterKeySlot(ctx, lims[0].rateKey(Subject{Key: key})).Result()
				if err != nil {
					t.Fatal(err)
				}
				nodes[nodeOf(t, cl, slot)] = true
			}
			if len(nodes) < 2 {
				t.Errorf("the 12 keys landed on %d primaries; want them spread over several", len(nodes))
			}
		})
	}
}

// nodeOf returns the address of the primary serving slot.
func nodeOf(t *testing.T, cl *redistest.Cluster, slot int64) string {
	t.Helper()
	shards, err := cl.Client().ClusterShards(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range shards {
		for _, r := range s.Slots {
			if r.Start <= slot && slot <= r.End {
				for _, n := range s.Nodes {
					if n.Role == "master" {
						return net.JoinHostPort(n.IP, strconv.FormatInt(n.Port, 10))
					}
				}
			}
		}
	}
	t.Fatalf("no primary serves slot %d", slot)
	return ""
}

// TestRedisClusterSlotMigration moves the slot of one API key's hash tag
// from its primary to another while three limiters keep admitting: before,
// while the slot is MIGRATING/IMPORTING (ASK redirects, and TRYAGAIN while
// its keys are split between the two), after the keys moved, and after
// the slot is reassigned (MOVED). No Admit fails, and once the journals
// are replayed the daily counter equals the units admitted, exactly.
func TestRedisClusterSlotMigration(t *testing.T) {
	cl := redistest.StartCluster(t)
	ctx := context.Background()
	clk := clock.NewFake(time.Now()) // drives the breakers; Redis TIME the windows
	var lims []*Redis
	for range 3 {
		r, _ := newLimiterOn(t, cl.Client(), RedisOptions{Prefix: "tg:", Timeout: 2 * time.Second, ReconcileEvery: time.Hour}, clk)
		lims = append(lims, r)
	}
	const key = "migrating-key"
	p := Policy{Daily: 100_000, Monthly: 1_000_000}
	var admitted int64
	admit := func(stage string, n int) {
		t.Helper()
		clk.Advance(10 * time.Second) // past any open breaker's back-off: probe Redis again
		for i := range n {
			d, err := lims[i%3].Admit(ctx, Subject{Key: key}, p, 1)
			if err != nil {
				t.Fatalf("%s: Admit: %v", stage, err)
			}
			if !d.Allowed {
				t.Fatalf("%s: refused (%s); want admitted", stage, d.Reason)
			}
			admitted++
		}
	}

	direct := map[string]*redis.Client{}
	ids := map[string]string{}
	for _, a := range cl.Addrs() {
		rc := redis.NewClient(&redis.Options{Addr: a})
		t.Cleanup(func() { _ = rc.Close() })
		direct[a] = rc
		id, err := rc.Do(ctx, "CLUSTER", "MYID").Text()
		if err != nil {
			t.Fatal(err)
		}
		ids[a] = id
	}
	slot, err := cl.Client().ClusterKeySlot(ctx, lims[0].rateKey(Subject{Key: key})).Result()
	if err != nil {
		t.Fatal(err)
	}
	from := nodeOf(t, cl, slot)
	var to string
	for _, a := range cl.Addrs() {
		if a != from {
			to = a
			break
		}
	}
	do := func(a string, args ...any) {
		t.Helper()
		if err := direct[a].Do(ctx, args...).Err(); err != nil {
			t.Fatalf("%s %v: %v", a, args, err)
		}
	}

	admit("before", 30)
	do(to, "CLUSTER", "SETSLOT", slot, "IMPORTING", ids[from])
	do(from, "CLUSTER", "SETSLOT", slot, "MIGRATING", ids[to])
	admit("slot migrating", 30)
	keys, err := direct[from].ClusterGetKeysInSlot(ctx, int(slot), 1000).Result()
	if err != nil {
		t.Fatal(err)
	}
	host, port, _ := strings.Cut(to, ":")
	for _, k := range keys[:len(keys)/2] { // half the keys: the script's keys are split
		do(from, "MIGRATE", host, port, k, 0, 5000)
	}
	admit("keys split between the primaries", 30)
	for _, k := range keys[len(keys)/2:] {
		do(from, "MIGRATE", host, port, k, 0, 5000)
	}
	admit("keys moved", 30)
	for _, a := range cl.Addrs() {
		do(a, "CLUSTER", "SETSLOT", slot, "NODE", ids[to])
	}
	admit("slot moved", 30)

	var fallbacks float64
	clk.Advance(10 * time.Second)
	for _, r := range lims {
		fallbacks += testutil.ToFloat64(r.m.RedisFallbacks)
		if err := r.Reconcile(ctx); err != nil {
			t.Fatalf("Reconcile: %v", err)
		}
		if n := r.JournalLen(); n != 0 {
			t.Fatalf("journal after Reconcile: %d entries; want 0", n)
		}
	}
	w := windowAt(time.Now())
	if got := readCounter(t, cl.Client(), lims[0].dayKey(key, w.day)); got != admitted {
		t.Errorf("day counter: got %d; want %d (units admitted)", got, admitted)
	}
	if got := readCounter(t, cl.Client(), lims[0].monthKey(key, w.month)); got != admitted {
		t.Errorf("month counter: got %d; want %d", got, admitted)
	}
	if got := nodeOf(t, cl, slot); got != to {
		t.Errorf("slot %d served by %s; want %s (the migration target)", slot, got, to)
	}
	t.Logf("slot %d moved %s -> %s with %d keys; %d admitted, %v by the fallback", slot, from, to, len(keys), admitted, fallbacks)
}
