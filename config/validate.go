package config

import (
	"fmt"
	"math"
	"net"
	"net/mail"
	"net/netip"
	"net/url"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"trendgate/api"
	"trendgate/auth"
	"trendgate/cache"
	"trendgate/internal/redisconn"
	"trendgate/limits"
	"trendgate/state"
)

// Limits on server.max_header_bytes.
const (
	MinHeaderBytes = 4 << 10
	MaxHeaderBytes = 1 << 20
)

// maxEventLoops bounds server.event_loops: a loop keeps a processor, and
// more loops than a machine has cores only take turns.
const maxEventLoops = 256

// problems collects validation problems, each "path: problem".
type problems []string

func (p *problems) add(path, format string, args ...any) {
	*p = append(*p, path+": "+fmt.Sprintf(format, args...))
}

// addSection adds each line of a domain section's Validate error with the
// section's path in front.
func (p *problems) addSection(prefix string, err error) {
	if err == nil {
		return
	}
	for _, line := range strings.Split(err.Error(), "\n") {
		if line = strings.TrimSpace(line); line != "" {
			*p = append(*p, prefix+line)
		}
	}
}

// Validate reports every problem in c at once as an *Error whose problems
// each start with the YAML path they are about, e.g.
// `keys[2].plan: unknown plan "gold"`. It returns nil when c is valid.
// Values that may be secret (keys, tokens, Redis URLs) never appear in it.
func (c *Config) Validate() error {
	if c == nil {
		return &Error{Problems: []string{"no configuration"}}
	}
	var p problems
	c.validateServer(&p)
	c.validateTLS(&p)
	c.validateAdminLog(&p)
	c.validateRedis(&p)
	p.addSection("routes", api.ValidateRoutes(c.Routes))
	c.validatePlans(&p)
	c.validateAccounts(&p)
	c.validateKeys(&p)
	if c.RevokedKeyRetention < 0 {
		p.add("revoked_key_retention", "must not be negative")
	}
	p.addSection("upstream.", c.Upstream.Validate())
	p.addSection("cache.", c.Cache.Validate())
	p.addSection("limits.", c.Limits.Validate())
	p.addSection("tracing.", c.Tracing.Validate())
	p.addSection("metrics.", c.Metrics.Validate())
	p.addSection("state.", c.State.Validate())
	p.addSection("usage.", c.Usage.Validate())
	if len(p) == 0 {
		return nil
	}
	return &Error{Problems: p}
}

func (c *Config) validateServer(p *problems) {
	s := c.Server
	checkHostPort(p, "server.listen", s.Listen)
	for _, d := range []struct {
		path string
		v    time.Duration
	}{
		{"server.read_header_timeout", s.ReadHeaderTimeout},
		{"server.read_timeout", s.ReadTimeout},
		{"server.write_timeout", s.WriteTimeout},
		{"server.idle_timeout", s.IdleTimeout},
		{"server.shutdown_timeout", s.ShutdownTimeout},
	} {
		checkPositive(p, d.path, d.v)
	}
	if s.ShutdownDelay < 0 {
		p.add("server.shutdown_delay", "must be 0 (drain at once) or a positive duration, got %s", s.ShutdownDelay)
	}
	if s.MaxHeaderBytes < MinHeaderBytes || s.MaxHeaderBytes > MaxHeaderBytes {
		p.add("server.max_header_bytes", "must be between %d (4 KiB) and %d (1 MiB), got %d", MinHeaderBytes, MaxHeaderBytes, s.MaxHeaderBytes)
	}
	switch {
	case s.EventLoops != LoopsAuto && (s.EventLoops < 0 || s.EventLoops > maxEventLoops):
		p.add("server.event_loops", "must be auto, 0 (a goroutine per connection) or 1 to %d, got %s", maxEventLoops, s.EventLoops)
	case s.EventLoops > 0 && runtime.GOOS != "linux":
		p.add("server.event_loops", "event loops need Linux (epoll); set 0 on %s", runtime.GOOS)
	}
	if s.MemoryLimit < 0 {
		p.add("server.memory_limit", "must be 0 (derived from cache.max_bytes) or a number of bytes, got %d", s.MemoryLimit)
	}
	p.addSection("server.cors.", s.CORS.Validate())
	for i, cidr := range s.TrustedProxies {
		path := fmt.Sprintf("server.trusted_proxies[%d]", i)
		prefix, err := netip.ParsePrefix(cidr)
		switch {
		case err != nil:
			p.add(path, "%q is not a CIDR such as 10.0.0.0/8 or 192.0.2.7/32", cidr)
		case prefix != prefix.Masked():
			p.add(path, "%q has bits set after the prefix length; did you mean %s?", cidr, prefix.Masked())
		}
	}
}

func (c *Config) validateTLS(p *problems) {
	t := c.TLS
	switch t.Mode {
	case "", TLSModeOff:
	case TLSModeFiles:
		if t.CertFile == "" {
			p.add("tls.cert_file", "required when tls.mode is files")
		}
		if t.KeyFile == "" {
			p.add("tls.key_file", "required when tls.mode is files")
		}
	case TLSModeACME:
		c.validateACME(p)
	default:
		p.add("tls.mode", "must be off, acme or files, got %q", t.Mode)
	}
	checkHostPort(p, "tls.http_listen", t.HTTPListen)
	if t.HSTSMaxAge < 0 {
		p.add("tls.hsts_max_age", "must not be negative (0 turns HSTS off)")
	}
}

func (c *Config) validateACME(p *problems) {
	a := c.TLS.ACME
	if u, err := url.Parse(a.DirectoryURL); err != nil || u.Scheme != "https" || u.Host == "" {
		p.add("tls.acme.directory_url", "must be an https:// URL")
	}
	if a.Email != "" {
		if addr, err := mail.ParseAddress(a.Email); err != nil || addr.Address != a.Email {
			p.add("tls.acme.email", "%q is not a plain e-mail address", a.Email)
		}
	}
	if len(a.Domains) == 0 {
		p.add("tls.acme.domains", "at least one domain is required when tls.mode is acme")
	}
	seen := make(map[string]bool)
	for i, d := range a.Domains {
		path := fmt.Sprintf("tls.acme.domains[%d]", i)
		lower := strings.ToLower(d)
		switch {
		case !validHostname(d) || isIP(d):
			p.add(path, "%q is not a valid host name (wildcards and IP addresses are not supported)", d)
		case seen[lower]:
			p.add(path, "%q is listed twice", d)
		}
		seen[lower] = true
	}
	if a.Storage == "" && c.Redis.URL == "" {
		p.add("tls.acme.storage", "required when tls.mode is acme and redis.url is not set")
	}
	if a.DisableHTTPChallenge && a.DisableTLSALPNChallenge {
		p.add("tls.acme", "disable_http_challenge and disable_tlsalpn_challenge cannot both be true (no challenge would remain)")
	}
}

func (c *Config) validateAdminLog(p *problems) {
	if c.Admin.Listen != "off" {
		checkHostPort(p, "admin.listen", c.Admin.Listen)
		if c.Admin.Listen == c.Server.Listen {
			p.add("admin.listen", "must differ from server.listen")
		}
		if !c.Admin.HasToken() && !c.Admin.AllowNoToken && !LoopbackListen(c.Admin.Listen) {
			what := "purge the cache and read per-key usage"
			if c.Admin.Pprof {
				what += " and profiles (admin.pprof is on)"
			}
			p.add("admin.listen", "%q is not a loopback address and admin.token is empty: anyone who reaches the port could %s; "+
				"set admin.token (e.g. token: ${TRENDGATE_ADMIN_TOKEN}), listen on 127.0.0.1, or set admin.allow_no_token: true "+
				"if a firewall keeps everyone else out", c.Admin.Listen, what)
		}
	}
	ids := make(map[string]int, len(c.Admin.Tokens))
	digests := make(map[string]int, len(c.Admin.Tokens))
	for i, t := range c.Admin.Tokens {
		path := fmt.Sprintf("admin.tokens[%d]", i)
		if !validName(t.ID) {
			p.add(path+".id", "%s", nameRule)
		} else if j, dup := ids[t.ID]; dup {
			p.add(path+".id", "%q is already used by admin.tokens[%d]", t.ID, j)
		} else {
			ids[t.ID] = i
		}
		if !validDigest(t.SHA256) {
			// Never echoed: it may be the token itself.
			p.add(path+".sha256", "must be 64 lower-case hex digits: the SHA-256 of the token (printf %%s \"$TOKEN\" | sha256sum)")
		} else if j, dup := digests[t.SHA256]; dup {
			p.add(path+".sha256", "same digest as admin.tokens[%d]", j)
		} else {
			digests[t.SHA256] = i
		}
		for j, sc := range t.Scopes {
			if !slices.Contains(AdminScopes, sc) {
				p.add(fmt.Sprintf("%s.scopes[%d]", path, j), "unknown scope %q (known: %s)", sc, strings.Join(AdminScopes, ", "))
			}
		}
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		p.add("log.level", "must be debug, info, warn or error, got %q", c.Log.Level)
	}
}

func (c *Config) validateRedis(p *problems) {
	r := c.Redis
	mode := r.Mode
	if mode != "" && mode != redisconn.ModeSingle && mode != redisconn.ModeCluster {
		p.add("redis.mode", "must be empty, %q or %q, got %q", redisconn.ModeSingle, redisconn.ModeCluster, mode)
		mode = ""
	}
	if r.URL != "" {
		checkRedisURL(p, "redis.url", r.URL, mode)
	}
	if r.CacheURL != "" {
		if r.URL == "" {
			p.add("redis.cache_url", "set without redis.url")
		}
		// The cache tier is a cluster exactly when the counters are.
		if r.URL != "" && r.Cluster() {
			mode = redisconn.ModeCluster
		} else if r.URL != "" {
			mode = redisconn.ModeSingle
		}
		checkRedisURL(p, "redis.cache_url", r.CacheURL, mode)
	}
	if r.Prefix == "" {
		p.add("redis.prefix", "must not be empty")
	}
	checkPositive(p, "redis.timeout", r.Timeout)
	if r.AdmissionWindow < time.Second {
		p.add("redis.admission_window", "must be at least 1s")
	}
	if !(r.LocalShare > 0 && r.LocalShare <= 1) {
		p.add("redis.local_share", "must be greater than 0 and at most 1")
	}
}

func (c *Config) validatePlans(p *problems) {
	if len(c.Plans) == 0 {
		p.add("plans", "at least one plan is required")
		return
	}
	names := make([]string, 0, len(c.Plans))
	for name := range c.Plans {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		path := "plans." + name
		if !validName(name) {
			p.add(path, "plan name %s", nameRule)
		}
		c.validatePlan(p, path, c.Plans[name])
		c.checkCosts(p, path, c.Plans[name].Policy, c.Plans[name].Endpoints)
	}
}

// checkCosts reports each endpoint of endpoints whose cost pol could never
// admit: a burst, daily or monthly limit below the cost would answer every
// such request with a refusal that no wait can lift.
func (c *Config) checkCosts(p *problems, path string, pol limits.Policy, endpoints []string) {
	for i, name := range endpoints {
		cost, ok := c.Cost(name)
		if !ok || slices.Index(endpoints, name) < i {
			continue // reported by validatePlan
		}
		if limit, most := pol.Unservable(cost); limit != "" {
			p.add(path+"."+limit, "%d is below the %s cost (%d); %s could never be served", most, name, cost, name)
		}
	}
}

// Cost returns the cost of one request to the built-in endpoint or
// configured route called name, and whether there is one.
func (c *Config) Cost(name string) (int, bool) {
	if ep, ok := api.EndpointNamed(name); ok {
		return c.Limits.Costs.For(ep), true
	}
	for _, r := range c.Routes {
		if r.Name == name {
			return max(r.Cost, 1), true
		}
	}
	return 0, false
}

// routeNames returns the names of the configured routes, in file order.
func (c *Config) routeNames() []string {
	names := make([]string, len(c.Routes))
	for i, r := range c.Routes {
		names[i] = r.Name
	}
	return names
}

func (c *Config) validatePlan(p *problems, path string, pl Plan) {
	checkRate(p, path, pl.PerSecond, pl.Burst)
	if pl.Daily < 0 {
		p.add(path+".daily", "must not be negative (0 means no daily quota)")
	}
	if pl.Monthly < 0 {
		p.add(path+".monthly", "must not be negative (0 means no monthly quota)")
	}
	if !(pl.UpstreamWeight >= 0 && pl.UpstreamWeight <= 1e6) { // also rejects NaN
		p.add(path+".upstream_weight", "must be between 0 and 1000000 (0 means 1)")
	}
	if pl.UpstreamPerMinute < 0 {
		p.add(path+".upstream_per_minute", "must not be negative (0 means no cap)")
	}
	known := strings.Join(append(api.EndpointNames(), c.routeNames()...), ", ")
	if len(pl.Endpoints) == 0 {
		p.add(path+".endpoints", "must list at least one of %s", known)
	}
	for i, e := range pl.Endpoints {
		ep := fmt.Sprintf("%s.endpoints[%d]", path, i)
		_, ok := c.Cost(e)
		switch {
		case !ok:
			p.add(ep, "unknown endpoint or route %q (known: %s)", e, known)
		case slices.Index(pl.Endpoints, e) < i:
			p.add(ep, "endpoint %q is listed twice", e)
		}
	}
	switch pl.DataMode {
	case DataModeFull:
		if !pl.Fields.empty() {
			p.add(path+".fields", "must not be set when data_mode is full (full passes every field)")
		}
	case DataModeLimited:
		for _, ep := range api.Endpoints {
			known := KnownFields[ep]
			for i, f := range pl.Fields.For(ep) {
				fp := fmt.Sprintf("%s.fields.%s[%d]", path, ep, i)
				if !slices.Contains(known, f) {
					p.add(fp, "unknown field %q (known: %s)", f, strings.Join(known, ", "))
				}
			}
		}
	default:
		p.add(path+".data_mode", "must be full or limited, got %q", pl.DataMode)
	}
}

// validateAccounts checks accounts: ids unique and not the id of a key
// outside the account (such a key is an account of its own, and the two
// would share counters), a known plan, sane overrides.
func (c *Config) validateAccounts(p *problems) {
	ids := make(map[string]int, len(c.Accounts))
	for i, a := range c.Accounts {
		path := fmt.Sprintf("accounts[%d]", i)
		switch {
		case !validName(a.ID):
			p.add(path+".id", "%s", nameRule)
		default:
			if j, dup := ids[a.ID]; dup {
				p.add(path+".id", "%q is already used by accounts[%d]", a.ID, j)
			} else {
				ids[a.ID] = i
			}
		}
		plan, ok := c.Plans[a.Plan]
		if !ok {
			p.add(path+".plan", "unknown plan %q (known: %s)", a.Plan, strings.Join(c.planNames(), ", "))
		}
		o := overrides{a.PerSecond, a.Burst, a.Daily, a.Monthly}
		checkOverrides(p, path, o)
		if ok {
			c.checkOverriddenPolicy(p, path, plan, plan.Policy, o)
		}
	}
	for i, k := range c.Keys {
		if j, clash := ids[k.ID]; clash && k.Account != k.ID {
			p.add(fmt.Sprintf("keys[%d].id", i), "%q is the id of accounts[%d]; a key outside that account "+
				"is an account of its own and needs an id no account has", k.ID, j)
		}
	}
}

func (c *Config) validateKeys(p *problems) {
	ids := make(map[string]int, len(c.Keys))
	digests := make(map[string]int, len(c.Keys))
	accounts := c.accountsByID()
	for i, k := range c.Keys {
		path := "keys[" + strconv.Itoa(i) + "]"
		switch {
		case !validName(k.ID):
			p.add(path+".id", "%s", nameRule)
		default:
			if j, dup := ids[k.ID]; dup {
				p.add(path+".id", "%q is already used by keys[%d]", k.ID, j)
			} else {
				ids[k.ID] = i
			}
		}
		switch {
		case strings.HasPrefix(k.SHA256, auth.Prefix):
			// Never echoed: it is a live secret.
			p.add(path+".sha256", "this is the secret itself, not its digest; run `trendgate keys hash` "+
				"and paste what it prints; treat this secret as exposed (it is in the file): "+
				"issue a new key with `trendgate keys new` and revoke this one")
		case !validDigest(k.SHA256):
			p.add(path+".sha256", "must be 64 lower-case hex digits (the SHA-256 of the key)")
		default:
			if j, dup := digests[k.SHA256]; dup {
				p.add(path+".sha256", "same digest as keys[%d]", j)
			} else {
				digests[k.SHA256] = i
			}
		}
		if k.NotBefore != nil && k.Expires != nil && !k.NotBefore.Before(*k.Expires) {
			p.add(path+".not_before", "must be before expires (%s)", k.Expires.UTC().Format(time.RFC3339))
		}
		o := overrides{k.PerSecond, k.Burst, k.Daily, k.Monthly}
		checkOverrides(p, path, o)
		if k.Account != "" {
			c.checkAccountKey(p, path, k, accounts)
			continue
		}
		plan, ok := c.Plans[k.Plan]
		switch {
		case k.Plan == "":
			p.add(path+".plan", "a key names its plan, or its account (known plans: %s)", strings.Join(c.planNames(), ", "))
			continue
		case !ok:
			p.add(path+".plan", "unknown plan %q (known: %s)", k.Plan, strings.Join(c.planNames(), ", "))
			continue
		}
		c.checkOverriddenPolicy(p, path, plan, plan.Policy, o)
	}
}

// checkAccountKey checks a key that names an account: the account exists,
// the key names no other plan, and it sets no quota of its own (the
// account's quotas are shared by all its keys).
func (c *Config) checkAccountKey(p *problems, path string, k Key, accounts map[string]*Account) {
	a, ok := accounts[k.Account]
	if !ok {
		known := make([]string, 0, len(c.Accounts))
		for _, a := range c.Accounts {
			known = append(known, a.ID)
		}
		sort.Strings(known)
		known = slices.Compact(known)
		p.add(path+".account", "unknown account %q (known: %s)", k.Account, strings.Join(known, ", "))
		return
	}
	if k.Plan != "" && k.Plan != a.Plan {
		p.add(path+".plan", "%q differs from the plan of account %q (%q): a key takes its account's plan; "+
			"leave plan out", k.Plan, a.ID, a.Plan)
	}
	if k.Daily != nil {
		p.add(path+".daily", "quotas belong to the account: set daily on account %q", a.ID)
	}
	if k.Monthly != nil {
		p.add(path+".monthly", "quotas belong to the account: set monthly on account %q", a.ID)
	}
	plan, ok := c.Plans[a.Plan]
	if !ok {
		return // reported under accounts
	}
	c.checkOverriddenPolicy(p, path, plan, a.apply(plan.Policy), overrides{perSecond: k.PerSecond, burst: k.Burst})
}

// checkOverrides checks the numbers a key or an account may override.
func checkOverrides(p *problems, path string, o overrides) {
	if o.perSecond != nil && (*o.perSecond < 0 || math.IsNaN(*o.perSecond) || math.IsInf(*o.perSecond, 0)) {
		p.add(path+".per_second", "must be a finite number >= 0")
	}
	if o.burst != nil && *o.burst < 0 {
		p.add(path+".burst", "must not be negative")
	}
	if o.daily != nil && *o.daily < 0 {
		p.add(path+".daily", "must not be negative")
	}
	if o.monthly != nil && *o.monthly < 0 {
		p.add(path+".monthly", "must not be negative")
	}
}

// checkOverriddenPolicy reports what o, applied over base (the plan's
// policy, or the account's), makes unservable.
func (c *Config) checkOverriddenPolicy(p *problems, path string, plan Plan, base limits.Policy, o overrides) {
	if o == (overrides{}) {
		return
	}
	pol := o.apply(base)
	if (o.perSecond != nil || o.burst != nil) && pol.PerSecond > 0 && pol.Burst == 0 {
		p.add(path+".burst", "must be at least 1 when the rate (per_second) is above 0")
	}
	// The plan's own numbers are checked under plans.<name>; report here
	// only what the overrides make unservable.
	var own problems
	c.checkCosts(&own, path, base, plan.Endpoints)
	var with problems
	c.checkCosts(&with, path, pol, plan.Endpoints)
	for _, prob := range with {
		if !slices.Contains(own, prob) {
			*p = append(*p, prob)
		}
	}
}

// planNames returns the names of c's plans, sorted.
func (c *Config) planNames() []string {
	names := make([]string, 0, len(c.Plans))
	for name := range c.Plans {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// CheckName reports whether id can name a key or a plan, as Validate
// requires (they appear in logs and metric labels): nil, or an error
// saying what is allowed.
func CheckName(id string) error {
	if !validName(id) {
		return fmt.Errorf("config: %q is not a valid name: %s", id, nameHelp)
	}
	return nil
}

// checkRate checks a plan's per_second and burst.
func checkRate(p *problems, path string, perSecond float64, burst int) {
	if perSecond < 0 || math.IsNaN(perSecond) || math.IsInf(perSecond, 0) {
		p.add(path+".per_second", "must be a finite number >= 0 (0 means no rate limit)")
	}
	switch {
	case burst < 0:
		p.add(path+".burst", "must not be negative")
	case perSecond > 0 && burst < 1:
		p.add(path+".burst", "must be at least 1 when per_second is above 0")
	}
}

func checkPositive(p *problems, path string, d time.Duration) {
	if d <= 0 {
		p.add(path, "must be a duration above 0, such as 5s")
	}
}

// checkHostPort checks a listen address: an optional host (IP or name)
// and a numeric port.
func checkHostPort(p *problems, path, addr string) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		p.add(path, "%q is not host:port, such as 127.0.0.1:8080 or :8080", addr)
		return
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || port != strconv.FormatUint(n, 10) {
		p.add(path, "%q: port must be a number from 0 to 65535", addr)
	}
	if host != "" && !isIP(host) && !validHostname(host) {
		p.add(path, "%q: host must be an IP address or a host name", addr)
	}
}

// checkRedisURL checks a redis:// or rediss:// URL for mode without ever
// echoing it (it may hold a password).
func checkRedisURL(p *problems, path, raw, mode string) {
	if err := redisconn.Check(raw, mode); err != nil {
		for _, line := range strings.Split(strings.TrimPrefix(err.Error(), "redisconn: "), "\n") {
			p.add(path, "%s", line)
		}
	}
}

// validHostname reports whether s is a DNS host name: dot-separated labels
// of 1 to 63 letters, digits and hyphens, not starting or ending with a
// hyphen, at most 253 characters in all.
func validHostname(s string) bool {
	s = strings.TrimSuffix(s, ".")
	if s == "" || len(s) > 253 {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}

func isIP(s string) bool {
	_, err := netip.ParseAddr(s)
	return err == nil
}

// Warnings returns settings that are valid but probably not what the
// operator wants, each starting with its YAML path. config check prints
// them and serve logs them at start.
func (c *Config) Warnings() []string {
	var w []string
	if len(c.Server.TrustedProxies) == 0 && !LoopbackListen(c.Server.Listen) {
		w = append(w, "server.trusted_proxies: empty while server.listen ("+c.Server.Listen+
			") is not loopback; behind a load balancer every client then shares its address, "+
			"for the failed-authentication limit and the access log alike")
	}
	// The snapshot directory is checked here, not in Validate: it may be
	// a volume that exists only where the gateway runs, and a gateway that
	// cannot save its cache still serves correctly.
	if p := c.Cache.PersistPath; p != "" {
		if err := cache.CheckPersistPath(p); err != nil {
			w = append(w, "cache.persist_path: "+err.Error()+"; the local cache will not survive a restart")
		}
	}
	if p := c.State.Path; p != "" {
		if err := state.CheckPath(p); err != nil {
			w = append(w, "state.path: "+err.Error()+"; the gateway will not start until the state file can be written")
		}
	} else if !c.ClusterMode() && c.QuotasConfigured() {
		w = append(w, "state.path: empty while quotas are configured without Redis; "+
			"every restart (a deploy, a crash, an OOM kill) resets every daily and monthly quota to zero "+
			"and forgets the 24-hour usage (see docs/restarts.md)")
	}
	if p := c.KeysFile; p != "" {
		if err := state.CheckPath(p); err != nil {
			w = append(w, "keys_file: "+err.Error()+"; the key API cannot store its changes")
		}
	} else if c.ClusterMode() {
		w = append(w, "keys_file: empty in cluster mode; keys made through the key API live only in Redis, "+
			"and a Redis restart that keeps nothing on disk loses them (see docs/accounts.md)")
	}
	w = append(w, c.routeWarnings()...)
	w = append(w, c.eventLoopWarnings()...)
	if m := c.Server.MemoryLimit; m > 0 && m < c.Cache.MaxBytes {
		w = append(w, fmt.Sprintf("server.memory_limit: %d is below cache.max_bytes (%d); "+
			"the collector will run almost constantly once the cache fills", m, c.Cache.MaxBytes))
	}
	return w
}

// eventLoopWarnings returns server.event_loops set where no loop runs
// (fast_http1 off) or where every request would leave its loop (cluster
// mode).
func (c *Config) eventLoopWarnings() []string {
	n := c.Server.EventLoops
	switch {
	case n <= 0:
		return nil // 0, or auto, which runs loops only where they serve
	case !c.Server.FastHTTP1Enabled():
		return []string{fmt.Sprintf("server.event_loops: %d has no effect with server.fast_http1 off; "+
			"net/http serves every connection", n)}
	case c.ClusterMode():
		return []string{fmt.Sprintf("server.event_loops: %d in cluster mode, where each request's limits "+
			"run a script in Redis: every request leaves its loop for a goroutine and comes back, "+
			"so the loops only add that move; 0 serves a goroutine per connection", n)}
	}
	return nil
}

// routeWarnings returns the routes' settings that are valid but cannot
// work as written: a stale lifetime the cache caps, a cached route whose
// path names a change of state (stateChangeWord), and a limited plan
// listing a route without limited_fields (its keys are refused there).
func (c *Config) routeWarnings() []string {
	var w []string
	limited := make(map[string]bool)
	for i, r := range c.Routes {
		if r.Stale > c.Cache.MaxStale {
			w = append(w, fmt.Sprintf("routes[%d].stale: %s is above cache.max_stale (%s), which caps it", i, r.Stale, c.Cache.MaxStale))
		}
		if word := stateChangeWord(r.Path); word != "" && !r.PassThrough() {
			w = append(w, fmt.Sprintf("routes[%d].path: %q names a change of state (%s), yet the route is cached: "+
				"a repeated call would be answered from the cache and never reach the upstream; "+
				"set cache: false to send every call", i, r.Path, word))
		}
		limited[r.Name] = r.LimitedFields != nil
	}
	for _, name := range c.planNames() {
		pl := c.Plans[name]
		if pl.DataMode != DataModeLimited {
			continue
		}
		for i, e := range pl.Endpoints {
			if has, isRoute := limited[e]; isRoute && !has {
				w = append(w, fmt.Sprintf("plans.%s.endpoints[%d]: route %s has no limited_fields, so keys of this limited plan are refused there (403)", name, i, e))
			}
		}
	}
	return w
}

// MemoryLimitOverhead is what DerivedMemoryLimit allows above the cache:
// connections, requests in flight, the limiters and the runtime itself.
const MemoryLimitOverhead = 32 << 20

// MemoryLimitPerKey is what DerivedMemoryLimit allows for each configured
// key: a key never used measured about 550 bytes of live heap in the whole
// gateway (its configuration, keyring entry, compiled settings and the 24
// bytes of its unused counters), a key used once about 400 bytes more, one
// used every hour of a day on one endpoint about 3.7 KB more.
const MemoryLimitPerKey = 1 << 10

// DerivedMemoryLimit returns the soft memory limit trendgate sets for a
// cache bounded to maxBytes and keys configured keys when neither
// GOMEMLIMIT nor server.memory_limit says otherwise: maxBytes + maxBytes/4
// + MemoryLimitOverhead + keys × MemoryLimitPerKey. The cache holds at
// most maxBytes of live data; the quarter on top is garbage the collector
// may leave between cycles, so it works harder only as the process nears
// the limit, rather than letting the heap double (GOGC=100) before each
// collection.
func DerivedMemoryLimit(maxBytes int64, keys int) int64 {
	return maxBytes + maxBytes/4 + MemoryLimitOverhead + int64(keys)*MemoryLimitPerKey
}

// LoopbackListen reports whether a listen address ("host:port") binds only
// loopback: "localhost" or a loopback IP; an empty or wildcard host is not.
func LoopbackListen(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}
