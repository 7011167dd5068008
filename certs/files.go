package certs

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math/big"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"trendgate/internal/clock"
)

// Reload outcomes passed to Options.OnReload.
const (
	// ReloadOK: a changed (or, on Reload, re-read) pair now serves.
	ReloadOK = "ok"
	// ReloadRefused: the files could not be read or did not make a valid,
	// unexpired pair; the previous pair keeps serving.
	ReloadRefused = "refused"
)

// ErrExpired is wrapped by a reload refused because the new certificate's
// NotAfter has passed.
var ErrExpired = errors.New("certs: certificate has expired")

// filePair serves tls.mode files: the pair read from cert_file and
// key_file, swapped atomically when the files change. Handshakes read the
// current pair without locking; the first handshake at or after nextCheck
// stats the files (at most once per interval) and reloads them when they
// changed, so a certificate renewed by an external tool serves without a
// restart and without a goroutine of our own.
type filePair struct {
	certFile, keyFile string
	clk               clock.Clock
	interval          time.Duration // <= 0: only Reload looks at the files
	log               *zap.Logger
	onReload          func(result string) // never nil
	metrics           *Metrics            // the expiry gauge of the pair serving; nil records nothing

	cur       atomic.Pointer[tls.Certificate] // the pair handshakes present
	nextCheck atomic.Int64                    // unix nanoseconds; a handshake at or after it checks the files

	mu   sync.Mutex // guards seen; held by the one check or reload running
	seen pairStamp  // the files as last looked at, whether they loaded or were refused
}

// pairStamp identifies one version of the two files.
type pairStamp struct {
	cert, key fileStamp
}

// fileStamp identifies one version of a file: its stat and, once read, a
// SHA-256 of its content. A file that could not be read has only err.
type fileStamp struct {
	modTime int64 // UnixNano
	size    int64
	sum     [sha256.Size]byte
	err     string
}

// sameStat reports whether a and b have the same stat (what a cheap check
// compares before reading anything).
func (a pairStamp) sameStat(b pairStamp) bool {
	return a.cert.err == "" && a.key.err == "" &&
		a.cert.modTime == b.cert.modTime && a.cert.size == b.cert.size &&
		a.key.modTime == b.key.modTime && a.key.size == b.key.size
}

// sameContent reports whether a and b hold the same bytes (or fail the
// same way).
func (a pairStamp) sameContent(b pairStamp) bool {
	return a.cert.sum == b.cert.sum && a.cert.err == b.cert.err &&
		a.key.sum == b.key.sum && a.key.err == b.key.err
}

// newFilePair loads the pair; a pair that cannot be loaded is an error
// (startup refuses to serve without a certificate).
func newFilePair(certFile, keyFile string, clk clock.Clock, interval time.Duration, log *zap.Logger, onReload func(string), metrics *Metrics) (*filePair, error) {
	if onReload == nil {
		onReload = func(string) {}
	}
	p := &filePair{
		certFile: certFile,
		keyFile:  keyFile,
		clk:      clk,
		interval: interval,
		log:      log.Named("tls"),
		onReload: onReload,
		metrics:  metrics,
	}
	stamp, certPEM, keyPEM, err := p.read()
	cert, err := p.parse(certPEM, keyPEM, err)
	if err != nil {
		return nil, err
	}
	p.seen = stamp
	p.cur.Store(cert)
	p.metrics.notAfter(certFile, cert.Leaf.NotAfter)
	p.nextCheck.Store(clk.Now().Add(interval).UnixNano())
	return p, nil
}

// getCertificate is tls.Config.GetCertificate. Connections already
// established keep the pair they were made with.
func (p *filePair) getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if p.interval > 0 {
		now := p.clk.Now().UnixNano()
		// One handshake checks; the others present the current pair
		// without waiting for it.
		if now >= p.nextCheck.Load() && p.mu.TryLock() {
			if now >= p.nextCheck.Load() {
				p.nextCheck.Store(now + int64(p.interval))
				_ = p.checkLocked(false)
			}
			p.mu.Unlock()
		}
	}
	return p.cur.Load(), nil
}

// reload re-reads the files now, changed or not (SIGHUP, config change).
// A pair that does not load is refused, logged and returned as the error;
// the previous pair keeps serving.
func (p *filePair) reload() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.checkLocked(true)
}

// checkLocked looks at the files and swaps in their pair when they changed
// (or always when force). Unless forced, an unchanged stat costs two stats
// and nothing more, and a touched file whose content did not change is not
// parsed again. A refused version is remembered in seen, so it is logged
// and counted once, not on every check, and the next change is tried
// again. The caller holds p.mu.
func (p *filePair) checkLocked(force bool) error {
	if !force {
		if p.statStamp().sameStat(p.seen) {
			return nil
		}
	}
	stamp, certPEM, keyPEM, err := p.read()
	if !force && stamp.sameContent(p.seen) {
		p.seen = stamp // touched: the stat moved, the content did not
		return nil
	}
	p.seen = stamp
	cert, err := p.parse(certPEM, keyPEM, err)
	if err != nil {
		p.log.Warn("tls certificate files not reloaded; the previous certificate keeps serving",
			zap.String("cert_file", p.certFile), zap.String("key_file", p.keyFile), zap.Bool("forced", force), zap.Error(err))
		p.onReload(ReloadRefused)
		return err
	}
	p.cur.Store(cert)
	p.metrics.notAfter(p.certFile, cert.Leaf.NotAfter)
	p.log.Info("tls certificate reloaded", zap.String("cert_file", p.certFile), zap.Bool("forced", force),
		zap.String("subject", cert.Leaf.Subject.String()), zap.String("serial", SerialHex(cert.Leaf.SerialNumber)),
		zap.Time("not_after", cert.Leaf.NotAfter))
	p.onReload(ReloadOK)
	return nil
}

// SerialHex formats a certificate serial number as openssl prints it
// ("openssl x509 -serial"): upper-case hex, two digits per byte, so a
// serial found in a log line can be compared with the tool's output.
// A negative serial (invalid, but parsed) keeps its sign; nil is "".
func SerialHex(n *big.Int) string {
	if n == nil {
		return ""
	}
	sign, abs := "", n
	if n.Sign() < 0 {
		sign, abs = "-", new(big.Int).Neg(n)
	}
	h := fmt.Sprintf("%X", abs)
	if len(h)%2 == 1 {
		h = "0" + h
	}
	return sign + h
}

// statStamp stats both files (no content).
func (p *filePair) statStamp() pairStamp {
	return pairStamp{cert: statFile(p.certFile), key: statFile(p.keyFile)}
}

func statFile(path string) fileStamp {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{err: err.Error()}
	}
	return fileStamp{modTime: fi.ModTime().UnixNano(), size: fi.Size()}
}

// read stats and reads both files. A file is stat'ed before it is read, so
// a write landing in between shows as a changed stat at the next check.
// err is the first read failure.
func (p *filePair) read() (stamp pairStamp, certPEM, keyPEM []byte, err error) {
	var errs [2]error
	stamp.cert, certPEM, errs[0] = readFile(p.certFile)
	stamp.key, keyPEM, errs[1] = readFile(p.keyFile)
	return stamp, certPEM, keyPEM, errors.Join(errs[:]...)
}

func readFile(path string) (fileStamp, []byte, error) {
	s := statFile(path)
	data, err := os.ReadFile(path)
	if err != nil {
		return fileStamp{err: err.Error()}, nil, err
	}
	s.sum = sha256.Sum256(data)
	return s, data, nil
}

// parse turns the files' content into a pair: both must have been read
// (readErr nil), the key must match the certificate, and the certificate
// must not have expired by the injected clock.
func (p *filePair) parse(certPEM, keyPEM []byte, readErr error) (*tls.Certificate, error) {
	if readErr != nil {
		return nil, fmt.Errorf("certs: tls files: %w", readErr)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("certs: tls files: %w", err)
	}
	if cert.Leaf == nil {
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, fmt.Errorf("certs: tls files: %w", err)
		}
	}
	if now := p.clk.Now(); now.After(cert.Leaf.NotAfter) {
		return nil, fmt.Errorf("%w: %s expired at %s", ErrExpired, p.certFile, cert.Leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	return &cert, nil
}
