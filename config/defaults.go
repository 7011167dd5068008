package config

import (
	"time"

	"trendgate/api"
	"trendgate/cache"
	"trendgate/certs"
	"trendgate/internal/cors"
	"trendgate/internal/redisconn"
	"trendgate/internal/tenantlabel"
	"trendgate/limits"
	"trendgate/rollup"
	"trendgate/state"
	"trendgate/tracing"
	"trendgate/upstream"
)

// The data modes a plan can have.
const (
	// DataModeFull passes every field of the upstream's representation.
	DataModeFull = "full"
	// DataModeLimited keeps only the fields a plan's Fields allowlist names.
	DataModeLimited = "limited"
)

// The built-in plan names. Default always contains both; a plan of the same
// name in the file replaces the built-in one entirely.
const (
	PlanFull    = "full"
	PlanLimited = "limited"
)

// KnownFields maps each endpoint to the field names the API documents
// (spec/analytics-api.md), which are the only names a limited plan's Fields
// may list: the fields of a topic list item, the top-level fields of a
// whatsup response, the fields of a time-series row, and the TSV metrics.
// The whatsup "config" object is not listed: it is metadata, not data, and
// carries the response's data_mode. Callers must not modify it.
var KnownFields = map[api.Endpoint][]string{
	api.EndpointList: {
		"topic", "title", "topic_rank", "topic_rank_1h_previous",
		"topic_rank_24h_previous", "num_contributors", "num_posts",
		"interactions_24h",
	},
	api.EndpointWhatsup: {"summary", "supportive", "critical"},
	api.EndpointSeries: {
		"time", "contributors_active", "contributors_created", "interactions",
		"posts_active", "posts_created", "sentiment", "spam", "alt_rank",
		"circulating_supply", "close", "galaxy_score", "high", "low",
		"market_cap", "market_dominance", "open", "social_dominance",
		"volume_24h",
	},
	api.EndpointTSV: {"interactions", "posts_active", "contributors_active", "sentiment"},
}

// Default returns a configuration with every default filled in, including
// the built-in plans "full" and "limited", and no keys. It is valid. Each
// call returns a fresh value that the caller may modify.
func Default() *Config {
	access, fastHTTP1, fastHTTP2 := true, true, true
	return &Config{
		Server: Server{
			Listen:            "127.0.0.1:8080",
			ReadHeaderTimeout: 5 * time.Second,
			ReadTimeout:       10 * time.Second,
			WriteTimeout:      60 * time.Second,
			IdleTimeout:       120 * time.Second,
			MaxHeaderBytes:    32 << 10,
			ShutdownTimeout:   20 * time.Second,
			FastHTTP1:         &fastHTTP1,
			FastHTTP2:         &fastHTTP2,
			EventLoops:        LoopsAuto,
			CORS:              cors.Config{MaxAge: cors.DefaultMaxAge},
		},
		TLS: TLS{
			Mode:       TLSModeOff,
			HTTPListen: ":80",
			HSTSMaxAge: 365 * 24 * time.Hour,
			ACME:       ACME{DirectoryURL: LetsEncryptProduction},
		},
		Admin:    Admin{Listen: "127.0.0.1:9090"},
		Log:      Log{Level: "info", Access: &access},
		Upstream: upstream.DefaultConfig(),
		Cache:    cache.DefaultConfig(),
		Limits:   limits.DefaultConfig(),
		Tracing:  tracing.DefaultConfig(),
		Metrics:  tenantlabel.DefaultConfig(),
		State:    state.DefaultConfig(),
		Usage:    rollup.DefaultConfig(),
		Redis: Redis{
			Prefix:     "tg:",
			Timeout:    redisconn.CommandTimeout,
			LocalShare: 1.0 / 3,
			// limits.RedisOptions' default, repeated so the example file
			// and config check show it.
			AdmissionWindow: 10 * time.Minute,
		},
		Plans: map[string]Plan{
			PlanFull:    defaultFullPlan(),
			PlanLimited: defaultLimitedPlan(),
		},
		RevokedKeyRetention: 400 * 24 * time.Hour,
	}
}

// LetsEncryptProduction is the default ACME directory.
const LetsEncryptProduction = "https://acme-v02.api.letsencrypt.org/directory"

// The TLS modes (package certs owns them).
const (
	TLSModeOff   = certs.ModeOff
	TLSModeACME  = certs.ModeACME
	TLSModeFiles = certs.ModeFiles
)

func defaultFullPlan() Plan {
	return Plan{
		Policy:    limits.Policy{PerSecond: 20, Burst: 40, Daily: 100000, Monthly: 2000000},
		Endpoints: api.EndpointNames(),
		DataMode:  DataModeFull,
	}
}

func defaultLimitedPlan() Plan {
	return Plan{
		Policy:    limits.Policy{PerSecond: 5, Burst: 10, Daily: 5000, Monthly: 100000},
		Endpoints: api.EndpointNames(),
		DataMode:  DataModeLimited,
		Fields: Fields{
			List:    without(KnownFields[api.EndpointList], "interactions_24h"),
			Whatsup: []string{"summary"},
			Series: []string{
				"time", "contributors_active", "contributors_created",
				"posts_active", "posts_created", "interactions", "sentiment", "spam",
			},
			TSV: clone(KnownFields[api.EndpointTSV]),
		},
	}
}

func clone(s []string) []string { return append([]string(nil), s...) }

// without returns a copy of s without the element drop.
func without(s []string, drop string) []string {
	var out []string
	for _, v := range s {
		if v != drop {
			out = append(out, v)
		}
	}
	return out
}
