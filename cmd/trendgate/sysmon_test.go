package main

import (
	"slices"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

func TestSteadySysmonEnv(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     []string
		want    string // GODEBUG afterwards; "" for none
		changed bool
	}{
		{"no GODEBUG", []string{"HOME=/root"}, steadySysmon, true},
		{"empty GODEBUG", []string{"GODEBUG="}, steadySysmon, true},
		{"other settings kept", []string{"GODEBUG=http2debug=1,madvdontneed=1"}, "http2debug=1,madvdontneed=1," + steadySysmon, true},
		{"schedtrace=0 is the operator's choice", []string{"GODEBUG=schedtrace=0"}, "schedtrace=0", false},
		{"any schedtrace is", []string{"GODEBUG=gctrace=1,schedtrace=1000"}, "gctrace=1,schedtrace=1000", false},
		{"already steady", []string{"GODEBUG=" + steadySysmon}, steadySysmon, false},
		{"a longer name is another setting", []string{"GODEBUG=xschedtrace=1"}, "xschedtrace=1," + steadySysmon, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env, changed := steadySysmonEnv(slices.Clone(tc.env))
			if changed != tc.changed {
				t.Fatalf("changed = %v, want %v", changed, tc.changed)
			}
			var godebug []string
			for _, kv := range env {
				if v, ok := strings.CutPrefix(kv, "GODEBUG="); ok {
					godebug = append(godebug, v)
				}
			}
			if len(godebug) != 1 || godebug[0] != tc.want {
				t.Fatalf("GODEBUG afterwards: %q, want exactly one, %q", godebug, tc.want)
			}
			for _, kv := range tc.env {
				if !strings.HasPrefix(kv, "GODEBUG=") && !slices.Contains(env, kv) {
					t.Fatalf("%q was dropped: %q", kv, env)
				}
			}
		})
	}
}

func TestServes(t *testing.T) {
	for args, want := range map[string]bool{
		"":                      true,
		"-listen :0":            true,
		"serve -config x.yaml":  true,
		"serve -h":              true, // harmless: serve prints its help after the exec
		"-h":                    false,
		"-version":              false,
		"keys usage":            false,
		"config check x.yaml":   false,
		"demo-upstream -listen": false,
		"version":               false,
	} {
		if got := serves(strings.Fields(args)); got != want {
			t.Errorf("serves(%q) = %v, want %v", args, got, want)
		}
	}
}

func TestLogSysmon(t *testing.T) {
	for godebug, want := range map[string]string{
		"gctrace=1," + steadySysmon: "runtime monitor: steady (no deep sleep between requests)",
		"schedtrace=0":              "runtime monitor: schedtrace set by GODEBUG",
		"":                          "runtime monitor: the runtime's default (deep sleep when idle, woken per request)",
	} {
		core, logs := observer.New(zap.InfoLevel)
		logSysmon(func(k string) string {
			if k == "GODEBUG" {
				return godebug
			}
			return ""
		}, zap.New(core))
		if got := logs.All(); len(got) != 1 || got[0].Message != want {
			t.Errorf("GODEBUG=%q: logged %v, want %q", godebug, got, want)
		}
	}
}
