package main

import (
	"runtime/debug"
	"testing"

	"trendgate/config"
)

func TestMemoryLimit(t *testing.T) {
	env := func(v string) func(string) string {
		return func(name string) string {
			if name == "GOMEMLIMIT" {
				return v
			}
			return ""
		}
	}
	for _, tc := range []struct {
		name       string
		maxBytes   int64
		configured int64
		gomemlimit string
		want       int64
		wantSource string
		wantSet    bool
	}{
		{"derived from the default", 256 << 20, 0, "", 352 << 20, "derived from cache.max_bytes and keys", true},
		{"derived from 128 MiB", 128 << 20, 0, "", 192 << 20, "derived from cache.max_bytes and keys", true},
		{"configured", 128 << 20, 500 << 20, "", 500 << 20, "server.memory_limit", true},
		{"GOMEMLIMIT wins", 128 << 20, 500 << 20, "1GiB", debug.SetMemoryLimit(-1), "GOMEMLIMIT", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config.Default()
			cfg.Cache.MaxBytes = tc.maxBytes
			cfg.Server.MemoryLimit = tc.configured
			got, source, set := memoryLimit(cfg, env(tc.gomemlimit))
			if got != tc.want || source != tc.wantSource || set != tc.wantSet {
				t.Errorf("memoryLimit = %d, %q, %v; want %d, %q, %v", got, source, set, tc.want, tc.wantSource, tc.wantSet)
			}
		})
	}
	// Keys are counted: 100,000 configured keys add 100,000 KiB.
	cfg := config.Default()
	cfg.Keys = make([]config.Key, 100_000)
	if got, _, _ := memoryLimit(cfg, env("")); got != 352<<20+100_000<<10 {
		t.Errorf("memoryLimit with 100,000 keys = %d; want %d (352 MiB + 1 KiB a key)", got, 352<<20+100_000<<10)
	}
}

func TestGCTuner(t *testing.T) {
	env := func(v string) func(string) string {
		return func(name string) string {
			if name == "GOGC" {
				return v
			}
			return ""
		}
	}
	cfg := config.Default()
	if tu := gcTuner(cfg, env("200")); tu != nil {
		t.Errorf("GOGC=200 set: a tuner with headroom %d; want none (the operator's GOGC stands)", tu.Headroom)
	}
	cfg.Cache.MaxBytes = 256 << 20
	if tu := gcTuner(cfg, env("")); tu == nil || tu.Headroom != gcHeadroom {
		t.Errorf("cache.max_bytes 256 MiB: tuner %+v; want headroom %d", tu, gcHeadroom)
	}
	cfg.Cache.MaxBytes = 32 << 20
	if tu := gcTuner(cfg, env("")); tu == nil || tu.Headroom != 8<<20 {
		t.Errorf("cache.max_bytes 32 MiB: tuner %+v; want headroom max_bytes/4, 8 MiB", tu)
	}
}
