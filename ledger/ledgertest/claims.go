package ledgertest

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/ledger"
)

// testQuestionClaims: a claim on a question is one row shared by every
// handle on the ledger (every console process), taken by compare and set:
// of operators who claim at once exactly one holds it and the others get
// ErrClaimed naming the holder and change nothing. The holder renews it
// keeping Since; only the holder releases a live claim; a lapsed claim is
// anyone's, is not listed, and Purge forgets it.
func testQuestionClaims(t *testing.T, h Harness) {
	e := newEnv(t, h)
	other := h.Open(t, e.loc, e.clock.Now) // a second console process
	t.Cleanup(func() { _ = other.Close() })
	at := e.clock.Now().Truncate(time.Microsecond)

	list, err := e.store.QuestionClaims(e.ctx)
	require.NoError(t, err)
	require.Empty(t, list)

	// Eight operators on two consoles claim the same question at once.
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			s := e.store
			if i%2 == 1 {
				s = other
			}
			_, errs[i] = s.ClaimQuestion(e.ctx, "wf-1", "q-1", "op"+string(rune('a'+i)), 15*time.Minute)
		})
	}
	wg.Wait()
	winner := ""
	for i, err := range errs {
		if err == nil {
			require.Empty(t, winner, "two operators hold one question")
			winner = "op" + string(rune('a'+i))
		} else {
			require.ErrorIs(t, err, ledger.ErrClaimed)
		}
	}
	require.NotEmpty(t, winner, "one of them holds it")
	for _, err := range errs {
		if err != nil {
			require.Contains(t, err.Error(), winner, "the refusal names the holder")
		}
	}

	list, err = other.QuestionClaims(e.ctx)
	require.NoError(t, err)
	require.Equal(t, []ledger.QuestionClaim{{WorkflowID: "wf-1", QuestionID: "q-1", By: winner, Since: at, Until: at.Add(15 * time.Minute)}},
		normalize(list), "another console sees who holds it, since when and until when")

	// Someone else's claim or release changes nothing and names the holder.
	loser := "someone-else"
	got, err := other.ClaimQuestion(e.ctx, "wf-1", "q-1", loser, time.Minute)
	require.ErrorIs(t, err, ledger.ErrClaimed)
	require.Equal(t, winner, got.By)
	got, err = other.ReleaseQuestion(e.ctx, "wf-1", "q-1", loser)
	require.ErrorIs(t, err, ledger.ErrClaimed)
	require.Equal(t, winner, got.By)

	// The holder renews it: Since kept, Until moved.
	e.clock.Advance(10 * time.Minute)
	got, err = e.store.ClaimQuestion(e.ctx, "wf-1", "q-1", winner, 15*time.Minute)
	require.NoError(t, err)
	require.True(t, got.Since.Equal(at), "a renewal keeps Since")
	require.True(t, got.Until.Equal(at.Add(25*time.Minute)), "a renewal moves Until")

	// It lapses: not listed, anyone's, with a new Since.
	e.clock.Advance(15 * time.Minute)
	list, err = e.store.QuestionClaims(e.ctx)
	require.NoError(t, err)
	require.Empty(t, list, "a lapsed claim is not listed")
	got, err = other.ClaimQuestion(e.ctx, "wf-1", "q-1", loser, time.Minute)
	require.NoError(t, err, "a lapsed claim is anyone's")
	require.Equal(t, loser, got.By)
	require.True(t, got.Since.Equal(at.Add(25*time.Minute)), "a new holder starts a new Since")

	// The holder releases it; releasing nothing is no error.
	got, err = other.ReleaseQuestion(e.ctx, "wf-1", "q-1", loser)
	require.NoError(t, err)
	require.Empty(t, got.By)
	_, err = e.store.ReleaseQuestion(e.ctx, "wf-1", "q-1", winner)
	require.NoError(t, err, "nothing to release")
	got, err = e.store.ClaimQuestion(e.ctx, "wf-1", "q-1", winner, time.Minute)
	require.NoError(t, err, "released: anyone's")
	require.Equal(t, winner, got.By)

	// Claims are per question; Purge forgets only lapsed ones.
	_, err = e.store.ClaimQuestion(e.ctx, "wf-1", "q-2", loser, time.Hour)
	require.NoError(t, err)
	e.clock.Advance(2 * time.Minute) // q-1's minute lapsed
	_, err = e.store.Purge(e.ctx, e.clock.Now())
	require.NoError(t, err)
	var rows int
	require.NoError(t, e.db().QueryRowContext(e.ctx, `SELECT COUNT(*) FROM question_claims`).Scan(&rows))
	require.Equal(t, 1, rows, "Purge forgot the lapsed claim and kept the live one")

	// Bad input is refused naming the field and the limit.
	for _, bad := range []struct {
		wf, q, by, field string
		d                time.Duration
	}{
		{"", "q", "a", "WorkflowID", time.Minute},
		{strings.Repeat("w", ledger.MaxClaimIdent+1), "q", "a", "WorkflowID", time.Minute},
		{"w", "", "a", "QuestionID", time.Minute},
		{"w", "q\x00", "a", "QuestionID", time.Minute},
		{"w", "q", "", "By", time.Minute},
		{"w", "q", strings.Repeat("b", ledger.MaxClaimBy+1), "By", time.Minute},
		{"w", "q", "a", "duration", 0},
		{"w", "q", "a", "duration", ledger.MaxClaimFor + time.Second},
	} {
		_, err := e.store.ClaimQuestion(e.ctx, bad.wf, bad.q, bad.by, bad.d)
		require.ErrorContains(t, err, bad.field)
		require.NotErrorIs(t, err, ledger.ErrClaimed)
	}
	_, err = e.store.ReleaseQuestion(e.ctx, "w", "q", strings.Repeat("b", ledger.MaxClaimBy+1))
	require.ErrorContains(t, err, "By")
}

func normalize(cs []ledger.QuestionClaim) []ledger.QuestionClaim {
	for i := range cs {
		cs[i].Since, cs[i].Until = cs[i].Since.UTC(), cs[i].Until.UTC()
	}
	return cs
}
