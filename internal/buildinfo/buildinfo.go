// Package buildinfo says which build of the worker is running: the
// release, the VCS revision and the Go toolchain. The build_info metric and
// the version command both read it here, so they cannot disagree.
package buildinfo

import (
	"cmp"
	"runtime"
	"runtime/debug"
)

// Unknown stands for a part the build did not record: a release neither
// set at link time nor stamped by the toolchain, a binary built without
// VCS stamping (go run, go test, -buildvcs=false, a git worktree).
const Unknown = "unknown"

// Info identifies a build.
type Info struct {
	Version   string // the release: set at link time, else the module version the toolchain stamped, else Unknown
	Revision  string // vcs.revision the toolchain stamped, or Unknown
	GoVersion string // runtime.Version()
}

// Read returns the build's Info, with version as its release when it is
// not "" (set at link time: -ldflags "-X main.version=..."). Without it the
// release is the main module's version as the toolchain stamped it: a
// tag (go install ...@v1.2.3), or a pseudo-version naming the commit
// (v0.0.0-20260402091400-a6a62eb66a9d, "+dirty" for uncommitted changes)
// when go build ran in a clone with VCS stamping on (its default).
func Read(version string) Info {
	bi, _ := debug.ReadBuildInfo()
	return from(version, bi)
}

// from is Read on bi, which is nil when the binary carries no build
// information.
func from(version string, bi *debug.BuildInfo) Info {
	i := Info{Version: version, Revision: Unknown, GoVersion: runtime.Version()}
	if bi == nil {
		bi = &debug.BuildInfo{}
	}
	if i.Version == "" && bi.Main.Version != "(devel)" {
		i.Version = bi.Main.Version
	}
	i.Version = cmp.Or(i.Version, Unknown)
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" && s.Value != "" {
			i.Revision = s.Value
		}
	}
	return i
}
