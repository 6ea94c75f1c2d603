// Package version is the one version of the whole module: what rationd,
// rationd edge, rationctl and the client library report (rationd version,
// rationctl version, the Status RPC, ration_build_info on /metrics).
//
// # DESIGN
//
// A release build stamps Version and Revision at link time (make release):
//
//	go build -ldflags "-X github.com/ration-dev/ration/internal/version.version=v0.1.0 \
//	    -X github.com/ration-dev/ration/internal/version.revision=$(git rev-parse HEAD)"
//
// Without a stamp the Go toolchain's build information is the fallback, so
// that `go install github.com/ration-dev/ration/cmd/rationd@v0.1.0` reports
// v0.1.0 and a `go build` in a checkout reports its commit: the module's
// version (the main module's, or this module's among the dependencies of a
// program that imports the client) and the VCS revision. A build with
// neither says "(devel)" and "unknown". The package imports nothing of the
// module, so every package may import it (the client too).
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
)

// modulePath is this module's path, found among a program's dependencies
// when the program is not ration itself.
const modulePath = "github.com/ration-dev/ration"

// Set with -ldflags -X at link time (make build, make release).
var (
	version  string
	revision string
)

// Info is a build's identity.
type Info struct {
	// Version is a module version: v0.1.0, a pseudo-version, or "(devel)".
	Version string
	// Revision is the VCS commit (40 hex digits, "-dirty" when built from
	// a modified tree) or "unknown".
	Revision string
	// GoVersion is the toolchain that built the binary: go1.26.0.
	GoVersion string
	// Platform is GOOS/GOARCH.
	Platform string
}

var (
	once sync.Once
	info Info
)

// Get returns this build's identity.
func Get() Info {
	once.Do(func() {
		bi, _ := debug.ReadBuildInfo()
		info = resolve(version, revision, bi)
	})
	return info
}

// Version is Get().Version.
func Version() string { return Get().Version }

// resolve prefers the link-time stamp, then the build information.
func resolve(stampedVersion, stampedRevision string, bi *debug.BuildInfo) Info {
	in := Info{Version: stampedVersion, Revision: stampedRevision, GoVersion: runtime.Version(),
		Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi != nil {
		if bi.GoVersion != "" {
			in.GoVersion = bi.GoVersion
		}
		if in.Version == "" {
			in.Version = moduleVersion(bi)
		}
		if in.Revision == "" {
			in.Revision = vcsRevision(bi)
		}
	}
	if in.Version == "" {
		in.Version = "(devel)"
	}
	if in.Revision == "" {
		in.Revision = "unknown"
	}
	return in
}

// moduleVersion is this module's version in bi: the main module's when
// ration is the program, else the dependency's.
func moduleVersion(bi *debug.BuildInfo) string {
	if bi.Main.Path == modulePath {
		return bi.Main.Version
	}
	for _, d := range bi.Deps {
		if d.Path != modulePath {
			continue
		}
		if d.Replace != nil && d.Replace.Version != "" {
			return d.Replace.Version
		}
		return d.Version
	}
	return ""
}

// vcsRevision is the commit the go command recorded (builds in a checkout
// of ration itself), with "-dirty" for a modified tree; else the commit a
// pseudo-version names (v0.0.0-20261203114805-28bdce9c1a2b).
func vcsRevision(bi *debug.BuildInfo) string {
	var rev string
	var dirty bool
	if bi.Main.Path == modulePath {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
	}
	if rev == "" {
		rev = pseudoRevision(moduleVersion(bi))
	}
	if rev != "" && dirty {
		rev += "-dirty"
	}
	return rev
}

// pseudoRevision is the commit prefix at the end of a pseudo-version, ""
// for any other version.
func pseudoRevision(v string) string {
	v, _, _ = strings.Cut(v, "+")
	i := strings.LastIndexByte(v, '-')
	if i < 0 || len(v)-i-1 != 12 || strings.Count(v, "-") < 2 {
		return ""
	}
	rev := v[i+1:]
	for _, c := range rev {
		if !strings.ContainsRune("0123456789abcdef", c) {
			return ""
		}
	}
	return rev
}

// String is the one-line form the commands print:
// "v0.1.0, revision 28bdce9…, go1.26.0 linux/amd64".
func (in Info) String() string {
	return fmt.Sprintf("%s, revision %s, %s %s", in.Version, in.Revision, in.GoVersion, in.Platform)
}
