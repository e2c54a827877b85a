package integration

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/internal/cli"
)

// Invalid input costs nothing: `starter run` without --tools sends a plan
// whose amount is a float; the worker's workflow refuses it, run exits 2
// with the workflow's words, `status` says the plan was refused and why, and
// the corrected plan under the same session and turn runs to success.
func TestRefusedPlanLeavesItsTurnFree(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	st := sharedStack(t)
	dir := t.TempDir()
	starter := func(args ...string) (string, string, int) {
		t.Helper()
		var out, errOut bytes.Buffer
		args = append(args, "--address", st.Server.FrontendAddr(), "--namespace", st.Server.Namespace())
		code := cli.Report(&errOut, cli.Run(ctx, args, nil, &out, cli.Config{}), false)
		return out.String(), errOut.String(), code
	}
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
		return p
	}
	bad := write("bad.json", `{"session_id":"it-refused","turn":1,"requested_by":"it","steps":[{"tool":"apply_refund","args":{"order_id":"ord_7001","amount_minor":25.5,"currency":"EUR","reason":"damaged"}}]}`)
	out, errOut, code := starter("run", "--plan", bad)
	require.Equal(t, 2, code, "an invalid plan is exit 2:\n%s%s", out, errOut)
	require.Contains(t, errOut, "refused as invalid")
	require.Contains(t, errOut, "amount_minor", "the workflow names the field")

	out, errOut, code = starter("status", "agent-plan:it-refused:1")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "state refused")
	require.Contains(t, out, "amount_minor")

	good := write("good.json", `{"session_id":"it-refused","turn":1,"requested_by":"it","steps":[{"tool":"apply_refund","args":{"order_id":"ord_7001","amount_minor":2550,"currency":"EUR","reason":"damaged"}}]}`)
	out, errOut, code = starter("run", "--plan", good, "--wait")
	require.Equal(t, 0, code, "the corrected plan runs under the same session and turn:\n%s%s", out, errOut)
	require.Contains(t, out, "state succeeded")
}
