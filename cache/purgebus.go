package cache

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"trendgate/internal/redisconn"
)

// Defaults of PurgeBusOptions.
const (
	// DefaultPurgePoll is how often a PurgeBus reads the purge generation.
	DefaultPurgePoll = 250 * time.Millisecond
	// purgeGenTTL keeps the generation counter alive well past the longest
	// an entry purged when it last moved can still be held (freshness plus
	// max stale, a day or two by default). When it expires anyway, the
	// instances follow it back to zero.
	purgeGenTTL = 30 * 24 * time.Hour
)

// PurgeBusOptions configures a PurgeBus. The zero value uses every default.
type PurgeBusOptions struct {
	// Prefix starts the generation key (Prefix+"purge:gen") and names the
	// channel (Prefix+"purge"); default "tg:".
	Prefix string
	// Timeout bounds each Redis command (default 50ms).
	Timeout time.Duration
	// Poll is how often the generation is read (default 250ms). A purge
	// whose message never came is applied, by clearing the local tier, at
	// the second read that finds it: within two polls.
	Poll time.Duration
	// Logger receives resyncs and publish failures; nil discards.
	Logger *zap.Logger
	// Metrics counts purges received, resyncs and publish failures; nil
	// counts in an unregistered Metrics.
	Metrics *Metrics
}

// PurgeBus carries purges between the instances of a cluster, so that a
// purge on one instance also empties every other instance's local tier
// (the shared tier is purged once, by the instance that was asked).
//
// Each purge increments a generation counter in Redis and publishes the
// selector with the new generation on a channel, in one script, so
// messages arrive in generation order. Every instance applies the
// selectors it receives to its local tier at once (pub/sub: well under a
// second). Pub/sub delivers only to connected subscribers, so the counter
// is the safety net: a message whose generation skips one, a resubscription
// after a reconnect, or a poll that finds the counter ahead of what was
// applied (still ahead at the next poll, so a message in flight is not
// mistaken for a lost one) all mean purges were missed, and the instance
// clears its whole local tier, since it cannot know what they selected.
// An instance that could not read the counter at start clears it too, the
// first time it can.
//
// Use NewPurgeBus, then Start; Close stops it. The zero value is not
// usable.
type PurgeBus struct {
	rdb     redis.UniversalClient
	local   Store // the local tier purges from other instances apply to
	genKey  string
	channel string
	origin  string // this instance's id in messages: its own are not applied twice
	timeout time.Duration
	poll    time.Duration
	log     *zap.Logger
	m       *Metrics

	mu      sync.Mutex // guards the fields below and orders the local purges
	applied int64      // the highest generation the local tier reflects
	known   bool       // applied was read from Redis; false until the counter was first read
	blind   bool       // Start could not read the counter: purges may have been missed
	pending int64      // a generation beyond applied seen by the last poll; 0 if none
	moves   uint64     // counts changes of applied by messages and Publish, so Sync can tell its read is stale

	cancel context.CancelFunc // stops the loops Start began; nil before Start
	wg     sync.WaitGroup     // the subscriber and poll loops
}

// NewPurgeBus returns a bus on client that applies other instances' purges
// to local (the local tier, not a Tiered store). It does not touch Redis
// until Start.
func NewPurgeBus(client redis.UniversalClient, local Store, opts PurgeBusOptions) (*PurgeBus, error) {
	if client == nil || local == nil {
		return nil, errors.New("cache: purge bus: nil client or local tier")
	}
	if opts.Timeout < 0 || opts.Poll < 0 {
		return nil, errors.New("cache: purge bus: negative timeout or poll")
	}
	var id [8]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, fmt.Errorf("cache: purge bus: %w", err)
	}
	prefix := cmp(opts.Prefix, "tg:")
	b := &PurgeBus{
		rdb:     client,
		local:   local,
		genKey:  prefix + "purge:gen",
		channel: prefix + "purge",
		origin:  hex.EncodeToString(id[:]),
		timeout: cmp(opts.Timeout, redisconn.CommandTimeout),
		poll:    cmp(opts.Poll, DefaultPurgePoll),
		log:     opts.Logger,
		m:       orNew(opts.Metrics),
	}
	if b.log == nil {
		b.log = zap.NewNop()
	}
	b.log = b.log.Named("purge")
	return b, nil
}

// Start reads the generation (bounded by the timeout; a failure is retried
// by the poll) and starts the subscriber and the poll. Call it once.
func (b *PurgeBus) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	b.cancel = cancel
	if err := b.Sync(ctx); err != nil {
		b.mu.Lock()
		b.blind = true
		b.mu.Unlock()
		b.log.Warn("purge generation unreadable at start; the local cache is cleared once Redis answers", zap.Error(err))
	}
	ps := b.rdb.Subscribe(ctx, b.channel)
	b.wg.Add(2)
	go func() { // owned by b: ends when Close cancels ctx and closes ps
		defer b.wg.Done()
		b.receive(ctx, ps)
	}()
	go func() { // owned by b: ends when Close cancels ctx
		defer b.wg.Done()
		t := time.NewTicker(b.poll)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				_ = b.Sync(ctx)
			}
		}
	}()
}

// Close stops the subscriber and the poll and waits for them.
func (b *PurgeBus) Close() error {
	if b.cancel != nil {
		b.cancel()
	}
	b.wg.Wait()
	return nil
}

// Generation returns the purge generation the local tier reflects, and
// false when the bus has not read it from Redis yet (or lost track of it:
// a resync is due). A cache snapshot saved under one generation must not
// be loaded under another.
func (b *PurgeBus) Generation() (int64, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.applied, b.known && b.pending == 0
}

// publishScript increments the generation (KEYS[1]), renews its expiry
// (ARGV[3] ms) and publishes "<generation>|ARGV[2]" on ARGV[1]: one
// script, so the channel carries generations in order.
var publishScript = redis.NewScript(`
local g = redis.call('INCR', KEYS[1])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('PUBLISH', ARGV[1], g .. '|' .. ARGV[2])
return g
`)

// Publish tells every other instance to purge sel from its local tier. The
// caller purges its own tiers (Cache.Purge). An error means the other
// instances were not told (Redis is unreachable): their local copies live
// out their freshness.
func (b *PurgeBus) Publish(ctx context.Context, sel Selector) error {
	msg, err := encodeSelector(b.origin, sel)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	gen, err := publishScript.Run(cctx, b.rdb, []string{b.genKey}, b.channel, msg, purgeGenTTL.Milliseconds()).Int64()
	if err != nil {
		b.m.purgePublishErrors.Inc()
		b.log.Warn("purge not broadcast: other instances keep their local copies until they reach Redis again", zap.Error(err))
		return fmt.Errorf("cache: purge broadcast: %w", err)
	}
	b.mu.Lock()
	if b.known && gen == b.applied+1 {
		b.applied = gen // nothing missed in between: our own purge is done
		b.moves++
	}
	b.mu.Unlock()
	return nil
}

// Sync reads the generation once and resyncs the local tier when purges
// were missed (see PurgeBus). The poll calls it; tests may call it to
// step the bus.
func (b *PurgeBus) Sync(ctx context.Context) error {
	b.mu.Lock()
	moves := b.moves
	b.mu.Unlock()
	cctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	gen, err := b.rdb.Get(cctx, b.genKey).Int64()
	if errors.Is(err, redis.Nil) {
		gen, err = 0, nil
	}
	if err != nil {
		return fmt.Errorf("cache: purge generation: %w", err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case !b.known:
		// First read. If Start could not read it, purges made since may
		// have been missed.
		if b.blind {
			b.resync(ctx, "redis reached after start without it")
		}
		b.known, b.blind, b.applied, b.pending = true, false, gen, 0
	case b.moves != moves:
		// A message or our own purge moved applied during the read: the
		// value read may predate it. The next poll reads again.
	case gen < b.applied:
		// The counter expired or Redis lost it: follow it.
		b.applied, b.pending = gen, 0
	case gen == b.applied:
		b.pending = 0
	case b.pending != 0 && b.applied < b.pending:
		// Ahead at two reads in a row: the messages were lost.
		b.resync(ctx, "purge messages missed")
		b.applied, b.pending = gen, 0
	default:
		b.pending = gen // a message may be on its way: look again next poll
	}
	return nil
}

// receive applies messages until ctx ends.
func (b *PurgeBus) receive(ctx context.Context, ps *redis.PubSub) {
	defer ps.Close()
	ch := ps.ChannelWithSubscriptions(redis.WithChannelHealthCheckInterval(time.Second))
	subscriptions := 0
	for {
		select {
		case <-ctx.Done():
			return
		case m, ok := <-ch:
			if !ok {
				return
			}
			switch m := m.(type) {
			case *redis.Subscription:
				if m.Kind != "subscribe" {
					continue
				}
				if subscriptions++; subscriptions > 1 {
					// Resubscribed after a reconnect: messages may have
					// been lost while away. Look now; the next poll
					// confirms (a message published just after the
					// resubscription may be queued behind this one).
					_ = b.Sync(ctx)
				}
			case *redis.Message:
				b.onMessage(ctx, m.Payload)
			}
		}
	}
}

// onMessage applies one published purge.
func (b *PurgeBus) onMessage(ctx context.Context, payload string) {
	gen, origin, sel, err := decodeSelector(payload)
	if err != nil {
		b.log.Warn("ignoring a malformed purge message", zap.Error(err))
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if origin != b.origin {
		// Applied whatever its generation: purging twice is harmless,
		// and after the counter was reset generations restart low.
		purgeStore(ctx, b.local, sel)
		b.m.purgeReceived.Inc()
	}
	if !b.known {
		return // Sync will resync once it can read the counter
	}
	if gen > b.applied+1 {
		b.resync(ctx, "purge messages missed")
	}
	if gen > b.applied {
		b.applied = gen
		b.moves++
	}
}

// resync clears the local tier because purges were missed. Called with
// mu held.
func (b *PurgeBus) resync(ctx context.Context, why string) {
	b.local.Clear(ctx)
	b.m.purgeResyncs.Inc()
	b.log.Warn("local cache cleared: purges from other instances may have been missed", zap.String("reason", why))
}

// encodeSelector is the message body after the generation:
// "<origin>|<kind>|<argument>", kind "all", "key" or "topic". Only the
// argument may hold '|' (canonical keys do).
func encodeSelector(origin string, sel Selector) (string, error) {
	switch {
	case sel.All:
		return origin + "|all|", nil
	case sel.Key != "" && sel.Topic != "":
		return "", errors.New("cache: purge broadcast: a selector with both key and topic")
	case sel.Key != "":
		return origin + "|key|" + sel.Key, nil
	case sel.Topic != "":
		return origin + "|topic|" + sel.Topic, nil
	}
	return "", errors.New("cache: purge broadcast: empty selector")
}

// decodeSelector parses a published message.
func decodeSelector(payload string) (gen int64, origin string, sel Selector, err error) {
	parts := strings.SplitN(payload, "|", 4)
	if len(parts) != 4 {
		return 0, "", sel, fmt.Errorf("cache: purge message has %d fields", len(parts))
	}
	gen, err = strconv.ParseInt(parts[0], 10, 64)
	if err != nil || gen < 1 {
		return 0, "", sel, fmt.Errorf("cache: purge message generation %q", parts[0])
	}
	switch arg := parts[3]; parts[2] {
	case "all":
		sel.All = true
	case "key":
		sel.Key = arg
	case "topic":
		sel.Topic = arg
	default:
		return 0, "", sel, fmt.Errorf("cache: purge message kind %q", parts[2])
	}
	if !sel.All && parts[3] == "" {
		return 0, "", sel, errors.New("cache: purge message without its key or topic")
	}
	return gen, parts[1], sel, nil
}

// purgeStore removes what sel selects from s and returns how many entries
// it removed (best effort: a topic's count may include keys already
// gone). Purging by topic needs s to implement TopicIndex.
func purgeStore(ctx context.Context, s Store, sel Selector) int {
	if sel.All {
		n := 0
		if l, ok := s.(interface{ Len() int }); ok {
			n = l.Len()
		}
		s.Clear(ctx)
		return n
	}
	n := 0
	if sel.Key != "" {
		if _, ok := s.Get(ctx, sel.Key); ok {
			n++
		}
		s.Delete(ctx, sel.Key)
	}
	if sel.Topic != "" {
		if ti, ok := s.(TopicIndex); ok {
			for _, k := range ti.TopicKeys(ctx, sel.Topic) {
				if k == sel.Key {
					continue
				}
				s.Delete(ctx, k)
				n++
			}
		}
	}
	return n
}
