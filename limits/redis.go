package limits

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"trendgate/internal/breaker"
	"trendgate/internal/clock"
	"trendgate/internal/redisconn"
)

// RedisOptions tunes a Redis limiter. The zero value means all defaults.
type RedisOptions struct {
	// Prefix starts every key this limiter writes; default "tg:".
	Prefix string
	// Timeout bounds each Redis command; default 50ms.
	Timeout time.Duration
	// LocalShare scales the policy while Redis is unavailable and the local
	// fallback decides alone (PerSecond, Burst, Daily, Monthly × share, at
	// least 1); it should be 1/instances. Default 1/3.
	LocalShare float64
	// FailureThreshold is the number of consecutive failures that open the
	// breaker; default 3.
	FailureThreshold int
	// Backoff is how long the open breaker skips Redis before one probe;
	// default 5s (measured on the injected clock).
	Backoff time.Duration
	// Breaker guards this Redis client, shared with the client's other
	// users (lease, budget) so that once one of them sees Redis fail, none
	// waits on it; nil builds a breaker of this limiter's own from
	// FailureThreshold and Backoff.
	Breaker *breaker.Breaker
	// ReconcileEvery is how often the background reconciler tries to replay
	// the journal while it is not empty; default 5s (wall time).
	ReconcileEvery time.Duration
	// AdmissionWindow is how long Redis keeps the record of one admitted
	// request (its admission id and the units it charged), which makes a
	// retry or a journal replay of that admission charge nothing more;
	// default 10 minutes. One record per admitted request with a quota
	// lives that long (about 100 bytes each in Redis).
	AdmissionWindow time.Duration
}

func (o RedisOptions) withDefaults() (RedisOptions, error) {
	if o.Prefix == "" {
		o.Prefix = "tg:"
	}
	if o.Timeout == 0 {
		o.Timeout = redisconn.CommandTimeout
	}
	if o.LocalShare == 0 {
		o.LocalShare = 1.0 / 3
	}
	if o.FailureThreshold == 0 {
		o.FailureThreshold = 3
	}
	if o.Backoff == 0 {
		o.Backoff = 5 * time.Second
	}
	if o.ReconcileEvery == 0 {
		o.ReconcileEvery = 5 * time.Second
	}
	if o.AdmissionWindow == 0 {
		o.AdmissionWindow = 10 * time.Minute
	}
	var errs []error
	if o.Timeout < 0 {
		errs = append(errs, fmt.Errorf("timeout: must be > 0 (got %s)", o.Timeout))
	}
	if !(o.LocalShare > 0 && o.LocalShare <= 1) {
		errs = append(errs, fmt.Errorf("local_share: must be in (0, 1] (got %v)", o.LocalShare))
	}
	if o.FailureThreshold < 0 {
		errs = append(errs, fmt.Errorf("failure_threshold: must be >= 1 (got %d)", o.FailureThreshold))
	}
	if o.Backoff < 0 {
		errs = append(errs, fmt.Errorf("backoff: must be > 0 (got %s)", o.Backoff))
	}
	if o.ReconcileEvery < 0 {
		errs = append(errs, fmt.Errorf("reconcile_every: must be > 0 (got %s)", o.ReconcileEvery))
	}
	if o.AdmissionWindow < time.Millisecond {
		errs = append(errs, fmt.Errorf("admission_window: must be >= 1ms (got %s)", o.AdmissionWindow))
	}
	return o, errors.Join(errs...)
}

// Redis is the Limiter shared by all instances through one Redis or one
// Redis Cluster. Rates use GCRA and quotas atomic counters, all inside one
// Lua script per Admit that reads Redis TIME (never the instance clock) and
// writes only keys that carry an expiry: the bucket (theoretical arrival
// time, µs; expires when full again), the daily and monthly counters
// (EXPIREAT the end of their UTC window), the admission record (see below)
// and the journal's replay markers (7 days). The key layout is documented
// at rateKey; with a *redis.ClusterClient every key of one account (its
// counters and its keys' buckets) carries the hash tag {<account id>}, so
// each script's keys share a slot.
//
// Exactly-once charging: every Admit with a quota carries an admission id
// (instance id and a sequence number). The script records it, with the
// units it charged, for AdmissionWindow; a script run for an id already
// recorded charges nothing, and a refund or a journal replay sets the
// record to what the admission must end up charging (settleScript), so
// running any of them twice changes nothing. That is what makes an Admit
// that ran in Redis but answered after Timeout safe: the request is
// admitted by the fallback, and the journal later settles the admission at
// the units delivered, whether or not the script had run.
//
// While Redis fails (per-command Timeout; the breaker opens after
// consecutive failures, then lets one probe through), Admit is served by
// the fallback Local at LocalShare of the policy and every quota change is
// journaled in memory; Reconcile replays the journal exactly once (each
// entry is applied together with a marker key, so a retried entry is
// skipped) and a background goroutine calls it while the journal is not
// empty. Close stops that goroutine; it does not close the client.
type Redis struct {
	rdb      redis.Scripter
	opts     RedisOptions
	fallback *Local
	clk      clock.Clock
	log      *zap.Logger
	m        *Metrics
	instance string // random id naming this instance's replay markers and admissions
	tagged   bool   // keys carry the {key id} hash tag (a cluster client)

	admissions atomic.Uint64 // last admission sequence number

	br *breaker.Breaker // guards every Redis call

	mu      sync.Mutex // guards open, settles, pending and seq
	open    map[journalKey]*journalEntry
	settles []*journalEntry // admissions to settle, oldest first, not yet sealed
	pending []*journalEntry // sealed entries being replayed, oldest first
	seq     uint64

	reconcileMu sync.Mutex // serialises Reconcile

	kick     chan struct{} // wakes the reconciler
	stop     chan struct{} // closed by Close
	done     chan struct{} // closed when the reconciler exits
	stopOnce sync.Once
}

// NewRedis returns a Redis limiter and starts its reconciler; call Close to
// stop it. client is required and stays owned by the caller; a
// *redis.ClusterClient selects the hash-tagged key layout. fallback is
// required (it decides while Redis is unavailable). A nil clk is
// clock.Real{}, a nil log zap.NewNop(), a nil m an unregistered Metrics.
func NewRedis(client redis.UniversalClient, opts RedisOptions, fallback *Local, clk clock.Clock, log *zap.Logger, m *Metrics) (*Redis, error) {
	if client == nil {
		return nil, errors.New("limits: redis: nil client")
	}
	if fallback == nil {
		return nil, errors.New("limits: redis: nil fallback limiter")
	}
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("limits: redis options: %w", err)
	}
	if clk == nil {
		clk = clock.Real{}
	}
	if log == nil {
		log = zap.NewNop()
	}
	var id [6]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, fmt.Errorf("limits: redis: instance id: %w", err)
	}
	r := &Redis{
		rdb:      client,
		opts:     opts,
		fallback: fallback,
		clk:      clk,
		log:      log.Named("limits"),
		m:        m.orNew(),
		instance: hex.EncodeToString(id[:]),
		tagged:   isCluster(client),
		open:     make(map[journalKey]*journalEntry),
		kick:     make(chan struct{}, 1),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	r.br = opts.Breaker
	if r.br == nil {
		r.br = breaker.New("redis", breaker.Config{Failures: opts.FailureThreshold, Backoff: opts.Backoff},
			breaker.Options{Clock: clk, Logger: r.log})
	}
	r.br.Notify(r.breakerChanged)
	r.m.registerRedis()
	r.m.RedisAvailable.Set(1)
	go r.reconciler()
	return r, nil
}

// Close stops the reconciler goroutine and waits for it. Journal entries not
// yet replayed are lost (they are logged). Close is idempotent.
func (r *Redis) Close() error {
	r.stopOnce.Do(func() { close(r.stop) })
	<-r.done
	r.mu.Lock()
	n := r.journalLenLocked()
	r.mu.Unlock()
	if n > 0 {
		r.log.Warn("closing with unreplayed quota journal", zap.Int("entries", n))
	}
	return nil
}

// Admit implements Limiter.
func (r *Redis) Admit(ctx context.Context, s Subject, p Policy, cost int) (Decision, error) {
	if err := checkArgs(s, cost); err != nil {
		return Decision{}, err
	}
	if err := p.Validate(); err != nil {
		return Decision{}, fmt.Errorf("limits: invalid policy: %w", err)
	}
	if p.PerSecond > 0 {
		p.Burst = effectiveBurst(p)
	}
	if p.PerSecond == 0 && p.Daily == 0 && p.Monthly == 0 {
		d := Decision{Allowed: true, Policy: p}
		r.m.decision(d)
		return d, nil
	}
	var id string
	if p.Daily > 0 || p.Monthly > 0 {
		id = r.instance + "." + strconv.FormatUint(r.admissions.Add(1), 36)
	}
	var d Decision
	ran, err := r.br.Do(ctx, func() (err error) {
		d, err = r.admitRedis(ctx, s, id, p, cost)
		return err
	})
	switch {
	case ran && err == nil:
		r.m.decision(d)
		if d.Allowed {
			r.m.reserved(s, d)
		}
		return d, nil
	case ran && ctx.Err() != nil: // the caller gave up; not Redis's fault
		if id != "" {
			// The script may have run and charged a request that is not
			// going to be served: settle that admission at nothing.
			w := windowAt(r.clk.Now())
			r.journalSettle(s.account(), settlement{admission: id, day: w.day, month: w.month})
		}
		return Decision{}, fmt.Errorf("limits: admit: %w", ctx.Err())
	case ran && id != "" && !unsent(err):
		// The script may have run in Redis (a reply that came too late):
		// the fallback decides, and the journal later settles this very
		// admission at what the fallback reserved, charged once either way.
		return r.admitFallback(ctx, s, id, p, cost)
	}
	return r.admitFallback(ctx, s, "", p, cost)
}

// admitFallback decides locally at the configured share and journals the
// reservation: as a plain counter change, or, when id is set (the admission
// may have reached Redis), as a settlement of admission id, which Redis may
// or may not have charged already.
func (r *Redis) admitFallback(ctx context.Context, s Subject, id string, p Policy, cost int) (Decision, error) {
	r.m.RedisFallbacks.Inc()
	d, err := r.fallback.Admit(ctx, s, scalePolicy(p, r.opts.LocalShare), cost)
	if err != nil {
		return Decision{}, err
	}
	d.fallback = true
	switch {
	case id != "":
		d.admission = id
		// Settled even when the fallback refused: a script that ran must
		// not keep a charge for a request that was not served.
		r.journalSettle(s.account(), settlement{admission: id, day: d.Day, month: d.Month,
			wantDay: d.DayReserved, wantMonth: d.MonthReserved})
	case d.Allowed:
		r.journal(s.account(), d, 1)
	}
	return d, nil
}

// scalePolicy scales every limit of p by share, keeping each at least 1.
func scalePolicy(p Policy, share float64) Policy {
	if p.PerSecond > 0 {
		p.Burst = max(int(float64(effectiveBurst(p))*share), 1)
		p.PerSecond *= share
	}
	if p.Daily > 0 {
		p.Daily = max(int64(float64(p.Daily)*share), 1)
	}
	if p.Monthly > 0 {
		p.Monthly = max(int64(float64(p.Monthly)*share), 1)
	}
	return p
}

// Refund implements Limiter. A reservation made by the fallback is given
// back there and journaled (it may not be in Redis yet); one made in Redis
// is given back in Redis with DECRBY (never below 0), or journaled when
// Redis fails.
func (r *Redis) Refund(ctx context.Context, s Subject, d Decision) error {
	if s.Key == "" {
		return ErrNoSubject
	}
	account := s.account()
	if !d.Allowed || (d.DayReserved == 0 && d.MonthReserved == 0) {
		return nil
	}
	if d.fallback {
		if err := r.fallback.Refund(ctx, s, d); err != nil {
			return err
		}
		if d.admission != "" {
			r.journalSettle(account, settlement{admission: d.admission, day: d.Day, month: d.Month})
		} else {
			r.journal(account, d, -1)
		}
		return nil
	}
	ran, err := r.br.Do(ctx, func() error { return r.refundRedis(ctx, account, d) })
	switch {
	case ran && err == nil:
		r.m.refunded(s, d)
		return nil
	case ran && ctx.Err() != nil:
		return fmt.Errorf("limits: refund: %w", ctx.Err())
	}
	r.m.RedisFallbacks.Inc()
	r.m.refunded(s, d)
	if ran && d.admission != "" && !unsent(err) {
		// The refund may have run: settling is idempotent, a replay of the
		// same refund changes nothing.
		r.journalSettle(account, settlement{admission: d.admission, day: d.Day, month: d.Month,
			assumeDay: d.DayReserved, assumeMonth: d.MonthReserved})
	} else {
		r.journal(account, d, -1)
	}
	return nil
}

// unsent reports whether err shows that a command never reached Redis (no
// connection could be made), so it cannot have run there.
func unsent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial" || errors.Is(err, redis.ErrPoolTimeout) || errors.Is(err, redis.ErrPoolExhausted)
}

// isCluster reports whether c shards keys over several primaries.
func isCluster(c redis.UniversalClient) bool {
	_, ok := c.(*redis.ClusterClient)
	return ok
}
