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

	"github.com/agentsaga/agentsaga/devserver"
)

const (
	stressEnv      = "AGENTSAGA_DEVSERVER_STRESS"
	stressChildEnv = "AGENTSAGA_DEVSERVER_STRESS_CHILD"
)

// stressCount returns N from AGENTSAGA_DEVSERVER_STRESS=N or skips the test.
func stressCount(t *testing.T) int {
	t.Helper()
	v := os.Getenv(stressEnv)
	if v == "" {
		t.Skipf("skipped: set %s=N to start and stop the dev server N times", stressEnv)
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive integer", stressEnv, v)
	}
	return n
}

// TestStressInProcess starts and stops servers N times in this process:
// in memory and on a data directory, with and without UI, restarting on the
// same directory.
func TestStressInProcess(t *testing.T) {
	n := stressCount(t)
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
// once on a shared data directory with the UI, the way `worker --dev` does,
// two at a time on separate directories to load the machine.
func TestStressProcesses(t *testing.T) {
	n := stressCount(t)
	par := 2
	if v, err := strconv.Atoi(os.Getenv("AGENTSAGA_DEVSERVER_STRESS_PAR")); err == nil && v > 0 {
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
				if os.Getenv("AGENTSAGA_DEVSERVER_STRESS_FRESH") != "" {
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
