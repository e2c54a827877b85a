package mcpgw_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/temporal"

	"github.com/agentsaga/agentsaga/internal/demotools"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/ledger/ledgersqlite"
	"github.com/agentsaga/agentsaga/mcpgw"
	"github.com/agentsaga/agentsaga/plan"
	"github.com/agentsaga/agentsaga/sagaclient"
	"github.com/agentsaga/agentsaga/tool"
	"github.com/agentsaga/agentsaga/workflows"
)

// fakeSessions is the session engine as the gateway sees it: a turn number
// holds one payload; the same payload again is answered from the record
// (an Update ID Temporal deduplicates), another is refused as a conflict.
// A write turn that starts counts one effect.
type fakeSessions struct {
	mu       sync.Mutex
	turns    map[string]map[int]*fakeTurn // session -> turn
	effects  map[string]int               // tool -> effects made
	sent     int                          // Turn calls received
	approved map[string]bool              // operation key -> approved
	busy     bool                         // refuse every new turn as an open question would
	lose     int                          // answer this many next Turn calls with a lost response (after running)
	fail     map[string]bool              // tool -> its calls fail
	running  int                          // answer this many next Turn calls with state running
	rejected map[string]bool              // operation key -> a person rejected it
	gate     chan struct{}                // when set, every Turn call waits for it to close
	onTurn   func()                       // when set, called as each Turn call arrives
}

type fakeTurn struct {
	fp  string
	res workflows.TurnResult
}

func newFake() *fakeSessions {
	return &fakeSessions{turns: map[string]map[int]*fakeTurn{}, effects: map[string]int{}, approved: map[string]bool{}, fail: map[string]bool{}, rejected: map[string]bool{}}
}

func (f *fakeSessions) Turn(ctx context.Context, session string, t workflows.TurnRequest, _ sagaclient.SessionOptions) (workflows.TurnResult, error) {
	f.mu.Lock()
	gate, hook := f.gate, f.onTurn
	f.mu.Unlock()
	if hook != nil {
		hook()
	}
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return workflows.TurnResult{}, ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sent++
	fp, err := plan.Plan{SessionID: session, Turn: t.Turn, Steps: t.Steps}.Fingerprint()
	if err != nil {
		return workflows.TurnResult{}, err
	}
	if f.turns[session] == nil {
		f.turns[session] = map[int]*fakeTurn{}
	}
	ft, ok := f.turns[session][t.Turn]
	switch {
	case ok && ft.fp != fp:
		// What sagaclient returns when the session holds the turn with
		// another fingerprint.
		return workflows.TurnResult{}, &sagaclient.ConflictError{WorkflowID: workflows.SessionWorkflowID(session), Existing: ft.fp, Requested: fp}
	case !ok && f.busy:
		return workflows.TurnResult{}, temporal.NewApplicationError("turn 1 is still running (see its open question)", "Refused")
	case !ok:
		ft = &fakeTurn{fp: fp}
		f.turns[session][t.Turn] = ft
		s := t.Steps[0]
		key := plan.Key(session, t.Turn, 1, s.Tool)
		ft.res = workflows.TurnResult{Turn: t.Turn, Fingerprint: fp, State: workflows.TurnSucceeded,
			Steps: []workflows.StepStatus{{Step: 1, Turn: t.Turn, Key: key, Tool: s.Tool, State: "succeeded"}}}
		if amount, _ := tool.Int(s.Args, "amount_minor"); s.Hold != "" || (amount > demotools.RefundApprovalAboveMinor && s.Tool == demotools.ApplyRefund) {
			ft.res.State = workflows.TurnWaiting
			ft.res.Question = &workflows.Question{ID: "q1-step1-approval", Kind: "approval", Step: 1, Key: key, Answers: []string{"approve", "reject"},
				Card: workflows.Card{Change: "apply_refund: Refund", Amount: "600.00 EUR", Rule: strings.TrimPrefix(s.Hold+"; approval above 500.00", "; "), Key: key}}
		} else {
			f.run(ft)
		}
	}
	if ft.res.State == workflows.TurnWaiting && f.approved[ft.res.Steps[0].Key] {
		ft.res.Question = nil
		f.run(ft)
	}
	if ft.res.State == workflows.TurnWaiting && f.rejected[ft.res.Steps[0].Key] {
		ft.res.Question, ft.res.State, ft.res.Error, ft.res.Steps[0].State = nil, workflows.TurnFailed, "step 1 failed: rejected by a person", "failed_final"
	}
	if f.lose > 0 {
		f.lose--
		return workflows.TurnResult{}, context.DeadlineExceeded
	}
	if f.running > 0 {
		f.running--
		res := ft.res
		res.State = workflows.TurnRunning
		return res, nil
	}
	return ft.res, nil
}

// run makes the turn's effect (or its failure).
func (f *fakeSessions) run(ft *fakeTurn) {
	s := &ft.res.Steps[0]
	if f.fail[s.Tool] {
		ft.res.State, ft.res.Error, s.State = workflows.TurnFailed, "step 1 failed: rejected", "failed"
		return
	}
	ft.res.State = workflows.TurnSucceeded
	if spec, _ := demotools.Specs().Spec(s.Tool); spec.Class.IsWrite() {
		f.effects[s.Tool]++
		s.ExternalID = fmt.Sprintf("ext_%d", f.effects[s.Tool])
		s.Result = json.RawMessage(fmt.Sprintf(`{"id":%q}`, s.ExternalID))
	}
}

func (f *fakeSessions) Status(ctx context.Context, workflowID string) (workflows.Status, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	session := strings.TrimPrefix(workflowID, "agent-session:")
	turns, ok := f.turns[session]
	if !ok {
		return workflows.Status{}, fmt.Errorf("query status of %s: %w", workflowID, serviceerror.NewNotFound("workflow not found"))
	}
	var st workflows.Status
	for n, t := range turns {
		st.Steps = append(st.Steps, workflows.StepStatus{Turn: n, Key: t.res.Steps[0].Key})
		if t.res.State == workflows.TurnWaiting && t.res.Question != nil && !f.approved[t.res.Steps[0].Key] && !f.rejected[t.res.Steps[0].Key] {
			st.Questions = append(st.Questions, *t.res.Question)
		}
	}
	return st, nil
}

func (f *fakeSessions) count(tool string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.effects[tool]
}

// clock is an injected clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// connect serves a gateway over fake sessions to an official MCP client
// over in-memory transports.
func connect(t *testing.T, f *fakeSessions, c *clock) *mcp.ClientSession {
	t.Helper()
	reg, err := demotools.Registry(demotools.Config{})
	require.NoError(t, err)
	srv, err := mcpgw.New(f, reg, mcpgw.Options{Calls: memory(t), Now: c.now})
	require.NoError(t, err)
	st, ct := mcp.NewInMemoryTransports()
	ss, err := srv.Connect(t.Context(), st, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "mcpgw-test", Version: "1"}, nil).Connect(t.Context(), ct, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

func refund(order string, amount int) map[string]any {
	return map[string]any{"order_id": order, "amount_minor": amount, "currency": "EUR", "reason": "damaged"}
}

// call calls a tool and decodes its structured result.
func call(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any, meta mcp.Meta) (*mcp.CallToolResult, mcpgw.Result) {
	t.Helper()
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: name, Arguments: args, Meta: meta})
	require.NoError(t, err)
	var out mcpgw.Result
	b, err := json.Marshal(res.StructuredContent)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &out))
	require.Len(t, res.Content, 1)
	require.Equal(t, out.Message, res.Content[0].(*mcp.TextContent).Text)
	return res, out
}

func TestMCPListsEveryToolWithSchemaAndAnnotations(t *testing.T) {
	cs := connect(t, newFake(), &clock{t: time.Unix(1_800_000_000, 0)})
	tools := map[string]*mcp.Tool{}
	for tl, err := range cs.Tools(t.Context(), nil) {
		require.NoError(t, err)
		tools[tl.Name] = tl
	}
	for name, spec := range demotools.Specs() {
		_, listed := tools[name]
		require.Equal(t, !spec.Reversal, listed, "%s listed iff it is not a reversal", name)
	}
	refund := tools[demotools.ApplyRefund]
	var schema struct {
		Type       string   `json:"type"`
		Required   []string `json:"required"`
		Additional bool     `json:"additionalProperties"`
		Properties map[string]struct {
			Type        string `json:"type"`
			Description string `json:"description"`
			MaxLength   int    `json:"maxLength"`
			Minimum     int64  `json:"minimum"`
			Maximum     int64  `json:"maximum"`
			Format      string `json:"format"`
		} `json:"properties"`
	}
	b, err := json.Marshal(refund.InputSchema)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &schema))
	require.Equal(t, "object", schema.Type)
	require.False(t, schema.Additional)
	require.ElementsMatch(t, []string{"order_id", "amount_minor", "currency"}, schema.Required)
	amount := schema.Properties["amount_minor"]
	require.Equal(t, "integer", amount.Type)
	require.Contains(t, amount.Description, "minor units")
	require.EqualValues(t, 1, amount.Minimum)
	require.EqualValues(t, demotools.MaxRefundMinor, amount.Maximum)
	require.Equal(t, "string", schema.Properties["order_id"].Type)
	require.Equal(t, plan.DefaultMaxStringLen, schema.Properties["order_id"].MaxLength)
	require.Contains(t, schema.Properties["order_id"].Description, "the order")
	require.Contains(t, refund.Description, "above 50000 wait for a person")

	require.True(t, *refund.Annotations.DestructiveHint)
	require.False(t, refund.Annotations.IdempotentHint)
	require.False(t, refund.Annotations.ReadOnlyHint)
	require.True(t, tools[demotools.QueryOrder].Annotations.ReadOnlyHint)
	pay := tools[demotools.CreatePayment].Annotations
	require.True(t, pay.IdempotentHint)
	require.False(t, *pay.DestructiveHint)
	require.True(t, tools[demotools.CreateTicket].Annotations.IdempotentHint)
	require.Equal(t, "CONDITIONAL_WRITE", tools[demotools.CreateTicket].Meta["agentsaga/class"])

	var mail struct {
		Properties map[string]struct {
			Format    string `json:"format"`
			MaxLength int    `json:"maxLength"`
		} `json:"properties"`
	}
	b, _ = json.Marshal(tools[demotools.SendEmail].InputSchema)
	require.NoError(t, json.Unmarshal(b, &mail))
	require.Equal(t, "email", mail.Properties["to"].Format)
	require.Equal(t, demotools.MaxBodyLen, mail.Properties["body"].MaxLength)
}

func TestMCPUnkeyedIdenticalWriteIsHeldWithinTheWindow(t *testing.T) {
	f, c := newFake(), &clock{t: time.Unix(1_800_000_000, 0)}
	cs := connect(t, f, c)
	first, r1 := call(t, cs, demotools.ApplyRefund, refund("ord_1", 1200), nil)
	require.False(t, first.IsError, r1.Message)
	require.Equal(t, workflows.TurnSucceeded, r1.State)
	require.Equal(t, 1, r1.Turn)
	require.Equal(t, r1.Session+":1:1:apply_refund", r1.Key)
	require.Equal(t, r1.Key, first.Meta[mcpgw.MetaOperationKey])

	c.add(9 * time.Minute)
	again, r2 := call(t, cs, demotools.ApplyRefund, map[string]any{"currency": "EUR", "reason": "damaged", "amount_minor": 1200, "order_id": "ord_1"}, nil)
	require.False(t, again.IsError)
	require.Equal(t, workflows.TurnWaiting, r2.State, "a suspected duplicate waits for a person: %s", r2.Message)
	require.Equal(t, 2, r2.Turn, "a turn of its own")
	require.NotNil(t, r2.Question)
	require.Contains(t, r2.Question.Card.Rule, "suspected duplicate of "+r1.Key)
	require.Equal(t, r1.Key, r2.Held.Key)
	require.Equal(t, 1, f.count(demotools.ApplyRefund), "one refund: nothing ran")
	_, r3 := call(t, cs, demotools.ApplyRefund, refund("ord_1", 1200), nil)
	require.Equal(t, r2.Key, r3.Key, "repeating it reads the same held turn")
	require.Equal(t, 1, f.count(demotools.ApplyRefund))

	_, other := call(t, cs, demotools.ApplyRefund, refund("ord_1", 1300), nil)
	require.Equal(t, workflows.TurnSucceeded, other.State, "other arguments are another call")
	require.Equal(t, 3, other.Turn)
	_, read := call(t, cs, demotools.QueryOrder, map[string]any{"order_id": "ord_1"}, nil)
	_, read2 := call(t, cs, demotools.QueryOrder, map[string]any{"order_id": "ord_1"}, nil)
	require.Equal(t, workflows.TurnSucceeded, read2.State, "reads are never held")
	require.Equal(t, read.Turn+1, read2.Turn)

	c.add(time.Minute) // ten minutes after the first refund was given
	_, late := call(t, cs, demotools.ApplyRefund, refund("ord_1", 1200), nil)
	require.Equal(t, r2.Key, late.Key, "the held turn's result was not given yet: its record is kept, the repeat reads it")
	require.Equal(t, workflows.TurnWaiting, late.State, late.Message)

	// A person rejects the held duplicate; repeated an hour later it reads
	// the rejection and never runs.
	f.mu.Lock()
	f.rejected[r2.Key] = true
	f.mu.Unlock()
	c.add(time.Hour)
	_, rejected := call(t, cs, demotools.ApplyRefund, refund("ord_1", 1200), nil)
	require.Equal(t, workflows.TurnFailed, rejected.State, rejected.Message)
	require.Equal(t, r2.Key, rejected.Key)
	require.NotNil(t, rejected.Held)
	require.Contains(t, rejected.Message, "stands")
	c.add(9 * time.Minute)
	_, again2 := call(t, cs, demotools.ApplyRefund, refund("ord_1", 1200), nil)
	require.Equal(t, r2.Key, again2.Key, "within the window after the rejection was given, the repeat reads it again")
	require.Equal(t, workflows.TurnFailed, again2.State)
	require.Equal(t, 2, f.count(demotools.ApplyRefund), "ord_1 once, ord_1 with 1300 once")

	c.add(time.Minute) // the window after every final result was given has passed
	_, fresh := call(t, cs, demotools.ApplyRefund, refund("ord_1", 1200), nil)
	require.Equal(t, workflows.TurnSucceeded, fresh.State, fresh.Message)
	require.Equal(t, 3, f.count(demotools.ApplyRefund))
}

// A call whose final result the client was not given is kept past the
// window: repeated after a person decided, however late, it reads its turn.
func TestMCPUnansweredCallIsKeptPastTheWindow(t *testing.T) {
	f, c := newFake(), &clock{t: time.Unix(1_800_000_000, 0)}
	cs := connect(t, f, c)
	_, w := call(t, cs, demotools.ApplyRefund, refund("ord_11", 60000), nil)
	require.Equal(t, workflows.TurnWaiting, w.State)
	f.mu.Lock()
	f.approved[w.Key] = true
	f.mu.Unlock()
	c.add(11 * time.Minute)
	_, done := call(t, cs, demotools.ApplyRefund, refund("ord_11", 60000), nil)
	require.Equal(t, workflows.TurnSucceeded, done.State, done.Message)
	require.Equal(t, w.Key, done.Key, "the repeat after the window reads the waiting turn")
	require.Equal(t, 1, f.count(demotools.ApplyRefund))

	// The window counts from that delivery.
	c.add(9 * time.Minute)
	_, held := call(t, cs, demotools.ApplyRefund, refund("ord_11", 60000), nil)
	require.Equal(t, workflows.TurnWaiting, held.State)
	require.NotNil(t, held.Held, "nine minutes after the result was given: a suspected duplicate")
	require.Equal(t, w.Key, held.Held.Key)
	require.Equal(t, c.now().Add(-9*time.Minute).Add(mcpgw.DefaultDuplicateWindow).UTC(), held.Held.HeldUntil)

	// A lost answer, repeated an hour later, reads its turn too.
	f.lose = 1
	_, lost := call(t, cs, demotools.SendEmail, map[string]any{"to": "ana@example.com", "subject": "s", "body": "b"}, nil)
	require.Equal(t, mcpgw.StateNoAnswer, lost.State)
	c.add(time.Hour)
	_, read := call(t, cs, demotools.SendEmail, map[string]any{"to": "ana@example.com", "subject": "s", "body": "b"}, nil)
	require.Equal(t, workflows.TurnSucceeded, read.State, read.Message)
	require.Equal(t, lost.Key, read.Key)
	require.Equal(t, 1, f.count(demotools.SendEmail))
}

func TestMCPKeyedRepeatReachesTheSameTurn(t *testing.T) {
	f, c := newFake(), &clock{t: time.Unix(1_800_000_000, 0)}
	cs := connect(t, f, c)
	meta := mcp.Meta{mcpgw.MetaKey: "call_7f3a"}
	a, ra := call(t, cs, demotools.ApplyRefund, refund("ord_2", 1500), meta)
	b, rb := call(t, cs, demotools.ApplyRefund, refund("ord_2", 1500), meta)
	require.False(t, a.IsError)
	require.False(t, b.IsError, "a keyed repeat is answered, not held: %s", rb.Message)
	require.Equal(t, mcpgw.KeyTurn("call_7f3a"), ra.Turn)
	require.GreaterOrEqual(t, ra.Turn, mcpgw.KeyedTurnBase)
	require.Equal(t, ra.Key, rb.Key)
	require.Equal(t, ra.ExternalID, rb.ExternalID)
	require.Equal(t, 1, f.count(demotools.ApplyRefund))

	_, conflict := call(t, cs, demotools.ApplyRefund, refund("ord_2", 1600), meta)
	require.Equal(t, mcpgw.StateRefused, conflict.State)
	require.Contains(t, conflict.Message, "conflict")
	require.Contains(t, conflict.Message, "send it with a new "+mcpgw.MetaKey, "the refusal says what to do")
	require.NotContains(t, conflict.Message, "fingerprint", "no fingerprints for the agent to compare")

	_, t7 := call(t, cs, demotools.ApplyRefund, refund("ord_3", 100), mcp.Meta{mcpgw.MetaTurn: 7})
	require.Equal(t, t7.Session+":7:1:apply_refund", t7.Key)
	_, k7 := call(t, cs, demotools.ApplyRefund, refund("ord_3", 100), mcp.Meta{mcpgw.MetaKey: "7"})
	require.Equal(t, t7.Key, k7.Key, `key "7" names turn 7`)
	_, next := call(t, cs, demotools.QueryOrder, map[string]any{"order_id": "ord_3"}, nil)
	require.Equal(t, 8, next.Turn, "the gateway numbers after the client's turns")
	require.Equal(t, 2, f.count(demotools.ApplyRefund))

	_, s := call(t, cs, demotools.ApplyRefund, refund("ord_4", 100), mcp.Meta{mcpgw.MetaSession: "agent-42", mcpgw.MetaTurn: 1})
	require.Equal(t, "agent-42:1:1:apply_refund", s.Key)
}

func TestMCPBadMetaIsRefusedNamingTheField(t *testing.T) {
	cs := connect(t, newFake(), &clock{t: time.Unix(1_800_000_000, 0)})
	for _, tc := range []struct {
		meta mcp.Meta
		want string
	}{
		{mcp.Meta{mcpgw.MetaSession: "bad session"}, mcpgw.MetaSession},
		{mcp.Meta{mcpgw.MetaTurn: 0}, mcpgw.MetaTurn},
		{mcp.Meta{mcpgw.MetaTurn: 1.5}, mcpgw.MetaTurn},
		{mcp.Meta{mcpgw.MetaTurn: "3"}, mcpgw.MetaTurn},
		{mcp.Meta{mcpgw.MetaKey: ""}, mcpgw.MetaKey},
		{mcp.Meta{mcpgw.MetaKey: "a\x1bb"}, mcpgw.MetaKey},
		{mcp.Meta{mcpgw.MetaKey: "k", mcpgw.MetaTurn: 2}, "both"},
	} {
		res, out := call(t, cs, demotools.QueryOrder, map[string]any{"order_id": "ord_1"}, tc.meta)
		require.True(t, res.IsError, "%v", tc.meta)
		require.Equal(t, mcpgw.StateRefused, out.State)
		require.Contains(t, out.Message, tc.want, "%v", tc.meta)
	}
	res, out := call(t, cs, demotools.ApplyRefund, map[string]any{"order_id": "ord_1", "amount_minor": 12.5, "currency": "EUR", "x": 1}, nil)
	require.True(t, res.IsError)
	require.Contains(t, out.Message, "arguments.amount_minor: must be an integer")
	require.Contains(t, out.Message, "arguments.x: is not an argument")
}

// Arguments with a key named twice are refused as strictly as a plan's,
// naming the field, before anything is run (canonical JSON would otherwise
// settle on one value silently).
func TestMCPArgumentsWithAKeyTwiceAreRefused(t *testing.T) {
	f := newFake()
	cs := connect(t, f, &clock{t: time.Unix(1_800_000_000, 0)})
	raw := json.RawMessage(`{"order_id":"ord_1","order_id":"ord_2","amount_minor":100,"currency":"EUR"}`)
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: demotools.ApplyRefund, Arguments: raw})
	require.NoError(t, err)
	require.True(t, res.IsError)
	b, err := json.Marshal(res.StructuredContent)
	require.NoError(t, err)
	var out mcpgw.Result
	require.NoError(t, json.Unmarshal(b, &out))
	require.Equal(t, mcpgw.StateRefused, out.State)
	require.Contains(t, out.Message, "order_id: appears twice")
	f.mu.Lock()
	defer f.mu.Unlock()
	require.Zero(t, f.sent, "nothing was sent to the session")
}

func TestMCPWaitingCallReturnsTheCardAndItsRepeatTheFinalResult(t *testing.T) {
	f, c := newFake(), &clock{t: time.Unix(1_800_000_000, 0)}
	cs := connect(t, f, c)
	res, w := call(t, cs, demotools.ApplyRefund, refund("ord_5", 60000), nil)
	require.False(t, res.IsError)
	require.Equal(t, workflows.TurnWaiting, w.State)
	require.NotNil(t, w.Question)
	require.Equal(t, "600.00 EUR", w.Question.Card.Amount)
	require.Contains(t, w.Message, "WAITING FOR A HUMAN")
	require.Contains(t, w.Message, "600.00 EUR")
	require.Contains(t, w.Message, "approval above 500.00")
	require.Contains(t, w.Message, "starter approve agent-session:"+w.Session+" --step 1")
	require.Equal(t, 0, f.count(demotools.ApplyRefund))

	_, still := call(t, cs, demotools.ApplyRefund, refund("ord_5", 60000), nil)
	require.Equal(t, workflows.TurnWaiting, still.State, "a repeat while it waits reads the same turn")
	require.Equal(t, w.Key, still.Key)

	f.mu.Lock()
	f.approved[w.Key] = true
	f.mu.Unlock()
	c.add(time.Minute)
	done, final := call(t, cs, demotools.ApplyRefund, refund("ord_5", 60000), nil)
	require.False(t, done.IsError, final.Message)
	require.Equal(t, workflows.TurnSucceeded, final.State)
	require.Equal(t, w.Key, final.Key)
	require.Equal(t, 1, f.count(demotools.ApplyRefund))

	_, held := call(t, cs, demotools.ApplyRefund, refund("ord_5", 60000), nil)
	require.Equal(t, workflows.TurnWaiting, held.State, "once the final result was given, an identical call waits for a person")
	require.NotNil(t, held.Held)
	require.Equal(t, 1, f.count(demotools.ApplyRefund))
}

func TestMCPLostAnswerIsReadAgainUnderTheSameKey(t *testing.T) {
	f, c := newFake(), &clock{t: time.Unix(1_800_000_000, 0)}
	cs := connect(t, f, c)
	f.lose = 1
	res, lost := call(t, cs, demotools.ApplyRefund, refund("ord_6", 700), nil)
	require.True(t, res.IsError)
	require.Equal(t, mcpgw.StateNoAnswer, lost.State)
	require.Contains(t, lost.Message, "same _meta")
	_, keyed := call(t, cs, demotools.ApplyRefund, refund("ord_6", 700), mcp.Meta{mcpgw.MetaKey: "k-6"})
	require.Equal(t, workflows.TurnSucceeded, keyed.State, "a keyed call is its own turn")
	res, again := call(t, cs, demotools.ApplyRefund, refund("ord_6", 700), nil)
	require.False(t, res.IsError, again.Message)
	require.Equal(t, workflows.TurnSucceeded, again.State)
	require.Equal(t, lost.Key, again.Key, "the retry reads the turn whose answer was lost, not the keyed call's")
	require.Equal(t, 2, f.count(demotools.ApplyRefund), "the lost one once, the keyed one once")
}

func TestMCPRefusedOrFailedCallIsNotRemembered(t *testing.T) {
	f, c := newFake(), &clock{t: time.Unix(1_800_000_000, 0)}
	cs := connect(t, f, c)
	f.busy = true
	_, busy := call(t, cs, demotools.ApplyRefund, refund("ord_7", 800), nil)
	require.Equal(t, mcpgw.StateRefused, busy.State)
	require.Contains(t, busy.Message, "still running")
	require.NotContains(t, busy.Message, "retryable", "no Temporal wording that invites a retry loop")
	require.NotContains(t, busy.Message, "type: Refused")
	f.busy = false
	_, ran := call(t, cs, demotools.ApplyRefund, refund("ord_7", 800), nil)
	require.Equal(t, workflows.TurnSucceeded, ran.State, "a refused turn ran nothing: its repeat runs")

	f.fail[demotools.CreatePayment] = true
	pay := map[string]any{"customer_id": "cus_1", "amount_minor": 500, "currency": "EUR", "payment_method": "tok_visa"}
	res, failed := call(t, cs, demotools.CreatePayment, pay, nil)
	require.True(t, res.IsError)
	require.Equal(t, workflows.TurnFailed, failed.State)
	f.fail[demotools.CreatePayment] = false
	_, retried := call(t, cs, demotools.CreatePayment, pay, nil)
	require.Equal(t, workflows.TurnSucceeded, retried.State, "a failed call made no effect: its repeat runs")
	require.Equal(t, failed.Turn+1, retried.Turn)
}

// A session's memory is not forgotten while a final result was given less
// than the window ago, even if its last call arrived longer ago.
func TestMCPSessionIsKeptForTheWindowAfterItsLastDelivery(t *testing.T) {
	f, c := newFake(), &clock{t: time.Unix(1_800_000_000, 0)}
	cs := connect(t, f, c)
	f.onTurn = func() { c.add(5 * time.Minute) } // the turn takes five minutes
	_, first := call(t, cs, demotools.ApplyRefund, refund("ord_12", 1200), mcp.Meta{mcpgw.MetaSession: "slow"})
	require.Equal(t, workflows.TurnSucceeded, first.State)
	f.onTurn = nil
	c.add(6 * time.Minute) // 11 minutes after the call, 6 after its result was given
	call(t, cs, demotools.QueryOrder, map[string]any{"order_id": "ord_12"}, mcp.Meta{mcpgw.MetaSession: "other"})
	_, again := call(t, cs, demotools.ApplyRefund, refund("ord_12", 1200), mcp.Meta{mcpgw.MetaSession: "slow"})
	require.Equal(t, workflows.TurnWaiting, again.State, again.Message)
	require.NotNil(t, again.Held, "still a suspected duplicate of the first")
	require.Equal(t, 1, f.count(demotools.ApplyRefund))
}

// attaches counts the gateway's log lines of calls that attached to an
// identical call in progress.
type attaches struct{ n atomic.Int32 }

func (a *attaches) Enabled(context.Context, slog.Level) bool { return true }
func (a *attaches) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, "attaches") {
		a.n.Add(1)
	}
	return nil
}
func (a *attaches) WithAttrs([]slog.Attr) slog.Handler { return a }
func (a *attaches) WithGroup(string) slog.Handler      { return a }

// Four clients (four MCP connections to one gateway) name one session and
// send the same refund at the same moment, without a key: it is one call.
// The first is held in flight until the other three have attached to it
// (each reads its turn under the turn's own Update ID); all four get its
// result, one turn, one effect, nobody asked.
func TestMCPConcurrentIdenticalCallsAreOneCall(t *testing.T) {
	f, c := newFake(), &clock{t: time.Unix(1_800_000_000, 0)}
	f.gate = make(chan struct{})
	reg, err := demotools.Registry(demotools.Config{})
	require.NoError(t, err)
	log := &attaches{}
	srv, err := mcpgw.New(f, reg, mcpgw.Options{Calls: memory(t), Now: c.now, Logger: slog.New(log)})
	require.NoError(t, err)
	clients := make([]*mcp.ClientSession, 4)
	for i := range clients {
		st, ct := mcp.NewInMemoryTransports()
		ss, err := srv.Connect(t.Context(), st, nil)
		require.NoError(t, err)
		t.Cleanup(func() { _ = ss.Close() })
		clients[i], err = mcp.NewClient(&mcp.Implementation{Name: "mcpgw-test", Version: "1"}, nil).Connect(t.Context(), ct, nil)
		require.NoError(t, err)
		t.Cleanup(func() { _ = clients[i].Close() })
	}
	var wg sync.WaitGroup
	results := make([]map[string]any, len(clients))
	for i, cs := range clients {
		wg.Go(func() {
			res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: demotools.ApplyRefund, Arguments: refund("ord_8", 900), Meta: mcp.Meta{mcpgw.MetaSession: "shared"}})
			if err == nil {
				results[i] = res.StructuredContent.(map[string]any)
			}
		})
	}
	deadline := time.Now().Add(10 * time.Second)
	for log.n.Load() < 3 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond) // polls a condition: three calls attached
	}
	close(f.gate)
	wg.Wait()
	for i, r := range results {
		require.NotNil(t, r, "client %d got no result", i)
		require.Equal(t, "succeeded", r["state"], "client %d: one call, its result for all: %v", i, r["message"])
		require.Equal(t, "shared:1:1:apply_refund", r["key"])
		require.Nil(t, r["held"])
	}
	require.Equal(t, 1, f.count(demotools.ApplyRefund))
	f.mu.Lock()
	defer f.mu.Unlock()
	require.Len(t, f.turns["shared"], 1, "one turn: each attached call read it under its Update ID")
}

func TestMCPNumberingContinuesAnExistingSession(t *testing.T) {
	f, c := newFake(), &clock{t: time.Unix(1_800_000_000, 0)}
	cs := connect(t, f, c)
	meta := mcp.Meta{mcpgw.MetaSession: "resumed"}
	for _, n := range []int{1, 2, 4} {
		_, r := call(t, cs, demotools.QueryOrder, map[string]any{"order_id": fmt.Sprint(n)}, mcp.Meta{mcpgw.MetaSession: "resumed", mcpgw.MetaTurn: n})
		require.Equal(t, n, r.Turn)
	}
	_, keyed := call(t, cs, demotools.QueryOrder, map[string]any{"order_id": "k"}, mcp.Meta{mcpgw.MetaSession: "resumed", mcpgw.MetaKey: "x"})
	require.Greater(t, keyed.Turn, mcpgw.KeyedTurnBase)

	// A second gateway (a restart) meets the session for the first time.
	cs2 := connect(t, f, c)
	_, r := call(t, cs2, demotools.QueryOrder, map[string]any{"order_id": "next"}, meta)
	require.Equal(t, 5, r.Turn, "after the session's highest turn below the keyed range")
}

func TestMCPSessionsOfTwoConnectionsAreApart(t *testing.T) {
	f, c := newFake(), &clock{t: time.Unix(1_800_000_000, 0)}
	a, b := connect(t, f, c), connect(t, f, c)
	_, ra := call(t, a, demotools.ApplyRefund, refund("ord_9", 100), nil)
	_, rb := call(t, b, demotools.ApplyRefund, refund("ord_9", 100), nil)
	require.NotEqual(t, ra.Session, rb.Session)
	require.True(t, strings.HasPrefix(ra.Session, "mcp-"))
	require.Equal(t, workflows.TurnSucceeded, rb.State, "the duplicate rule is per session (the tool's guard spans sessions)")
}

func TestMCPNewRefusesBadOptions(t *testing.T) {
	reg, err := demotools.Registry(demotools.Config{})
	require.NoError(t, err)
	_, err = mcpgw.New(nil, reg, mcpgw.Options{Calls: memory(t)})
	require.Error(t, err)
	_, err = mcpgw.New(newFake(), reg, mcpgw.Options{})
	require.ErrorContains(t, err, "Options.Calls is required")
	_, err = mcpgw.New(newFake(), reg, mcpgw.Options{Calls: memory(t), DuplicateWindow: -time.Second})
	require.ErrorContains(t, err, "negative")
	_, err = mcpgw.New(newFake(), reg, mcpgw.Options{Calls: memory(t), Limits: plan.Limits{MaxStringLen: -1}})
	require.Error(t, err)
}

func TestMCPKeyTurn(t *testing.T) {
	require.Equal(t, 12, mcpgw.KeyTurn("12"))
	require.GreaterOrEqual(t, mcpgw.KeyTurn("012"), mcpgw.KeyedTurnBase, "a leading zero is not a turn number")
	require.Equal(t, mcpgw.KeyTurn("call-1"), mcpgw.KeyTurn("call-1"))
	require.NotEqual(t, mcpgw.KeyTurn("call-1"), mcpgw.KeyTurn("call-2"))
	require.Less(t, mcpgw.KeyTurn("call-1"), 2*mcpgw.KeyedTurnBase)
	require.GreaterOrEqual(t, mcpgw.KeyTurn(fmt.Sprint(mcpgw.KeyedTurnBase)), mcpgw.KeyedTurnBase)
}

func TestMCPRunningTurnIsReadUntilItSettles(t *testing.T) {
	f, c := newFake(), &clock{t: time.Unix(1_800_000_000, 0)}
	cs := connect(t, f, c)
	f.running = 2
	_, r := call(t, cs, demotools.ApplyRefund, refund("ord_10", 100), nil)
	require.Equal(t, workflows.TurnSucceeded, r.State, r.Message)
	require.Equal(t, 3, f.sent, "read twice while running, then settled")
	require.Equal(t, 1, f.count(demotools.ApplyRefund))
}

// memory is a fresh ledger for the gateway's memory of keyless calls.
func memory(t testing.TB) ledger.Store {
	t.Helper()
	l, err := ledgersqlite.Open(t.Context(), filepath.Join(t.TempDir(), "ledger.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	return l
}
