package main

import (
	"context"
	"runtime/debug"
	"time"

	"go.uber.org/zap"

	"trendgate/config"
	"trendgate/internal/gctune"
)

// memoryLimit returns the soft memory limit in force for cfg and where it
// comes from: GOMEMLIMIT in the environment wins (the runtime already
// applied it), then server.memory_limit, then the limit derived from
// cache.max_bytes and the number of configured keys
// (config.DerivedMemoryLimit). set reports whether the caller must apply
// it with debug.SetMemoryLimit.
func memoryLimit(cfg *config.Config, getenv func(string) string) (limit int64, source string, set bool) {
	if getenv("GOMEMLIMIT") != "" {
		return debug.SetMemoryLimit(-1), "GOMEMLIMIT", false // -1 reads the limit without changing it
	}
	if cfg.Server.MemoryLimit > 0 {
		return cfg.Server.MemoryLimit, "server.memory_limit", true
	}
	return config.DerivedMemoryLimit(cfg.Cache.MaxBytes, len(cfg.Keys)), "derived from cache.max_bytes and keys", true
}

// setMemoryLimit applies the soft memory limit for cfg and logs which one
// is in force.
func setMemoryLimit(cfg *config.Config, getenv func(string) string, log *zap.Logger) {
	limit, source, set := memoryLimit(cfg, getenv)
	if set {
		debug.SetMemoryLimit(limit)
	}
	log.Info("memory limit", zap.Int64("bytes", limit), zap.String("source", source),
		zap.Int64("cache_max_bytes", cfg.Cache.MaxBytes), zap.Int("keys", len(cfg.Keys)))
}

// releaseStartGarbage returns to the operating system, once the gateway is
// built, the memory its start used and left behind: the configuration's
// parse tree and the state file's replay, tens of MB with 100,000 keys,
// which the runtime's background scavenger would otherwise give back only
// over minutes. It costs one collection of what is live, once.
func releaseStartGarbage() { debug.FreeOSMemory() }

// tuneGC keeps the collector's goal gcHeadroom above the live heap
// (internal/gctune; at most cache.max_bytes/4, the garbage the derived
// memory limit allows for) until ctx ends, instead of GOGC=100's goal of
// twice a heap that is small while the cache is. A GOGC environment
// variable turns it off (the operator's choice stands).
func tuneGC(ctx context.Context, cfg *config.Config, getenv func(string) string, log *zap.Logger) {
	t := gcTuner(cfg, getenv)
	if t == nil {
		log.Info("collector tuning off: GOGC is set", zap.String("gogc", getenv("GOGC")))
		return
	}
	tick := time.NewTicker(gcTuneEvery)
	go func() {
		defer tick.Stop()
		t.Run(ctx, tick.C)
	}()
}

// gcTuner returns the tuner tuneGC runs for cfg, or nil when GOGC is set.
func gcTuner(cfg *config.Config, getenv func(string) string) *gctune.Tuner {
	if getenv("GOGC") != "" {
		return nil
	}
	return &gctune.Tuner{Headroom: min(cfg.Cache.MaxBytes/4, gcHeadroom)}
}

// gcHeadroom is the garbage allowed above the live heap. 16 MiB cut the
// collections of a gateway with a 6 MB live heap from about 4 a second to
// 1 at 8,000 requests a second, and its p99 with them; 64 MiB cut them
// further but raised CPU per request and p99 on 58 KB answers, the heap's
// memory no longer staying in the processor's caches (docs/performance.md,
// "The collector's headroom").
const gcHeadroom = 16 << 20

// gcTuneEvery is how often the tuner looks at the live heap: it changes as
// the cache fills, over seconds to minutes.
const gcTuneEvery = time.Second
