package config

import (
	"reflect"
	"testing"
	"time"

	"trendgate/certs"
	"trendgate/projection"
)

// TestCertSettings checks that every tls setting, and the cluster's Redis
// in cluster mode only, reaches package certs.
func TestCertSettings(t *testing.T) {
	c := Default()
	c.TLS = TLS{Mode: TLSModeACME, CertFile: "c.pem", KeyFile: "k.pem", ACME: ACME{
		DirectoryURL: "https://ca.example/dir", Email: "ops@example.com", Domains: []string{"a.example"},
		Storage: "/var/lib/tg", CARoot: "ca.pem", DisableHTTPChallenge: true, DisableTLSALPNChallenge: true,
	}}
	want := certs.Settings{Mode: certs.ModeACME, CertFile: "c.pem", KeyFile: "k.pem", ACME: certs.ACME{
		DirectoryURL: "https://ca.example/dir", Email: "ops@example.com", Domains: []string{"a.example"},
		Storage: "/var/lib/tg", CARoot: "ca.pem", DisableHTTPChallenge: true, DisableTLSALPNChallenge: true,
	}}
	if got := c.CertSettings(); !reflect.DeepEqual(got, want) {
		t.Errorf("CertSettings() without redis = %+v; want %+v", got, want)
	}
	c.Redis.URL, c.Redis.Mode, c.Redis.Prefix, c.Redis.Timeout = "redis://127.0.0.1:6379/0", "single", "p:", time.Second
	want.Redis = certs.Redis{URL: "redis://127.0.0.1:6379/0", Mode: "single", Prefix: "p:", Timeout: time.Second}
	if got := c.CertSettings(); !reflect.DeepEqual(got, want) {
		t.Errorf("CertSettings() with redis = %+v; want %+v", got, want)
	}
	// A field added to ACME must be carried over too.
	if a, b := reflect.TypeOf(ACME{}).NumField(), reflect.TypeOf(certs.ACME{}).NumField(); a != b {
		t.Errorf("config.ACME has %d fields, certs.ACME %d: CertSettings must carry each", a, b)
	}
}

// TestPlanProjection checks that a plan's data mode and allowlists reach
// package projection.
func TestPlanProjection(t *testing.T) {
	p := Plan{DataMode: DataModeLimited, Fields: Fields{List: []string{"a"}, Whatsup: []string{"b"}, Series: []string{"c"}, TSV: []string{"d"}}}
	want := projection.Plan{DataMode: "limited", Fields: projection.Fields{List: []string{"a"}, Whatsup: []string{"b"}, Series: []string{"c"}, TSV: []string{"d"}}}
	if got := p.Projection(); !reflect.DeepEqual(got, want) {
		t.Errorf("Projection() = %+v; want %+v", got, want)
	}
}
