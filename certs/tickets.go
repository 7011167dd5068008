package certs

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"trendgate/internal/clock"
	"trendgate/internal/redisconn"
)

// Session tickets let a returning client resume without a full handshake.
// An instance on its own leaves their keys to crypto/tls, which makes a
// new key every 24 hours and accepts each for 7 days (the Manager's
// tls.Config reads the injected clock, so that rotation follows it). In
// cluster mode the keys are shared through Redis instead, one per UTC day:
// a ticket one instance issued then resumes on any other instance behind
// the same address, and every instance rotates at the same time.

// ticketPeriod is how long one key encrypts new tickets.
const ticketPeriod = 24 * time.Hour

// ticketDaysKept is how many earlier days' keys still decrypt tickets:
// crypto/tls accepts a ticket for at most 7 days.
const ticketDaysKept = 7

// ticketKeyTTL keeps a key in Redis past the last day it may decrypt, also
// when it was made a day ahead.
const ticketKeyTTL = (ticketDaysKept + 3) * ticketPeriod

// ticketRefreshEvery is how often a running Manager looks whether the day
// changed; it reloads the keys only when it did (or the last load failed).
const ticketRefreshEvery = time.Minute

// ticketKeyLen is the length of a session ticket key (tls.Config's
// SetSessionTicketKeys takes 32-byte keys).
const ticketKeyLen = 32

// sharedTickets keeps a tls.Config's session ticket keys those of the
// cluster's current day, read from Redis.
type sharedTickets struct {
	rdb     redis.UniversalClient
	prefix  string // a day's key is prefix + its day number
	clk     clock.Clock
	log     *zap.Logger
	metrics *Metrics // nil records nothing
	tc      *tls.Config

	mu      sync.Mutex // guards the fields below; held for one whole refresh
	loaded  int64      // the day whose keys tc has; math.MinInt64 before the first load
	failing bool       // the last refresh failed (logged once, until one succeeds)
}

// ticketPrefix is the Redis key prefix of the ticket keys under the
// configured prefix. The hash tag keeps every day's key in one Redis
// Cluster slot, so one MGET reads them all.
func ticketPrefix(prefix string) string { return prefix + "{tls-tickets}:" }

func newSharedTickets(rdb redis.UniversalClient, prefix string, clk clock.Clock, log *zap.Logger, metrics *Metrics, tc *tls.Config) *sharedTickets {
	return &sharedTickets{rdb: rdb, prefix: ticketPrefix(prefix), clk: clk, log: log, metrics: metrics, tc: tc, loaded: math.MinInt64}
}

// dayOf numbers the UTC day of t (days since 1970-01-01).
func dayOf(t time.Time) int64 { return t.Unix() / int64(ticketPeriod/time.Second) }

// refresh loads the keys of the current day into tc unless they are loaded
// already. The first key, today's, encrypts new tickets; the others only
// decrypt: tomorrow's, so that tickets from an instance whose clock has
// already turned the day resume here, and those of the ticketDaysKept
// days before. Today's and tomorrow's keys are made by whichever instance
// asks for them first (SET NX); every instance then reads the same ones.
// On an error tc keeps the keys it had.
func (s *sharedTickets) refresh(ctx context.Context) error {
	day := dayOf(s.clk.Now())
	s.mu.Lock()
	defer s.mu.Unlock()
	if day == s.loaded {
		return nil
	}
	err := s.load(ctx, day)
	switch {
	case err != nil && !s.failing:
		s.log.Warn("session ticket keys not loaded from redis; keeping the current ones", zap.Error(err))
	case err == nil && s.failing:
		s.log.Info("session ticket keys loaded from redis again")
	}
	s.failing = err != nil
	s.metrics.ticketKeys(s.failing)
	if err == nil {
		s.loaded = day
	}
	return err
}

// load reads (making them when missing) the keys for day into tc.
func (s *sharedTickets) load(ctx context.Context, day int64) error {
	pipe := s.rdb.Pipeline()
	for _, d := range []int64{day, day + 1} {
		var k [ticketKeyLen]byte
		if _, err := rand.Read(k[:]); err != nil {
			return fmt.Errorf("certs: session ticket key: %w", err)
		}
		pipe.SetNX(ctx, s.key(d), k[:], ticketKeyTTL)
	}
	names := []string{s.key(day), s.key(day + 1)}
	for d := day - 1; d >= day-ticketDaysKept; d-- {
		names = append(names, s.key(d))
	}
	get := pipe.MGet(ctx, names...)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("certs: session ticket keys: %w", err)
	}
	keys := make([][ticketKeyLen]byte, 0, len(names))
	for i, v := range get.Val() {
		str, ok := v.(string)
		if !ok { // an earlier day no instance was running on
			if i < 2 {
				return fmt.Errorf("certs: session ticket key %s missing after it was set", names[i])
			}
			continue
		}
		if len(str) != ticketKeyLen {
			return fmt.Errorf("certs: session ticket key %s holds %d bytes, want %d", names[i], len(str), ticketKeyLen)
		}
		keys = append(keys, [ticketKeyLen]byte([]byte(str)))
	}
	s.tc.SetSessionTicketKeys(keys)
	return nil
}

func (s *sharedTickets) key(day int64) string { return s.prefix + strconv.FormatInt(day, 10) }

// run refreshes the keys every ticketRefreshEvery until ctx ends. The day
// is read from the injected clock; the ticker only decides how often to
// look.
func (s *sharedTickets) run(ctx context.Context) {
	t := time.NewTicker(ticketRefreshEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			rctx, cancel := context.WithTimeout(ctx, redisconn.CertTimeout)
			_ = s.refresh(rctx) // logged by refresh; the next tick tries again
			cancel()
		}
	}
}
