// Package certs provides the public listener's certificates: certificate
// files (reloaded when they change), or certmagic's ACME management with its storage on disk
// or, in cluster mode, on Redis (RedisStorage) so instances share
// certificates and take turns issuing them.
//
// It owns the tls.Config (TLS 1.2 or later, ALPN h2 and http/1.1), its
// session ticket keys (shared through Redis in cluster mode) and the ACME
// HTTP-01 challenge responder; it never sees an API request, a key or a
// cache entry, and it does not serve HTTP itself.
package certs

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"trendgate/internal/clock"
	"trendgate/internal/redisconn"
)

// Manager holds the certificates for one Serve call: the public listener's
// tls.Config and, in ACME mode, certmagic's manager. A nil *Manager means
// TLS is off; its methods are then no-ops that report ready.
type Manager struct {
	config  *tls.Config
	acme    *acmeManager          // nil in files mode
	files   *filePair             // nil in ACME mode
	tickets *sharedTickets        // cluster mode: session ticket keys from Redis; nil otherwise
	rdb     redis.UniversalClient // cluster mode: for tickets and ACME storage; nil otherwise

	mu      sync.Mutex         // guards stop
	stop    context.CancelFunc // ends the ticket refresher Start began; nil before
	stopped chan struct{}      // closed when that refresher returned
}

// DefaultCheckInterval is Options.CheckInterval's default.
const DefaultCheckInterval = 2 * time.Second

// Options tune a Manager. The zero value checks the certificate files of
// tls.mode files every DefaultCheckInterval and reports reloads nowhere.
type Options struct {
	// CheckInterval is how often, at most, a TLS handshake stats
	// tls.cert_file and tls.key_file (tls.mode files) and reloads them when
	// they changed: the first handshake after each interval does it. 0
	// means DefaultCheckInterval; a negative value means only Reload does.
	CheckInterval time.Duration
	// OnReload is called after each attempt to load changed files, with
	// ReloadOK or ReloadRefused; nil calls nothing.
	OnReload func(result string)
	// Metrics counts every ACME certificate obtained, renewed or failed,
	// and in tls.mode files holds the serving certificate's expiry; nil
	// records nothing.
	Metrics *Metrics
}

// acmeManager owns certmagic for one Serve call: its certificate cache
// (whose maintenance goroutine renews certificates) and the context of the
// background issuance started by start. stop releases all of it.
type acmeManager struct {
	magic   *certmagic.Config
	cache   *certmagic.Cache
	issuer  *certmagic.ACMEIssuer
	domains []string
	closers []func() error // storage resources, closed by stop (the Manager closes the Redis client)
	metrics *Metrics       // obtain and renewal outcomes; nil records nothing

	mu      sync.Mutex         // guards cancel and onCache
	cancel  context.CancelFunc // stops background issuance; nil before start
	onCache func()             // called when a managed certificate is cached; nil: nothing
}

// New builds the certificates of s. It returns nil, nil when TLS is
// off. In cluster mode the instances share session ticket keys through
// Redis (see sharedTickets): New loads them, waiting up to 2 s for Redis
// (on a failure crypto/tls's own keys serve until a later load succeeds),
// and Start keeps them current. In files mode the pair must load now (a
// missing, mismatched or expired pair is an error) and is then served
// through GetCertificate, so a changed pair replaces it for new connections
// (see Options and Reload). In ACME mode nothing is requested until Start.
// A nil clk is the real clock and a nil log discards.
func New(s Settings, clk clock.Clock, log *zap.Logger, opts Options) (*Manager, error) {
	if clk == nil {
		clk = clock.Real{}
	}
	if log == nil {
		log = zap.NewNop()
	}
	if s.Mode == "" || s.Mode == ModeOff {
		return nil, nil
	}
	var rdb redis.UniversalClient
	if s.Redis.URL != "" {
		timeout := max(s.Redis.Timeout, redisconn.CertTimeout)
		client, err := redisconn.New(s.Redis.URL, s.Redis.Mode, redisconn.Tuning{Timeout: timeout})
		if err != nil {
			return nil, fmt.Errorf("certs: redis.url: %w", err)
		}
		rdb = client
	}
	m, err := newManager(s, clk, log, opts, rdb)
	if err != nil {
		if rdb != nil {
			_ = rdb.Close()
		}
		return nil, err
	}
	m.config.Time = clk.Now // crypto/tls's ticket key rotation and ticket ages follow the clock
	if rdb != nil {
		m.rdb = rdb
		m.tickets = newSharedTickets(rdb, s.Redis.Prefix, clk, log.Named("tickets"), opts.Metrics, m.config)
		// Before the listener serves, so that its first tickets already
		// resume on the other instances.
		ctx, cancel := context.WithTimeout(context.Background(), redisconn.CertTimeout)
		_ = m.tickets.refresh(ctx) // a failure is logged; Start's refresher tries again
		cancel()
	}
	return m, nil
}

// newManager builds the tls.Config and the certificates of s.Mode;
// rdb is the cluster's Redis (nil outside cluster mode).
func newManager(s Settings, clk clock.Clock, log *zap.Logger, opts Options, rdb redis.UniversalClient) (*Manager, error) {
	switch s.Mode {
	case ModeFiles:
		interval := opts.CheckInterval
		if interval == 0 {
			interval = DefaultCheckInterval
		}
		fp, err := newFilePair(s.CertFile, s.KeyFile, clk, interval, log, opts.OnReload, opts.Metrics)
		if err != nil {
			return nil, err
		}
		tc := baseTLSConfig()
		tc.GetCertificate = fp.getCertificate
		return &Manager{config: tc, files: fp}, nil
	case ModeACME:
		am, err := newACME(s, clk, log, opts.Metrics, rdb)
		if err != nil {
			return nil, err
		}
		tc := baseTLSConfig()
		mc := am.magic.TLSConfig()
		tc.GetCertificate = mc.GetCertificate
		// acme-tls/1 stays last so TLS-ALPN-01 challenges can be answered.
		tc.NextProtos = append(tc.NextProtos, mc.NextProtos...)
		return &Manager{config: tc, acme: am}, nil
	default:
		return nil, fmt.Errorf("certs: tls: unknown mode %q", s.Mode)
	}
}

// baseTLSConfig is what both modes share: TLS 1.2 or later and HTTP/2.
func baseTLSConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"h2", "http/1.1"},
	}
}

// newACME builds the certmagic configuration: an ACME issuer for
// tls.acme.directory_url, storage on Redis rdb in cluster mode (so
// instances share certificates and coordinate issuance) or, with a nil
// rdb, on disk, and no on-demand issuance: only tls.acme.domains are ever
// requested. Every domain starts as not failing in metrics.
func newACME(s Settings, clk clock.Clock, log *zap.Logger, metrics *Metrics, rdb redis.UniversalClient) (*acmeManager, error) {
	a := s.ACME
	if len(a.Domains) == 0 {
		return nil, errors.New("certs: tls.acme.domains is empty")
	}
	log = log.Named("acme")
	m := &acmeManager{domains: append([]string(nil), a.Domains...), metrics: metrics}
	if metrics != nil {
		for _, d := range m.domains {
			metrics.failing.WithLabelValues(d).Set(0)
		}
	}

	var roots *x509.CertPool
	if a.CARoot != "" {
		pem, err := os.ReadFile(a.CARoot)
		if err != nil {
			return nil, fmt.Errorf("certs: tls.acme.ca_root: %w", err)
		}
		roots = x509.NewCertPool()
		if !roots.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("certs: tls.acme.ca_root: no PEM certificate in %s", a.CARoot)
		}
	}

	var storage certmagic.Storage
	if rdb != nil {
		st, err := NewRedisStorage(rdb, RedisStorageOptions{Prefix: StoragePrefix(s.Redis.Prefix, redisconn.IsCluster(s.Redis.URL, s.Redis.Mode)), Clock: clk})
		if err != nil {
			return nil, err
		}
		m.closers = append(m.closers, st.Close)
		storage = st
	} else {
		storage = &certmagic.FileStorage{Path: a.Storage}
	}

	var magic *certmagic.Config
	m.cache = certmagic.NewCache(certmagic.CacheOptions{
		GetConfigForCert: func(certmagic.Certificate) (*certmagic.Config, error) { return magic, nil },
		Logger:           log,
	})
	magic = certmagic.New(m.cache, certmagic.Config{
		Storage: storage,
		Logger:  log,
		OnEvent: m.event,
		// A client that sends no SNI (dialing by IP, some health checks)
		// gets the first domain's certificate instead of a failed handshake.
		DefaultServerName: a.Domains[0],
	})
	m.issuer = certmagic.NewACMEIssuer(magic, certmagic.ACMEIssuer{
		CA:    a.DirectoryURL,
		Email: a.Email,
		// Choosing tls.mode acme is taken as agreeing to the CA's terms.
		Agreed:                  true,
		TrustedRoots:            roots,
		DisableHTTPChallenge:    a.DisableHTTPChallenge,
		DisableTLSALPNChallenge: a.DisableTLSALPNChallenge,
		Logger:                  log,
	})
	magic.Issuers = []certmagic.Issuer{m.issuer}
	m.magic = magic
	return m, nil
}

// start begins managing the domains in the background: certificates are
// loaded from storage or obtained (certmagic retries failures with backoff)
// and renewed by the cache's maintenance. It never blocks: until every
// domain has a certificate, ready reports false and handshakes for the
// missing names fail.
func (m *acmeManager) start(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	m.mu.Lock()
	m.cancel = cancel
	m.mu.Unlock()
	if err := m.magic.ManageAsync(ctx, m.domains); err != nil {
		return fmt.Errorf("certs: acme: %w", err)
	}
	return nil
}

// event is certmagic's event callback: it records obtained, renewed and
// failed certificates in metrics, and reports newly cached managed
// certificates (loaded from storage, obtained or renewed) to onCache.
func (m *acmeManager) event(ctx context.Context, name string, data map[string]any) error {
	m.metrics.event(ctx, name, data)
	if name != "cached_managed_cert" {
		return nil
	}
	m.mu.Lock()
	f := m.onCache
	m.mu.Unlock()
	if f != nil {
		f()
	}
	return nil
}

// onCached sets the function event calls; see onCache.
func (m *acmeManager) onCached(f func()) {
	m.mu.Lock()
	m.onCache = f
	m.mu.Unlock()
}

// ready reports whether every managed domain has a certificate in memory.
func (m *acmeManager) ready() (bool, string) {
	for _, d := range m.domains {
		if len(m.cache.AllMatchingCertificates(d)) == 0 {
			return false, "no certificate yet for " + d
		}
	}
	return true, "ok"
}

// stop cancels background issuance, stops the certificate cache's
// maintenance goroutine and closes the storage.
func (m *acmeManager) stop() error {
	m.mu.Lock()
	if m.cancel != nil {
		m.cancel()
	}
	m.mu.Unlock()
	m.cache.Stop()
	var errs []error
	for _, c := range m.closers {
		if err := c(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// TLSConfig is the public listener's configuration; nil when m is nil.
func (m *Manager) TLSConfig() *tls.Config {
	if m == nil {
		return nil
	}
	return m.config
}

// ChallengeHandler wraps next, the plain-HTTP listener's handler, so that
// ACME HTTP-01 challenges are answered in ACME mode. Otherwise it returns
// next itself.
func (m *Manager) ChallengeHandler(next http.Handler) http.Handler {
	if m == nil || m.acme == nil {
		return next
	}
	return m.acme.issuer.HTTPChallengeHandler(next)
}

// Start begins managing the ACME domains in the background, calling
// onCached each time a certificate is cached (loaded, obtained or renewed);
// see acmeManager.start. In cluster mode it keeps the shared session
// ticket keys current until Close.
func (m *Manager) Start(ctx context.Context, onCached func()) error {
	if m == nil {
		return nil
	}
	if m.tickets != nil {
		tctx, stop := context.WithCancel(ctx)
		stopped := make(chan struct{})
		m.mu.Lock()
		m.stop, m.stopped = stop, stopped
		m.mu.Unlock()
		go func() {
			defer close(stopped)
			m.tickets.run(tctx)
		}()
	}
	if m.acme == nil {
		return nil
	}
	m.acme.onCached(onCached)
	return m.acme.start(ctx)
}

// Reload re-reads the certificate files now (tls.mode files; SIGHUP and
// configuration changes call it), whether or not they changed. A pair that
// does not load is refused and returned as the error, and the previous pair
// keeps serving. Connections already established are untouched. In ACME
// mode and with TLS off it does nothing.
func (m *Manager) Reload() error {
	if m == nil || m.files == nil {
		return nil
	}
	return m.files.reload()
}

// Ready reports whether every managed domain has a certificate; always true
// with TLS off or in files mode. The second result says why not.
func (m *Manager) Ready() (bool, string) {
	if m == nil || m.acme == nil {
		return true, "ok"
	}
	return m.acme.ready()
}

// Close stops certificate management and the ticket key refresher, and
// closes the storage and the Redis client.
func (m *Manager) Close() error {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	stop, stopped := m.stop, m.stopped
	m.mu.Unlock()
	if stop != nil {
		stop()
		<-stopped
	}
	var errs []error
	if m.acme != nil {
		errs = append(errs, m.acme.stop())
	}
	if m.rdb != nil {
		errs = append(errs, m.rdb.Close())
	}
	return errors.Join(errs...)
}
