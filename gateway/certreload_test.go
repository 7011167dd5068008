package gateway_test

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"trendgate/config"
	"trendgate/internal/clock"
	"trendgate/internal/testing/promtest"

	"trendgate/gateway/gatewaytest"
	"trendgate/internal/testing/testcert"
)

// certPair is a self-signed certificate for tg.test and 127.0.0.1 with its
// key, PEM-encoded, and the parsed certificate.
type certPair struct {
	certPEM, keyPEM []byte
	cert            *x509.Certificate
}

func newCertPair(t *testing.T, serial int64) certPair {
	t.Helper()
	// Valid around the fake clock (testNow) and the real one, which the
	// client checks.
	p := testcert.New(t, testcert.Options{Serial: serial, NotBefore: gatewaytest.Now.Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour)})
	return certPair{certPEM: p.CertPEM, keyPEM: p.KeyPEM, cert: p.Cert}
}

// writeCertFile writes data to path and gives it a modification time later
// than any before, as a renewal minutes later would.
func writeCertFile(t *testing.T, path string, data []byte, mtime *time.Time) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	*mtime = mtime.Add(time.Minute)
	if err := os.Chtimes(path, *mtime, *mtime); err != nil {
		t.Fatal(err)
	}
}

// handshakeSerial opens a new TLS connection to addr and returns the serial
// of the certificate the server presented.
func handshakeSerial(t *testing.T, addr string) int64 {
	t.Helper()
	d := &net.Dialer{Timeout: 5 * time.Second}
	// Only which certificate is presented matters here; trust is checked
	// by the HTTPS client below.
	conn, err := tls.DialWithDialer(d, "tcp", addr, &tls.Config{ServerName: "tg.test", InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
}

// TestTLSFilesReload: in tls.mode files a certificate renewed on disk by an
// external tool serves from the first handshake after the check interval
// (on the injected clock), or at once after Reload (SIGHUP, config change),
// without a restart; connections made with the old certificate keep
// working; a broken new pair is refused, logged once and counted, and the
// previous pair keeps serving.
func TestTLSFilesReload(t *testing.T) {
	clk := clock.NewFake(gatewaytest.Now)
	_, upSrv := gatewaytest.StartUpstream(t, clk, nil)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	mtime := gatewaytest.Now
	first := newCertPair(t, 1)
	writeCertFile(t, certFile, first.certPEM, &mtime)
	writeCertFile(t, keyFile, first.keyPEM, &mtime)
	s := gatewaytest.StartGateway(t, upSrv.URL, clk, func(c *config.Config) {
		c.TLS.Mode = config.TLSModeFiles
		c.TLS.CertFile, c.TLS.KeyFile = certFile, keyFile
		c.TLS.HTTPListen = "127.0.0.1:0"
	})
	url := "https://" + s.Public + gatewaytest.ListPath

	// A client trusting only the first certificate keeps one connection.
	pool := x509.NewCertPool()
	pool.AddCert(first.cert)
	old := gatewaytest.HttpsClient(pool, "tg.test", tls.VersionTLS12, tls.VersionTLS13)
	defer old.CloseIdleConnections()
	if resp, body, err := gatewaytest.GetWithKey(t, old, url, s.Key); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("first request: %v %v %s", err, resp, body)
	}
	if got := handshakeSerial(t, s.Public); got != 1 {
		t.Fatalf("serial at start: got %d; want 1", got)
	}

	// Renewed on disk: not before the check interval, then at once.
	second := newCertPair(t, 2)
	writeCertFile(t, certFile, second.certPEM, &mtime)
	writeCertFile(t, keyFile, second.keyPEM, &mtime)
	if got := handshakeSerial(t, s.Public); got != 1 {
		t.Fatalf("serial before the check interval passed: got %d; want 1", got)
	}
	clk.Advance(3 * time.Second)
	if got := handshakeSerial(t, s.Public); got != 2 {
		t.Fatalf("serial after the renewal and the check interval: got %d; want 2", got)
	}
	resp, body, err := gatewaytest.GetWithKey(t, old, url, s.Key)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("request on the connection made before the reload: %v %v %s", err, resp, body)
	}
	if got := resp.TLS.PeerCertificates[0].SerialNumber.Int64(); got != 1 {
		t.Errorf("the old connection's certificate: got serial %d; want 1 (same connection, untouched)", got)
	}
	pool2 := x509.NewCertPool()
	pool2.AddCert(second.cert)
	fresh := gatewaytest.HttpsClient(pool2, "tg.test", tls.VersionTLS12, tls.VersionTLS13)
	defer fresh.CloseIdleConnections()
	if resp, body, err := gatewaytest.GetWithKey(t, fresh, url, s.Key); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("request trusting only the renewed certificate: %v %v %s", err, resp, body)
	}

	// A certificate without its key (a tool that wrote one file of two):
	// refused once, the renewed pair keeps serving.
	third := newCertPair(t, 3)
	writeCertFile(t, certFile, third.certPEM, &mtime)
	for range 3 {
		clk.Advance(3 * time.Second)
		if got := handshakeSerial(t, s.Public); got != 2 {
			t.Fatalf("serial after a mismatched pair: got %d; want 2", got)
		}
	}
	if got := strings.Count(s.Logs.String(), "tls certificate files not reloaded"); got != 1 {
		t.Errorf("refusal log lines: got %d; want 1", got)
	}
	if got, _ := promtest.Sum(t, s.Gateway.Registry(), "trendgate_tls_certificate_reloads_total", "result", "refused"); got != 1 {
		t.Errorf("refused reloads: got %v; want 1", got)
	}

	// The key arrives: SIGHUP's Reload loads it without waiting for the
	// interval.
	writeCertFile(t, keyFile, third.keyPEM, &mtime)
	if err := s.Gateway.Reload(s.Config); err != nil {
		t.Fatal(err)
	}
	if got := handshakeSerial(t, s.Public); got != 3 {
		t.Fatalf("serial after Reload: got %d; want 3", got)
	}
	if got, _ := promtest.Sum(t, s.Gateway.Registry(), "trendgate_tls_certificate_reloads_total", "result", "ok"); got != 2 {
		t.Errorf("ok reloads: got %v; want 2", got)
	}
}
