package workflows_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/workflows"
)

// A second run of a plan that compensated (what a reset to the first
// workflow task starts) finds its first step compensated in the ledger: it
// ends compensated again, truthfully, without calling a tool or a reversal.
func TestRerunOfACompensatedPlanEndsCompensatedWithoutCalls(t *testing.T) {
	h := newHarness(t)
	h.p.fail("ship", "reject")
	p := newPlan("rr1", step("read_order", "o1", 1), step("charge", "o1", 100), step("invoice", "o1", 100), step("ship", "o1", 100))
	first := run(t, h.env(), p)
	require.Equal(t, workflows.SagaCompensated, first.State)
	calls := len(h.p.calls)

	again := run(t, h.env(), p)
	require.Equal(t, workflows.SagaCompensated, again.State, "error: %s", again.Error)
	require.Contains(t, again.Error, "step 2 (charge) was compensated by an earlier run")
	require.Equal(t, ledger.Compensated, again.Steps[1].State)
	require.Contains(t, again.Steps[1].LastError, "neither the tool nor its reversal was called")
	require.Equal(t, ledger.Pending, again.Steps[2].State, "not run")
	require.Contains(t, again.Steps[3].LastError, "not run")
	require.Len(t, h.p.calls, calls+1, "only the read ran again")
	require.Equal(t, 1, h.p.count("charge"))
	require.Equal(t, 1, h.p.count("charge_reverse"))
	require.Equal(t, 1, h.p.count("invoice_storno"))
}
