package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/ledger/ledgersqlite"
)

// Issue 35, item 8: an approval rejected before any call leaves no
// operation row, only its decisions; `starter audit KEY` shows them (a
// refused attempt, the rejection) from a real ledger instead of answering
// "no operation".
func TestAuditShowsDecisionsOfAKeyThatNeverRan(t *testing.T) {
	ctx := context.Background()
	st, err := ledgersqlite.Open(ctx, filepath.Join(t.TempDir(), "ledger.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	at := time.Date(2026, 12, 6, 19, 0, 0, 0, time.UTC)
	const key = "s35:1:1:apply_refund"
	for _, d := range []ledger.DecisionRecord{
		{QuestionID: "q-1-approval-1", Key: key, WorkflowID: "agent-plan:s35:1", Kind: "refused", By: "mallory", SentAt: at, AppliedAt: at,
			Refused: "mallory may not approve (the operators file gives them no approve right)"},
		{QuestionID: "q-1-approval-1", Key: key, WorkflowID: "agent-plan:s35:1", Kind: "reject", By: "alice", Verified: true, SentAt: at.Add(time.Minute), AppliedAt: at.Add(time.Minute),
			Note: "not this customer"},
	} {
		_, err := st.RecordDecision(ctx, d)
		require.NoError(t, err)
	}
	_, err = st.Get(ctx, key)
	require.ErrorIs(t, err, ledger.ErrNotFound, "the test needs a key with no row")

	var out bytes.Buffer
	require.NoError(t, audit(ctx, st, key, &out, false))
	txt := out.String()
	for _, want := range []string{
		"operation s35:1:1:apply_refund  no call was made",
		"refused by mallory (unverified), question q-1-approval-1, sent 2026-12-06T19:00:00Z",
		"REFUSED    mallory may not approve (the operators file gives them no approve right)",
		"reject by alice (verified), question q-1-approval-1",
		"note       not this customer",
	} {
		require.Contains(t, txt, want)
	}

	out.Reset()
	require.NoError(t, audit(ctx, st, key, &out, true))
	var got struct {
		Operation *ledger.Operation       `json:"operation"`
		Decisions []ledger.DecisionRecord `json:"decisions"`
	}
	require.NoError(t, json.Unmarshal(out.Bytes(), &got))
	require.Nil(t, got.Operation)
	require.Len(t, got.Decisions, 2)

	err = audit(ctx, st, "s35:1:2:apply_refund", &out, false)
	require.Equal(t, 1, code(err))
	require.ErrorContains(t, err, "no operation with key")
}
