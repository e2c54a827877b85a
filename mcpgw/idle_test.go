package mcpgw_test

import (
	"context"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/internal/demotools"
	"github.com/agentsaga/agentsaga/mcpgw"
	"github.com/agentsaga/agentsaga/workflows"
)

// enderFake is the fake sessions with EndSession.
type enderFake struct {
	*fakeSessions
	mu    sync.Mutex
	ended map[string]string // session -> by
}

func (e *enderFake) EndSession(_ context.Context, session, outcome, by string) (workflows.Status, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if outcome != "succeeded" {
		panic("the gateway ends idle sessions succeeded, got " + outcome)
	}
	e.ended[session] = by
	return workflows.Status{}, nil
}

// The AgentSession the gateway made for an MCP session ends when the MCP
// session closes, unless it waits for a person; a session the client named
// is left alone.
func TestMCPClosedSessionEndsItsAgentSession(t *testing.T) {
	f := &enderFake{fakeSessions: newFake(), ended: map[string]string{}}
	reg, err := demotools.Registry(demotools.Config{})
	require.NoError(t, err)
	srv, err := mcpgw.New(f, reg, mcpgw.Options{Calls: memory(t)})
	require.NoError(t, err)
	open := func() *mcp.ClientSession {
		st, ct := mcp.NewInMemoryTransports()
		_, err := srv.Connect(t.Context(), st, nil)
		require.NoError(t, err)
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil).Connect(t.Context(), ct, nil)
		require.NoError(t, err)
		return cs
	}
	idle, waiting, named := open(), open(), open()
	_, done := call(t, idle, demotools.QueryOrder, map[string]any{"order_id": "ord_1"}, nil)
	require.Equal(t, workflows.TurnSucceeded, done.State, done.Message)
	_, w := call(t, waiting, demotools.ApplyRefund, refund("ord_2", 60000), nil)
	require.Equal(t, workflows.TurnWaiting, w.State, w.Message)
	_, n := call(t, named, demotools.QueryOrder, map[string]any{"order_id": "ord_3"}, mcp.Meta{mcpgw.MetaSession: "client-named"})
	require.Equal(t, workflows.TurnSucceeded, n.State, n.Message)
	unused := open()

	for _, cs := range []*mcp.ClientSession{idle, waiting, named, unused} {
		require.NoError(t, cs.Close())
	}
	require.NoError(t, mcpgw.Settle(t.Context(), srv))
	f.mu.Lock()
	defer f.mu.Unlock()
	require.Equal(t, map[string]string{done.Session: mcpgw.EndedBy}, f.ended,
		"only the idle session the gateway made ends; the waiting one waits for its person, the named one is the client's")
}
