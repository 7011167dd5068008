package config

import (
	"net/url"
	"strconv"

	"trendgate/api"
	"trendgate/internal/redisconn"
	"trendgate/limits"
)

// ResolvedKey is one configured key with its effective limits.
type ResolvedKey struct {
	// Key is the key as configured.
	Key Key
	// Policy is the key's plan's Policy with the key's overrides applied.
	Policy limits.Policy
	// Plan is the name of the key's plan (Key.Plan).
	Plan string
}

// ResolvedKeys returns every configured key, in file order, with its plan's
// Policy and the key's own overrides applied. Disabled and expired keys are
// included (the caller refuses them); a key whose plan does not exist is
// left out, which only happens in a configuration that fails Validate.
func (c *Config) ResolvedKeys() []ResolvedKey {
	out := make([]ResolvedKey, 0, len(c.Keys))
	for _, k := range c.Keys {
		plan, ok := c.Plans[k.Plan]
		if !ok {
			continue
		}
		out = append(out, ResolvedKey{Key: k, Policy: k.apply(plan.Policy), Plan: k.Plan})
	}
	return out
}

// apply returns p with k's overrides in place of the plan's numbers.
func (k Key) apply(p limits.Policy) limits.Policy {
	if k.PerSecond != nil {
		p.PerSecond = *k.PerSecond
	}
	if k.Burst != nil {
		p.Burst = *k.Burst
	}
	if k.Daily != nil {
		p.Daily = *k.Daily
	}
	if k.Monthly != nil {
		p.Monthly = *k.Monthly
	}
	return p
}

// ClusterMode reports whether Redis is configured (Redis.URL is set), which
// makes instances share limits, quotas, the cache tier and certificates.
func (c *Config) ClusterMode() bool { return c.Redis.URL != "" }

// Cluster reports whether URL names a Redis Cluster (see Mode).
func (r Redis) Cluster() bool { return r.URL != "" && redisconn.IsCluster(r.URL, r.Mode) }

// CacheTierURL returns the Redis URL for the shared cache tier: CacheURL
// when set, otherwise URL with its database number plus one, so that cache
// eviction never touches counters (on a Redis Cluster, URL itself: the
// cache keys have their own prefix there). It returns "" when URL is
// empty, and URL itself when it cannot be parsed (Validate reports that).
func (r Redis) CacheTierURL() string {
	if r.CacheURL != "" || r.URL == "" {
		return r.CacheURL
	}
	if r.Cluster() {
		return r.URL
	}
	u, err := url.Parse(r.URL)
	if err != nil {
		return r.URL
	}
	db, err := redisconn.DB(u)
	if err != nil {
		return r.URL
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
