package config

import (
	"time"

	"trendgate/api"
	"trendgate/cache"
	"trendgate/internal/cors"
	"trendgate/internal/tenantlabel"
	"trendgate/limits"
	"trendgate/rollup"
	"trendgate/state"
	"trendgate/tracing"
	"trendgate/upstream"
)

// Config is the whole trendgate configuration file. Build one with Default,
// Parse or Load: its zero value is not valid (it has no listen address and
// no plans). Every setting left out of a file keeps Default's value.
type Config struct {
	Server   Server          `yaml:"server"`
	TLS      TLS             `yaml:"tls"`
	Admin    Admin           `yaml:"admin"`
	Log      Log             `yaml:"log"`
	Upstream upstream.Config `yaml:"upstream"`
	Cache    cache.Config    `yaml:"cache"`
	Limits   limits.Config   `yaml:"limits"`
	Redis    Redis           `yaml:"redis"`
	State    state.Config    `yaml:"state"`
	Tracing  tracing.Config  `yaml:"tracing"`
	// Metrics bounds the tenant labels of /metrics (docs/operations.md).
	Metrics tenantlabel.Config `yaml:"metrics"`
	// Usage is the daily usage rollups' retention and flush interval
	// (package rollup).
	Usage rollup.Config `yaml:"usage"`
	// Plans maps a plan name to its definition. Default holds the built-in
	// plans "full" and "limited"; a plan of the same name in a file replaces
	// the built-in one entirely. Nil or empty fails Validate.
	Plans map[string]Plan `yaml:"plans"`
	// Accounts are the tenants that own keys: each names a plan and owns
	// the quotas and the fair share of the upstream budget that all its
	// keys draw on. Nil means every key is an account of its own.
	Accounts []Account `yaml:"accounts"`
	// Routes are the upstream's other read endpoints the gateway serves,
	// each added on purpose (docs/routes.md); nil serves only the four
	// built-in endpoints. A plan lists a route's name to include it.
	Routes []api.RouteConfig `yaml:"routes"`
	// Keys are the issued API keys (only their digests). Nil means no keys,
	// so every API request is refused with 401.
	Keys []Key `yaml:"keys"`
	// KeysFile keeps the changes made through the admin key API (keys
	// created, revoked or rotated; accounts' overrides): a log of one
	// record per change, compacted now and then, read again by a reload
	// when it was edited; its directory must exist.
	// Empty (the default) leaves the key API read-only on a single
	// instance; in cluster mode Redis holds the changes, and the file
	// is each instance's copy that brings them back after Redis restarts
	// empty. Read at start only.
	KeysFile string `yaml:"keys_file"`
	// RevokedKeyRetention is how long the id of a key revoked through the
	// key API stays taken: its tombstone (when, by which admin token) is
	// kept, and a new key of that id is refused unless the request names
	// the account it joins. Default 400 days (9600h); 0 means the default.
	RevokedKeyRetention time.Duration `yaml:"revoked_key_retention"`
}

// Account is a tenant (a team): its keys share its plan, its daily and
// monthly quotas and its fair share of the upstream budget. ID and Plan are
// required; the zero value fails Validate. The overrides replace the
// plan's numbers for the account: Daily and Monthly are the account's
// quotas; PerSecond and Burst size the token bucket of each of its keys
// (a key's own per_second or burst wins over the account's).
type Account struct {
	ID   string `yaml:"id"`
	Plan string `yaml:"plan"`
	// Overrides of the plan's numbers; nil keeps the plan's value.
	PerSecond *float64 `yaml:"per_second"`
	Burst     *int     `yaml:"burst"`
	Daily     *int64   `yaml:"daily"`
	Monthly   *int64   `yaml:"monthly"`
}

// Server configures the public listener. A zero duration or a
// MaxHeaderBytes outside 4 KiB..1 MiB fails Validate.
type Server struct {
	Listen            string        `yaml:"listen"`              // default 127.0.0.1:8080
	ReadHeaderTimeout time.Duration `yaml:"read_header_timeout"` // default 5s
	ReadTimeout       time.Duration `yaml:"read_timeout"`        // default 10s
	WriteTimeout      time.Duration `yaml:"write_timeout"`       // default 60s
	IdleTimeout       time.Duration `yaml:"idle_timeout"`        // default 120s
	MaxHeaderBytes    int           `yaml:"max_header_bytes"`    // default 32768
	ShutdownTimeout   time.Duration `yaml:"shutdown_timeout"`    // default 20s
	// ShutdownDelay is how long SIGTERM keeps the public listeners
	// accepting and serving, with /readyz already answering 503, before
	// the drain (ShutdownTimeout) begins: time for a load balancer or a
	// Kubernetes Service to stop sending new connections. 0 (the default)
	// drains at once.
	ShutdownDelay time.Duration `yaml:"shutdown_delay"`
	// TrustedProxies are CIDRs whose X-Forwarded-For is believed when
	// finding the client IP. Empty trusts no one.
	TrustedProxies []string `yaml:"trusted_proxies"`
	// FastHTTP1 serves HTTP/1.1 GET and HEAD requests of the common shape
	// on trendgate's lean HTTP/1.1 loop (package internal/transport/h1), over TLS
	// too, and everything else (HTTP/2 included) with net/http (default
	// true; nil, which only a Config built in code can have, means true).
	FastHTTP1 *bool `yaml:"fast_http1"`
	// FastHTTP2 serves HTTP/2 (TLS connections that negotiate h2) on
	// trendgate's own HTTP/2 lane (package internal/transport/h2) instead of
	// net/http's HTTP/2 server (default true; nil means true). It only
	// matters with TLS on: plain HTTP/2 (h2c) is not served.
	FastHTTP2 *bool `yaml:"fast_http2"`
	// EventLoops serves plain HTTP/1.1 (TLS off, FastHTTP1 on) from epoll
	// event loops instead of a goroutine per connection (Linux only): a
	// cached answer is read, served and written on a loop, and a request
	// that has to wait (a miss, Redis) moves its connection to a goroutine
	// until it is answered. Each loop keeps a processor; the runtime gets
	// one more. LoopsAuto (auto, the default) runs a loop for each
	// processor the runtime started with, none in cluster mode
	// (Config.LoopCount); 0 serves a goroutine per connection; N runs N.
	EventLoops EventLoops `yaml:"event_loops"`
	// MemoryLimit is the Go runtime's soft memory limit in bytes; 0 (the
	// default) derives it from cache.max_bytes and the number of keys (see
	// DerivedMemoryLimit). A
	// GOMEMLIMIT environment variable overrides both.
	MemoryLimit int64 `yaml:"memory_limit"`
	// CORS lets web pages on the listed origins call the API from a
	// browser; its zero value (no origins) is off.
	CORS cors.Config `yaml:"cors"`
}

// TLS configures HTTPS on the public listener. Mode "" or "off" serves
// plain HTTP on Server.Listen.
type TLS struct {
	Mode     string `yaml:"mode"`      // off | acme | files
	CertFile string `yaml:"cert_file"` // mode files
	KeyFile  string `yaml:"key_file"`  // mode files
	// HTTPListen is the plain-HTTP listener used with TLS on: it answers
	// ACME HTTP-01 challenges and refuses API paths with 403 (default :80).
	HTTPListen string `yaml:"http_listen"`
	// HSTSMaxAge is sent as Strict-Transport-Security (default 1 year; 0 off).
	HSTSMaxAge time.Duration `yaml:"hsts_max_age"`
	ACME       ACME          `yaml:"acme"`
}

// ACME configures certmagic's certificate management (TLS.Mode "acme",
// which needs Domains, and Storage unless Redis.URL is set). Its zero
// value is unused when TLS is off or uses files.
type ACME struct {
	DirectoryURL string   `yaml:"directory_url"` // default Let's Encrypt production
	Email        string   `yaml:"email"`
	Domains      []string `yaml:"domains"`
	Storage      string   `yaml:"storage"` // file storage path (unless redis is on)
	// CARoot is a PEM file trusted for the ACME directory (private ACME
	// servers such as Pebble); empty uses the system roots.
	CARoot string `yaml:"ca_root"`
	// DisableHTTPChallenge / DisableTLSALPNChallenge turn one challenge off.
	DisableHTTPChallenge    bool `yaml:"disable_http_challenge"`
	DisableTLSALPNChallenge bool `yaml:"disable_tlsalpn_challenge"`
}

// Admin configures the admin listener (health, readiness, metrics, purge).
// An empty Listen fails Validate; "off" disables the listener.
type Admin struct {
	Listen string `yaml:"listen"` // default 127.0.0.1:9090; "off" disables
	// Token, when set, is required as "Authorization: Bearer <token>" on
	// every admin route except the probes, /healthz and /readyz.
	Token string `yaml:"token"`
	// Tokens are further admin tokens, one per operator or tool, each
	// named: only its SHA-256 digest is configured, and the key API's
	// audit line names the one presented by its ID. They work beside
	// Token, which the audit line names "admin.token".
	Tokens []AdminToken `yaml:"tokens"`
	// Pprof serves net/http/pprof under /debug/pprof/, guarded like the
	// other routes (default false: no profiling routes).
	Pprof bool `yaml:"pprof"`
	// AllowNoToken lets Listen be a non-loopback address while Token is
	// empty (default false: Validate refuses that, since anyone who can
	// reach the port may send a loopback Host and purge the cache, read
	// per-key usage and, with Pprof, profiles). Set it only when something
	// in front of the port (a firewall, a sidecar) keeps everyone else out.
	AllowNoToken bool `yaml:"allow_no_token"`
}

// AdminToken is a named admin token: its ID (letters, digits, "_", "."
// and "-") and the lower-case hex SHA-256 of the token itself.
type AdminToken struct {
	ID     string `yaml:"id"`
	SHA256 string `yaml:"sha256"`
	// Scopes are what the token may do: read (metrics, summary, usage,
	// dashboard, openapi), keys (the key and account API), purge, admin
	// (everything, pprof included: what Token has). Empty means admin.
	Scopes []string `yaml:"scopes"`
}

// AdminScopes are the scopes an admin token can hold (admin.Scopes says
// what each admits).
var AdminScopes = []string{"read", "keys", "purge", "admin"}

// HasToken reports whether the admin routes need a token: admin.token or
// admin.tokens is set.
func (a Admin) HasToken() bool { return a.Token != "" || len(a.Tokens) > 0 }

// Log configures logging. An empty Level fails Validate.
type Log struct {
	Level string `yaml:"level"` // debug | info | warn | error (default info)
	// Access turns the per-request access log on (default true); nil, which
	// only a hand-built Config has, means on.
	Access *bool `yaml:"access"`
}

// Redis turns on cluster mode when URL is set; with URL empty the other
// fields are unused (but still validated).
type Redis struct {
	// URL is the Redis for counters (limits, quotas, budget, leases,
	// certificates), e.g. redis://127.0.0.1:6379/0, or the nodes of a
	// Redis Cluster: redis://h1:7000?addr=h2:7000&addr=h3:7000.
	URL string `yaml:"url"`
	// Mode is "single", "cluster", or empty: cluster when URL lists
	// several nodes (addr=), otherwise single.
	Mode string `yaml:"mode"`
	// CacheURL is the Redis for the shared cache tier; default: URL with
	// the database number plus one, so eviction never touches counters
	// (on a Redis Cluster, which has one database: URL itself). It is a
	// cluster exactly when URL is.
	CacheURL string `yaml:"cache_url"`
	// Prefix starts every key trendgate writes (default "tg:").
	Prefix string `yaml:"prefix"`
	// Timeout bounds each Redis command (default 50ms).
	Timeout time.Duration `yaml:"timeout"`
	// LocalShare is the share (0..1] of each key's limits an instance
	// enforces on its own while Redis is unreachable (default 1/3).
	LocalShare float64 `yaml:"local_share"`
	// AdmissionWindow is how long Redis keeps each admitted request's
	// admission record, which lets a late or replayed admission be charged
	// once (default 10m).
	AdmissionWindow time.Duration `yaml:"admission_window"`
}

// Plan is a named bundle of limits, allowed endpoints and data projection.
// Its zero value fails Validate: Endpoints and DataMode are required.
type Plan struct {
	limits.Policy `yaml:",inline"`
	// Endpoints the plan may call: list, whatsup, series, tsv, and the
	// names of configured routes.
	Endpoints []string `yaml:"endpoints"`
	// DataMode is "full" (everything passes) or "limited" (Fields applies).
	DataMode string `yaml:"data_mode"`
	// Fields is the allowlist per endpoint for DataMode limited: fields of
	// list items, of series rows, top-level whatsup fields, and TSV metrics.
	Fields Fields `yaml:"fields"`
	// UpstreamWeight is the plan's weight in the fair share of the upstream
	// budget among keys asking for upstream data (0 means 1).
	UpstreamWeight float64 `yaml:"upstream_weight"`
	// UpstreamPerMinute caps the upstream calls one key of the plan may
	// cause per minute; 0 means no cap beyond the fair share.
	UpstreamPerMinute int `yaml:"upstream_per_minute"`
}

// Fields is a per-endpoint allowlist of field names (see KnownFields). It
// fails closed: in a limited plan a nil or empty list keeps no fields of
// that endpoint. A full plan must leave it empty.
type Fields struct {
	List    []string `yaml:"list"`
	Whatsup []string `yaml:"whatsup"`
	Series  []string `yaml:"series"`
	TSV     []string `yaml:"tsv"`
}

// Key is one issued API key. Only the SHA-256 digest of the secret is kept.
// ID, SHA256, and Plan or Account are required; the zero value fails
// Validate. A key with an Account takes the account's plan (naming another
// plan is an error) and draws on the account's quotas, so it may not set
// Daily or Monthly itself; a key without one is an account of its own,
// named by its ID.
type Key struct {
	ID      string `yaml:"id"`
	SHA256  string `yaml:"sha256"` // lower-case hex digest of the secret
	Account string `yaml:"account"`
	Plan    string `yaml:"plan"`
	// Expires, when set, is the instant from which the key is refused
	// (the old key of a rotation expires when the overlap ends).
	Expires *time.Time `yaml:"expires"`
	// NotBefore, when set, is the instant before which the key is refused.
	NotBefore *time.Time `yaml:"not_before"`
	// Created, when set, is when the key was issued; reported, never
	// enforced (trendgate keys new and the key API write it).
	Created  *time.Time `yaml:"created"`
	Disabled bool       `yaml:"disabled"`
	// Overrides of the plan's (or the account's) numbers; nil keeps that
	// value. Daily and Monthly only on a key without an Account.
	PerSecond *float64 `yaml:"per_second"`
	Burst     *int     `yaml:"burst"`
	Daily     *int64   `yaml:"daily"`
	Monthly   *int64   `yaml:"monthly"`
}
