package workflows_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/plan"
	"github.com/agentsaga/agentsaga/workflows"
)

// Consecutive reads run at once: each of the three waits until all three
// are in flight.
func TestConsecutiveReadsRunAtOnce(t *testing.T) {
	h := newHarness(t)
	h.p.barrier, h.p.barrierN = make(chan struct{}), 3
	st := run(t, h.env(), newPlan("p1", step("read_order", "o1", 1), step("read_order", "o2", 1), step("read_order", "o3", 1), step("charge", "o1", 100)))
	require.Equal(t, workflows.SagaSucceeded, st.State, "%+v", st.Steps)
}

// In a parallel plan a failed sibling waits for the others in flight, then
// the plan compensates them in reverse order of completion.
func TestParallelFailureCompensatesInReverseCompletionOrder(t *testing.T) {
	h := newHarness(t)
	h.p.fail("invoice", "reject")
	h.p.slow["p2:1:1:charge"] = true // charge completes after refund, against plan order
	p := newPlan("p2", step("charge", "o1", 100), step("refund", "o1", 100), step("invoice", "o1", 100))
	p.Parallel = true
	st := run(t, h.env(), p)
	require.Equal(t, workflows.SagaCompensated, st.State)
	require.Equal(t, ledger.Compensated, st.Steps[0].State)
	require.Equal(t, ledger.Compensated, st.Steps[1].State)

	var done, undone []string
	for _, c := range h.p.calls {
		var name, key string
		fmt.Sscan(c, &name, &key)
		switch name {
		case "charge", "refund":
			done = append(done, key)
		case "charge_reverse":
			undone = append(undone, strings.TrimSuffix(key, ":compensate"))
		}
	}
	require.Equal(t, []string{"p2:1:2:refund", "p2:1:1:charge"}, done, "completion order")
	require.Equal(t, []string{done[1], done[0]}, undone, "reversed newest completion first")
}

// A parallel plan cannot hold a write that cannot be undone.
func TestParallelPlanRefusesAnIrreversibleWrite(t *testing.T) {
	h := newHarness(t)
	p := newPlan("p3", step("charge", "o1", 100), step("email", "o1", 1))
	p.Parallel = true
	err := p.Validate(h.reg.Specs())
	require.ErrorContains(t, err, "cannot run in a parallel plan")
	require.True(t, plan.IsValidation(err))
}
