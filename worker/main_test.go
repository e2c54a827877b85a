package main

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// captureStderr runs f with os.Stderr and os.Stdout redirected and returns
// what it printed.
func captureOutput(t *testing.T, f func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	require.NoError(t, err)
	stderr, stdout := os.Stderr, os.Stdout
	os.Stderr, os.Stdout = w, w
	done := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		done <- string(b)
	}()
	f()
	os.Stderr, os.Stdout = stderr, stdout
	require.NoError(t, w.Close())
	return <-done
}

// `worker --help` and flag errors never print a secret from the environment.
func TestHelpAndFlagErrorsPrintNoSecret(t *testing.T) {
	secrets := map[string]string{
		"TEMPORAL_API_KEY":        "tmprl-api-key-very-secret-0123456789",
		"AGENTSAGA_LEDGER":        "postgres://agentsaga:pg-pass-very-secret@db:5432/agentsaga",
		"AGENTSAGA_CODEC_KEYS":    "k1:QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVowMTIzNDU=",
		"AGENTSAGA_SANDBOX_TOKEN": "sandbox-token-very-secret",
	}
	for k, v := range secrets {
		t.Setenv(k, v)
	}
	for _, args := range [][]string{{"--help"}, {"--no-such-flag"}, {"--port", "notanumber"}} {
		out := captureOutput(t, func() { _ = run(context.Background(), args) })
		require.NotEmpty(t, out, "%v printed its usage", args)
		for name, v := range secrets {
			require.NotContains(t, out, v, "%v printed %s", args, name)
			require.NotContains(t, out, "pg-pass-very-secret", "%v printed the DSN's password", args)
		}
		require.True(t, strings.Contains(out, "-ledger") || strings.Contains(out, "flag"), "%v: %s", args, out)
	}
}

// freeBase returns a --port value whose derived dev ports (HTTP API +10,
// codec +1001, UI +1000 as passed here, metrics +2231) and the sandbox port
// (+857) are all free right now.
func freeBase(t *testing.T, skip ...int) int {
	t.Helper()
	for base := 21000 + os.Getpid()%500*20; base < 60000; base += 37 {
		if slices.Contains(skip, base) {
			continue
		}
		ok := true
		for _, off := range []int{0, 10, 1000, 1001, 2231, 857} {
			l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(base+off)))
			if err != nil {
				ok = false
				break
			}
			_ = l.Close()
		}
		if ok {
			return base
		}
	}
	t.Fatal("no free range of ports")
	return 0
}

// devArgs are the flags of a dev stack that moves every port with base.
func devArgs(t *testing.T, base int) []string {
	return []string{"--dev", "--port", strconv.Itoa(base), "--ui-port", strconv.Itoa(base + 1000),
		"--sandbox-addr", net.JoinHostPort("127.0.0.1", strconv.Itoa(base+857)), "--data-dir", t.TempDir()}
}

// waitServing polls addr until it accepts a connection or the run ended.
func waitServing(t *testing.T, addr string, done <-chan error) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		select {
		case err := <-done:
			t.Fatalf("the dev stack ended before %s served: %v", addr, err)
		default:
		}
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			_ = c.Close()
			return
		}
		time.Sleep(50 * time.Millisecond) // polling a real condition, with a deadline
	}
	t.Fatalf("%s did not serve within 2 minutes", addr)
}

// Two `worker --dev` on one machine: moving --port, --ui-port and
// --sandbox-addr moves every other port (HTTP API, codec, metrics) too, and
// both stacks run side by side.
func TestTwoDevStacksOnOneMachine(t *testing.T) {
	t.Setenv("AGENTSAGA_SANDBOX_URL", "")
	t.Setenv("AGENTSAGA_METRICS_ADDR", "")
	t.Setenv("AGENTSAGA_CODEC_KEYS", "")
	t.Setenv("AGENTSAGA_CODEC_KEYS_FILE", "")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first := freeBase(t)
	second := freeBase(t, first, first+37)
	var dones []chan error
	for _, base := range []int{first, second} {
		done := make(chan error, 1)
		args := devArgs(t, base)
		go func() { done <- run(ctx, args) }()
		dones = append(dones, done)
		// The metrics endpoint is the last thing the stack starts.
		waitServing(t, net.JoinHostPort("127.0.0.1", strconv.Itoa(base+2231)), done)
		for _, off := range []int{0, 10, 1000, 1001, 857} {
			waitServing(t, net.JoinHostPort("127.0.0.1", strconv.Itoa(base+off)), done)
		}
	}
	cancel()
	for _, done := range dones {
		require.NoError(t, <-done)
	}
}

// A port that is taken fails the start with a message naming the flag that
// moves it.
func TestTakenPortNamesTheFlag(t *testing.T) {
	t.Setenv("AGENTSAGA_SANDBOX_URL", "")
	t.Setenv("AGENTSAGA_METRICS_ADDR", "")
	base := freeBase(t)
	for flagName, off := range map[string]int{"--http-port": 10, "--codec-addr": 1001, "--metrics-addr": 2231} {
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(base+off)))
		require.NoError(t, err)
		err = run(context.Background(), devArgs(t, base))
		_ = l.Close()
		require.Error(t, err, flagName)
		require.Contains(t, err.Error(), "pass "+flagName, flagName)
	}
}

// A catalogue with problems stops the worker before it connects, naming
// every problem; without --tools and without --sandbox-url it says what to
// give.
func TestToolsFileProblemsStopTheWorker(t *testing.T) {
	t.Setenv("AGENTSAGA_SANDBOX_URL", "")
	t.Setenv("AGENTSAGA_TOOLS", "")
	bad := filepath.Join(t.TempDir(), "tools.yaml")
	require.NoError(t, os.WriteFile(bad, []byte("version: 1\ntools:\n  - name: pay\n    class: MAYBE_WRITE\n    system: nowhere\n"), 0o600))
	err := run(context.Background(), []string{"--tools", bad, "--address", "127.0.0.1:1", "--allow-unverified-decisions"})
	require.Error(t, err)
	for _, want := range []string{"--tools", "tools[0].class", "tools[0].system"} {
		require.Contains(t, err.Error(), want)
	}
	err = run(context.Background(), []string{"--address", "127.0.0.1:1", "--allow-unverified-decisions"})
	require.ErrorContains(t, err, "give --tools FILE")
}
