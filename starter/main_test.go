package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func code(err error) int {
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	if err != nil {
		return 1
	}
	return 0
}

func TestBadPlanIsRefusedBeforeAnythingStarts(t *testing.T) {
	plan := `{"session_id":"s","turn":1,"steps":[
		{"tool":"apply_refund","args":{"order_id":"ord_1001","amount_minor":129.00,"currency":"EUR"}},
		{"tool":"teleport","args":{}}]}`
	var out bytes.Buffer
	// No Temporal runs at this address: the plan must be refused before any
	// connection is tried.
	err := run(context.Background(), []string{"run", "--plan", "-", "--address", "127.0.0.1:1"}, strings.NewReader(plan), &out)
	require.Equal(t, 2, code(err))
	require.ErrorContains(t, err, "steps[1].args.amount_minor: must be an integer, got 129.00")
	require.ErrorContains(t, err, `steps[2].tool: unknown tool "teleport"`)
}

func TestUsageErrorsExitTwo(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"nope"},
		{"run"},
		{"status"},
		{"approve", "agent-plan:s:1", "--step", "1"},
		{"resolve", "agent-plan:s:1", "--step", "1", "--by", "x", "--outcome", "maybe"},
		{"ledger", "purge", "--older-than", "1h"},
		{"sandbox", "fault", "--op", "refunds.create", "--kind", "explode"},
	} {
		err := run(context.Background(), args, strings.NewReader(""), &bytes.Buffer{})
		require.Equal(t, 2, code(err), "%v: %v", args, err)
	}
}
