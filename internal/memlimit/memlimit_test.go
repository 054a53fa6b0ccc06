package memlimit

import (
	"math"
	"os"
	"path/filepath"
	"testing"
)

// fakeRoot lays out files under a temporary root, path -> content.
func fakeRoot(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, content := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestApply(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		name    string
		files   map[string]string
		current int64 // the runtime's limit before: math.MaxInt64 unless GOMEMLIMIT
		want    Limit
	}{
		{
			name: "CgroupV2Namespaced",
			files: map[string]string{
				"proc/self/cgroup":         "0::/\n",
				"sys/fs/cgroup/memory.max": "268435456\n",
			},
			current: math.MaxInt64,
			want:    Limit{Bytes: 256 * mib * 9 / 10, Source: SourceCgroup, Cgroup: 256 * mib},
		},
		{
			name: "CgroupV2OwnPath",
			files: map[string]string{
				"proc/self/cgroup":                          "0::/kubepods/pod1/c1\n",
				"sys/fs/cgroup/kubepods/pod1/c1/memory.max": "536870912\n",
				"sys/fs/cgroup/memory.max":                  "max\n",
			},
			current: math.MaxInt64,
			want:    Limit{Bytes: 512 * mib * 9 / 10, Source: SourceCgroup, Cgroup: 512 * mib},
		},
		{
			name: "CgroupV2Max",
			files: map[string]string{
				"proc/self/cgroup":         "0::/\n",
				"sys/fs/cgroup/memory.max": "max\n",
			},
			current: math.MaxInt64,
			want:    Limit{Bytes: math.MaxInt64, Source: SourceNone},
		},
		{
			name: "CgroupV1BindMount",
			files: map[string]string{
				"proc/self/cgroup":                           "4:memory:/docker/abc\n0::/\n",
				"sys/fs/cgroup/memory/memory.limit_in_bytes": "268435456\n",
			},
			current: math.MaxInt64,
			want:    Limit{Bytes: 256 * mib * 9 / 10, Source: SourceCgroup, Cgroup: 256 * mib},
		},
		{
			name: "CgroupV1Unlimited",
			files: map[string]string{
				"proc/self/cgroup":                           "4:memory:/\n",
				"sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n",
			},
			current: math.MaxInt64,
			want:    Limit{Bytes: math.MaxInt64, Source: SourceNone},
		},
		{
			name: "GOMEMLIMITWins",
			files: map[string]string{
				"proc/self/cgroup":         "0::/\n",
				"sys/fs/cgroup/memory.max": "268435456\n",
			},
			current: 100 * mib,
			want:    Limit{Bytes: 100 * mib, Source: SourceGOMEMLIMIT, Cgroup: 256 * mib},
		},
		{
			name:    "NoCgroupFiles",
			files:   map[string]string{},
			current: math.MaxInt64,
			want:    Limit{Bytes: math.MaxInt64, Source: SourceNone},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := fakeRoot(t, tc.files)
			set := int64(-1)
			got := apply(root, DefaultRatio, tc.current, func(n int64) { set = n })
			if got != tc.want {
				t.Errorf("apply = %+v, want %+v", got, tc.want)
			}
			wantSet := int64(-1)
			if tc.want.Source == SourceCgroup {
				wantSet = tc.want.Bytes
			}
			if set != wantSet {
				t.Errorf("runtime limit set to %d, want %d (-1: left alone)", set, wantSet)
			}
		})
	}
}
