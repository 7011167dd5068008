package config

import (
	neturl "net/url"
	"strconv"

	"trendgate/api"
	"trendgate/certs"
	"trendgate/internal/redisconn"
	"trendgate/limits"
	"trendgate/projection"
)

// ResolvedKey is one configured key with its effective limits.
type ResolvedKey struct {
	// Key is the key as configured.
	Key Key
	// Account is the key's account: Key.Account, or the key's own ID for
	// a key configured without one.
	Account string
	// Policy is the key's plan's Policy with the account's and then the
	// key's overrides applied. Its Daily and Monthly are the account's
	// quotas (shared by all its keys); PerSecond and Burst size this key's
	// own token bucket.
	Policy limits.Policy
	// Plan is the name of the key's plan (its account's plan).
	Plan string
}

// ResolvedAccount is one account with its effective quotas and its keys.
type ResolvedAccount struct {
	// ID names the account; for a key configured without an account, the
	// key's ID.
	ID string
	// Plan is the account's plan.
	Plan string
	// Policy is the plan's Policy with the account's overrides applied (a
	// key's own rate overrides are in its ResolvedKey).
	Policy limits.Policy
	// Keys are the IDs of the account's keys, in file order.
	Keys []string
	// Implicit is true for the account of a key configured without one.
	Implicit bool
}

// ResolvedKeys returns every configured key, in file order, with its
// account and its effective Policy. Disabled and expired keys are included
// (the caller refuses them); a key whose account or plan does not exist is
// left out, which only happens in a configuration that fails Validate.
func (c *Config) ResolvedKeys() []ResolvedKey {
	accounts := c.accountsByID()
	out := make([]ResolvedKey, 0, len(c.Keys))
	for _, k := range c.Keys {
		rk, ok := c.resolveKey(k, accounts)
		if ok {
			out = append(out, rk)
		}
	}
	return out
}

// ResolvedKeysOf is ResolvedKeys of only the keys whose ids are in ids,
// in file order. It indexes only the accounts those keys name, so it
// costs one pass over the keys and accounts, whatever their number.
func (c *Config) ResolvedKeysOf(ids map[string]bool) []ResolvedKey {
	var keys []Key
	named := make(map[string]*Account)
	for _, k := range c.Keys {
		if ids[k.ID] {
			keys = append(keys, k)
			if k.Account != "" {
				named[k.Account] = nil
			}
		}
	}
	for i := range c.Accounts {
		if a, ok := named[c.Accounts[i].ID]; ok && a == nil {
			named[c.Accounts[i].ID] = &c.Accounts[i]
		}
	}
	for id, a := range named {
		if a == nil {
			delete(named, id)
		}
	}
	out := make([]ResolvedKey, 0, len(keys))
	for _, k := range keys {
		if rk, ok := c.resolveKey(k, named); ok {
			out = append(out, rk)
		}
	}
	return out
}

// ResolvedAccounts returns the configured accounts in file order, then one
// implicit account per key configured without an account, in key order.
// An account whose plan does not exist is left out (Validate reports it).
func (c *Config) ResolvedAccounts() []ResolvedAccount {
	out := make([]ResolvedAccount, 0, len(c.Accounts))
	index := make(map[string]int, len(c.Accounts))
	for _, a := range c.Accounts {
		plan, ok := c.Plans[a.Plan]
		if !ok {
			continue
		}
		index[a.ID] = len(out)
		out = append(out, ResolvedAccount{ID: a.ID, Plan: a.Plan, Policy: a.apply(plan.Policy)})
	}
	for _, rk := range c.ResolvedKeys() {
		if i, ok := index[rk.Account]; ok && rk.Key.Account != "" {
			out[i].Keys = append(out[i].Keys, rk.Key.ID)
			continue
		}
		out = append(out, ResolvedAccount{ID: rk.Account, Plan: rk.Plan, Policy: rk.Policy,
			Keys: []string{rk.Key.ID}, Implicit: true})
	}
	return out
}

// accountsByID indexes c.Accounts (the first of duplicated ids wins; such
// a configuration fails Validate).
func (c *Config) accountsByID() map[string]*Account {
	m := make(map[string]*Account, len(c.Accounts))
	for i := range c.Accounts {
		if _, dup := m[c.Accounts[i].ID]; !dup {
			m[c.Accounts[i].ID] = &c.Accounts[i]
		}
	}
	return m
}

// resolveKey applies k's account and plan; ok is false when either is
// unknown.
func (c *Config) resolveKey(k Key, accounts map[string]*Account) (rk ResolvedKey, ok bool) {
	if k.Account == "" {
		plan, ok := c.Plans[k.Plan]
		if !ok {
			return ResolvedKey{}, false
		}
		return ResolvedKey{Key: k, Account: api.AccountOf(k.ID, k.Account), Policy: k.apply(plan.Policy), Plan: k.Plan}, true
	}
	a, ok := accounts[k.Account]
	if !ok {
		return ResolvedKey{}, false
	}
	plan, ok := c.Plans[a.Plan]
	if !ok {
		return ResolvedKey{}, false
	}
	// The quotas are the account's: only the key's rate overrides apply.
	p := a.apply(plan.Policy)
	rate := Key{PerSecond: k.PerSecond, Burst: k.Burst}
	return ResolvedKey{Key: k, Account: a.ID, Policy: rate.apply(p), Plan: a.Plan}, true
}

// apply returns p with k's overrides in place of the plan's numbers.
func (k Key) apply(p limits.Policy) limits.Policy {
	return overrides{k.PerSecond, k.Burst, k.Daily, k.Monthly}.apply(p)
}

// Apply returns p, the account's plan's Policy, with a's overrides in
// place of the plan's numbers.
func (a Account) Apply(p limits.Policy) limits.Policy { return a.apply(p) }

// apply returns p with a's overrides in place of the plan's numbers.
func (a Account) apply(p limits.Policy) limits.Policy {
	return overrides{a.PerSecond, a.Burst, a.Daily, a.Monthly}.apply(p)
}

// overrides are the optional numbers a key or an account may set.
type overrides struct {
	perSecond *float64
	burst     *int
	daily     *int64
	monthly   *int64
}

func (o overrides) apply(p limits.Policy) limits.Policy {
	if o.perSecond != nil {
		p.PerSecond = *o.perSecond
	}
	if o.burst != nil {
		p.Burst = *o.burst
	}
	if o.daily != nil {
		p.Daily = *o.daily
	}
	if o.monthly != nil {
		p.Monthly = *o.monthly
	}
	return p
}

// ClusterMode reports whether Redis is configured (Redis.URL is set), which
// makes instances share limits, quotas, the cache tier and certificates.
func (c *Config) ClusterMode() bool { return c.Redis.URL != "" }

// Cluster reports whether URL names a Redis Cluster (see Mode).
func (r Redis) Cluster() bool { return r.URL != "" && redisconn.IsCluster(r.URL, r.Mode) }

// CacheTier returns the Redis URL and mode for the shared cache tier:
// CacheURL when set (a cluster when URL is one), otherwise URL with its
// database number plus one, so that cache eviction never touches counters
// (on a Redis Cluster, URL itself: the cache keys have their own prefix
// there). It returns "" when URL is empty, and URL itself when it cannot be
// parsed (Validate reports that). This is the one place that decides it.
func (r Redis) CacheTier() (url, mode string) {
	switch {
	case r.URL == "":
		return r.CacheURL, r.Mode
	case r.CacheURL != "" && r.Cluster():
		return r.CacheURL, redisconn.ModeCluster
	case r.CacheURL != "":
		return r.CacheURL, redisconn.ModeSingle
	case r.Cluster():
		return r.URL, r.Mode
	}
	return plusOneDB(r.URL), r.Mode
}

// plusOneDB returns the single-instance Redis URL raw with its database
// number plus one (raw itself when it cannot be parsed).
func plusOneDB(raw string) string {
	u, err := neturl.Parse(raw)
	if err != nil {
		return raw
	}
	db, err := redisconn.DB(u)
	if err != nil {
		return raw
	}
	u.Path = "/" + strconv.Itoa(db+1)
	u.RawPath = ""
	return u.String()
}

// For returns the allowlist for endpoint e; nil for an unknown endpoint.
// In a limited plan an empty allowlist means no fields.
func (f Fields) For(e api.Endpoint) []string {
	switch e {
	case api.EndpointList:
		return f.List
	case api.EndpointWhatsup:
		return f.Whatsup
	case api.EndpointSeries:
		return f.Series
	case api.EndpointTSV:
		return f.TSV
	}
	return nil
}

// Projection is the plan's data mode and allowlists in the form package
// projection compiles.
func (p Plan) Projection() projection.Plan {
	return projection.Plan{DataMode: p.DataMode, Fields: projection.Fields(p.Fields)}
}

// CertSettings is the tls settings, with the cluster's Redis in cluster
// mode, in the form package certs takes them.
func (c *Config) CertSettings() certs.Settings {
	a := c.TLS.ACME
	s := certs.Settings{
		Mode:     c.TLS.Mode,
		CertFile: c.TLS.CertFile,
		KeyFile:  c.TLS.KeyFile,
		ACME: certs.ACME{
			DirectoryURL:            a.DirectoryURL,
			Email:                   a.Email,
			Domains:                 a.Domains,
			Storage:                 a.Storage,
			CARoot:                  a.CARoot,
			DisableHTTPChallenge:    a.DisableHTTPChallenge,
			DisableTLSALPNChallenge: a.DisableTLSALPNChallenge,
		},
	}
	if c.ClusterMode() {
		s.Redis = certs.Redis{URL: c.Redis.URL, Mode: c.Redis.Mode, Prefix: c.Redis.Prefix, Timeout: c.Redis.Timeout}
	}
	return s
}

func (f Fields) empty() bool {
	return len(f.List) == 0 && len(f.Whatsup) == 0 && len(f.Series) == 0 && len(f.TSV) == 0
}

// FastHTTP1Enabled reports whether the lean HTTP/1.1 loop serves the
// public listener: FastHTTP1 is unset (nil) or true.
func (s Server) FastHTTP1Enabled() bool { return s.FastHTTP1 == nil || *s.FastHTTP1 }

// FastHTTP2Enabled reports whether the HTTP/2 lane serves connections
// that negotiate h2 over TLS: FastHTTP2 is unset (nil) or true.
func (s Server) FastHTTP2Enabled() bool { return s.FastHTTP2 == nil || *s.FastHTTP2 }

// AccessEnabled reports whether the per-request access log is on: Access
// is unset (nil) or true.
func (l Log) AccessEnabled() bool { return l.Access == nil || *l.Access }

// QuotasConfigured reports whether any configured key has a daily or
// monthly quota.
func (c *Config) QuotasConfigured() bool {
	for _, rk := range c.ResolvedKeys() {
		if rk.Policy.Daily > 0 || rk.Policy.Monthly > 0 {
			return true
		}
	}
	return false
}
