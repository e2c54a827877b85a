package integration

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/agentsaga/agentsaga/internal/demotools"
	"github.com/agentsaga/agentsaga/internal/sandbox"
	"github.com/agentsaga/agentsaga/mcpgw"
	"github.com/agentsaga/agentsaga/plan"
	"github.com/agentsaga/agentsaga/sagaclient"
	"github.com/agentsaga/agentsaga/workflows"
)

// gwClock is the gateway's clock of the duplicate window, moved by the test.
type gwClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *gwClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *gwClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// attachLog counts the gateway's log lines of calls that attached to an
// identical call in progress.
type attachLog struct{ n atomic.Int32 }

func (a *attachLog) Enabled(context.Context, slog.Level) bool { return true }
func (a *attachLog) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, "attaches") {
		a.n.Add(1)
	}
	return nil
}
func (a *attachLog) WithAttrs([]slog.Attr) slog.Handler { return a }
func (a *attachLog) WithGroup(string) slog.Handler      { return a }

// gatedPlans holds every turn until gate closes, then sends it to the
// real sessions.
type gatedPlans struct {
	mcpgw.Plans
	gate chan struct{}
}

func (g gatedPlans) Turn(ctx context.Context, session string, t workflows.TurnRequest, o sagaclient.SessionOptions) (workflows.TurnResult, error) {
	select {
	case <-g.gate:
	case <-ctx.Done():
		return workflows.TurnResult{}, ctx.Err()
	}
	return g.Plans.Turn(ctx, session, t, o)
}

// mcpClient is an official MCP client on a gateway over in-memory
// transports.
type mcpClient struct {
	t   *testing.T
	ctx context.Context
	cs  *mcp.ClientSession
}

func newMCPClient(ctx context.Context, t *testing.T, plans mcpgw.Plans, o mcpgw.Options) *mcpClient {
	t.Helper()
	st := sharedStack(t)
	if o.Calls == nil {
		o.Calls = st.Ledger
	}
	srv, err := mcpgw.New(plans, st.Tools, o)
	require.NoError(t, err)
	server, client := mcp.NewInMemoryTransports()
	ss, err := srv.Connect(ctx, server, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "agentsaga-it-repeat", Version: "1"}, nil).Connect(ctx, client, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.Close() })
	return &mcpClient{t: t, ctx: ctx, cs: cs}
}

// call calls a tool in session (no key) and decodes its result.
func (c *mcpClient) call(session, name string, args map[string]any) mcpgw.Result {
	c.t.Helper()
	res, err := c.cs.CallTool(c.ctx, &mcp.CallToolParams{Name: name, Arguments: args, Meta: mcp.Meta{mcpgw.MetaSession: session}})
	require.NoError(c.t, err)
	var out mcpgw.Result
	b, err := json.Marshal(res.StructuredContent)
	require.NoError(c.t, err)
	require.NoError(c.t, json.Unmarshal(b, &out))
	return out
}

// waitTurn polls the session's record of turn until it has settled
// (succeeded or failed), so that the session takes a new turn.
func waitTurn(ctx context.Context, t *testing.T, c client.Client, session string, turn int) workflows.TurnResult {
	t.Helper()
	var res workflows.TurnResult
	require.Eventually(t, func() bool {
		v, err := c.QueryWorkflow(ctx, workflows.SessionWorkflowID(session), "", workflows.QueryTurn, turn)
		if err != nil || v.Get(&res) != nil {
			return false
		}
		return res.State == workflows.TurnSucceeded || res.State == workflows.TurnFailed
	}, 30*time.Second, 20*time.Millisecond, "turn %d of %s settles", turn, session)
	return res
}

// emailsAbout counts the emails with subject in the mail relay's store.
func emailsAbout(ctx context.Context, t *testing.T, sb *sandbox.Client, subject string) int {
	t.Helper()
	n := 0
	for _, e := range allEffects(ctx, t, sb) {
		if e.Kind == "email" && strings.HasSuffix(e.Summary, ": "+subject) {
			n++
		}
	}
	return n
}

// An unkeyed send_email whose answer is lost waits for a person; the person
// resolves it after the duplicate window; the client repeats the call as the
// waiting text told it: the repeat reads the first turn, one email at the
// relay. Repeated once more, the call is held (its card shows the email
// already sent); a person rejects it; repeated after the window again, it
// reads the rejection and never runs.
func TestMCPRepeatAfterTheWindowSendsOneEmail(t *testing.T) {
	st := sharedStack(t)
	sb := sandbox.NewClient(st.SandboxURL, nil)
	ctx := testContext(t, 3*time.Minute)
	clk := &gwClock{t: time.Unix(1_900_000_000, 0)}
	c := newMCPClient(ctx, t, st.Plans, mcpgw.Options{Now: clk.now, DuplicateWindow: 10 * time.Minute,
		Session: sagaclient.SessionOptions{RequestedBy: "mcp-agent"}})
	const session, subject = "it-mcp-repeat-email", "it-mcp-repeat-email: your refund"
	mail := map[string]any{"to": "ana@example.com", "subject": subject, "body": "Your refund is on its way."}
	wf := workflows.SessionWorkflowID(session)
	require.NoError(t, sb.Fault(ctx, sandbox.FaultSpec{Op: "mail.send", Fault: sandbox.CommitThenDrop, Count: 1}))
	callsBefore := allCalls(ctx, t, sb)

	first := c.call(session, demotools.SendEmail, mail)
	require.Equal(t, workflows.TurnWaiting, first.State, first.Message)
	require.NotNil(t, first.Question)
	require.Equal(t, workflows.QuestionOutcome, first.Question.Kind)
	require.Equal(t, 1, emailsAbout(ctx, t, sb, subject), "the relay committed, the answer was lost")

	clk.add(11 * time.Minute)
	_, err := st.Plans.Resolve(ctx, wf, workflows.ResolveSignal{Step: first.Question.Step, QuestionID: first.Question.ID,
		Outcome: workflows.OutcomeSucceeded, By: "ops", Note: "the relay's log shows it sent"})
	require.NoError(t, err)
	waitTurn(ctx, t, st.Client, session, first.Turn)
	again := c.call(session, demotools.SendEmail, mail)
	require.Equal(t, workflows.TurnSucceeded, again.State, again.Message)
	require.Equal(t, first.Key, again.Key, "the repeat after the window reads the first turn")
	require.Nil(t, again.Held)
	require.Equal(t, 1, emailsAbout(ctx, t, sb, subject), "one email at the relay")

	// Its success given, the same call is a suspected duplicate: held,
	// with the email already sent on its card.
	clk.add(time.Minute)
	held := c.call(session, demotools.SendEmail, mail)
	require.Equal(t, workflows.TurnWaiting, held.State, held.Message)
	require.NotNil(t, held.Held)
	require.Equal(t, first.Key, held.Held.Key)
	require.NotNil(t, held.Question)
	require.Contains(t, strings.Join(held.Question.Card.AlreadyRan, "\n"), first.Key, "the card shows the identical email already sent")
	_, err = st.Plans.Approve(ctx, wf, workflows.ApproveSignal{Step: held.Question.Step, QuestionID: held.Question.ID,
		Fingerprint: held.Question.Fingerprint, By: "ops", Approved: false, Reason: "a repeat, not a second email"})
	require.NoError(t, err)

	clk.add(11 * time.Minute)
	rejected := c.call(session, demotools.SendEmail, mail)
	require.Equal(t, workflows.TurnFailed, rejected.State, rejected.Message)
	require.Equal(t, held.Key, rejected.Key, "the rejected held call, repeated after the window, reads the held turn")
	clk.add(9 * time.Minute)
	still := c.call(session, demotools.SendEmail, mail)
	require.Equal(t, workflows.TurnFailed, still.State, still.Message)
	require.Equal(t, held.Key, still.Key, "within the window after the rejection was given, still the held turn")

	require.Equal(t, 1, emailsAbout(ctx, t, sb, subject), "one email at the relay")
	delta := callsDelta(callsBefore, allCalls(ctx, t, sb))
	require.Equal(t, 1, delta["mail.send"], "one request reached the relay; calls %v", delta)
	status, err := st.Plans.Status(ctx, wf)
	require.NoError(t, err)
	require.Len(t, status.Steps, 2, "the first call and the held one, which never ran")
}

// An unkeyed 6,000.00 EUR payment waits for approval; the client repeats it
// after the duplicate window; the approver approves: one payment at the
// provider, the repeat read the first turn. A new identical payment after
// the window that followed its result asks again, and its card shows the
// payment already made.
func TestMCPApprovalRepeatedAfterTheWindowPaysOnce(t *testing.T) {
	st := sharedStack(t)
	sb := sandbox.NewClient(st.SandboxURL, nil)
	ctx := testContext(t, 3*time.Minute)
	clk := &gwClock{t: time.Unix(1_900_000_000, 0)}
	c := newMCPClient(ctx, t, st.Plans, mcpgw.Options{Now: clk.now, DuplicateWindow: 10 * time.Minute,
		Session: sagaclient.SessionOptions{RequestedBy: "mcp-agent"}})
	const session, order = "it-mcp-repeat-pay", "ord_it_mcp_repeat_pay"
	pay := map[string]any{"customer_id": "cus_ana", "order_id": order, "amount_minor": 600000, "currency": "EUR", "payment_method": "tok_visa"}
	wf := workflows.SessionWorkflowID(session)
	payments := func() int {
		n := 0
		for _, e := range allEffects(ctx, t, sb) {
			if e.Kind == "payment" && e.OrderID == order {
				n++
			}
		}
		return n
	}

	first := c.call(session, demotools.CreatePayment, pay)
	require.Equal(t, workflows.TurnWaiting, first.State, first.Message)
	require.NotNil(t, first.Question)
	require.Equal(t, "6,000.00 EUR", first.Question.Card.Amount)
	clk.add(11 * time.Minute)
	repeat := c.call(session, demotools.CreatePayment, pay)
	require.Equal(t, workflows.TurnWaiting, repeat.State, repeat.Message)
	require.Equal(t, first.Key, repeat.Key, "the repeat after the window reads the waiting turn")
	require.Equal(t, first.Question.ID, repeat.Question.ID, "one question")
	_, err := st.Plans.Approve(ctx, wf, workflows.ApproveSignal{Step: first.Question.Step, QuestionID: first.Question.ID,
		Fingerprint: first.Question.Fingerprint, By: "ops", Approved: true})
	require.NoError(t, err)
	waitTurn(ctx, t, st.Client, session, first.Turn)
	clk.add(11 * time.Minute)
	done := c.call(session, demotools.CreatePayment, pay)
	require.Equal(t, workflows.TurnSucceeded, done.State, done.Message)
	require.Equal(t, first.Key, done.Key)
	require.Equal(t, 1, payments(), "one payment at the provider")

	clk.add(11 * time.Minute) // the window after its result was given has passed
	next := c.call(session, demotools.CreatePayment, pay)
	require.Equal(t, workflows.TurnWaiting, next.State, next.Message)
	require.NotEqual(t, first.Key, next.Key, "a new turn")
	require.NotNil(t, next.Question)
	require.Contains(t, strings.Join(next.Question.Card.AlreadyRan, "\n"), first.Key, "the card of the new payment shows the identical one already made")
	_, err = st.Plans.Approve(ctx, wf, workflows.ApproveSignal{Step: next.Question.Step, QuestionID: next.Question.ID,
		Fingerprint: next.Question.Fingerprint, By: "ops", Approved: false, Reason: "already paid"})
	require.NoError(t, err)
	require.Equal(t, 1, payments(), "still one payment")
}

// Two identical unkeyed calls sent at the same moment in one session are
// one call: the first is held before it reaches the session until the second
// has attached to it; both get the first's result, one turn, one email.
func TestMCPConcurrentIdenticalCallsSendOneEmail(t *testing.T) {
	st := sharedStack(t)
	sb := sandbox.NewClient(st.SandboxURL, nil)
	ctx := testContext(t, 2*time.Minute)
	log := &attachLog{}
	gated := gatedPlans{Plans: st.Plans, gate: make(chan struct{})}
	c := newMCPClient(ctx, t, gated, mcpgw.Options{Logger: slog.New(log), Session: sagaclient.SessionOptions{RequestedBy: "mcp-agent"}})
	const session, subject = "it-mcp-concurrent", "it-mcp-concurrent: your order"
	mail := map[string]any{"to": "ana@example.com", "subject": subject, "body": "It shipped."}
	callsBefore := allCalls(ctx, t, sb)

	var wg sync.WaitGroup
	results := make([]mcpgw.Result, 2)
	for i := range results {
		wg.Go(func() {
			res, err := c.cs.CallTool(ctx, &mcp.CallToolParams{Name: demotools.SendEmail, Arguments: mail, Meta: mcp.Meta{mcpgw.MetaSession: session}})
			if err != nil {
				results[i].Error = err.Error()
				return
			}
			b, _ := json.Marshal(res.StructuredContent)
			_ = json.Unmarshal(b, &results[i])
		})
	}
	deadline := time.Now().Add(20 * time.Second)
	for log.n.Load() < 1 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond) // polls a condition: the second call attached
	}
	close(gated.gate)
	wg.Wait()
	for i, r := range results {
		require.Equal(t, workflows.TurnSucceeded, r.State, "call %d: %s %s", i, r.Message, r.Error)
		require.Equal(t, session+":1:1:send_email", r.Key)
		require.Nil(t, r.Held, "not held for a person")
	}
	require.Equal(t, 1, emailsAbout(ctx, t, sb, subject), "one email at the relay")
	delta := callsDelta(callsBefore, allCalls(ctx, t, sb))
	require.Equal(t, 1, delta["mail.send"], "calls %v", delta)
	status, err := st.Plans.Status(ctx, workflows.SessionWorkflowID(session))
	require.NoError(t, err)
	require.Len(t, status.Steps, 1, "one turn")
}

// Alice's gateway names bob's session: the refund's card says requested by
// alice, and alice's own approval is refused by four eyes; another
// operator's approval runs it once.
func TestMCPTurnInAnotherSessionIsRequestedByItsSender(t *testing.T) {
	st := sharedStack(t)
	sb := sandbox.NewClient(st.SandboxURL, nil)
	ctx := testContext(t, 2*time.Minute)
	const session, order = "it-mcp-bobs-session", "ord_it_mcp_four_eyes"
	wf := workflows.SessionWorkflowID(session)
	read := step(t, demotools.QueryOrder, map[string]any{"order_id": "ord_1001"})
	bobs, err := st.Plans.Turn(ctx, session, workflows.TurnRequest{Turn: 1, Steps: []plan.Step{read}}, sagaclient.SessionOptions{RequestedBy: "bob"})
	require.NoError(t, err)
	require.Equal(t, workflows.TurnSucceeded, bobs.State)

	alice := newMCPClient(ctx, t, st.Plans, mcpgw.Options{Session: sagaclient.SessionOptions{RequestedBy: "alice"}})
	refund := map[string]any{"order_id": order, "amount_minor": 60000, "currency": "EUR", "reason": "arrived damaged"}
	w := alice.call(session, demotools.ApplyRefund, refund)
	require.Equal(t, workflows.TurnWaiting, w.State, w.Message)
	require.NotNil(t, w.Question)
	require.Equal(t, "alice", w.Question.Card.RequestedBy, "the card names who sent the turn, not who started the session")
	require.Contains(t, w.Message, "requested by alice")
	q := w.Question
	_, err = st.Plans.Approve(ctx, wf, workflows.ApproveSignal{Step: q.Step, QuestionID: q.ID, Fingerprint: q.Fingerprint, By: "alice", Approved: true})
	var rejected *sagaclient.RejectedError
	require.True(t, errors.As(err, &rejected), "alice's approval of her own refund is refused: %v", err)
	require.Contains(t, rejected.Reason, "four eyes")
	refunds := func() int {
		n := 0
		for _, e := range allEffects(ctx, t, sb) {
			if e.Kind == "refund" && e.OrderID == order {
				n++
			}
		}
		return n
	}
	require.Equal(t, 0, refunds())
	_, err = st.Plans.Approve(ctx, wf, workflows.ApproveSignal{Step: q.Step, QuestionID: q.ID, Fingerprint: q.Fingerprint, By: "carol", Approved: true})
	require.NoError(t, err)
	done := alice.call(session, demotools.ApplyRefund, refund)
	require.Equal(t, workflows.TurnSucceeded, done.State, done.Message)
	require.Equal(t, w.Key, done.Key)
	require.Equal(t, 1, refunds())
}

// Temporal answers a repeated Update ID with the first result, whatever the
// payload: the session client checks the returned fingerprint, so another
// payload under a turn already answered in this run is a conflict, never
// the first turn's result passed off as this one's.
func TestSessionClientChecksTheReturnedFingerprint(t *testing.T) {
	st := sharedStack(t)
	ctx := testContext(t, time.Minute)
	const session = "it-session-fingerprint"
	first := step(t, demotools.QueryOrder, map[string]any{"order_id": "ord_1001"})
	other := step(t, demotools.QueryOrder, map[string]any{"order_id": "ord_1002"})
	res, err := st.Plans.Turn(ctx, session, workflows.TurnRequest{Turn: 1, Steps: []plan.Step{first}}, sagaclient.SessionOptions{})
	require.NoError(t, err)
	require.Equal(t, workflows.TurnSucceeded, res.State)
	_, err = st.Plans.Turn(ctx, session, workflows.TurnRequest{Turn: 1, Steps: []plan.Step{other}}, sagaclient.SessionOptions{})
	var conflict *sagaclient.ConflictError
	require.True(t, errors.As(err, &conflict), "another payload under turn 1 is a conflict, got %v", err)
	require.Equal(t, res.Fingerprint, conflict.Existing)
}
