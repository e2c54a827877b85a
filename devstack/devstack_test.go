package devstack_test

import (
	"context"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/agentsaga/agentsaga/devstack"
)

// TestStartFailureIsAnError checks that a stack that cannot start returns an
// error saying why (here: the Temporal port is taken) and cleans up after
// itself, instead of panicking while it cleans up.
func TestStartFailureIsAnError(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp) // where Start makes its temporary data directory
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := devstack.Start(ctx, devstack.Options{Port: port, UIPort: -1, NoWorker: true})
	if err == nil {
		st.Close()
		t.Fatalf("Start with Temporal's port %d taken succeeded; want an error", port)
	}
	if st != nil {
		t.Errorf("Start failed (%v) but returned a stack", err)
	}
	if !strings.Contains(err.Error(), "not free") {
		t.Errorf("Start: %v; want an error saying the port is not free", err)
	}
	left, err := os.ReadDir(tmp)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range left {
		t.Errorf("the failed Start left %s behind in the temporary directory", e.Name())
	}
}

// TestCloseNil checks that closing a stack that never started is harmless.
func TestCloseNil(t *testing.T) {
	var st *devstack.Stack
	if err := st.Close(); err != nil {
		t.Errorf("Close of a nil stack: %v", err)
	}
}
