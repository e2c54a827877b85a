package activities

import (
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/ledger"
)

// Every holder of the scope is on the card (in Others) and named for the
// permit, however many other operations come before it; ended operations,
// held ones and the call's own key are not holders.
func TestCardHolders(t *testing.T) {
	var ops []ledger.Operation
	for i := range maxOthers + 2 {
		ops = append(ops, ledger.Operation{Key: fmt.Sprintf("ended-%d", i), Status: ledger.Compensated})
	}
	ops = append(ops,
		ledger.Operation{Key: "self", Status: ledger.InProgress},
		ledger.Operation{Key: "held", Status: ledger.NeedsHuman, HoldReason: "guard"},
		ledger.Operation{Key: "old-holder", Status: ledger.Succeeded},
		ledger.Operation{Key: "failed", Status: ledger.FailedFinal},
	)
	others := slices.Clone(ops[:maxOthers])
	holders, shown := cardHolders(ops, "self", others)
	require.Equal(t, []string{"old-holder"}, holders)
	require.Len(t, shown, maxOthers+1)
	require.Equal(t, "old-holder", shown[maxOthers].Key)

	holders, shown = cardHolders(ops[maxOthers+2:], "self", ops[maxOthers+2:])
	require.Equal(t, []string{"old-holder"}, holders)
	require.Len(t, shown, 4, "a holder already listed is not listed twice")
}
