package plan_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/plan"
)

// requested_by is an identity four eyes compares: one with an invisible or
// formatting character is refused (issue 16, item 10).
func TestRequestedByWithAnInvisibleCharacterIsRefused(t *testing.T) {
	base := plan.Plan{SessionID: "s", Turn: 1, Steps: []plan.Step{{Tool: "query_order", Args: json.RawMessage(`{"order_id":"o1"}`)}}}
	base.RequestedBy = "Jos\u00e9"
	require.NoError(t, base.ValidateWith(catalog, plan.DefaultLimits()))
	for _, by := range []string{"alice\u200b", "\u3164alice", "al\u00adice", "alice\ufe0f"} {
		p := base
		p.RequestedBy = by
		err := p.ValidateWith(catalog, plan.DefaultLimits())
		require.ErrorContains(t, err, "requested_by", "%q", by)
		require.ErrorContains(t, err, "invisible", "%q", by)
	}
}
