package buildinfo

import (
	"runtime/debug"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"trendgate/internal/testing/promtest"
)

func TestFromBuild(t *testing.T) {
	vcs := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "trendgate", Version: "v0.0.0-20261125074500-abcdef123456+dirty"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abcdef1234567890"}, {Key: "vcs.modified", Value: "true"}}}
	tests := []struct {
		name            string
		bi              *debug.BuildInfo
		version, commit string
		want            Info
	}{
		{"stamped by the linker", vcs, "v1.4.0", "3f2a9c1", Info{"v1.4.0", "3f2a9c1", "go1.26.0"}},
		{"from VCS build info", vcs, "", "", Info{"v0.0.0-20261125074500-abcdef123456+dirty", "abcdef1234567890-dirty", "go1.26.0"}},
		{"clean checkout", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v1.5.0"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123"}, {Key: "vcs.modified", Value: "false"}}}, "", "", Info{"v1.5.0", "0123", "go1.26.0"}},
		{"nothing known", &debug.BuildInfo{GoVersion: "go1.26.0"}, "", "", Info{"(devel)", "unknown", "go1.26.0"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := fromBuild(tc.bi, tc.version, tc.commit); got != tc.want {
				t.Errorf("fromBuild = %+v; want %+v", got, tc.want)
			}
		})
	}
	if got := fromBuild(nil, "", ""); got.GoVersion == "" || got.Version != "(devel)" {
		t.Errorf("fromBuild(nil) = %+v; want the runtime's Go version and (devel)", got)
	}
}

func TestReadAndCollector(t *testing.T) {
	info := Read()
	if !strings.HasPrefix(info.GoVersion, "go") || info.Version == "" || info.Commit == "" {
		t.Fatalf("Read() = %+v; want every field set", info)
	}
	if s := info.String(); !strings.Contains(s, info.Version) || !strings.Contains(s, info.Commit) {
		t.Errorf("String() = %q", s)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(info.Collector())
	v, found := promtest.Sum(t, reg, "trendgate_build_info", "version", info.Version, "commit", info.Commit, "goversion", info.GoVersion)
	if !found || v != 1 {
		t.Errorf("trendgate_build_info = %v (found %v); want 1 with the build's labels", v, found)
	}
}
