package cli

import (
	"context"
	"errors"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentsaga/agentsaga/plan"
)

// zeros is an endless reader, like /dev/zero, that counts what it gave.
type zeros struct{ n int }

func (z *zeros) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = '0'
	}
	z.n += len(p)
	return len(p), nil
}

// An endless plan is refused after the limit + 1 byte, exit 2 naming it,
// before any connection.
func TestRunReadsAtMostThePlanLimit(t *testing.T) {
	limit := plan.DefaultLimits().MaxPlanBytes
	z := &zeros{}
	err := run(context.Background(), []string{"run", "--plan", "-", "--address", unreachable}, z, io.Discard)
	if code(err) != 2 || !strings.Contains(err.Error(), strconv.Itoa(limit)) {
		t.Fatalf("endless stdin: exit %d, %v; want exit 2 naming the limit %d", code(err), err, limit)
	}
	if z.n > limit+1 {
		t.Errorf("read %d bytes of an endless plan; the limit is %d", z.n, limit)
	}
	err = run(context.Background(), []string{"run", "--plan", "/dev/zero", "--address", unreachable}, nil, io.Discard)
	if code(err) != 2 || !strings.Contains(err.Error(), strconv.Itoa(limit)) {
		t.Fatalf("--plan /dev/zero: exit %d, %v; want exit 2 naming the limit", code(err), err)
	}
}

// blocked is a reader that blocks until closed, like a terminal nobody
// types into; entered is closed when the first Read starts.
type blocked struct{ entered, release chan struct{} }

func (b *blocked) Read([]byte) (int, error) {
	close(b.entered)
	<-b.release
	return 0, io.EOF
}

// Ctrl-C (a cancelled context) ends `run` while it waits for the plan: on
// standard input that never ends, and on a fifo that no one writes.
func TestRunHonoursCancelWhileReading(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	in := &blocked{entered: make(chan struct{}), release: make(chan struct{})}
	defer close(in.release)
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"run", "--plan", "-", "--address", unreachable}, in, io.Discard)
	}()
	<-in.entered
	cancel()
	select {
	case err := <-done:
		if code(err) != 1 || !strings.Contains(err.Error(), "interrupted") {
			t.Errorf("cancelled while reading stdin: exit %d, %v; want exit 1 saying it was interrupted", code(err), err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return 10 s after its context was cancelled")
	}

	fifo := filepath.Join(t.TempDir(), "plan.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("no fifo here: %v", err)
	}
	ctx2, cancel2 := context.WithCancel(context.Background())
	cancel2() // Ctrl-C already pressed: the open of a fifo without writer blocks forever
	go func() {
		done <- run(ctx2, []string{"run", "--plan", fifo, "--address", unreachable}, nil, io.Discard)
	}()
	select {
	case err := <-done:
		if code(err) != 1 || !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled on a fifo: exit %d, %v; want exit 1 wrapping context.Canceled", code(err), err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run hung on a fifo no one writes, although its context was cancelled")
	}
}
