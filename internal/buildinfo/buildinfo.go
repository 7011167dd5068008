// Package buildinfo says which build of trendgate is running: its version,
// VCS commit and Go version. Values stamped by the linker win:
//
//	go build -ldflags "-X trendgate/internal/buildinfo.version=v1.4.0 -X trendgate/internal/buildinfo.commit=3f2a9c1" ./cmd/trendgate
//
// (the Dockerfile does this, since its build context holds no .git);
// otherwise they come from what the Go toolchain embeds in every binary
// (runtime/debug.ReadBuildInfo): the main module's version and, for a
// build inside a git checkout, vcs.revision and vcs.modified.
package buildinfo

import (
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// Stamped by the linker (-X); empty when the build did not set them.
var (
	version string
	commit  string
)

// Info identifies a build. The zero value reads as unknown everywhere.
type Info struct {
	// Version is the release version (v1.4.0), the module pseudo-version
	// Go derives from VCS, or "(devel)".
	Version string
	// Commit is the VCS revision, with "-dirty" when the working tree had
	// local changes, or "unknown".
	Commit string
	// GoVersion is the Go release that built the binary (go1.26.0).
	GoVersion string
}

// Read returns this binary's build information.
func Read() Info {
	bi, _ := debug.ReadBuildInfo()
	return fromBuild(bi, version, commit)
}

// fromBuild combines linker-stamped values (empty: not stamped) with the
// embedded build information bi (nil: none).
func fromBuild(bi *debug.BuildInfo, stampedVersion, stampedCommit string) Info {
	info := Info{Version: stampedVersion, Commit: stampedCommit, GoVersion: runtime.Version()}
	if bi != nil {
		if bi.GoVersion != "" {
			info.GoVersion = bi.GoVersion
		}
		if info.Version == "" {
			info.Version = bi.Main.Version
		}
		if info.Commit == "" {
			var rev string
			var dirty bool
			for _, s := range bi.Settings {
				switch s.Key {
				case "vcs.revision":
					rev = s.Value
				case "vcs.modified":
					dirty = s.Value == "true"
				}
			}
			if rev != "" && dirty {
				rev += "-dirty"
			}
			info.Commit = rev
		}
	}
	if info.Version == "" {
		info.Version = "(devel)"
	}
	if info.Commit == "" {
		info.Commit = "unknown"
	}
	return info
}

// String is the one-line form "trendgate <version> (commit <commit>, <go>)".
func (i Info) String() string {
	return "trendgate " + i.Version + " (commit " + i.Commit + ", " + i.GoVersion + ")"
}

// Collector returns the gauge trendgate_build_info{version, commit,
// goversion}, always 1, in the usual Prometheus form for build metadata.
func (i Info) Collector() prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "trendgate_build_info",
		Help:        "Always 1; the labels say which build is running.",
		ConstLabels: prometheus.Labels{"version": i.Version, "commit": i.Commit, "goversion": i.GoVersion},
	})
	g.Set(1)
	return g
}
