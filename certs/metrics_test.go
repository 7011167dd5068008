package certs

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"trendgate/internal/clock"
	"trendgate/internal/testing/promtest"
)

// localCA is a certmagic.Issuer that signs CSRs with an in-memory CA, or
// fails while fail is set, standing in for an ACME CA that is down.
type localCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	fail atomic.Bool
}

var errCADown = errors.New("certs test: CA unavailable")

func newLocalCA(t *testing.T) *localCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "trendgate test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &localCA{cert: cert, key: key}
}

func (ca *localCA) IssuerKey() string { return "trendgate-test-ca" }

func (ca *localCA) Issue(_ context.Context, csr *x509.CertificateRequest) (*certmagic.IssuedCertificate, error) {
	if ca.fail.Load() {
		return nil, errCADown
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		DNSNames:     csr.DNSNames,
		NotBefore:    time.Now().Add(-time.Minute),
		NotAfter:     time.Now().Add(23 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, csr.PublicKey, ca.key)
	if err != nil {
		return nil, err
	}
	chain := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	chain = append(chain, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.cert.Raw})...)
	return &certmagic.IssuedCertificate{Certificate: chain}, nil
}

// TestMetricsFollowCertmagicEvents runs certmagic's own obtain and renew
// against a CA that fails and recovers, and checks what the metrics say
// after each step: the events come from certmagic, not from the test.
func TestMetricsFollowCertmagicEvents(t *testing.T) {
	const domain = "gateway.trendgate.test"
	cfg := Settings{Mode: ModeACME, ACME: ACME{DirectoryURL: certmagic.LetsEncryptProductionCA, Domains: []string{domain}, Storage: t.TempDir()}}
	reg := prometheus.NewRegistry()
	am, err := newACME(cfg, clock.NewFake(time.Now()), zap.NewNop(), NewMetrics(reg), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := am.stop(); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	ca := newLocalCA(t)
	am.magic.Issuers = []certmagic.Issuer{ca}
	ctx := context.Background()
	obtain := func() error { return am.magic.ObtainCertSync(ctx, domain) }
	renew := func() error { return am.magic.RenewCertSync(ctx, domain, true) }

	// Each step runs in order on the same manager; the counters accumulate.
	steps := []struct {
		name                  string
		caDown                bool
		run                   func() error
		failing               float64
		obtainFail, renewFail float64
		obtained, renewed     float64
	}{
		{name: "start", run: func() error { return nil }},
		{name: "obtain fails", caDown: true, run: obtain, failing: 1, obtainFail: 1},
		{name: "obtain succeeds", run: obtain, failing: 0, obtainFail: 1, obtained: 1},
		{name: "renewal fails", caDown: true, run: renew, failing: 1, obtainFail: 1, renewFail: 1, obtained: 1},
		{name: "renewal fails again", caDown: true, run: renew, failing: 1, obtainFail: 1, renewFail: 2, obtained: 1},
		{name: "renewal succeeds", run: renew, failing: 0, obtainFail: 1, renewFail: 2, obtained: 1, renewed: 1},
	}
	for _, st := range steps {
		ca.fail.Store(st.caDown)
		err := st.run()
		if st.caDown != (err != nil) {
			t.Fatalf("%s: error %v; want an error: %t", st.name, err, st.caDown)
		}
		check := func(what string, want float64, name string, labels ...string) {
			t.Helper()
			got, found := promtest.Sum(t, reg, name, labels...)
			if !found {
				t.Errorf("%s: %s: no sample", st.name, what)
			} else if got != want {
				t.Errorf("%s: %s = %v; want %v", st.name, what, got, want)
			}
		}
		check("failing", st.failing, "trendgate_certs_failing", "domain", domain)
		check("obtain failures", st.obtainFail, "trendgate_certs_failures_total", "operation", "obtain")
		check("renew failures", st.renewFail, "trendgate_certs_failures_total", "operation", "renew")
		check("obtained", st.obtained, "trendgate_certs_obtained_total", "operation", "obtain")
		check("renewed", st.renewed, "trendgate_certs_obtained_total", "operation", "renew")
	}
}

// TestMetricsEvent covers event's handling of data certmagic might send
// without the expected keys, and a nil *Metrics.
func TestMetricsEvent(t *testing.T) {
	tests := []struct {
		name        string
		event       string
		data        map[string]any
		wantFailing bool // a failing series exists for "a.test"
		failures    float64
	}{
		{name: "other event ignored", event: "cached_managed_cert", data: map[string]any{"sans": []string{"a.test"}}},
		{name: "failure without identifier", event: "cert_failed", data: map[string]any{"renewal": true}, failures: 1},
		{name: "failure with identifier", event: "cert_failed", data: map[string]any{"renewal": true, "identifier": "a.test"}, wantFailing: true, failures: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			m := NewMetrics(reg)
			m.event(context.Background(), tc.event, tc.data)
			got, _ := promtest.Sum(t, reg, "trendgate_certs_failures_total", "operation", "renew")
			if got != tc.failures {
				t.Errorf("renew failures = %v; want %v", got, tc.failures)
			}
			if _, found := promtest.Sum(t, reg, "trendgate_certs_failing", "domain", "a.test"); found != tc.wantFailing {
				t.Errorf("failing series for a.test present: %t; want %t", found, tc.wantFailing)
			}
		})
	}
	var nilMetrics *Metrics
	nilMetrics.event(context.Background(), "cert_failed", map[string]any{"identifier": "a.test"}) // must not panic
}
