package mcpgw_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/internal/demotools"
	"github.com/agentsaga/agentsaga/mcpgw"
	"github.com/agentsaga/agentsaga/workflows"
)

// connectProgress serves a gateway with options o to a client whose
// progress notifications go to progress.
func connectProgress(t *testing.T, f *fakeSessions, o mcpgw.Options, progress chan<- *mcp.ProgressNotificationParams) *mcp.ClientSession {
	t.Helper()
	reg, err := demotools.Registry(demotools.Config{})
	require.NoError(t, err)
	o.Calls = memory(t)
	srv, err := mcpgw.New(f, reg, o)
	require.NoError(t, err)
	st, ct := mcp.NewInMemoryTransports()
	ss, err := srv.Connect(t.Context(), st, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "mcpgw-test", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			select {
			case progress <- r.Params:
			default: // the test reads the ones it needs
			}
		},
	}).Connect(t.Context(), ct, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

func decode(t *testing.T, res *mcp.CallToolResult) mcpgw.Result {
	t.Helper()
	var out mcpgw.Result
	b, err := json.Marshal(res.StructuredContent)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &out))
	return out
}

// A call made with a progressToken that waits for a person stays open,
// telling the client so, and answers with the final result once the
// person decides: a client that resets its timeout on progress gets the
// result instead of a timeout.
func TestMCPCallWithProgressStaysOpenUntilAPersonDecides(t *testing.T) {
	defer mcpgw.SetPersonPoll(5 * time.Millisecond)()
	f := newFake()
	progress := make(chan *mcp.ProgressNotificationParams, 16)
	cs := connectProgress(t, f, mcpgw.Options{ProgressInterval: time.Hour}, progress)

	type answer struct {
		res *mcp.CallToolResult
		err error
	}
	done := make(chan answer, 1)
	go func() {
		p := &mcp.CallToolParams{Name: demotools.ApplyRefund, Arguments: refund("ord_p", 60000)}
		p.SetProgressToken("tok-1")
		res, err := cs.CallTool(t.Context(), p)
		done <- answer{res, err}
	}()
	// The first notification comes at once when the call starts waiting
	// (the interval is an hour): it names the question.
	var n *mcp.ProgressNotificationParams
	for n == nil || !strings.Contains(n.Message, "waiting for a person") {
		select {
		case n = <-progress:
		case a := <-done:
			t.Fatalf("the call answered before a person decided: %+v %v", decode(t, a.res), a.err)
		}
	}
	require.Equal(t, "tok-1", n.ProgressToken)
	require.Contains(t, n.Message, "question q1-step1-approval (approval)")
	require.Equal(t, 0, f.count(demotools.ApplyRefund))

	f.mu.Lock()
	for _, ts := range f.turns {
		for _, ft := range ts {
			f.approved[ft.res.Steps[0].Key] = true
		}
	}
	f.mu.Unlock()
	a := <-done
	require.NoError(t, a.err)
	out := decode(t, a.res)
	require.Equal(t, workflows.TurnSucceeded, out.State, out.Message)
	require.Equal(t, 1, f.count(demotools.ApplyRefund))

	// The client was given the final result: an identical call now is a
	// suspected duplicate, as after any delivered success.
	_, held := call(t, cs, demotools.ApplyRefund, refund("ord_p", 60000), nil)
	require.NotNil(t, held.Held, held.Message)
}

// Without a decision within PersonWait the call answers "waiting", as a
// call without progress does at once; without a progressToken nothing is
// kept open.
func TestMCPCallWithProgressAnswersWaitingAfterPersonWait(t *testing.T) {
	defer mcpgw.SetPersonPoll(5 * time.Millisecond)()
	f := newFake()
	progress := make(chan *mcp.ProgressNotificationParams, 16)
	cs := connectProgress(t, f, mcpgw.Options{ProgressInterval: 10 * time.Millisecond, PersonWait: 300 * time.Millisecond}, progress)
	p := &mcp.CallToolParams{Name: demotools.ApplyRefund, Arguments: refund("ord_w", 60000)}
	p.SetProgressToken(7)
	start := time.Now()
	res, err := cs.CallTool(t.Context(), p)
	require.NoError(t, err)
	require.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond)
	out := decode(t, res)
	require.Equal(t, workflows.TurnWaiting, out.State, out.Message)
	require.False(t, res.IsError)
	require.NotEmpty(t, progress, "progress was sent while the call waited")
	require.Equal(t, 0, f.count(demotools.ApplyRefund))

	f.mu.Lock()
	sent := f.sent
	f.mu.Unlock()
	_, again := call(t, cs, demotools.ApplyRefund, refund("ord_w", 60000), nil)
	require.Equal(t, workflows.TurnWaiting, again.State)
	require.Equal(t, out.Key, again.Key)
	f.mu.Lock()
	require.Equal(t, sent+1, f.sent, "a call without a progressToken reads the turn once and answers")
	f.mu.Unlock()
}

// A call refused because an earlier call of the session waits for a person
// is told which question blocks it and who answers it, not "running".
func TestMCPRefusalNamesTheBlockingQuestion(t *testing.T) {
	f, c := newFake(), &clock{t: time.Unix(1_800_000_000, 0)}
	cs := connect(t, f, c)
	_, w := call(t, cs, demotools.ApplyRefund, refund("ord_b", 60000), nil)
	require.Equal(t, workflows.TurnWaiting, w.State)
	f.mu.Lock()
	f.busy = true // the session refuses new turns, as it does while one waits
	f.mu.Unlock()
	res, r := call(t, cs, demotools.QueryOrder, map[string]any{"order_id": "ord_b"}, nil)
	require.True(t, res.IsError)
	require.Equal(t, mcpgw.StateRefused, r.State)
	require.Contains(t, r.Message, "WAITS FOR A PERSON: question q1-step1-approval (approval) on step 1")
	require.Contains(t, r.Message, w.Key)
	require.Contains(t, r.Message, "starter approve agent-session:"+w.Session+" --step 1")
	require.NotContains(t, r.Message, "still running")
}

// Every tool has an output schema its results conform to, annotations
// true to its class, and a description without the class's name.
func TestMCPToolsHaveOutputSchemaAndPlainDescriptions(t *testing.T) {
	f, c := newFake(), &clock{t: time.Unix(1_800_000_000, 0)}
	cs := connect(t, f, c)
	tools := map[string]*mcp.Tool{}
	for tl, err := range cs.Tools(t.Context(), nil) {
		require.NoError(t, err)
		tools[tl.Name] = tl
	}
	for name, tl := range tools {
		schema, ok := tl.OutputSchema.(map[string]any)
		require.True(t, ok, "%s has an output schema", name)
		require.Equal(t, "object", schema["type"])
		for _, class := range []string{"READ", "IDEMPOTENT_WRITE", "CONDITIONAL_WRITE", "NON_IDEMPOTENT_WRITE", "side-effect class"} {
			require.NotContains(t, tl.Description, class, "%s: no internal words in the description", name)
		}
	}
	ticket := tools[demotools.CreateTicket]
	require.NotNil(t, ticket)
	require.True(t, ticket.Annotations.IdempotentHint)
	require.False(t, *ticket.Annotations.DestructiveHint, "a conditional write is not destructive")
	// The results conform: the official client checks structuredContent
	// against the output schema and refuses a result that does not.
	_, r := call(t, cs, demotools.QueryOrder, map[string]any{"order_id": "ord_s"}, nil)
	require.Equal(t, workflows.TurnSucceeded, r.State)
	_, w := call(t, cs, demotools.ApplyRefund, refund("ord_s", 60000), nil)
	require.Equal(t, workflows.TurnWaiting, w.State)
	_, bad := call(t, cs, demotools.ApplyRefund, map[string]any{"order_id": 7}, nil)
	require.Equal(t, mcpgw.StateRefused, bad.State)
}
