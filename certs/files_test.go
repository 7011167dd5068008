package certs

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"trendgate/internal/clock"
	"trendgate/internal/testing/promtest"
	"trendgate/internal/testing/testcert"
)

var filesNow = time.Date(2026, 11, 19, 10, 30, 0, 0, time.UTC)

// pemPair is a self-signed certificate and its key, PEM-encoded.
type pemPair struct {
	cert, key []byte
	serial    int64
}

// newPair makes a self-signed ECDSA pair for tg.test with the given serial,
// valid from an hour before filesNow until notAfter.
func newPair(t *testing.T, serial int64, notAfter time.Time) pemPair {
	t.Helper()
	p := testcert.New(t, testcert.Options{Serial: serial, Hosts: []string{"tg.test"}, NotBefore: filesNow.Add(-time.Hour), NotAfter: notAfter})
	return pemPair{cert: p.CertPEM, key: p.KeyPEM, serial: serial}
}

// fileSet is a certificate and key file pair on disk whose writes get
// strictly increasing modification times, as writes seconds apart would.
type fileSet struct {
	t                 *testing.T
	certFile, keyFile string
	mtime             time.Time
}

func newFileSet(t *testing.T) *fileSet {
	dir := t.TempDir()
	return &fileSet{t: t, certFile: filepath.Join(dir, "cert.pem"), keyFile: filepath.Join(dir, "key.pem"), mtime: filesNow}
}

func (f *fileSet) write(path string, data []byte) {
	f.t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		f.t.Fatal(err)
	}
	f.mtime = f.mtime.Add(time.Second)
	if err := os.Chtimes(path, f.mtime, f.mtime); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fileSet) writePair(p pemPair) {
	f.write(f.certFile, p.cert)
	f.write(f.keyFile, p.key)
}

// servingSerial is the serial of the certificate the next handshake gets.
func servingSerial(t *testing.T, m *Manager) int64 {
	t.Helper()
	c, err := m.TLSConfig().GetCertificate(&tls.ClientHelloInfo{ServerName: "tg.test"})
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return leaf.SerialNumber.Int64()
}

// filesManager builds a files-mode Manager on fs with a fake clock and an
// observed logger; results collects OnReload's calls.
func filesManager(t *testing.T, fs *fileSet, interval time.Duration) (*Manager, *clock.Fake, *observer.ObservedLogs, *[]string) {
	t.Helper()
	clk := clock.NewFake(filesNow)
	core, logs := observer.New(zap.InfoLevel)
	cfg := Settings{Mode: ModeFiles, CertFile: fs.certFile, KeyFile: fs.keyFile}
	var results []string
	m, err := New(cfg, clk, zap.New(core), Options{CheckInterval: interval, OnReload: func(r string) { results = append(results, r) }})
	if err != nil {
		t.Fatal(err)
	}
	return m, clk, logs, &results
}

// TestFilesReloadOnChange: a renewed pair written over the files serves
// from the first handshake after the check interval, not before, and not
// through a re-parse of untouched or merely touched files.
func TestFilesReloadOnChange(t *testing.T) {
	fs := newFileSet(t)
	fs.writePair(newPair(t, 1, filesNow.Add(24*time.Hour)))
	m, clk, _, results := filesManager(t, fs, 2*time.Second)

	if got := servingSerial(t, m); got != 1 {
		t.Fatalf("serial at start: got %d; want 1", got)
	}
	clk.Advance(3 * time.Second)
	if got := servingSerial(t, m); got != 1 || len(*results) != 0 {
		t.Fatalf("unchanged files: serial %d, reloads %v; want 1 and none", got, *results)
	}

	// Touched: new modification time, same content. Not a reload.
	data, _ := os.ReadFile(fs.certFile)
	fs.write(fs.certFile, data)
	clk.Advance(3 * time.Second)
	if got := servingSerial(t, m); got != 1 || len(*results) != 0 {
		t.Fatalf("touched files: serial %d, reloads %v; want 1 and none", got, *results)
	}

	fs.writePair(newPair(t, 2, filesNow.Add(48*time.Hour)))
	clk.Advance(time.Second) // the interval has not passed since the last check
	if got := servingSerial(t, m); got != 1 {
		t.Fatalf("before the interval: serial %d; want still 1", got)
	}
	clk.Advance(time.Second)
	if got := servingSerial(t, m); got != 2 {
		t.Fatalf("after the interval: serial %d; want 2", got)
	}
	if want := []string{ReloadOK}; strings.Join(*results, ",") != strings.Join(want, ",") {
		t.Errorf("reload results: got %v; want %v", *results, want)
	}
}

// TestFilesReloadRefused: a broken new pair is refused, logged and counted
// once however many handshakes follow, and the previous pair keeps serving;
// once the files are fixed the next check loads them.
func TestFilesReloadRefused(t *testing.T) {
	tests := []struct {
		name    string
		write   func(fs *fileSet, t *testing.T)
		wantErr error  // errors.Is target of a forced Reload, nil: any error
		wantMsg string // in the error text
	}{
		{
			name:    "key does not match the certificate",
			write:   func(fs *fileSet, t *testing.T) { fs.write(fs.certFile, newPair(t, 2, filesNow.Add(time.Hour)).cert) },
			wantMsg: "private key does not match public key",
		},
		{
			name:    "expired certificate",
			write:   func(fs *fileSet, t *testing.T) { fs.writePair(newPair(t, 2, filesNow.Add(-time.Minute))) },
			wantErr: ErrExpired,
		},
		{
			name: "key file removed",
			write: func(fs *fileSet, t *testing.T) {
				if err := os.Remove(fs.keyFile); err != nil {
					t.Fatal(err)
				}
			},
			wantErr: os.ErrNotExist,
		},
		{
			name:    "certificate file not PEM",
			write:   func(fs *fileSet, t *testing.T) { fs.write(fs.certFile, []byte("-----BEGIN CERTIFI")) },
			wantMsg: "failed to find any PEM data in certificate input",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fs := newFileSet(t)
			fs.writePair(newPair(t, 1, filesNow.Add(24*time.Hour)))
			m, clk, logs, results := filesManager(t, fs, 2*time.Second)

			tc.write(fs, t)
			for range 3 {
				clk.Advance(3 * time.Second)
				if got := servingSerial(t, m); got != 1 {
					t.Fatalf("serial after a broken pair: got %d; want the old 1", got)
				}
			}
			if got := logs.FilterMessageSnippet("not reloaded").Len(); got != 1 {
				t.Errorf("refusal log lines after 3 checks: got %d; want 1", got)
			}
			if want := []string{ReloadRefused}; strings.Join(*results, ",") != strings.Join(want, ",") {
				t.Errorf("reload results: got %v; want %v", *results, want)
			}

			// A forced reload (SIGHUP) tries again and returns the reason.
			err := m.Reload()
			switch {
			case err == nil:
				t.Fatal("forced reload of a broken pair: got nil error")
			case tc.wantErr != nil && !errors.Is(err, tc.wantErr):
				t.Errorf("forced reload: got %v; want an error wrapping %v", err, tc.wantErr)
			case !strings.Contains(err.Error(), tc.wantMsg):
				t.Errorf("forced reload: got %q; want it to contain %q", err, tc.wantMsg)
			}
			if got := servingSerial(t, m); got != 1 {
				t.Fatalf("serial after a refused forced reload: got %d; want 1", got)
			}

			fs.writePair(newPair(t, 3, filesNow.Add(24*time.Hour)))
			clk.Advance(3 * time.Second)
			if got := servingSerial(t, m); got != 3 {
				t.Fatalf("serial after the files were fixed: got %d; want 3", got)
			}
		})
	}
}

// TestFilesForcedReload: Reload re-reads the files at once, without
// waiting for the interval, and with checks off (negative interval) it is
// the only way a new pair gets in.
func TestFilesForcedReload(t *testing.T) {
	fs := newFileSet(t)
	fs.writePair(newPair(t, 1, filesNow.Add(24*time.Hour)))
	m, clk, _, results := filesManager(t, fs, -1)

	fs.writePair(newPair(t, 2, filesNow.Add(24*time.Hour)))
	clk.Advance(time.Hour)
	if got := servingSerial(t, m); got != 1 {
		t.Fatalf("checks off: serial %d; want 1 until Reload", got)
	}
	if err := m.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := servingSerial(t, m); got != 2 {
		t.Fatalf("after Reload: serial %d; want 2", got)
	}
	if strings.Join(*results, ",") != ReloadOK {
		t.Errorf("reload results: got %v; want [ok]", *results)
	}
}

// TestFilesStartRefusesBrokenPair: at start there is no previous pair to
// keep, so New fails.
func TestFilesStartRefusesBrokenPair(t *testing.T) {
	fs := newFileSet(t)
	fs.writePair(newPair(t, 1, filesNow.Add(-time.Second)))
	cfg := Settings{Mode: ModeFiles, CertFile: fs.certFile, KeyFile: fs.keyFile}
	if _, err := New(cfg, clock.NewFake(filesNow), nil, Options{}); !errors.Is(err, ErrExpired) {
		t.Fatalf("New with an expired pair: got %v; want ErrExpired", err)
	}
}

// TestFilesExpiryGauge: the expiry gauge holds the NotAfter of the pair
// serving, moves with a reload that loads, and stays on a refused one;
// the reload's log line gives the serial as openssl prints it.
func TestFilesExpiryGauge(t *testing.T) {
	fs := newFileSet(t)
	first, second := filesNow.Add(24*time.Hour), filesNow.Add(90*24*time.Hour)
	fs.writePair(newPair(t, 1, first))
	clk := clock.NewFake(filesNow)
	core, logs := observer.New(zap.InfoLevel)
	cfg := Settings{Mode: ModeFiles, CertFile: fs.certFile, KeyFile: fs.keyFile}
	reg := prometheus.NewRegistry()
	m, err := New(cfg, clk, zap.New(core), Options{CheckInterval: time.Second, Metrics: NewMetrics(reg)})
	if err != nil {
		t.Fatal(err)
	}
	expiry := func() float64 {
		t.Helper()
		got, found := promtest.Sum(t, reg, "trendgate_certs_expiry_timestamp_seconds", "cert_file", fs.certFile)
		if !found {
			t.Fatal("trendgate_certs_expiry_timestamp_seconds: no series for the cert file")
		}
		return got
	}
	if got, want := expiry(), float64(first.Unix()); got != want {
		t.Errorf("expiry at start: got %v; want %v", got, want)
	}

	fs.writePair(newPair(t, 0xABC, second))
	clk.Advance(2 * time.Second)
	if got := servingSerial(t, m); got != 0xABC {
		t.Fatalf("serial after renewal: got %d; want %d", got, 0xABC)
	}
	if got, want := expiry(), float64(second.Unix()); got != want {
		t.Errorf("expiry after renewal: got %v; want %v", got, want)
	}
	reloaded := logs.FilterMessage("tls certificate reloaded").All()
	if len(reloaded) != 1 {
		t.Fatalf("reload log lines: got %d; want 1", len(reloaded))
	}
	if got := reloaded[0].ContextMap()["serial"]; got != "0ABC" {
		t.Errorf("logged serial: got %v; want 0ABC (openssl's form)", got)
	}

	fs.writePair(newPair(t, 3, filesNow.Add(-time.Minute))) // expired: refused
	clk.Advance(2 * time.Second)
	if got := servingSerial(t, m); got != 0xABC {
		t.Fatalf("serial after a refused pair: got %d; want %d", got, 0xABC)
	}
	if got, want := expiry(), float64(second.Unix()); got != want {
		t.Errorf("expiry after a refused pair: got %v; want %v (the pair still serving)", got, want)
	}
}

func TestSerialHex(t *testing.T) {
	tests := []struct {
		name string
		in   *big.Int
		want string
	}{
		{"nil", nil, ""},
		{"zero", big.NewInt(0), "00"},
		{"one byte", big.NewInt(0x1f), "1F"},
		{"odd digits padded", big.NewInt(0xabc), "0ABC"},
		{"negative", big.NewInt(-0x1234), "-1234"},
		{"twenty bytes", new(big.Int).SetBytes([]byte{0x04, 0xd2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff}),
			"04D20000000000000000000000000000000000FF"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := SerialHex(tc.in); got != tc.want {
				t.Errorf("SerialHex(%v): got %q; want %q", tc.in, got, tc.want)
			}
		})
	}
}
