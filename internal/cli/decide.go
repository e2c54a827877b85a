package cli

import (
	"context"
	"fmt"
	"io"

	"github.com/agentsaga/agentsaga/operators"
	"github.com/agentsaga/agentsaga/sagaclient"
	"github.com/agentsaga/agentsaga/workflows"
)

// The one path by which a decision about a question somebody was shown is
// sent: `starter approve` and `starter resolve` (which print the card first)
// and `starter console` (which showed it in the browser). The question and
// its card come from the plan's status; the decision names the question, its
// run, its fingerprint and the digest of its card (workflows.CardDigest), is
// checked as the workflow's validator checks it (every field against its
// limit, named) and is signed by sagaclient with the operator's key.

// approveShown sends a, an answer to the approval question q of the status
// st that the decider was shown, as by.
func approveShown(ctx context.Context, sc *sagaclient.Client, by, workflowID string, st workflows.Status, q workflows.Question, a workflows.ApproveSignal) (workflows.DecisionResult, error) {
	a.Step, a.QuestionID, a.RunID, a.CardDigest = q.Step, q.ID, st.RunID, workflows.CardDigest(q.Card)
	if a.Fingerprint == "" {
		a.Fingerprint = q.Fingerprint
	}
	check := a
	check.By = by
	if err := workflows.CheckApprove(check); err != nil {
		return workflows.DecisionResult{}, usageErr("approve: %v", err)
	}
	res, err := sc.Approve(ctx, workflowID, a)
	return res, decisionErr(err)
}

// resolveShown sends r, an answer to the outcome or reversal question q of
// the status st that the decider was shown, as by.
func resolveShown(ctx context.Context, sc *sagaclient.Client, by, workflowID string, st workflows.Status, q workflows.Question, r workflows.ResolveSignal) (workflows.DecisionResult, error) {
	r.Step, r.QuestionID, r.RunID, r.CardDigest = q.Step, q.ID, st.RunID, workflows.CardDigest(q.Card)
	check := r
	check.By = by
	if err := workflows.CheckResolve(check); err != nil {
		return workflows.DecisionResult{}, usageErr("resolve: %v", err)
	}
	res, err := sc.Resolve(ctx, workflowID, r)
	return res, decisionErr(err)
}

// showQuestion reads the status of workflowID and finds the open question
// of step (or named qid) of one of kinds; when there is one and out is not
// nil it prints it with its card and digest, as `starter status` does.
func showQuestion(ctx context.Context, sc *sagaclient.Client, out io.Writer, workflowID string, step int, qid string, kinds ...string) (workflows.Status, workflows.Question, bool, error) {
	st, err := sc.Status(ctx, workflowID)
	if err != nil {
		return st, workflows.Question{}, false, err
	}
	q, ok := sagaclient.OpenQuestion(st, step, qid, kinds...)
	if ok && out != nil {
		printQuestion(out, workflowID, q, now())
		fmt.Fprintln(out)
	}
	return st, q, ok, nil
}

// deciderName is who decides: the key's operator, else the typed name.
func deciderName(key *operators.Key, by string) string {
	if key != nil {
		return key.Name
	}
	return by
}
