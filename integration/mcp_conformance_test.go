package integration

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/mcpgw"
)

// conformanceScenarios are the server scenarios of the official MCP
// conformance suite (@modelcontextprotocol/conformance, pinned in
// integration/mcp-ts) that apply to the gateway, a server of tools and
// logging, with the checks that may warn rather than pass (README, "MCP
// conformance", lists every scenario and why the others do not apply).
var conformanceScenarios = []struct {
	name  string
	warns []string // checks allowed to end WARNING, with the reason in the README
}{
	{name: "server-initialize"},
	{name: "ping"},
	{name: "logging-set-level"},
	{name: "tools-list"},
	{name: "resources-list"},
	{name: "prompts-list"},
	{name: "server-sse-multiple-streams"},
	// SEP-1699 (protocol 2025-11-25): the scenario calls the suite's own
	// tool test_reconnection, which the gateway does not offer, and checks
	// priming events and a retry field, which the Go SDK 1.8.0 does not
	// send. It warns; resumption with Last-Event-ID is served by the SDK's
	// event store.
	{name: "server-sse-polling", warns: []string{"server-sse-priming-event", "server-sse-retry-field", "server-sse-disconnect-resume"}},
	{name: "dns-rebinding-protection"},
}

// conformanceCheck is one check of a scenario's checks.json.
type conformanceCheck struct {
	ID           string `json:"id"`
	Description  string `json:"description"`
	Status       string `json:"status"`
	ErrorMessage string `json:"errorMessage"`
}

// The official conformance suite, in server mode, against the gateway on
// the real server over streamable HTTP: every scenario that applies passes
// (no FAILURE; WARNING only where listed).
func TestMCPConformanceSuite(t *testing.T) {
	node, dir := mcpTS(t)
	st := sharedStack(t)
	srv, err := mcpgw.New(st.Plans, st.Tools, mcpgw.Options{Calls: st.Ledger})
	require.NoError(t, err)
	url := mcpTestServer(t, srv)
	bin := filepath.Join(dir, "node_modules", "@modelcontextprotocol", "conformance", "dist", "index.js")
	for _, sc := range conformanceScenarios {
		t.Run(sc.name, func(t *testing.T) {
			ctx := testContext(t, time.Minute)
			out := t.TempDir()
			cmd := exec.CommandContext(ctx, node, bin, "server", "--url", url, "--scenario", sc.name, "-o", out)
			b, runErr := cmd.CombinedOutput()
			files, err := filepath.Glob(filepath.Join(out, "*", "checks.json"))
			require.NoError(t, err)
			require.Len(t, files, 1, "the suite wrote no checks.json (exit: %v): %s", runErr, b)
			raw, err := os.ReadFile(files[0])
			require.NoError(t, err)
			var checks []conformanceCheck
			require.NoError(t, json.Unmarshal(raw, &checks))
			require.NotEmpty(t, checks)
			for _, c := range checks {
				switch {
				case c.Status == "SUCCESS" || c.Status == "INFO":
				case c.Status == "WARNING" && containsString(sc.warns, c.ID):
					t.Logf("%s: WARNING (expected, see README): %s %s", c.ID, c.Description, c.ErrorMessage)
				default:
					t.Errorf("%s: %s: %s %s", c.ID, c.Status, c.Description, c.ErrorMessage)
				}
			}
			if !t.Failed() {
				require.NoError(t, runErr, "the suite failed: %s", b)
			}
		})
	}
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if strings.EqualFold(x, s) {
			return true
		}
	}
	return false
}
