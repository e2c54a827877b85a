package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"

	"github.com/agentsaga/agentsaga/internal/demotools"
	"github.com/agentsaga/agentsaga/internal/devstack"
	"github.com/agentsaga/agentsaga/internal/sandbox"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/ledger/ledgerdb"
	"github.com/agentsaga/agentsaga/mcpgw"
	"github.com/agentsaga/agentsaga/plan"
	"github.com/agentsaga/agentsaga/sagaclient"
	"github.com/agentsaga/agentsaga/workflows"
)

// spyPlans is the real session client that also reports the session of
// every turn it sends (the MCP session's AgentSession, which the gateway
// mints). It keeps the client's other methods (ending and reading
// sessions).
type spyPlans struct {
	*sagaclient.Client
	sent chan string
}

// drain forgets the sessions reported so far.
func (s *spyPlans) drain() {
	for {
		select {
		case <-s.sent:
		default:
			return
		}
	}
}

func (s *spyPlans) Turn(ctx context.Context, session string, t workflows.TurnRequest, o sagaclient.SessionOptions) (workflows.TurnResult, error) {
	select {
	case s.sent <- session:
	default:
	}
	return s.Client.Turn(ctx, session, t, o)
}

// keylessGateway is a gateway serving the agent named by, keeping its
// memory of keyless calls in calls.
func keylessGateway(t *testing.T, st *devstack.Stack, plans mcpgw.Plans, calls ledger.KeylessCalls, agent string) *mcp.Server {
	t.Helper()
	srv, err := mcpgw.New(plans, st.Tools, mcpgw.Options{Calls: calls, Session: sagaclient.SessionOptions{RequestedBy: agent}})
	require.NoError(t, err)
	return srv
}

// dial opens a new MCP connection (a new MCP session) to srv.
func dial(ctx context.Context, t *testing.T, srv *mcp.Server) *mcp.ClientSession {
	t.Helper()
	server, client := mcp.NewInMemoryTransports()
	ss, err := srv.Connect(ctx, server, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "agentsaga-it-keyless", Version: "1"}, nil).Connect(ctx, client, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// dialDroppable opens a new connection to srv over pipes, as a stdio
// client would; drop breaks it off from both ends at once, with calls in
// flight (the server's reader ends, the client's reader fails).
func dialDroppable(ctx context.Context, t *testing.T, srv *mcp.Server) (cs *mcp.ClientSession, drop func()) {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ss, err := srv.Connect(ctx, mcpgw.NewStdioTransport(inR, outW), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = ss.Close() })
	cs, err = mcp.NewClient(&mcp.Implementation{Name: "agentsaga-it-keyless", Version: "1"}, nil).
		Connect(ctx, &mcp.IOTransport{Reader: outR, Writer: inW}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.Close() })
	return cs, func() {
		_ = inW.CloseWithError(io.ErrUnexpectedEOF)
		_ = outR.CloseWithError(io.ErrUnexpectedEOF)
	}
}

// keylessCall calls name with args and no _meta at all, as most agent
// frameworks do, and decodes the result.
func keylessCall(ctx context.Context, t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) mcpgw.Result {
	t.Helper()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	require.NoError(t, err)
	var out mcpgw.Result
	b, err := json.Marshal(res.StructuredContent)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &out))
	return out
}

// slowCall starts a keyless call on cs whose provider operation op is
// delayed, and returns once the provider is working on it: the session the
// call runs in, and the call's own outcome (an error once its connection
// dropped).
func slowCall(ctx context.Context, t *testing.T, sb *sandbox.Client, spy *spyPlans, cs *mcp.ClientSession, name string, args map[string]any, op string) (string, <-chan error) {
	t.Helper()
	require.NoError(t, sb.Fault(ctx, sandbox.FaultSpec{Op: op, Fault: sandbox.Delay, Delay: 2 * time.Second, Count: 1}))
	before := allCalls(ctx, t, sb)[op]
	spy.drain()
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		done <- err
	}()
	var session string
	select {
	case session = <-spy.sent:
	case <-ctx.Done():
		t.Fatalf("the call never reached the session: %v", ctx.Err())
	}
	require.Eventually(t, func() bool { return allCalls(ctx, t, sb)[op] > before }, 30*time.Second, 10*time.Millisecond,
		"the provider is working on the call")
	return session, done
}

// ticketsAbout counts the tickets with subject in the CRM's store.
func ticketsAbout(ctx context.Context, t *testing.T, sb *sandbox.Client, subject string) int {
	t.Helper()
	n := 0
	for _, e := range allEffects(ctx, t, sb) {
		if e.Kind == "ticket" && e.Summary == subject {
			n++
		}
	}
	return n
}

// A client without any _meta opens a ticket and sends an e-mail; each time
// its connection drops while the provider works on the call, and it sends
// the same call again on a new connection (a new MCP session): once while
// the first call still runs, once after the gateway ended the dropped
// connection's AgentSession. Each retry gets the first call's real result
// under its key: 1 ticket in the CRM, 1 e-mail at the relay.
func TestMCPKeylessClientReconnectsMidCall(t *testing.T) {
	st := sharedStack(t)
	sb := sandbox.NewClient(st.SandboxURL, nil)
	ctx := testContext(t, 3*time.Minute)
	run := uuid.NewString()[:8]
	spy := &spyPlans{Client: st.Plans, sent: make(chan string, 1)}
	srv := keylessGateway(t, st, spy, st.Ledger, "mcp-keyless-"+run)
	subject := "it-keyless-reconnect-" + run
	ticket := map[string]any{"subject": subject, "body": "the parcel is late"}
	mail := map[string]any{"to": "ana@example.com", "subject": subject, "body": "We are on it."}
	callsBefore := allCalls(ctx, t, sb)

	first, drop := dialDroppable(ctx, t, srv)
	session, done := slowCall(ctx, t, sb, spy, first, demotools.CreateTicket, ticket, "tickets.create")
	drop() // the connection drops mid-call
	require.Error(t, <-done, "the first call got no answer")
	again := keylessCall(ctx, t, dial(ctx, t, srv), demotools.CreateTicket, ticket)
	waitTurn(ctx, t, st.Client, session, 1) // the first call has settled too
	require.Equal(t, 1, ticketsAbout(ctx, t, sb, subject), "one ticket in the CRM")
	require.Equal(t, workflows.TurnSucceeded, again.State, again.Message)
	require.Equal(t, plan.Key(session, 1, 1, demotools.CreateTicket), again.Key, "the retry on a new connection is the first call")

	second, drop := dialDroppable(ctx, t, srv)
	session, done = slowCall(ctx, t, sb, spy, second, demotools.SendEmail, mail, "mail.send")
	drop() // the connection drops mid-call
	require.Error(t, <-done, "the first call got no answer")
	wf := workflows.SessionWorkflowID(session)
	require.Eventually(t, func() bool {
		d, err := st.Client.DescribeWorkflowExecution(ctx, wf, "")
		return err == nil && d.WorkflowExecutionInfo.Status != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
	}, time.Minute, 20*time.Millisecond, "the gateway ended the dropped connection's AgentSession")
	sent := keylessCall(ctx, t, dial(ctx, t, srv), demotools.SendEmail, mail)
	require.Equal(t, 1, emailsAbout(ctx, t, sb, subject), "one e-mail at the relay")
	require.Equal(t, workflows.TurnSucceeded, sent.State, sent.Message)
	require.Equal(t, plan.Key(session, 1, 1, demotools.SendEmail), sent.Key, "the retry reads the ended session's turn")

	delta := callsDelta(callsBefore, allCalls(ctx, t, sb))
	require.Equal(t, 1, delta["tickets.create"], "calls %v", delta)
	require.Equal(t, 1, delta["mail.send"], "calls %v", delta)
}

// One client's calls reach two gateway processes (two servers, each with
// its own handle on the ledger, one Temporal): the ticket is sent to A and,
// while it runs, again to B, which attaches to it; the e-mail is sent to A,
// whose client gives up mid-call, and again to B. Each gets the first
// call's real result: 1 ticket, 1 e-mail. Sent a third time, to A, now that
// its success was given, the e-mail is held for a person as a suspected
// duplicate of the call B answered.
func TestMCPKeylessCallsThroughTwoGateways(t *testing.T) {
	st := sharedStack(t)
	sb := sandbox.NewClient(st.SandboxURL, nil)
	ctx := testContext(t, 3*time.Minute)
	other, err := ledgerdb.Open(ctx, st.LedgerDSN)
	require.NoError(t, err)
	t.Cleanup(func() { _ = other.Close() })
	run := uuid.NewString()[:8]
	agent := "mcp-keyless-" + run
	spy := &spyPlans{Client: st.Plans, sent: make(chan string, 1)}
	a := keylessGateway(t, st, spy, st.Ledger, agent)
	b := keylessGateway(t, st, st.Plans, other, agent)
	subject := "it-keyless-replicas-" + run
	ticket := map[string]any{"subject": subject, "body": "the parcel is late"}
	mail := map[string]any{"to": "ana@example.com", "subject": subject, "body": "We are on it."}
	callsBefore := allCalls(ctx, t, sb)

	session, done := slowCall(ctx, t, sb, spy, dial(ctx, t, a), demotools.CreateTicket, ticket, "tickets.create")
	viaB := keylessCall(ctx, t, dial(ctx, t, b), demotools.CreateTicket, ticket)
	require.NoError(t, <-done)
	require.Equal(t, 1, ticketsAbout(ctx, t, sb, subject), "one ticket in the CRM")
	require.Equal(t, workflows.TurnSucceeded, viaB.State, viaB.Message)
	require.Equal(t, plan.Key(session, 1, 1, demotools.CreateTicket), viaB.Key, "B attached to A's call")

	cctx, giveUp := context.WithCancel(ctx)
	session, done = slowCall(cctx, t, sb, spy, dial(ctx, t, a), demotools.SendEmail, mail, "mail.send")
	giveUp()
	require.Error(t, <-done, "the client gave up on A")
	sent := keylessCall(ctx, t, dial(ctx, t, b), demotools.SendEmail, mail)
	waitTurn(ctx, t, st.Client, session, 1) // the call A's client gave up on has settled too
	require.Equal(t, 1, emailsAbout(ctx, t, sb, subject), "one e-mail at the relay")
	require.Equal(t, workflows.TurnSucceeded, sent.State, sent.Message)
	require.Equal(t, plan.Key(session, 1, 1, demotools.SendEmail), sent.Key, "B answered A's call")

	held := keylessCall(ctx, t, dial(ctx, t, a), demotools.SendEmail, mail)
	require.Equal(t, workflows.TurnWaiting, held.State, held.Message)
	require.NotNil(t, held.Held, "a suspected duplicate of the call B answered")
	require.Equal(t, sent.Key, held.Held.Key)
	require.Contains(t, held.Message, mcpgw.MetaKey, "the caller is told how to mean it twice")
	require.Equal(t, 1, emailsAbout(ctx, t, sb, subject), "still one e-mail")

	delta := callsDelta(callsBefore, allCalls(ctx, t, sb))
	require.Equal(t, 1, delta["tickets.create"], "calls %v", delta)
	require.Equal(t, 1, delta["mail.send"], "calls %v", delta)
}

// The stdio abort race, 50 times: a client over stdio starts an e-mail
// without a key, aborts it once the gateway has sent its turn
// (notifications/cancelled), and at once sends the identical call again.
// Every repeat gets the real result of the one call (never the aborted
// client's cancellation), and each e-mail reaches the relay once.
func TestMCPStdioAbortRaceGetsTheRealResult(t *testing.T) {
	st := sharedStack(t)
	sb := sandbox.NewClient(st.SandboxURL, nil)
	ctx := testContext(t, 4*time.Minute)
	run := uuid.NewString()[:8]
	spy := &spyPlans{Client: st.Plans, sent: make(chan string, 64)}
	srv := keylessGateway(t, st, spy, st.Ledger, "mcp-abort-"+run)
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	go func() { _ = srv.Run(ctx, mcpgw.NewStdioTransport(inR, outW)) }()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "agentsaga-it-abort", Version: "1"}, nil).
		Connect(ctx, &mcp.IOTransport{Reader: outR, Writer: inW}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.Close() })

	const repeats = 50
	for i := range repeats {
		mail := map[string]any{"to": "ana@example.com", "subject": fmt.Sprintf("it-abort-%s-%d", run, i), "body": "Your order shipped."}
		cctx, abort := context.WithCancel(ctx)
		spy.drain()
		aborted := make(chan error, 1)
		go func() {
			_, err := cs.CallTool(cctx, &mcp.CallToolParams{Name: demotools.SendEmail, Arguments: mail})
			aborted <- err
		}()
		select {
		case <-spy.sent:
		case <-ctx.Done():
			t.Fatalf("repeat %d: the call never reached the session", i)
		}
		abort()
		res := keylessCall(ctx, t, cs, demotools.SendEmail, mail)
		require.Error(t, <-aborted)
		require.Equal(t, workflows.TurnSucceeded, res.State, "repeat %d got %s: %s", i, res.State, res.Message)
		require.Equal(t, 1, emailsAbout(ctx, t, sb, mail["subject"].(string)), "repeat %d: one e-mail at the relay", i)
	}
}
