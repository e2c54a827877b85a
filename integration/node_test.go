package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// missingPeer returns what a test calls when a Node.js peer it needs is
// missing: under CI=true the test fails (CI must be able to run step, the
// command that installs it), otherwise it is skipped with the reason and
// step, to purpose (such as "test the TypeScript planner").
func missingPeer(t *testing.T, step, purpose string) func(format string, args ...any) {
	return func(format string, args ...any) {
		t.Helper()
		if os.Getenv("CI") == "true" {
			t.Fatalf(format+"; CI must be able to run %s (.ci/run does it before go test)", append(args, step)...)
		}
		t.Skipf(format+"; run %s to %s", append(args, step, purpose)...)
	}
}

// npmInstalls runs `npm ci` at most once per directory per test binary.
var npmInstalls sync.Map // dir -> *npmInstall

type npmInstall struct {
	sync.Once
	out string
	err error
}

// nodePackages returns node and the directory integration/sub with its
// lockfile's packages installed: when marker (a path under node_modules)
// is missing and npm is there, it runs `npm ci` there once, with env added
// to its environment. A missing piece goes to missingPeer(t, step,
// purpose).
func nodePackages(t *testing.T, sub, marker, step, purpose string, env ...string) (node, dir string) {
	t.Helper()
	missing := missingPeer(t, step, purpose)
	node, err := exec.LookPath("node")
	if err != nil {
		missing("node is not installed (%v)", err)
	}
	dir, err = filepath.Abs(sub)
	require.NoError(t, err)
	m := filepath.Join(dir, "node_modules", marker)
	if _, err := os.Stat(m); err != nil {
		npm, lerr := exec.LookPath("npm")
		if lerr != nil {
			missing("%s is missing (%v) and npm is not installed (%v)", m, err, lerr)
		}
		v, _ := npmInstalls.LoadOrStore(dir, &npmInstall{})
		in := v.(*npmInstall)
		in.Do(func() {
			cmd := exec.Command(npm, "ci", "--no-audit", "--no-fund")
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), env...)
			out, err := cmd.CombinedOutput()
			in.out, in.err = string(out), err
		})
		if in.err != nil {
			missing("installing integration/%s failed (%v): %s", sub, in.err, in.out)
		}
	}
	return node, dir
}
