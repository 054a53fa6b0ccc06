// Package buildinfo says which build of the worker is running: the
// release, the VCS revision and the Go toolchain. The build_info metric and
// the version command both read it here, so they cannot disagree.
package buildinfo

import (
	"runtime"
	"runtime/debug"
)

// Unknown stands for a part the build did not record: a release not set at
// link time, a binary built without VCS stamping (go test, -buildvcs=false).
const Unknown = "unknown"

// Info identifies a build.
type Info struct {
	Version   string // the release set at link time, or Unknown
	Revision  string // vcs.revision the toolchain stamped, or Unknown
	GoVersion string // runtime.Version()
}

// Read returns the build's Info, with version as its release ("" reads as
// Unknown).
func Read(version string) Info {
	i := Info{Version: version, Revision: Unknown, GoVersion: runtime.Version()}
	if i.Version == "" {
		i.Version = Unknown
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && s.Value != "" {
				i.Revision = s.Value
			}
		}
	}
	return i
}
