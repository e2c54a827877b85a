package version

import (
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestFromBuildInfo(t *testing.T) {
	rev := []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "false"}}
	dirty := []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "true"}}
	for _, c := range []struct {
		name string
		info debug.BuildInfo
		want string
	}{
		{"tagged release", debug.BuildInfo{Main: debug.Module{Path: Module, Version: "v0.3.0"}, Settings: rev}, "v0.3.0"},
		{"checkout, pseudo-version", debug.BuildInfo{Main: debug.Module{Path: Module, Version: "v0.0.0-20261201202841-0123456789ab"}}, "v0.0.0-20261201202841-0123456789ab"},
		{"checkout, no module version", debug.BuildInfo{Main: debug.Module{Path: Module, Version: "(devel)"}, Settings: rev}, "devel-0123456789ab"},
		{"uncommitted changes", debug.BuildInfo{Main: debug.Module{Path: Module, Version: "(devel)"}, Settings: dirty}, "devel-0123456789ab+dirty"},
		{"nothing known", debug.BuildInfo{Main: debug.Module{Path: Module, Version: "(devel)"}}, "devel"},
		{"another team's main", debug.BuildInfo{Main: debug.Module{Path: "example.com/payments", Version: "v1.2.0"},
			Deps: []*debug.Module{{Path: "golang.org/x/text", Version: "v0.41.0"}, {Path: Module, Version: "v0.3.0"}}, Settings: rev}, "v0.3.0"},
		{"another team's main, replaced", debug.BuildInfo{Main: debug.Module{Path: "example.com/payments"},
			Deps: []*debug.Module{{Path: Module, Version: "v0.3.0", Replace: &debug.Module{Path: Module, Version: "v0.3.1"}}}}, "v0.3.1"},
		{"another team's main, local replace", debug.BuildInfo{Main: debug.Module{Path: "example.com/payments"},
			Deps: []*debug.Module{{Path: Module, Version: "v0.3.0", Replace: &debug.Module{Path: "../agentsaga"}}}, Settings: rev}, "devel"},
	} {
		t.Run(c.name, func(t *testing.T) { require.Equal(t, c.want, fromBuildInfo(&c.info)) })
	}
}

// A built binary reports the version set with -ldflags -X, and without it
// what the toolchain stamped into it (go version -m): the commit it was
// built from in a git clone. (Go stamps no revision in a git worktree or
// with -buildvcs=false; then the binary says "devel".)
func TestBuiltBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped under -short: this test builds a binary with go build; run it without -short")
	}
	bin := filepath.Join(t.TempDir(), "printversion")
	run := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("go", append([]string{"build", "-o", bin}, append(args, "./testdata/printversion")...)...).CombinedOutput()
		require.NoError(t, err, "%s", out)
		out, err = exec.Command(bin).Output()
		require.NoError(t, err)
		return strings.TrimSpace(string(out))
	}
	require.Equal(t, "v9.8.7-test", run("-ldflags", "-X "+Module+"/internal/version.Version=v9.8.7-test"))

	got := run("-buildvcs=auto")
	out, err := exec.Command("go", "version", "-m", bin).Output()
	require.NoError(t, err)
	info := debug.BuildInfo{}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 3 && f[0] == "mod":
			info.Main = debug.Module{Path: f[1], Version: f[2]}
		case len(f) >= 2 && f[0] == "build":
			if k, v, ok := strings.Cut(f[1], "="); ok {
				info.Settings = append(info.Settings, debug.BuildSetting{Key: k, Value: v})
			}
		}
	}
	require.Equal(t, Module, info.Main.Path, "%s", out)
	require.Equal(t, fromBuildInfo(&info), got, "the binary reports what go version -m says:\n%s", out)
	if rev, ok := setting(info, "vcs.revision"); ok {
		require.Contains(t, got, rev[:12], "the binary names the commit it was built from")
	}
}

func setting(info debug.BuildInfo, key string) (string, bool) {
	for _, s := range info.Settings {
		if s.Key == key {
			return s.Value, true
		}
	}
	return "", false
}
