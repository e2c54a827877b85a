package integration

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/agentsaga/agentsaga/internal/cli"
	"github.com/agentsaga/agentsaga/internal/devstack"
	"github.com/agentsaga/agentsaga/sagaworker"
)

// `starter cluster setup` prepares a namespace on a real server: it creates
// it with the retention and adds the search attributes; run again it finds
// everything in place and changes nothing; a different retention is kept
// unless --update-retention asks.
func TestClusterSetupPreparesANamespace(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	st, err := devstack.Start(ctx, devstack.Options{NoWorker: true, UIPort: -1, Ledger: "sqlite:" + filepath.Join(t.TempDir(), "ledger.db")})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, st.Close()) })
	t.Setenv("AGENTSAGA_CODEC_KEYS", "")
	t.Setenv("AGENTSAGA_CODEC_KEYS_FILE", "")

	setup := func(extra ...string) []map[string]string {
		t.Helper()
		var out bytes.Buffer
		args := append([]string{"cluster", "setup", "--address", st.Server.FrontendAddr(), "--namespace", "team-payments", "--json"}, extra...)
		require.NoError(t, cli.Run(ctx, args, nil, &out, cli.Config{}), out.String())
		var rows []map[string]string
		require.NoError(t, json.Unmarshal(out.Bytes(), &rows), out.String())
		return rows
	}
	actions := func(rows []map[string]string) []string {
		var a []string
		for _, r := range rows {
			a = append(a, r["action"])
		}
		return a
	}
	require.Equal(t, []string{"created", "added", "added", "added"}, actions(setup("--retention", "48h")))
	require.Equal(t, []string{"ok", "ok", "ok", "ok"}, actions(setup("--retention", "48h")), "a second run changes nothing")

	tc := st.Client
	sas, err := tc.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: "team-payments"})
	require.NoError(t, err)
	for name, typ := range sagaworker.SearchAttributes {
		require.Equal(t, typ, sas.GetCustomAttributes()[name], name)
	}

	rows := setup("--retention", "72h")
	require.Contains(t, rows[0]["action"], "kept")
	require.Equal(t, "48h0m0s", rows[0]["found"])
	require.Equal(t, "updated", setup("--retention", "72h", "--update-retention")[0]["action"])
	desc, err := tc.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: "team-payments"})
	require.NoError(t, err)
	require.Equal(t, 72*time.Hour, desc.GetConfig().GetWorkflowExecutionRetentionTtl().AsDuration())
}
