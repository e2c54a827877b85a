package devserver

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// takePortsOnChoice makes the next `times` port choices lose the history
// port to another listener before the server binds it, the race behind a
// start that died in `worker --dev` (the server's Fatal "Failed to start gRPC
// listener"). It returns how many choices were made.
func takePortsOnChoice(t *testing.T, times int) *int {
	t.Helper()
	calls := 0
	var held []net.Listener
	testHookPortsChosen = func(p *ports) {
		calls++
		if calls > times {
			return
		}
		l, err := net.Listen("tcp", net.JoinHostPort(internalHost, strconv.Itoa(p.history)))
		if err != nil {
			t.Errorf("take the history port %d: %v", p.history, err)
			return
		}
		held = append(held, l)
	}
	t.Cleanup(func() {
		testHookPortsChosen = nil
		for _, l := range held {
			l.Close()
		}
	})
	return &calls
}

func quietLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// TestStartChoosesAgainWhenAPortIsTaken checks that a port taken between its
// choice and the server's bind costs a new choice of ports, not the process.
func TestStartChoosesAgainWhenAPortIsTaken(t *testing.T) {
	calls := takePortsOnChoice(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := Start(ctx, Options{UIPort: NoUI, Logger: quietLogger(t)})
	if err != nil {
		t.Fatalf("Start with the history port taken once: %v", err)
	}
	if err := s.Stop(); err != nil {
		t.Errorf("Stop: %v", err)
	}
	if *calls != 2 {
		t.Errorf("ports were chosen %d times, want 2 (the first choice lost a port)", *calls)
	}
}

// TestStartReportsPortsTakenEveryTime checks that when every choice loses a
// port, Start gives up after maxPortAttempts with an error naming the port
// and the service, and the process lives on.
func TestStartReportsPortsTakenEveryTime(t *testing.T) {
	calls := takePortsOnChoice(t, maxPortAttempts)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := Start(ctx, Options{UIPort: NoUI, Logger: quietLogger(t)})
	if err == nil {
		s.Stop()
		t.Fatal("Start succeeded although every choice of ports lost the history port")
	}
	if !errors.Is(err, errPortTaken) || !strings.Contains(err.Error(), "service=history") {
		t.Errorf("Start: %v; want errPortTaken naming service=history", err)
	}
	if *calls != maxPortAttempts {
		t.Errorf("ports were chosen %d times, want %d", *calls, maxPortAttempts)
	}
}

// TestPickPorts checks that the chosen ports are distinct, that the ones the
// kernel chose are parked in TIME_WAIT yet bindable, and that the UI's port
// stays held.
func TestPickPorts(t *testing.T) {
	for range 20 {
		p, uiHold, err := pickPorts(Options{Host: DefaultHost, Port: 0, UIPort: 0})
		if err != nil {
			t.Fatal(err)
		}
		all := []int{p.frontend, p.frontendHTTP, p.history, p.matching, p.worker, p.ui}
		seen := map[int]bool{}
		for _, port := range all {
			if seen[port] {
				t.Fatalf("port %d chosen twice: %+v", port, p)
			}
			seen[port] = true
		}
		if l, err := net.Listen("tcp", net.JoinHostPort(DefaultHost, strconv.Itoa(p.ui))); err == nil {
			l.Close()
			t.Fatalf("the UI port %d was free after pickPorts; want it held for startUI", p.ui)
		}
		uiHold.Close()

		parked := timeWaitPorts(t)
		for _, port := range all[:5] {
			if parked != nil && !parked[port] {
				t.Errorf("port %d is not parked in TIME_WAIT", port)
			}
			l, err := net.Listen("tcp", net.JoinHostPort(DefaultHost, strconv.Itoa(port)))
			if err != nil {
				t.Fatalf("the server could not bind chosen port %d: %v", port, err)
			}
			l.Close()
		}
	}
}

// timeWaitPorts returns the local IPv4 ports in TIME_WAIT, or nil (with a
// logged reason) where /proc/net/tcp does not exist.
func timeWaitPorts(t *testing.T) map[int]bool {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Logf("TIME_WAIT not checked: /proc/net/tcp is Linux only (GOOS=%s)", runtime.GOOS)
		return nil
	}
	f, err := os.Open("/proc/net/tcp")
	if err != nil {
		t.Fatalf("read the socket table: %v", err)
	}
	defer f.Close()
	ports := map[int]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 4 || fields[3] != "06" { // 06: TIME_WAIT
			continue
		}
		_, hexPort, ok := strings.Cut(fields[1], ":")
		if !ok {
			continue
		}
		var port int
		if _, err := fmt.Sscanf(hexPort, "%X", &port); err == nil {
			ports[port] = true
		}
	}
	return ports
}
