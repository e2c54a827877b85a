package workflows

import (
	"strings"

	"go.temporal.io/sdk/workflow"
)

// MemoOpenQuestions is the memo field in which a plan publishes its open
// questions (an OpenQuestions), so a client lists every question waiting
// for a person with one visibility query (the plans whose
// SearchAttrNeedsHuman is true), not one status query per plan. Plans
// started before it was published (no such field) are read by their status.
const MemoOpenQuestions = "open_questions"

// OpenQuestions is what a plan publishes in its MemoOpenQuestions memo each
// time its open questions change: its state and every open question with
// its card, as the status query shows them. Like every payload it is
// encoded by the codec (encrypted, with keys).
type OpenQuestions struct {
	State SagaState `json:"state"`
	// SignedDecisions: the worker that published it accepts only signed
	// decisions (as Status.SignedDecisions).
	SignedDecisions bool `json:"signed_decisions,omitempty"`
	// Questions are the open questions, oldest first (empty once none is
	// open).
	Questions []OpenQuestion `json:"questions"`
}

// OpenQuestion is an open question and the tool of its step.
type OpenQuestion struct {
	Question
	Tool string `json:"tool"`
}

// publishQuestions upserts the MemoOpenQuestions memo when the open
// questions differ from what the run last published. A run that never
// opens a question never publishes (and records no version marker); plans
// started before the memo replay unchanged (versionQuestionsMemo).
func (r *run) publishQuestions(ctx workflow.Context) {
	// What is shown: the state and the ids while a question is open,
	// "" once none is (the state alone is the search attribute's).
	var now string
	if len(r.st.Questions) > 0 {
		ids := []string{string(r.st.State)}
		for _, q := range r.st.Questions {
			ids = append(ids, q.ID)
		}
		now = strings.Join(ids, "\x00")
	}
	if now == r.published {
		return
	}
	if workflow.GetVersion(ctx, versionQuestionsMemo, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return
	}
	memo := OpenQuestions{State: r.st.State, SignedDecisions: r.saga.Operators != nil, Questions: make([]OpenQuestion, 0, len(r.st.Questions))}
	for _, q := range r.st.Questions {
		memo.Questions = append(memo.Questions, OpenQuestion{Question: q, Tool: r.step(q.Step).Tool})
	}
	if err := workflow.UpsertMemo(ctx, map[string]any{MemoOpenQuestions: memo}); err != nil {
		workflow.GetLogger(ctx).Warn("open questions not published in the memo", "error", err)
		return
	}
	r.published = now
}
