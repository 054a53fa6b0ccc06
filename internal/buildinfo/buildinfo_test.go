package buildinfo

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strings"
	"testing"
)

// Without a release set at link time, the version is the module version
// the toolchain stamped, and the revision its VCS revision; a release set
// at link time wins.
func TestFrom(t *testing.T) {
	const rev = "a6a62eb66a9d51654638b456615b44c6cba2e5dc"
	stamped := &debug.BuildInfo{
		Main:     debug.Module{Path: "github.com/harborlight/notification-worker", Version: "v0.0.0-20261202080422-a6a62eb66a9d+dirty"},
		Settings: []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: rev}},
	}
	for _, tt := range []struct {
		name, version string
		bi            *debug.BuildInfo
		want          Info
	}{
		{"Stamped", "", stamped, Info{Version: stamped.Main.Version, Revision: rev}},
		{"Linked", "v1.4.0", stamped, Info{Version: "v1.4.0", Revision: rev}},
		{"Installed", "", &debug.BuildInfo{Main: debug.Module{Version: "v1.4.0"}}, Info{Version: "v1.4.0", Revision: Unknown}},
		{"NotStamped", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, Info{Version: Unknown, Revision: Unknown}},
		{"NoBuildInfo", "", nil, Info{Version: Unknown, Revision: Unknown}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := from(tt.version, tt.bi)
			if got.Version != tt.want.Version || got.Revision != tt.want.Revision || got.GoVersion == "" {
				t.Errorf("from(%q) = %+v, want %+v", tt.version, got, tt.want)
			}
		})
	}
}

// Read, in a binary built without -ldflags in a git clone as `go build`
// builds it by default (-buildvcs=auto), returns the module version and
// the commit the Go toolchain stamped. The build is of a command printing
// Read(""), in a fresh repository holding this package.
func TestRead_StampedByTheToolchain(t *testing.T) {
	repo := t.TempDir()
	write := func(name, body string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(repo, filepath.Dir(name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(repo, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	self, err := os.ReadFile("buildinfo.go")
	if err != nil {
		t.Fatal(err)
	}
	write("go.mod", "module github.com/harborlight/notification-worker\n\ngo 1.26\n")
	write("internal/buildinfo/buildinfo.go", string(self))
	write("cmd/probe/main.go", `package main

import (
	"fmt"

	"github.com/harborlight/notification-worker/internal/buildinfo"
)

func main() {
	i := buildinfo.Read("")
	fmt.Println(i.Version, i.Revision)
}
`)
	run := func(name string, args ...string) string {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir = repo
		cmd.Env = append(os.Environ(), "GOFLAGS=-buildvcs=auto", "CGO_ENABLED=0")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	git := []string{"-c", "user.name=test", "-c", "user.email=test@example.com", "-c", "commit.gpgsign=false"}
	run("git", append(git, "init", "-q")...)
	run("git", append(git, "add", "-A")...)
	run("git", append(git, "commit", "-q", "-m", "snapshot")...)
	rev := run("git", "rev-parse", "HEAD")
	bin := filepath.Join(t.TempDir(), "probe")
	run("go", "build", "-o", bin, "./cmd/probe")

	got := strings.Fields(run(bin))
	version := regexp.MustCompile(`^v0\.0\.0-\d{14}-` + rev[:12] + `$`)
	if len(got) != 2 || !version.MatchString(got[0]) || got[1] != rev {
		t.Errorf("Read(\"\") in a build of commit %s: %v, want its pseudo-version and revision", rev, got)
	}
}
