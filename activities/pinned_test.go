package activities_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/activities"
	"github.com/agentsaga/agentsaga/tool"
)

// A request carries the spec its plan pinned: approval comes from it, not
// from the registry. A request without one (recorded by an older workflow)
// runs with the registry's spec.
func TestPinnedSpecDecidesApproval(t *testing.T) {
	ft := writeTool("refund", tool.NonIdempotentWrite)
	ft.spec.Approval = &tool.Approval{Field: "amount_minor", AboveMinor: 100}
	e := newEnv(t, nil, ft)
	args := `{"order_id":"o-1","amount_minor":20000}`

	_, err := e.execute(request(t, "old:1:1:refund", "refund", args))
	require.Equal(t, activities.ErrNoPermit, appErr(t, err).Type(), "no pin: the registry's threshold")

	started := ft.spec
	started.Approval = &tool.Approval{Field: "amount_minor", AboveMinor: 50000}
	req := request(t, "new:1:1:refund", "refund", args)
	req.Pinned = activities.PinnedOf(started)
	out, err := e.execute(req)
	require.NoError(t, err, "the pinned threshold needs no approval for 200.00")
	require.NotEmpty(t, out.ExternalID)
	executed, _ := ft.calls()
	require.Equal(t, 1, executed)
	require.Nil(t, activities.PinnedOf(tool.Spec{}), "a spec without a class pins nothing")
}
