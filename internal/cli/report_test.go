package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/config"
	"github.com/agentsaga/agentsaga/ledger"
)

// TestReportReadsTheSeedsFiguresFromTheLedger: `starter report` finds the
// worker's ledger as the other ledger commands do and prints the figures the
// rows imply, in JSON and text.
func TestReportReadsTheSeedsFiguresFromTheLedger(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(config.EnvLedger, "")
	t.Setenv(config.EnvDataDir, dir)
	store, err := openLedger(t, config.DefaultLedger(dir))
	require.NoError(t, err)
	ctx := context.Background()
	claim := func(key, tool, summary string) {
		t.Helper()
		c, err := store.Claim(ctx, ledger.ClaimRequest{Key: key, ActionType: tool, RequestHash: "h", Executor: "w1", Lease: time.Minute, Summary: summary})
		require.NoError(t, err)
		require.Equal(t, ledger.Execute, c.Verdict)
	}
	complete := func(key string, st ledger.Status) {
		t.Helper()
		_, err := store.Complete(ctx, ledger.Completion{Key: key, Executor: "w1", Status: st})
		require.NoError(t, err)
	}
	claim("s:1:1:apply_refund", "apply_refund", "apply_refund order_id ord_1 129.00 EUR s:1:1:apply_refund")
	complete("s:1:1:apply_refund", ledger.Succeeded)
	c, err := store.Claim(ctx, ledger.ClaimRequest{Key: "s:1:1:apply_refund", ActionType: "apply_refund", RequestHash: "h", Executor: "w2", Lease: time.Minute})
	require.NoError(t, err)
	require.Equal(t, ledger.Replay, c.Verdict)
	claim("s:1:2:apply_refund", "apply_refund", "apply_refund order_id ord_2 1,500.00 EUR s:1:2:apply_refund")
	complete("s:1:2:apply_refund", ledger.Unknown)
	claim("s:1:3:send_email", "send_email", "send_email to ana@example.com s:1:3:send_email")
	complete("s:1:3:send_email", ledger.Unknown)
	_, err = store.Resolve(ctx, ledger.Resolution{Key: "s:1:3:send_email", Status: ledger.Succeeded, By: "bob"})
	require.NoError(t, err)
	_, err = store.RecordDecision(ctx, ledger.DecisionRecord{QuestionID: "q1-step3-outcome", Key: "s:1:3:send_email", Kind: "resolve", By: "bob"})
	require.NoError(t, err)
	require.NoError(t, store.Close())

	var out bytes.Buffer
	require.NoError(t, run(ctx, []string{"report", "--json"}, nil, &out))
	var v struct {
		Window            string  `json:"window"`
		FirstAttemptShare float64 `json:"first_attempt_share"`
		Totals            struct {
			Operations   int `json:"operations"`
			FirstAttempt int `json:"first_attempt"`
			Replays      int `json:"replays"`
			Unknown      int `json:"unknown"`
		} `json:"totals"`
		Unknown struct {
			Total   int `json:"total"`
			ByHuman int `json:"settled_by_human"`
			Open    int `json:"open"`
		} `json:"unknown"`
		Humans struct {
			Operations int            `json:"operations"`
			Why        map[string]int `json:"why"`
			Measured   int            `json:"measured"`
		} `json:"humans"`
		Queue []struct {
			Kind  string `json:"kind"`
			Count int    `json:"count"`
		} `json:"queue"`
		Uncertain struct {
			Operations int `json:"operations"`
			Amounts    []struct {
				Currency string `json:"currency"`
				Minor    int64  `json:"minor"`
			} `json:"amounts"`
		} `json:"uncertain"`
		Notes []string `json:"notes"`
	}
	require.NoError(t, json.Unmarshal(out.Bytes(), &v), out.String())
	require.Equal(t, "the last 24h0m0s", v.Window)
	require.Equal(t, 3, v.Totals.Operations)
	require.Equal(t, 1, v.Totals.FirstAttempt)
	require.InDelta(t, 1.0/3, v.FirstAttemptShare, 1e-9)
	require.Equal(t, 1, v.Totals.Replays)
	require.Equal(t, 2, v.Totals.Unknown)
	require.Equal(t, 1, v.Unknown.ByHuman)
	require.Equal(t, 1, v.Unknown.Open)
	require.Equal(t, 1, v.Humans.Operations)
	require.Equal(t, map[string]int{"outcome": 1}, v.Humans.Why)
	require.Equal(t, 1, v.Humans.Measured, "the resolve is measured from the moment the email became unknown")
	require.Len(t, v.Queue, len(ledger.ExceptionKinds))
	require.Equal(t, 1, v.Uncertain.Operations)
	require.Len(t, v.Uncertain.Amounts, 1)
	require.Equal(t, "EUR", v.Uncertain.Amounts[0].Currency)
	require.EqualValues(t, 150000, v.Uncertain.Amounts[0].Minor)
	require.NotEmpty(t, v.Notes)

	out.Reset()
	require.NoError(t, run(ctx, []string{"report", "--since", "0"}, nil, &out))
	txt := out.String()
	requireNeutral(t, txt)
	for _, want := range []string{"everything in the ledger", "share done on the first attempt   33.3% (1 of 3)", "duplicates absorbed (replays)     1",
		"1 by a person, 1 open", "150,000 minor units of EUR in 1", "refused calls are not stored", "unknown 1"} {
		require.True(t, strings.Contains(txt, want), "report lacks %q:\n%s", want, txt)
	}

	err = run(ctx, []string{"report", "--since", "-1h"}, nil, &out)
	require.Equal(t, 2, code(err))
}

// No form of a ledger DSN prints its password, parsed or not, in the text
// or the JSON error of any ledger command.
func TestLedgerCommandsPrintNoDSNPassword(t *testing.T) {
	ctx := context.Background()
	for _, dsn := range []string{"postgres://postgres:hunter2@[::1", "host=127.0.0.1 password=hunter2", "host=db password='hunter2 x'"} {
		for _, cmd := range [][]string{{"report"}, {"exceptions"}, {"audit", "k"}, {"report", "--json"}} {
			var out bytes.Buffer
			err := run(ctx, append(append([]string{}, cmd...), "--ledger", dsn), nil, &out)
			require.Error(t, err, "%v %s", cmd, dsn)
			require.NotContains(t, err.Error()+out.String(), "hunter2", "%v %s", cmd, dsn)
		}
	}
}
