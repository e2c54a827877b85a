package devserver_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentsaga/agentsaga/internal/devserver"
)

// The stress tests run only when asked, as they take minutes:
//
//	AGENTSAGA_DEVSERVER_STRESS=100 go test -run 'TestStress(InProcess|Processes)$' -v ./devserver/
//
// AGENTSAGA_DEVSERVER_STRESS_PAR=K runs K child processes at a time (default
// 2) and AGENTSAGA_DEVSERVER_STRESS_FRESH=1 gives every child a new data
// directory (a first start, which creates the schema).
const (
	stressEnv      = "AGENTSAGA_DEVSERVER_STRESS"
	stressParEnv   = "AGENTSAGA_DEVSERVER_STRESS_PAR"
	stressFreshEnv = "AGENTSAGA_DEVSERVER_STRESS_FRESH"
	stressChildEnv = "AGENTSAGA_DEVSERVER_STRESS_CHILD"
)

// stressCount returns N from AGENTSAGA_DEVSERVER_STRESS=N, else def, or
// skips the test when def is 0.
func stressCount(t *testing.T, def int) int {
	t.Helper()
	v := os.Getenv(stressEnv)
	if v == "" && def > 0 {
		t.Logf("%d rounds; set %s=N for N", def, stressEnv)
		return def
	}
	if v == "" {
		t.Skipf("skipped: set %s=N to start and stop the dev server N times", stressEnv)
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive integer", stressEnv, v)
	}
	return n
}

// TestStressInProcess starts and stops servers in this process, one after
// another (8 times, or N): in memory and on a data directory, with and
// without UI, restarting on the same directory. Each start must succeed and
// each stop must free what the next start needs.
func TestStressInProcess(t *testing.T) {
	n := stressCount(t, 8)
	dir := t.TempDir()
	for i := range n {
		opts := devserver.Options{SearchAttributes: testAttrs, Logger: testLogger(t)}
		switch i % 4 {
		case 0:
		case 1:
			opts.UIPort = devserver.NoUI
		case 2:
			opts.DataDir = dir
		case 3:
			opts.DataDir = dir
			opts.UIPort = devserver.NoUI
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		began := time.Now()
		s, err := devserver.Start(ctx, opts)
		cancel()
		if err != nil {
			t.Fatalf("start %d (%+v): %v", i, opts, err)
		}
		t.Logf("start %d (dir=%q ui=%q) took %v", i, opts.DataDir, s.UIURL(), time.Since(began).Round(time.Millisecond))
		if err := s.Stop(); err != nil {
			t.Fatalf("stop %d: %v", i, err)
		}
	}
}

// TestStressProcesses starts N child processes that each start the server
// once with the UI on a data directory, the way `worker --dev` does, several
// at a time on separate directories to load the machine. A child that exits
// with an error or prints a panic fails the test with its whole output.
func TestStressProcesses(t *testing.T) {
	n := stressCount(t, 0)
	par := 2
	if v, err := strconv.Atoi(os.Getenv(stressParEnv)); err == nil && v > 0 {
		par = v
	}
	var dirs []string
	for range par {
		dirs = append(dirs, t.TempDir())
	}
	var mu sync.Mutex
	failures := 0
	var wg sync.WaitGroup
	for w, dir := range dirs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += len(dirs) {
				cmd := exec.Command(os.Args[0], "-test.run=^TestStressChild$", "-test.v")
				sub := "temporal"
				if os.Getenv(stressFreshEnv) != "" {
					sub = fmt.Sprintf("fresh-%d", i)
				}
				cmd.Env = append(os.Environ(), stressChildEnv+"="+filepath.Join(dir, sub))
				out, err := cmd.CombinedOutput()
				mu.Lock()
				if err != nil || strings.Contains(string(out), "panic") {
					failures++
					t.Errorf("child %d failed: %v\n%s", i, err, out)
				} else {
					t.Logf("child %d ok: %s", i, lineWith(string(out), "Start took"))
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	t.Logf("%d of %d child starts failed", failures, n)
}

func lineWith(out, s string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, s) {
			return strings.TrimSpace(l)
		}
	}
	return "(no " + s + " line)"
}

// TestStressChild is one child of TestStressProcesses.
func TestStressChild(t *testing.T) {
	dir := os.Getenv(stressChildEnv)
	if dir == "" {
		t.Skip("skipped because it is only the child process of TestStressProcesses")
	}
	s := start(t, devserver.Options{DataDir: dir, SearchAttributes: testAttrs, Logger: testLogger(t)})
	fmt.Println("frontend", s.FrontendAddr())
}
