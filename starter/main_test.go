package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/agentsaga/agentsaga/internal/cli"
)

// The dev commands are listed and answer --help with their flags; bad usage
// exits 2, as every command of the CLI does.
func TestDevCommandsHelpAndUsage(t *testing.T) {
	var top bytes.Buffer
	if err := run(context.Background(), []string{"help"}, nil, &top); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"usage: starter <command>", "sandbox effects", "demo [--ui]", "chaos [--plans N]", "bench [--rounds N]", "approve ID"} {
		if !strings.Contains(top.String(), want) {
			t.Errorf("help lacks %q", want)
		}
	}
	for _, cmd := range [][]string{{"demo"}, {"chaos"}, {"bench"}, {"sandbox", "effects"}, {"sandbox", "fault"}, {"sandbox", "serve"}} {
		var out bytes.Buffer
		if err := run(context.Background(), append(cmd, "--help"), nil, &out); err != nil {
			t.Fatalf("%v --help: %v", cmd, err)
		}
		if !strings.Contains(out.String(), "usage: starter "+strings.Join(cmd, " ")) || !strings.Contains(out.String(), "  -json") {
			t.Errorf("%v --help:\n%s", cmd, out.String())
		}
	}
	for _, args := range [][]string{{"sandbox"}, {"sandbox", "fault", "--op", "refunds.create", "--kind", "explode"}, {"demo", "extra"}, {"chaos", "--plans", "-1"},
		{"bench", "--address", "127.0.0.1:7233"}, {"bench", "--namespace", "ns"}, {"bench", "--address", "127.0.0.1:7233", "--namespace", "ns", "--durable"}} {
		var stderr bytes.Buffer
		err := run(context.Background(), args, nil, &bytes.Buffer{})
		if code := cli.Report(&stderr, err, false); code != 2 {
			t.Errorf("%q: exit %d (%v), want 2", args, code, err)
		}
	}
}
