package cache

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"trendgate/internal/testing/redistest"
)

// Keys of the entries the purge bus tests hold in each local tier.
const (
	busBTCWhatsup = "v2|whatsup|bitcoin"
	busBTCSeries  = "v2|series|bitcoin|hour|1w||"
	busETHWhatsup = "v2|whatsup|ethereum"
)

// busInstance is one instance's side of the bus: its local tier and bus.
type busInstance struct {
	local *Local
	bus   *PurgeBus
	reg   *prometheus.Registry
}

// newBusInstance builds a local tier holding the three test entries and a
// bus on rdb under prefix; it is not started.
func newBusInstance(t *testing.T, rdb redis.UniversalClient, prefix string, poll time.Duration) *busInstance {
	t.Helper()
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	local, err := NewLocal(1<<20, m)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(local.Close)
	bus, err := NewPurgeBus(rdb, local, PurgeBusOptions{Prefix: prefix, Timeout: time.Second, Poll: poll, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bus.Close() })
	in := &busInstance{local: local, bus: bus, reg: reg}
	in.fill()
	return in
}

// fill stores the three test entries.
func (in *busInstance) fill() {
	ctx := context.Background()
	now := time.Now()
	in.local.Set(ctx, entry(busBTCWhatsup, "bitcoin", now, time.Hour, `{"summary":"b"}`))
	in.local.Set(ctx, entry(busBTCSeries, "bitcoin", now, time.Hour, `{"data":[]}`))
	in.local.Set(ctx, entry(busETHWhatsup, "ethereum", now, time.Hour, `{"summary":"e"}`))
	in.local.Wait()
}

// held reports which of the test keys the local tier holds.
func (in *busInstance) held() map[string]bool {
	out := make(map[string]bool)
	for _, k := range []string{busBTCWhatsup, busBTCSeries, busETHWhatsup} {
		_, ok := in.local.Get(context.Background(), k)
		out[k] = ok
	}
	return out
}

// eventually polls cond (background work: a message in flight, a poll)
// until it holds, for at most 10s.
func eventually(cond func() bool) bool {
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond) // polling background work, not waiting for time to pass
	}
	return true
}

// TestPurgeBusCarriesEverySelector: a purge published by one instance
// empties exactly what it selects from another instance's local tier, by
// pub/sub (the poll is set far beyond the test, so it cannot be what
// delivered it). The purged entries used to stay served from the other
// instances' local tiers until their freshness ended.
func TestPurgeBusCarriesEverySelector(t *testing.T) {
	tests := []struct {
		name   string
		sel    Selector
		purged []string
	}{
		{"key", Selector{Key: busBTCSeries}, []string{busBTCSeries}},
		{"topic", Selector{Topic: "bitcoin"}, []string{busBTCWhatsup, busBTCSeries}},
		{"all", Selector{All: true}, []string{busBTCWhatsup, busBTCSeries, busETHWhatsup}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rdb, prefix := testRedis(t)
			a := newBusInstance(t, rdb, prefix, time.Hour)
			b := newBusInstance(t, rdb, prefix, time.Hour)
			a.bus.Start()
			b.bus.Start()
			if !eventually(func() bool { return subscribers(t, rdb, prefix+"purge") == 2 }) {
				t.Fatal("the two buses did not subscribe")
			}
			if err := a.bus.Publish(context.Background(), tc.sel); err != nil {
				t.Fatalf("Publish: %v", err)
			}
			if !eventually(func() bool { return metric(t, b.reg, "trendgate_cache_cluster_purges_total", "event", "received") == 1 }) {
				t.Fatal("instance b never received the purge")
			}
			want := map[string]bool{busBTCWhatsup: true, busBTCSeries: true, busETHWhatsup: true}
			for _, k := range tc.purged {
				want[k] = false
			}
			if got := b.held(); !equalMaps(got, want) {
				t.Errorf("b holds %v after the purge; want %v", got, want)
			}
			// The publisher purges its own tiers itself (Cache.Purge); its own
			// message is not applied again, and nothing was missed.
			if got := metric(t, a.reg, "trendgate_cache_cluster_purges_total", "event", "received"); got != 0 {
				t.Errorf("a applied %v purges; want 0 (its own message)", got)
			}
			for name, in := range map[string]*busInstance{"a": a, "b": b} {
				if got := metric(t, in.reg, "trendgate_cache_cluster_purges_total", "event", "resync"); got != 0 {
					t.Errorf("%s resynced %v times; want 0", name, got)
				}
			}
			if ttl := rdb.PTTL(context.Background(), prefix+"purge:gen").Val(); ttl <= 0 {
				t.Errorf("generation key PTTL %v; want > 0 (every key expires)", ttl)
			}
		})
	}
}

// subscribers returns how many clients subscribe to channel.
func subscribers(t *testing.T, rdb *redis.Client, channel string) int64 {
	t.Helper()
	n, err := rdb.PubSubNumSub(context.Background(), channel).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n[channel]
}

func equalMaps(a, b map[string]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestPurgeBusMissedPurgeClearsLocal: an instance that did not hear a purge
// (not subscribed, as while away from Redis) finds the generation ahead of
// what it applied; a second read still ahead means the message is lost, not
// in flight, and it clears its local tier. Stepped by Sync, without timing.
func TestPurgeBusMissedPurgeClearsLocal(t *testing.T) {
	rdb, prefix := testRedis(t)
	ctx := context.Background()
	a := newBusInstance(t, rdb, prefix, time.Hour)
	b := newBusInstance(t, rdb, prefix, time.Hour)
	for _, in := range []*busInstance{a, b} {
		if err := in.bus.Sync(ctx); err != nil {
			t.Fatalf("Sync: %v", err)
		}
	}
	if err := a.bus.Publish(ctx, Selector{Topic: "ethereum"}); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	steps := []struct {
		name     string
		wantHeld bool
	}{
		{"first read: a message may be in flight", true},
		{"second read: lost, clear", false},
		{"third read: caught up", false},
	}
	for i, s := range steps {
		if i == 2 {
			b.fill()
			s.wantHeld = true // refilled after the resync: nothing more to clear
		}
		if err := b.bus.Sync(ctx); err != nil {
			t.Fatalf("%s: Sync: %v", s.name, err)
		}
		if got := b.held()[busBTCWhatsup]; got != s.wantHeld {
			t.Errorf("%s: b holds an unselected entry: %v; want %v", s.name, got, s.wantHeld)
		}
	}
	if got := metric(t, b.reg, "trendgate_cache_cluster_purges_total", "event", "resync"); got != 1 {
		t.Errorf("resyncs: %v; want 1", got)
	}
}

// TestPurgeBusGapClearsLocal: a message whose generation skips one means
// a message was lost; the selector alone is not enough, the local tier is
// cleared.
func TestPurgeBusGapClearsLocal(t *testing.T) {
	rdb, prefix := testRedis(t)
	ctx := context.Background()
	b := newBusInstance(t, rdb, prefix, time.Hour)
	if err := b.bus.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	b.bus.onMessage(ctx, "1|other|key|"+busBTCSeries)
	if got := b.held(); got[busBTCSeries] || !got[busBTCWhatsup] || !got[busETHWhatsup] {
		t.Fatalf("after generation 1 (key): holds %v; want all but the series", got)
	}
	b.bus.onMessage(ctx, "3|other|key|"+busBTCWhatsup) // generation 2 never came
	if got := b.held(); got[busETHWhatsup] {
		t.Errorf("after a gap: holds %v; want nothing", got)
	}
}

// TestPurgeBusBlindStartClearsLocal: an instance whose first read of the
// generation failed (Redis away at start) clears its local tier when it
// first reads it: it cannot know what was purged meanwhile.
func TestPurgeBusBlindStartClearsLocal(t *testing.T) {
	rdb, prefix := testRedis(t)
	b := newBusInstance(t, rdb, prefix, time.Hour)
	b.bus.blind = true
	if err := b.bus.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := b.held(); got[busETHWhatsup] {
		t.Errorf("holds %v; want nothing", got)
	}
}

// TestPurgeBusReconnectClearsLocal: instance b loses its connection to
// Redis while a purges, then comes back: its subscription is restored
// and, finding the generation moved, it clears its local tier instead of
// serving what was purged while it was away.
func TestPurgeBusReconnectClearsLocal(t *testing.T) {
	rdb, prefix := testRedis(t)
	link := newCutLink(t, redistest.Addr)
	viaLink := redis.NewClient(&redis.Options{Addr: link.addr(), MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { _ = viaLink.Close() })
	a := newBusInstance(t, rdb, prefix, time.Hour)
	b := newBusInstance(t, viaLink, prefix, 20*time.Millisecond)
	a.bus.Start()
	b.bus.Start()
	if !eventually(func() bool { return subscribers(t, rdb, prefix+"purge") == 2 }) {
		t.Fatal("the two buses did not subscribe")
	}
	link.cut()
	if !eventually(func() bool { return subscribers(t, rdb, prefix+"purge") == 1 }) {
		t.Fatal("b's subscription outlived the cut")
	}
	if err := a.bus.Publish(context.Background(), Selector{Topic: "ethereum"}); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	if got := b.held(); !got[busETHWhatsup] {
		t.Fatalf("b dropped the entry while away from Redis: %v", got)
	}
	link.restore()
	if !eventually(func() bool { return !b.held()[busETHWhatsup] }) {
		t.Fatalf("b still holds the purged entry after reconnecting: %v", b.held())
	}
	// The resync clears the local tier, then counts itself.
	resyncs := func() float64 { return metric(t, b.reg, "trendgate_cache_cluster_purges_total", "event", "resync") }
	if !eventually(func() bool { return resyncs() >= 1 }) {
		t.Errorf("resyncs: %v; want at least 1", resyncs())
	}
}

func TestPurgeMessageRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		sel  Selector
	}{
		{"all", Selector{All: true}},
		{"key with bars", Selector{Key: "v2|series|#ai|day|1m||"}},
		{"topic with space", Selector{Topic: "ai agents"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			msg, err := encodeSelector("me", tc.sel)
			if err != nil {
				t.Fatal(err)
			}
			gen, origin, got, err := decodeSelector("7|" + msg)
			if err != nil || gen != 7 || origin != "me" || got != tc.sel {
				t.Errorf("decode(encode(%+v)) = %d %q %+v %v; want 7 \"me\" the same", tc.sel, gen, origin, got, err)
			}
		})
	}
	for _, bad := range []string{"", "1|me|all", "x|me|all|", "0|me|all|", "1|me|key|", "1|me|flush|x"} {
		if _, _, _, err := decodeSelector(bad); err == nil {
			t.Errorf("decodeSelector(%q): no error", bad)
		}
	}
	if _, err := encodeSelector("me", Selector{}); err == nil {
		t.Error("encodeSelector(empty): no error")
	}
}

// cutLink is a loopback TCP relay to a Redis that can be cut (every
// connection closed, new ones refused) and restored on the same address.
type cutLink struct {
	t      *testing.T
	target string
	addrS  string
	mu     sync.Mutex // guards ln and conns
	ln     net.Listener
	conns  []net.Conn
	wg     sync.WaitGroup // accept loops and relays
}

func newCutLink(t *testing.T, target string) *cutLink {
	t.Helper()
	l := &cutLink{t: t, target: target}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l.addrS = ln.Addr().String()
	l.serve(ln)
	t.Cleanup(func() { l.cut(); l.wg.Wait() })
	return l
}

func (l *cutLink) addr() string { return l.addrS }

func (l *cutLink) serve(ln net.Listener) {
	l.mu.Lock()
	l.ln = ln
	l.mu.Unlock()
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", l.target)
			if err != nil {
				_ = c.Close()
				continue
			}
			l.mu.Lock()
			l.conns = append(l.conns, c, s)
			l.mu.Unlock()
			l.wg.Add(2)
			go func() { defer l.wg.Done(); _, _ = io.Copy(s, c); _ = s.Close() }()
			go func() { defer l.wg.Done(); _, _ = io.Copy(c, s); _ = c.Close() }()
		}
	}()
}

// cut closes the listener and every connection.
func (l *cutLink) cut() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ln != nil {
		_ = l.ln.Close()
		l.ln = nil
	}
	for _, c := range l.conns {
		_ = c.Close()
	}
	l.conns = nil
}

// restore listens again on the same address.
func (l *cutLink) restore() {
	ln, err := net.Listen("tcp", l.addrS)
	if err != nil && !errors.Is(err, net.ErrClosed) {
		l.t.Fatalf("relisten %s: %v", l.addrS, err)
	}
	l.serve(ln)
}

// TestTieredCopyDoesNotUndoPurge: a purge applied to the local tier while
// a Get was reading the shared tier (the shared read predating the purge's
// own delete in Redis) is not undone by that Get copying its entry into
// the local tier; with no purge in between, the copy is kept.
func TestTieredCopyDoesNotUndoPurge(t *testing.T) {
	tests := []struct {
		name     string
		purge    func(ctx context.Context, l *Local)
		wantKept bool
	}{
		{"no purge", nil, true},
		{"key purged meanwhile", func(ctx context.Context, l *Local) { l.Delete(ctx, busBTCWhatsup) }, false},
		{"all purged meanwhile", func(ctx context.Context, l *Local) { l.Clear(ctx) }, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			local, err := NewLocal(1<<20, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(local.Close)
			// The purge lands after the shared read, before the copy.
			shared := &hookStore{mapStore: newMapStore(), hook: func() {}}
			shared.Set(ctx, entry(busBTCWhatsup, "bitcoin", time.Now(), time.Hour, `{"summary":"old"}`))
			if tc.purge != nil {
				shared.hook = func() { tc.purge(ctx, local) }
			}
			if _, ok := Tiered(local, shared).Get(ctx, busBTCWhatsup); !ok {
				t.Fatal("Get missed the shared entry")
			}
			local.Wait()
			if _, kept := local.Get(ctx, busBTCWhatsup); kept != tc.wantKept {
				t.Errorf("local tier holds the copy: %v; want %v", kept, tc.wantKept)
			}
		})
	}
}
