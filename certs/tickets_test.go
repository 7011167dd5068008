package certs

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"trendgate/internal/clock"
	"trendgate/internal/redisconn"
	"trendgate/internal/testing/promtest"
	"trendgate/internal/testing/redistest"
	"trendgate/internal/testing/testcert"
)

// ticketPair is a certificate for tg.test valid at filesNow (the servers'
// fake clock) and at the real time (the clients verify it with theirs).
func ticketPair(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	p := testcert.New(t, testcert.Options{Hosts: []string{"tg.test"}, NotBefore: filesNow.Add(-time.Hour), NotAfter: time.Now().Add(30 * 24 * time.Hour)})
	certFile, keyFile = p.Write(t, t.TempDir())
	return certFile, keyFile, p.Pool()
}

// ticketManager builds and starts a files-mode Manager on clk; redisURL
// and prefix, when set, put it in cluster mode. It is closed when the
// test ends.
func ticketManager(t *testing.T, certFile, keyFile string, clk clock.Clock, redisURL, prefix string, log *zap.Logger, metrics *Metrics) *Manager {
	t.Helper()
	cfg := Settings{Mode: ModeFiles, CertFile: certFile, KeyFile: keyFile,
		Redis: Redis{URL: redisURL, Prefix: prefix, Timeout: redisconn.CommandTimeout}}
	m, err := New(cfg, clk, log, Options{CheckInterval: -1, Metrics: metrics})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Error(err)
		}
	})
	return m
}

// tlsServer accepts TLS connections with m's config on a loopback port
// until the test ends. Each connection gets its handshake and one byte, so
// that a TLS 1.3 client has read the session tickets sent before it.
func tlsServer(t *testing.T, m *Manager) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			nc, err := l.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer nc.Close()
				_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
				tc := tls.Server(nc, m.TLSConfig())
				if tc.Handshake() != nil {
					return
				}
				_, _ = tc.Write([]byte{'x'})
				_, _ = io.Copy(io.Discard, tc) // until the client closes
			}()
		}
	}()
	t.Cleanup(func() {
		_ = l.Close()
		wg.Wait()
	})
	return l.Addr().String()
}

// resumes dials addr with TLS version v and the client session cache
// (tickets are filed under the server name, so one cache serves every
// instance, as behind one address) and reports whether the handshake
// resumed a session.
func resumes(t *testing.T, addr string, v uint16, pool *x509.CertPool, cache tls.ClientSessionCache) bool {
	t.Helper()
	d := &net.Dialer{Timeout: 5 * time.Second}
	c, err := tls.DialWithDialer(d, "tcp", addr, &tls.Config{RootCAs: pool, ServerName: "tg.test",
		MinVersion: v, MaxVersion: v, ClientSessionCache: cache})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	return c.ConnectionState().DidResume
}

var tlsVersions = []uint16{tls.VersionTLS12, tls.VersionTLS13}

// TestTicketKeysRotateWithTheClock: on its own an instance leaves the
// ticket keys to crypto/tls, whose rotation follows the injected clock: a
// ticket still resumes a day later, after its key stopped encrypting new
// tickets, and no longer once 8 days have passed.
func TestTicketKeysRotateWithTheClock(t *testing.T) {
	certFile, keyFile, pool := ticketPair(t)
	for _, v := range tlsVersions {
		clk := clock.NewFake(filesNow)
		addr := tlsServer(t, ticketManager(t, certFile, keyFile, clk, "", "", zap.NewNop(), nil))
		cache := tls.NewLRUClientSessionCache(8)
		var got []bool
		got = append(got, resumes(t, addr, v, pool, cache), resumes(t, addr, v, pool, cache))
		clk.Advance(25 * time.Hour)
		got = append(got, resumes(t, addr, v, pool, cache))
		clk.Advance(7 * 24 * time.Hour)
		got = append(got, resumes(t, addr, v, pool, cache))
		if want := []bool{false, true, true, false}; !slices.Equal(got, want) {
			t.Errorf("TLS %x: resumed %v; want %v (full, resumed, resumed a day later, full after 8 days)", v, got, want)
		}
	}
}

// TestTicketKeysSharedThroughRedis: in cluster mode a ticket one instance
// issued resumes on another; when one instance has turned the day and the
// other not yet, tickets from either resume on both; and the keys in Redis
// are 32 bytes with an expiry.
func TestTicketKeysSharedThroughRedis(t *testing.T) {
	rdb := redistest.Client(t, redistest.Addr)
	prefix := redistest.Prefix(t, rdb)
	certFile, keyFile, pool := ticketPair(t)
	clk := clock.NewFake(filesNow)
	url := "redis://" + redistest.Addr + "/0"
	reg := prometheus.NewRegistry()
	a := ticketManager(t, certFile, keyFile, clk, url, prefix, zap.NewNop(), NewMetrics(reg))
	b := ticketManager(t, certFile, keyFile, clk, url, prefix, zap.NewNop(), nil)
	addrA, addrB := tlsServer(t, a), tlsServer(t, b)
	ctx := context.Background()
	if v, found := promtest.Sum(t, reg, "trendgate_certs_ticket_keys_failing"); !found || v != 0 {
		t.Errorf("trendgate_certs_ticket_keys_failing = %v (found %v); want 0", v, found)
	}

	for _, v := range tlsVersions {
		cache := tls.NewLRUClientSessionCache(8)
		if got := []bool{resumes(t, addrA, v, pool, cache), resumes(t, addrB, v, pool, cache)}; !slices.Equal(got, []bool{false, true}) {
			t.Errorf("TLS %x: A then B resumed %v; want a full handshake on A, then B resuming A's ticket", v, got)
		}
	}

	// A turns the day first: it encrypts with the new day's key, which B,
	// still on the old day, has already; B's tickets still resume on A.
	v := uint16(tls.VersionTLS13)
	before := tls.NewLRUClientSessionCache(8)
	resumes(t, addrB, v, pool, before)
	clk.Advance(ticketPeriod)
	if err := a.tickets.refresh(ctx); err != nil {
		t.Fatal(err)
	}
	after := tls.NewLRUClientSessionCache(8)
	if got := []bool{resumes(t, addrA, v, pool, after), resumes(t, addrB, v, pool, after), resumes(t, addrA, v, pool, before)}; !slices.Equal(got, []bool{false, true, true}) {
		t.Errorf("across the day: resumed %v; want A full, B resuming A's new-day ticket, A resuming B's old-day ticket", got)
	}

	day := dayOf(filesNow)
	for _, d := range []int64{day, day + 1, day + 2} {
		name := ticketPrefix(prefix) + strconv.FormatInt(d, 10)
		val, err := rdb.Get(ctx, name).Bytes()
		if err != nil || len(val) != ticketKeyLen {
			t.Errorf("%s: %d bytes, %v; want a %d-byte key", name, len(val), err, ticketKeyLen)
		}
		if ttl := rdb.TTL(ctx, name).Val(); ttl <= 0 || ttl > ticketKeyTTL {
			t.Errorf("%s: TTL %v; want one up to %v", name, ttl, ticketKeyTTL)
		}
	}

	// Past the tickets' lifetime, with both on the new keys: no resumption.
	clk.Advance((ticketDaysKept + 1) * ticketPeriod)
	for _, m := range []*Manager{a, b} {
		if err := m.tickets.refresh(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if resumes(t, addrB, v, pool, before) {
		t.Error("a ticket from 9 days ago resumed")
	}
}

// TestTicketKeysSharedThroughRedisCluster: the same sharing on a Redis
// Cluster, where every day's key must sit in one slot for the one MGET.
func TestTicketKeysSharedThroughRedisCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	certFile, keyFile, pool := ticketPair(t)
	clk := clock.NewFake(filesNow)
	a := ticketManager(t, certFile, keyFile, clk, cl.URL(), "tg:", zap.NewNop(), nil)
	b := ticketManager(t, certFile, keyFile, clk, cl.URL(), "tg:", zap.NewNop(), nil)
	addrA, addrB := tlsServer(t, a), tlsServer(t, b)
	for _, v := range tlsVersions {
		cache := tls.NewLRUClientSessionCache(8)
		if got := []bool{resumes(t, addrA, v, pool, cache), resumes(t, addrB, v, pool, cache)}; !slices.Equal(got, []bool{false, true}) {
			t.Errorf("TLS %x: A then B resumed %v; want a full handshake on A, then B resuming A's ticket", v, got)
		}
	}
}

// TestTicketKeysWithoutRedis: when Redis cannot be reached, Start logs it
// once and the instance serves with crypto/tls's own keys: handshakes
// work and its own tickets resume.
func TestTicketKeysWithoutRedis(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	_ = l.Close() // nothing listens there now
	certFile, keyFile, pool := ticketPair(t)
	core, logs := observer.New(zap.InfoLevel)
	clk := clock.NewFake(filesNow)
	reg := prometheus.NewRegistry()
	m := ticketManager(t, certFile, keyFile, clk, "redis://"+dead+"/0", "tg:test:", zap.New(core), NewMetrics(reg))
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if err := m.tickets.refresh(ctx); err == nil {
		t.Fatal("refresh against a closed port succeeded")
	}
	if n := logs.FilterMessage("session ticket keys not loaded from redis; keeping the current ones").Len(); n != 1 {
		t.Errorf("%d warnings after two failed loads; want 1", n)
	}
	if v, _ := promtest.Sum(t, reg, "trendgate_certs_ticket_keys_failing"); v != 1 {
		t.Errorf("trendgate_certs_ticket_keys_failing = %v; want 1", v)
	}
	addr := tlsServer(t, m)
	cache := tls.NewLRUClientSessionCache(8)
	if got := []bool{resumes(t, addr, tls.VersionTLS13, pool, cache), resumes(t, addr, tls.VersionTLS13, pool, cache)}; !slices.Equal(got, []bool{false, true}) {
		t.Errorf("resumed %v; want a full handshake, then a resumed one", got)
	}
}
