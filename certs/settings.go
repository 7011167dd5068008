package certs

import "time"

// The TLS modes of Settings.Mode.
const (
	ModeOff   = "off"
	ModeACME  = "acme"
	ModeFiles = "files"
)

// Settings is what New needs of the configuration: the tls settings and,
// in cluster mode, the Redis the instances share. The application's
// configuration fills it (config.Config.CertSettings). The zero Settings
// means TLS off.
type Settings struct {
	// Mode is ModeOff (or ""), ModeFiles or ModeACME.
	Mode string
	// CertFile and KeyFile are the PEM pair served in ModeFiles.
	CertFile, KeyFile string
	// ACME configures ModeACME.
	ACME ACME
	// Redis is the cluster's Redis; an empty URL means no cluster: the
	// session ticket keys are the process's own and ACME storage is on
	// disk (ACME.Storage).
	Redis Redis
}

// ACME configures certmagic's certificate management in ModeACME. Domains
// must not be empty; an empty DirectoryURL is certmagic's default CA.
type ACME struct {
	DirectoryURL string
	Email        string
	Domains      []string
	// Storage is the directory of the file storage, used without Redis.
	Storage string
	// CARoot is a PEM file trusted for the ACME directory (private ACME
	// servers); empty uses the system roots.
	CARoot string
	// DisableHTTPChallenge and DisableTLSALPNChallenge turn one challenge
	// off.
	DisableHTTPChallenge    bool
	DisableTLSALPNChallenge bool
}

// Redis names the cluster's Redis for the certificate storage and the
// shared session ticket keys.
type Redis struct {
	// URL and Mode are as redisconn.New takes them; an empty URL means no
	// cluster.
	URL, Mode string
	// Prefix starts every key written (before StoragePrefix's own part).
	Prefix string
	// Timeout bounds each command; it is raised to redisconn.CertTimeout
	// when shorter.
	Timeout time.Duration
}
