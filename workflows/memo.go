package workflows

import (
	"strings"
	"time"

	"go.temporal.io/sdk/workflow"
)

// MemoOpenQuestions is the memo field in which a plan publishes its open
// questions (an OpenQuestions), so a client lists every question waiting
// for a person with one visibility query (the plans whose
// SearchAttrNeedsHuman is true), not one status query per plan. Plans
// started before it was published (no such field) are read by their status.
const MemoOpenQuestions = "open_questions"

// OpenQuestions is what a plan publishes in its MemoOpenQuestions memo each
// time its open questions change: its state and an index entry for every
// open question. Like every payload it is encoded by the codec (encrypted,
// with keys).
type OpenQuestions struct {
	State SagaState `json:"state"`
	// SignedDecisions: the worker that published it accepts only signed
	// decisions (as Status.SignedDecisions).
	SignedDecisions bool `json:"signed_decisions,omitempty"`
	// Questions are the open questions, oldest first (empty once none is
	// open).
	Questions []QuestionIndex `json:"questions"`
}

// QuestionIndex is an open question as a list finds, sorts and shows it on
// one line: the question and the short fields of its card, without the
// card's long lines (arguments, calls, what each answer does), which the
// status query shows whole. A visibility page of a thousand plans stays a
// few hundred kilobytes.
type QuestionIndex struct {
	ID       string    `json:"id"`
	Kind     string    `json:"kind"`
	Step     int       `json:"step"`
	Key      string    `json:"key"`
	Tool     string    `json:"tool"`
	OpenedAt time.Time `json:"opened_at"`
	// ExpiresAt is Question.ExpiresAt (zero: it never expires).
	ExpiresAt time.Time `json:"expires_at,omitzero"`
	Answers   []string  `json:"answers"`
	// CardDigest is the digest of the whole card (Question.CardDigest).
	CardDigest  string `json:"card_digest,omitempty"`
	System      string `json:"system,omitempty"`
	Object      string `json:"object,omitempty"`
	Amount      string `json:"amount,omitempty"`
	AmountMinor int64  `json:"amount_minor,omitempty"`
	Currency    string `json:"currency,omitempty"`
	RequestedBy string `json:"requested_by,omitempty"`
	Reason      string `json:"reason,omitempty"`
	// Clash: the card shows a guard clash (approving needs override).
	Clash bool `json:"clash,omitempty"`
}

// IndexOf is the index entry of question q on a step of tool.
func IndexOf(q Question, tool string) QuestionIndex {
	c := q.Card
	return QuestionIndex{
		ID: q.ID, Kind: q.Kind, Step: q.Step, Key: q.Key, Tool: tool, OpenedAt: q.OpenedAt, ExpiresAt: q.ExpiresAt,
		Answers: q.Answers, CardDigest: q.CardDigest, System: c.System, Object: c.Object, Amount: c.Amount,
		AmountMinor: c.AmountMinor, Currency: c.Currency, RequestedBy: c.RequestedBy, Reason: c.Reason, Clash: c.Clash != "",
	}
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
	memo := OpenQuestions{State: r.st.State, SignedDecisions: r.saga.Operators != nil, Questions: make([]QuestionIndex, 0, len(r.st.Questions))}
	for _, q := range r.st.Questions {
		memo.Questions = append(memo.Questions, IndexOf(q, r.step(q.Step).Tool))
	}
	if err := workflow.UpsertMemo(ctx, map[string]any{MemoOpenQuestions: memo}); err != nil {
		workflow.GetLogger(ctx).Warn("open questions not published in the memo", "error", err)
		return
	}
	r.published = now
}
