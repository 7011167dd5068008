// Package testcert makes self-signed ECDSA P-256 certificates for tests:
// one that a test's client can trust as its own root, in PEM, parsed, as a
// tls.Certificate, or written to files. Production code never imports it.
package testcert

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Options describe the certificate. The zero value is serial 1 for
// tg.test and 127.0.0.1, valid from an hour ago to a day from now on the
// real clock.
type Options struct {
	// Serial is the serial number; 0 means 1.
	Serial int64
	// Hosts are DNS names and IP addresses; nil means tg.test and
	// 127.0.0.1. The first one is also the common name.
	Hosts []string
	// NotBefore and NotAfter bound the validity; zero means an hour ago
	// and a day from now.
	NotBefore, NotAfter time.Time
}

// Pair is a certificate and its key.
type Pair struct {
	CertPEM, KeyPEM []byte
	// Cert is the parsed certificate.
	Cert *x509.Certificate
	// TLS is the pair ready for a tls.Config.
	TLS tls.Certificate
}

// New returns a self-signed certificate for o, which can also serve as the
// root a client trusts (see Pool).
func New(t testing.TB, o Options) Pair {
	t.Helper()
	if o.Serial == 0 {
		o.Serial = 1
	}
	if o.Hosts == nil {
		o.Hosts = []string{"tg.test", "127.0.0.1"}
	}
	if o.NotBefore.IsZero() {
		o.NotBefore = time.Now().Add(-time.Hour)
	}
	if o.NotAfter.IsZero() {
		o.NotAfter = time.Now().Add(24 * time.Hour)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(o.Serial),
		Subject:               pkix.Name{CommonName: o.Hosts[0]},
		NotBefore:             o.NotBefore,
		NotAfter:              o.NotAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	for _, h := range o.Hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return Pair{
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
		Cert:    cert,
		TLS:     tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: cert},
	}
}

// Pool returns a certificate pool that trusts p.
func (p Pair) Pool() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(p.Cert)
	return pool
}

// Write writes p to cert.pem and key.pem in dir (mode 0600) and returns
// their paths.
func (p Pair) Write(t testing.TB, dir string) (certFile, keyFile string) {
	t.Helper()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, p.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, p.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}
