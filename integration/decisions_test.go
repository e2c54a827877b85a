package integration

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/agentsaga/agentsaga/codec"
	"github.com/agentsaga/agentsaga/internal/devstack"
	"github.com/agentsaga/agentsaga/internal/sandbox"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/plan"
	"github.com/agentsaga/agentsaga/sagaclient"
	"github.com/agentsaga/agentsaga/workflows"
)

// waitStatus polls the status query until cond holds or ctx ends.
func waitStatus(ctx context.Context, t *testing.T, st *devstack.Stack, id string, cond func(workflows.Status) bool) workflows.Status {
	t.Helper()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		s, err := st.Plans.Status(ctx, id)
		if err == nil && cond(s) {
			return s
		}
		select {
		case <-ctx.Done():
			require.FailNow(t, "condition not reached", "workflow %s, last status %+v, err %v", id, s, err)
		case <-tick.C:
		}
	}
}

func questionOn(step int, kind string) func(workflows.Status) bool {
	return func(s workflows.Status) bool {
		return len(s.Questions) == 1 && s.Questions[0].Step == step && s.Questions[0].Kind == kind
	}
}

func countEmails(effects []sandbox.Effect) int { return countKind(effects, "email") }

// rawUpdate sends an Update as any Temporal client would, without the Go
// client's own checks, and returns the workflow's verdict.
func rawUpdate(ctx context.Context, c client.Client, id, name string, arg any) error {
	h, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID: id, UpdateName: name, Args: []any{arg}, WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	if err != nil {
		return err
	}
	var r workflows.DecisionResult
	return h.Get(ctx, &r)
}

// A resolve sent before its step waits changes nothing at the mail relay:
// no phantom success, no second email.
func TestEarlyResolveChangesNothingAtTheRelay(t *testing.T) {
	st := sharedStack(t)
	sb := sandbox.NewClient(st.SandboxURL, nil)
	ctx := testContext(t, 2*time.Minute)
	p := newPlan("it-early-resolve",
		step(t, "apply_refund", map[string]any{"order_id": "ord_it_early", "amount_minor": 60000, "currency": "EUR", "reason": "early resolve test"}),
		step(t, "send_email", map[string]any{"to": "cleo@example.com", "subject": "Your refund", "body": "It is on its way."}))
	before := countEmails(allEffects(ctx, t, sb))
	require.NoError(t, sb.Fault(ctx, sandbox.FaultSpec{Op: "mail.send", Fault: sandbox.DropBeforeCommit, Count: 1}))

	run, err := st.Plans.Start(ctx, p)
	require.NoError(t, err)
	waiting := waitStatus(ctx, t, st, run.WorkflowID, questionOn(1, workflows.QuestionApproval))

	// Early decisions for step 2, as a signal and as an Update.
	require.NoError(t, st.Client.SignalWorkflow(ctx, run.WorkflowID, "", workflows.SignalResolve,
		workflows.ResolveSignal{Step: 2, Outcome: workflows.OutcomeSucceeded, ExternalID: "msg_bogus", By: "mallory"}))
	require.NoError(t, st.Client.SignalWorkflow(ctx, run.WorkflowID, "", workflows.SignalResolve,
		workflows.ResolveSignal{Step: 2, Outcome: workflows.OutcomeRetry, By: "mallory"}))
	err = rawUpdate(ctx, st.Client, run.WorkflowID, workflows.UpdateResolve,
		workflows.ResolveSignal{Step: 2, Outcome: workflows.OutcomeSucceeded, ExternalID: "msg_bogus", By: "mallory"})
	require.ErrorContains(t, err, "step 2 has no open question")

	q := waiting.Questions[0]
	res, err := st.Plans.Approve(ctx, run.WorkflowID, workflows.ApproveSignal{Step: 1, QuestionID: q.ID, Fingerprint: q.Fingerprint, By: "alice", Approved: true})
	require.NoError(t, err)
	require.True(t, res.Applied)

	unknown := waitStatus(ctx, t, st, run.WorkflowID, questionOn(2, workflows.QuestionOutcome))
	require.Equal(t, ledger.NeedsHuman, unknown.Steps[1].State, "the early decisions were not kept")
	require.Equal(t, before, countEmails(allEffects(ctx, t, sb)), "the relay holds no email yet")
	for _, d := range unknown.Steps[1].Decisions {
		require.NotEmpty(t, d.Refused, "every early decision is recorded as refused")
	}

	_, err = st.Plans.Resolve(ctx, run.WorkflowID, workflows.ResolveSignal{Step: 2, QuestionID: unknown.Questions[0].ID, Outcome: workflows.OutcomeRetry, By: "bob", Note: "relay log is empty"})
	require.NoError(t, err)
	final, err := st.Plans.Wait(ctx, run.WorkflowID)
	require.NoError(t, err)
	require.Equal(t, workflows.SagaSucceeded, final.State, "plan error: %s", final.Error)
	require.NotEqual(t, "msg_bogus", final.Steps[1].ExternalID)
	require.Equal(t, before+1, countEmails(allEffects(ctx, t, sb)), "exactly one email at the relay")

	trail, err := st.Ledger.Decisions(ctx, p.Key(2))
	require.NoError(t, err)
	var kinds []string
	for _, d := range trail {
		kinds = append(kinds, d.Kind+":"+d.By)
		require.False(t, d.AppliedAt.IsZero())
	}
	require.Contains(t, kinds, "refused:mallory")
	require.Contains(t, kinds, "resolve:bob")
}

// A refund above the threshold on an order already refunded shows the clash,
// the amount and the earlier refund on its card (also in the UI), and runs
// only after an explicit override; every decision is in the ledger.
func TestClashOnTheCardAndOverride(t *testing.T) {
	st := sharedStack(t)
	sb := sandbox.NewClient(st.SandboxURL, nil)
	ctx := testContext(t, 2*time.Minute)
	refund := func(session string, amount int) plan.Plan {
		p := newPlan(session, step(t, "apply_refund", map[string]any{"order_id": "ord_it_clash", "amount_minor": amount, "currency": "EUR", "reason": "clash test"}))
		p.RequestedBy = "agent-7"
		return p
	}
	approve := func(id string, q workflows.Question, by string, override bool) error {
		_, err := st.Plans.Approve(ctx, id, workflows.ApproveSignal{Step: q.Step, QuestionID: q.ID, Fingerprint: q.Fingerprint, By: by, Approved: true, Override: override})
		return err
	}

	first := refund("it-clash-1", 150000)
	run1, err := st.Plans.Start(ctx, first)
	require.NoError(t, err)
	w1 := waitStatus(ctx, t, st, run1.WorkflowID, questionOn(1, workflows.QuestionApproval))
	require.ErrorContains(t, approve(run1.WorkflowID, w1.Questions[0], "agent-7", false), "four eyes")
	require.NoError(t, approve(run1.WorkflowID, w1.Questions[0], "bob", false))
	done1, err := st.Plans.Wait(ctx, run1.WorkflowID)
	require.NoError(t, err)
	require.Equal(t, workflows.SagaSucceeded, done1.State, "plan error: %s", done1.Error)

	second := refund("it-clash-2", 339900)
	run2, err := st.Plans.Start(ctx, second)
	require.NoError(t, err)
	w2 := waitStatus(ctx, t, st, run2.WorkflowID, questionOn(1, workflows.QuestionApproval))
	card := w2.Questions[0].Card
	require.Equal(t, "3,399.00 EUR", card.Amount)
	require.Equal(t, "EUR", card.Currency)
	require.Equal(t, "order_id ord_it_clash", card.Object)
	require.Contains(t, card.Rule, "above 500.00 EUR")
	require.Contains(t, card.Clash, first.Key(1))
	require.Len(t, card.AlreadyRan, 1)
	require.Contains(t, card.AlreadyRan[0], first.Key(1))
	require.Contains(t, card.AlreadyRan[0], "1,500.00 EUR", "the earlier refund's amount")
	require.Equal(t, "agent-7", card.RequestedBy)

	details := uiCurrentDetails(ctx, t, st, run2.WorkflowID)
	for _, want := range []string{"3,399.00 EUR", "order_id ord_it_clash", "above 500.00 EUR", first.Key(1), w2.Questions[0].ID} {
		require.Contains(t, details, want, "the UI's current details show the card")
	}
	require.Contains(t, details, "how to decide: `starter approve "+run2.WorkflowID+" --step 1 --question "+w2.Questions[0].ID)
	require.Contains(t, details, "`--override` to let it through the clash shown")
	require.Contains(t, details, "- step 1 · apply_refund · **pending**", "one line per step, its cells apart")

	refundsBefore := countKind(allEffects(ctx, t, sb), "refund")
	err = approve(run2.WorkflowID, w2.Questions[0], "carol", false)
	var rej *sagaclient.RejectedError
	require.True(t, errors.As(err, &rej), "want a rejection, got %v", err)
	require.Contains(t, rej.Reason, "override")
	require.Equal(t, refundsBefore, countKind(allEffects(ctx, t, sb), "refund"), "nothing ran without the override")

	require.NoError(t, approve(run2.WorkflowID, w2.Questions[0], "carol", true))
	done2, err := st.Plans.Wait(ctx, run2.WorkflowID)
	require.NoError(t, err)
	require.Equal(t, workflows.SagaSucceeded, done2.State, "plan error: %s", done2.Error)
	require.Equal(t, refundsBefore+1, countKind(allEffects(ctx, t, sb), "refund"))

	trail, err := st.Ledger.Decisions(ctx, second.Key(1))
	require.NoError(t, err)
	require.NotEmpty(t, trail)
	last := trail[len(trail)-1]
	require.Equal(t, "override", last.Kind)
	require.Equal(t, "carol", last.By)
	require.Equal(t, w2.Questions[0].ID, last.QuestionID)
	require.Contains(t, string(last.Card), "3,399.00 EUR")

	summaries := uiActivitySummaries(ctx, t, st, run2.WorkflowID)
	require.Contains(t, summaries, "apply_refund order_id ord_it_clash 3,399.00 EUR "+second.Key(1))
	// A finished plan's details keep who decided, how, and why.
	finished := uiCurrentDetails(ctx, t, st, run2.WorkflowID)
	require.Contains(t, finished, "approved with override by carol (unverified)")
	require.Contains(t, finished, "**succeeded** · id ")
	// The approval wait is named after its question in the UI's timeline,
	// not AwaitWithTimeout.
	require.Contains(t, summaries, "approval "+w2.Questions[0].ID+" apply_refund 3,399.00 EUR")
}

// uiCall calls the Temporal Web UI's HTTP API of the stack as the browser
// does: a write carries the UI's CSRF cookie and header.
func uiCall(ctx context.Context, t *testing.T, st *devstack.Stack, method, path string, body any) []byte {
	t.Helper()
	var csrf string
	if method != http.MethodGet {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, st.Server.UIURL()+"/", nil)
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_ = resp.Body.Close()
		for _, c := range resp.Cookies() {
			if c.Name == "_csrf" {
				csrf = c.Value
			}
		}
		require.NotEmpty(t, csrf, "the UI sets its CSRF cookie")
	}
	var in io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		require.NoError(t, err)
		in = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, st.Server.UIURL()+path, in)
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	if csrf != "" {
		req.AddCookie(&http.Cookie{Name: "_csrf", Value: csrf})
		req.Header.Set("X-CSRF-Token", csrf)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s %s: %s", method, path, out)
	return out
}

// uiCurrentDetails reads the workflow's current details through the UI's
// HTTP API, as the UI does (the __temporal_workflow_metadata query).
func uiCurrentDetails(ctx context.Context, t *testing.T, st *devstack.Stack, id string) string {
	t.Helper()
	path := fmt.Sprintf("/api/v1/namespaces/%s/workflows/%s/query/__temporal_workflow_metadata", st.Server.Namespace(), url.PathEscape(id))
	raw := uiCall(ctx, t, st, http.MethodPost, path, map[string]any{"query": map[string]any{"queryType": "__temporal_workflow_metadata"}})
	var resp struct {
		QueryResult struct {
			Payloads []uiPayload `json:"payloads"`
		} `json:"queryResult"`
	}
	require.NoError(t, json.Unmarshal(raw, &resp), "%s", raw)
	require.NotEmpty(t, resp.QueryResult.Payloads, "%s", raw)
	data := decodeAsTheUI(ctx, t, st, resp.QueryResult.Payloads[0])
	var meta struct {
		CurrentDetails string `json:"currentDetails"`
	}
	require.NoError(t, json.Unmarshal(data, &meta), "%s", data)
	return meta.CurrentDetails
}

// uiActivitySummaries returns the summaries of the activities scheduled in a
// workflow's history, read through the UI's HTTP API.
func uiActivitySummaries(ctx context.Context, t *testing.T, st *devstack.Stack, id string) string {
	t.Helper()
	path := fmt.Sprintf("/api/v1/namespaces/%s/workflows/%s/history", st.Server.Namespace(), url.PathEscape(id))
	raw := uiCall(ctx, t, st, http.MethodGet, path, nil)
	var resp struct {
		History struct {
			Events []struct {
				UserMetadata struct {
					Summary uiPayload `json:"summary"`
				} `json:"userMetadata"`
			} `json:"events"`
		} `json:"history"`
	}
	require.NoError(t, json.Unmarshal(raw, &resp), "%s", raw)
	var out []string
	for _, e := range resp.History.Events {
		if e.UserMetadata.Summary.Data == "" {
			continue
		}
		data := decodeAsTheUI(ctx, t, st, e.UserMetadata.Summary)
		var s string
		require.NoError(t, json.Unmarshal(data, &s), "%s", data)
		out = append(out, s)
	}
	return strings.Join(out, "\n")
}

// uiPayload is a payload as the UI's HTTP API returns it: metadata values
// and data in base64.
type uiPayload struct {
	Metadata map[string]string `json:"metadata,omitempty"`
	Data     string            `json:"data"`
}

// encoding returns the payload's encoding metadata.
func (p uiPayload) encoding(t *testing.T) string {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(p.Metadata["encoding"])
	require.NoError(t, err)
	return string(b)
}

// decodeAsTheUI returns the data of p as the browser's UI gets it: an
// encrypted payload is sent to the stack's codec endpoint with its token
// (the UI sends the login cookie instead), a plain one is read as is.
func decodeAsTheUI(ctx context.Context, t *testing.T, st *devstack.Stack, p uiPayload) []byte {
	t.Helper()
	if p.encoding(t) == codec.EncodingEncrypted {
		out := codecCall(ctx, t, st, "/decode", st.CodecToken, []uiPayload{p})
		require.Len(t, out, 1)
		require.NotEqual(t, codec.EncodingEncrypted, out[0].encoding(t), "the codec endpoint did not decode")
		p = out[0]
	}
	data, err := base64.StdEncoding.DecodeString(p.Data)
	require.NoError(t, err)
	return data
}

// codecCall POSTs payloads to the stack's codec endpoint as the Web UI does
// (JSON, X-Namespace, the UI's origin) with token as bearer ("" for none)
// and returns the answer's payloads; a non-200 answer fails the test.
func codecCall(ctx context.Context, t *testing.T, st *devstack.Stack, path, token string, payloads []uiPayload) []uiPayload {
	t.Helper()
	status, out := codecPost(ctx, t, st, path, token, payloads)
	require.Equal(t, http.StatusOK, status, "POST %s: %s", path, out)
	var resp struct {
		Payloads []uiPayload `json:"payloads"`
	}
	require.NoError(t, json.Unmarshal(out, &resp), "%s", out)
	return resp.Payloads
}

// codecPost POSTs payloads to the stack's codec endpoint and returns the
// status and body.
func codecPost(ctx context.Context, t *testing.T, st *devstack.Stack, path, token string, payloads []uiPayload) (int, []byte) {
	t.Helper()
	body, err := json.Marshal(map[string]any{"payloads": payloads})
	require.NoError(t, err)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, st.CodecURL+path, bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Namespace", st.Server.Namespace())
	if ui := st.Server.UIURL(); ui != "" {
		req.Header.Set("Origin", ui)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, out
}
