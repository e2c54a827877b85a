package workflows

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/agentsaga/agentsaga/activities"
	"github.com/agentsaga/agentsaga/codec"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/operators"
	"github.com/agentsaga/agentsaga/plan"
	"github.com/agentsaga/agentsaga/redact"
	"github.com/agentsaga/agentsaga/tool"
)

// Limits of a decision payload; a decision over a limit is rejected, never
// stored.
const (
	MaxByLen         = 128
	MaxNoteLen       = 2000
	MaxExternalIDLen = 256
	MaxQuestionIDLen = 128
	// MaxFingerprintLen bounds a decision's fingerprint (a step's is 64
	// hex digits).
	MaxFingerprintLen = 128
	// MaxRunIDLen bounds a decision's run_id (a Temporal run ID is a
	// 36-character UUID).
	MaxRunIDLen = 64
	// MaxSignatureLen bounds a decision's signature (an Ed25519 signature
	// is 88 characters of base64).
	MaxSignatureLen = 128
	// DoubleClickWindow: a decision without a question id that repeats the
	// decision which closed the step's previous question within this
	// window is a double click, applied once (decisions with a question id
	// are matched by id instead).
	DoubleClickWindow = time.Minute
	// MaxRefusedRecorded bounds how many refused signals a plan records in
	// its status and audit trail; later ones are only counted and logged.
	MaxRefusedRecorded = 50
	// MaxRefusedNoteLen and MaxRefusedReasonLen clip what a recorded
	// refusal keeps of the sender's note and of the reason it was
	// refused, so the bytes a plan records for refusals are bounded
	// (about MaxRefusedRecorded × 1 KB in the status, as much again in
	// the audit activities' inputs).
	MaxRefusedNoteLen   = 200
	MaxRefusedReasonLen = 400
	// RefusalHistoryBound: a plan whose history is larger than this (in
	// bytes, as Temporal counts them) records no further refusal, however
	// few it recorded: what is left of the history is kept for the plan's
	// own work (Temporal terminates a run at 50 MB by default).
	RefusalHistoryBound = 8 << 20
	// MaxClockSkew bounds how far a signed decision's sent_at may be from
	// the workflow's time.
	MaxClockSkew = 15 * time.Minute
)

// question is an open wait of a step.
type question struct {
	Question
	decision *Decision    // set when a decision was applied
	checking bool         // a resolve is being checked with the provider
	notified bool         // its opening was announced to the webhook
	notify   *notifyChild // its AgentNotify workflow (versionNotifyDelivery)
}

// Change IDs for workflow.GetVersion: each names a change of the commands
// the workflow issues, so plans started before it replay unchanged.
const (
	// versionLedgerFollowsQuestion: opening an outcome or reversal
	// question moves the ledger row to needs_human / compensation_failed.
	versionLedgerFollowsQuestion = "ledger-row-follows-question"
	// versionParallelSteps: consecutive reads (or every step of a
	// parallel plan) run at once.
	versionParallelSteps = "parallel-steps"
	// versionIdentityRecorded: the identity verdict of a decision is
	// recorded whole (dev mode included) in a SideEffect.
	versionIdentityRecorded = "identity-recorded"
	// versionReversalRowSettled: a person's answer to a reversal question
	// closes the reversal's own ledger row.
	versionReversalRowSettled = "reversal-row-settled"
	// versionTurnVerdictRecorded: a session turn's validation verdict is
	// recorded in the Update handler.
	versionTurnVerdictRecorded = "turn-verdict-recorded"
	// versionDecisionRules: a decision's every field is bounded before
	// anything else is looked at, `by` is refused with invisible
	// characters, four eyes compares identities in one normal form, and
	// a decision that arrived as its question opened is refused even when
	// it names the question. (Update validators always apply them: they
	// are not replayed.)
	versionDecisionRules = "decision-rules-v2"
	// versionInFlightHorizon: an absent lookup answer inside the in-flight
	// horizon (tool.Lookup.NotBefore) is waited out on a timer before the
	// provider is asked again.
	versionInFlightHorizon = "in-flight-horizon"
	// versionAdoptMismatch: a question about an effect found under the
	// key with other arguments offers succeeded (adopt it, naming its
	// external id), not only failed.
	versionAdoptMismatch = "adopt-mismatch"
	// versionNotSentRidesOut: a call that was provably not sent after its
	// retries (a refused connection, a DNS failure) is called again with
	// backoff for NotSentRetryFor before the step fails.
	versionNotSentRidesOut = "not-sent-rides-out"
	// versionReversalRetries: a reversal that ends provably not done is
	// called again on the forward path's schedule (backoff, Retry-After,
	// maxCalls) before a person is asked.
	versionReversalRetries = "reversal-retries"
	// versionIdentitySkeleton: four eyes compares the requester and the
	// approver by their Unicode TS #39 skeleton (operators.SameIdentity:
	// NFKC, case folding, confusables), so ａｌｉｃｅ and аlice are alice.
	// (Update validators always do: they are not replayed.)
	versionIdentitySkeleton = "identity-skeleton"
	// versionNotifyDelivery: a question's notifications are delivered by
	// an AgentNotify child workflow, at least once until the webhook
	// answers 2xx, and "aged" no longer waits on "opened".
	versionNotifyDelivery = "notify-delivery"
	// versionQuestionsMemo: a plan publishes its open questions in its
	// memo (MemoOpenQuestions) each time they change.
	versionQuestionsMemo = "questions-memo"
	// versionCardLastSent: an outcome question's card is made after a
	// guard check for every tool, which reads the key's last send.
	versionCardLastSent = "card-last-sent"
)

// withdrawnPrefix starts the error of a step whose approval was withdrawn.
const withdrawnPrefix = "withdrawn"

// register installs the status query, the decision Updates (with
// validators) and the signal listeners.
func (r *run) register(ctx workflow.Context) error {
	r.st.RunID = workflow.GetInfo(ctx).WorkflowExecution.RunID
	if err := workflow.SetQueryHandler(ctx, QueryStatus, func() (Status, error) {
		st := r.st
		st.SignedDecisions = r.saga.Operators != nil
		return st, nil
	}); err != nil {
		return fmt.Errorf("register status query: %w", err)
	}
	// Decisions arrive as raw JSON, checked as strictly as a plan (see
	// decodeDecision) before anything else is looked at.
	err := workflow.SetUpdateHandlerWithOptions(ctx, UpdateApprove,
		func(ctx workflow.Context, raw json.RawMessage) (DecisionResult, error) {
			a, err := decodeDecision[ApproveSignal](raw)
			if err != nil {
				return DecisionResult{}, err
			}
			return r.applyApprove(ctx, a)
		},
		workflow.UpdateHandlerOptions{
			Validator: func(ctx workflow.Context, raw json.RawMessage) error {
				a, err := decodeDecision[ApproveSignal](raw)
				if err != nil {
					return err
				}
				if err := r.checkApprove(ctx, a, true); err != nil {
					r.refusedUpdate(ctx, SignalApprove, a.Step, a.QuestionID, a.By, a.SentAt, a.Reason, err)
					return err
				}
				return nil
			},
			Description: "Approve or reject the open approval question of a step.",
		})
	if err != nil {
		return fmt.Errorf("register update %s: %w", UpdateApprove, err)
	}
	err = workflow.SetUpdateHandlerWithOptions(ctx, UpdateResolve,
		func(ctx workflow.Context, raw json.RawMessage) (DecisionResult, error) {
			d, err := decodeDecision[ResolveSignal](raw)
			if err != nil {
				return DecisionResult{}, err
			}
			return r.applyResolve(ctx, d)
		},
		workflow.UpdateHandlerOptions{
			Validator: func(ctx workflow.Context, raw json.RawMessage) error {
				d, err := decodeDecision[ResolveSignal](raw)
				if err != nil {
					return err
				}
				if err := r.checkResolve(ctx, d, true); err != nil {
					r.refusedUpdate(ctx, SignalResolve, d.Step, d.QuestionID, d.By, d.SentAt, d.Note, err)
					return err
				}
				return nil
			},
			Description: "Say what happened to a step whose outcome is open, or to its failed reversal.",
		})
	if err != nil {
		return fmt.Errorf("register update %s: %w", UpdateResolve, err)
	}
	approveCh := workflow.GetSignalChannel(ctx, SignalApprove)
	resolveCh := workflow.GetSignalChannel(ctx, SignalResolve)
	workflow.Go(ctx, func(ctx workflow.Context) {
		ctx, _ = workflow.NewDisconnectedContext(ctx)
		for {
			var raw json.RawMessage
			approveCh.Receive(ctx, &raw)
			a, err := signalDecision(ctx, r, raw, &ApproveSignal{})
			if err != nil {
				r.refuse(ctx, SignalApprove, a.Step, a.QuestionID, a.By, a.SentAt, a.Reason, err)
				continue
			}
			if err := r.tooEarlyUnnamed(ctx, a.Step, a.QuestionID); err != nil {
				r.refuse(ctx, SignalApprove, a.Step, a.QuestionID, a.By, a.SentAt, a.Reason, err)
				continue
			}
			if err := r.checkApprove(ctx, *a, false); err != nil {
				r.refuse(ctx, SignalApprove, a.Step, a.QuestionID, a.By, a.SentAt, a.Reason, err)
				continue
			}
			if _, err := r.applyApprove(ctx, *a); err != nil {
				r.refuse(ctx, SignalApprove, a.Step, a.QuestionID, a.By, a.SentAt, a.Reason, err)
			}
		}
	})
	workflow.Go(ctx, func(ctx workflow.Context) {
		ctx, _ = workflow.NewDisconnectedContext(ctx)
		for {
			var raw json.RawMessage
			resolveCh.Receive(ctx, &raw)
			s, err := signalDecision(ctx, r, raw, &ResolveSignal{})
			if err != nil {
				r.refuse(ctx, SignalResolve, s.Step, s.QuestionID, s.By, s.SentAt, s.Note, err)
				continue
			}
			if err := r.tooEarlyUnnamed(ctx, s.Step, s.QuestionID); err != nil {
				r.refuse(ctx, SignalResolve, s.Step, s.QuestionID, s.By, s.SentAt, s.Note, err)
				continue
			}
			if err := r.checkResolve(ctx, *s, false); err != nil {
				r.refuse(ctx, SignalResolve, s.Step, s.QuestionID, s.By, s.SentAt, s.Note, err)
				continue
			}
			if _, err := r.applyResolve(ctx, *s); err != nil {
				r.refuse(ctx, SignalResolve, s.Step, s.QuestionID, s.By, s.SentAt, s.Note, err)
			}
		}
	})
	return nil
}

// MaxDecisionBytes bounds the JSON of one decision (approve or resolve): its
// fields' own limits add up to far less.
const MaxDecisionBytes = 16 << 10

// decodeDecision reads a decision's JSON as strictly as a plan: at most
// MaxDecisionBytes, UTF-8, no key twice, no unknown field; a payload a
// client sent unencrypted to a worker with codec keys is refused.
func decodeDecision[T ApproveSignal | ResolveSignal](raw json.RawMessage) (T, error) {
	var d T
	if codec.IsRefusedPlaintext(raw) {
		return d, refused("%v", codec.ErrPlaintext)
	}
	if len(raw) > MaxDecisionBytes {
		return d, refused("the decision is %d bytes, the limit is %d (MaxDecisionBytes): send only its fields", len(raw), MaxDecisionBytes)
	}
	if err := plan.CheckJSON(raw, MaxDecisionBytes); err != nil {
		return d, refused("the decision is not plain JSON: %s", redact.String(err.Error()))
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		return d, refused("the decision does not fit its payload: %s", clip(redact.String(err.Error()), 200))
	}
	return d, nil
}

// signalDecision decodes a decision signal into dst: strictly (decodeDecision)
// in plans under versionDecisionRules, as the SDK decoded signals before in
// plans that took a decision before them.
//
// On a refusal dst still holds what a plain decoder read of it (its step,
// question, sender), so the refusal is recorded where it was aimed.
func signalDecision[T ApproveSignal | ResolveSignal](ctx workflow.Context, r *run, raw json.RawMessage, dst *T) (*T, error) {
	if r.strict(ctx, false) {
		d, err := decodeDecision[T](raw)
		if err != nil {
			_ = json.Unmarshal(raw, dst) // best effort, for the record only
			return dst, err
		}
		return &d, nil
	}
	if err := json.Unmarshal(raw, dst); err != nil {
		return dst, refused("the decision could not be read: %s", clip(redact.String(err.Error()), 200))
	}
	return dst, nil
}

// strict reports whether the decision rules of versionDecisionRules apply:
// always in a validator (validators are not replayed), and in the signal
// and Update handlers of every plan that took no decision before them.
func (r *run) strict(ctx workflow.Context, validating bool) bool {
	return validating || workflow.GetVersion(ctx, versionDecisionRules, workflow.DefaultVersion, 1) != workflow.DefaultVersion
}

// tooEarly refuses a decision that arrives in the same workflow task as the
// question it would answer, named or not: it was sent before the question
// existed (the task also delivered what opened it), so nobody saw the
// question it answers. Question ids are predictable; a decision is for a
// question somebody saw.
func (r *run) tooEarly(ctx workflow.Context, q *question) error {
	if q.OpenedAt.Equal(workflow.Now(ctx)) {
		return refused("this decision arrived as question %s opened: it was sent before the question existed, so nothing was applied; decide again now that it is open", q.ID)
	}
	return nil
}

// tooEarlyUnnamed is the early check of plans that took a decision before
// versionDecisionRules: it refused only signals without a question id.
func (r *run) tooEarlyUnnamed(ctx workflow.Context, step int, qid string) error {
	if r.strict(ctx, false) {
		return nil // approveTarget and resolveTarget check (tooEarly)
	}
	if q := r.qs[step]; q != nil && qid == "" && q.OpenedAt.Equal(workflow.Now(ctx)) {
		return refused("this signal arrived as question %s opened: it was sent before the question existed; send it again naming the question", q.ID)
	}
	return nil
}

// decisionError is a refused decision; its message tells the sender why.
type decisionError struct{ msg string }

func (e *decisionError) Error() string { return e.msg }

func refused(format string, args ...any) error {
	return &decisionError{msg: fmt.Sprintf(format, args...)}
}

// checkText refuses a missing, oversize or unprintable field, and a `by`
// with an invisible character (see operators.CheckIdentity).
func checkText(field, v string, limit int, required bool) error {
	return checkTextRules(field, v, limit, required, true)
}

// checkTextRules is checkText; not strict, `by` is checked as plans that
// took a decision before versionDecisionRules checked it.
func checkTextRules(field, v string, limit int, required, strict bool) error {
	switch {
	case v == "" && required:
		return refused("%s is required: name who decides", field)
	case len(v) > limit:
		return refused("%s is %d bytes, the limit is %d", field, len(v), limit)
	case !utf8.ValidString(v):
		return refused("%s is not valid UTF-8", field)
	}
	for _, c := range v {
		if unicode.IsControl(c) && (field == "by" || (c != '\n' && c != '\t')) {
			return refused("%s holds a control character (%U): send plain text", field, c)
		}
		if field == "by" && !strict && unicode.Is(unicode.Cf, c) {
			return refused("by holds an invisible formatting character (%U): send a plain name", c)
		}
	}
	if field == "by" && strict {
		if err := operators.CheckIdentity(v); err != nil {
			return refused("by %s", strings.TrimPrefix(err.Error(), "operators: identity "))
		}
	}
	return nil
}

// openFor returns the open question a decision of kind for step (and
// question id, if given) answers. dup is set when the question named was
// already closed by the same decision.
func (r *run) openFor(ctx workflow.Context, kinds []string, step int, qid string, same func(Decision) bool) (q *question, dup *Decision, err error) {
	if err := checkTextRules("question_id", qid, MaxQuestionIDLen, false, false); err != nil {
		return nil, nil, err
	}
	if qid != "" {
		if d, ok := r.closed[qid]; ok {
			if same(d) {
				return nil, &d, nil
			}
			return nil, nil, refused("question %s was already answered by %s at %s (%s): this decision was not applied", qid, d.By, d.At.Format(time.RFC3339), decisionWord(d))
		}
	}
	if last, ok := r.lastClosed[step]; ok && qid == "" && same(last) && workflow.Now(ctx).Sub(last.At) <= DoubleClickWindow {
		return nil, &last, nil
	}
	q = r.qs[step]
	if q == nil {
		for _, o := range r.openList() {
			if qid != "" && o.ID == qid {
				return nil, nil, refused("question %s is on step %d, not step %d", qid, o.Step, step)
			}
		}
		if len(r.qs) == 0 {
			return nil, nil, refused("no question is open on this plan now (state %s): nothing was applied; decisions answer only the question open when they arrive", r.st.State)
		}
		return nil, nil, refused("step %d has no open question; open now: %s", step, r.openSummary())
	}
	switch {
	case qid != "" && qid != q.ID:
		return nil, nil, refused("question %s is not open (stale or unknown); the open question of step %d is %s (%s)", qid, q.Step, q.ID, q.Kind)
	case !contains(kinds, q.Kind):
		return nil, nil, refused("the open question %s on step %d asks for %s, which this decision does not answer", q.ID, q.Step, q.Kind)
	case q.decision != nil:
		if same(*q.decision) {
			return nil, q.decision, nil
		}
		return nil, nil, refused("question %s was already answered by %s (%s): this decision was not applied", q.ID, q.decision.By, decisionWord(*q.decision))
	case q.checking:
		return nil, nil, refused("a decision for question %s is being checked with the provider: wait for its answer", q.ID)
	}
	return q, nil, nil
}

func decisionWord(d Decision) string {
	if d.Kind == SignalApprove {
		if d.Approved {
			return "approved"
		}
		return "rejected"
	}
	return "resolved " + string(d.Outcome)
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// identityVerdict is the recorded outcome of an identity check.
type identityVerdict struct {
	Verified bool   `json:"verified"`
	Refused  string `json:"refused,omitempty"`
}

// verdict checks a decision's run and identity: a decision naming a run
// must name this one, a signed one must name it; then the signature is
// checked against the operators file. Dev mode (no file) accepts the typed
// name as unverified. (The run is checked here, recorded with the verdict,
// so a reset run replaying a decision its first run applied replays it.)
func (r *run) verdict(by, action, runID string, sentAt time.Time, msg []byte, sig string) identityVerdict {
	v := r.saga.Operators
	switch {
	case runID != "" && runID != r.st.RunID:
		return identityVerdict{Refused: fmt.Sprintf("run_id %s is not this plan's run %s (it was reset or started again): the decision answers a question of another run; decide again on the question open now", runID, r.st.RunID)}
	case sig != "" && runID == "":
		return identityVerdict{Refused: "a signed decision must name its run (run_id, shown by status): a signature answers one question of one run; sign it again with a current client (starter approve/resolve)"}
	case v == nil:
		return identityVerdict{}
	case sig == "":
		return identityVerdict{Refused: fmt.Sprintf("identity of %q not verified: the worker has an operators file: sign the decision (starter --key FILE); an unsigned name is not accepted", by)}
	case sentAt.IsZero():
		return identityVerdict{Refused: fmt.Sprintf("identity of %q not verified: sent_at is missing from the signed decision", by)}
	}
	if err := v.Verify(by, action, msg, sig); err != nil {
		return identityVerdict{Refused: fmt.Sprintf("identity of %q not verified: %v", by, err)}
	}
	return identityVerdict{Verified: true}
}

// fresh refuses a signed decision whose sent_at is far from now.
func (r *run) fresh(ctx workflow.Context, sentAt time.Time, verified bool) error {
	if !verified {
		return nil
	}
	if skew := workflow.Now(ctx).Sub(sentAt); skew > MaxClockSkew || skew < -MaxClockSkew {
		return refused("sent_at %s is %s away from now: sign a fresh decision", sentAt.Format(time.RFC3339), skew.Round(time.Second))
	}
	return nil
}

// identify checks who sent a decision (see verdict). In a validator it
// calls the verifier directly; elsewhere through SideEffect, so a replay
// sees the verdict the first run saw even if the file changed.
func (r *run) identify(ctx workflow.Context, by, action, runID string, sentAt time.Time, msg []byte, sig string, validating bool) (bool, error) {
	var got identityVerdict
	switch {
	case validating:
		got = r.verdict(by, action, runID, sentAt, msg, sig)
	case workflow.GetVersion(ctx, versionIdentityRecorded, workflow.DefaultVersion, 1) != workflow.DefaultVersion:
		// The whole verdict, dev mode included, is recorded: adding or
		// removing an operators file never changes a plan's replay.
		if err := workflow.SideEffect(ctx, func(workflow.Context) any { return r.verdict(by, action, runID, sentAt, msg, sig) }).Get(&got); err != nil {
			return false, refused("identity check could not be read: %v", err)
		}
	case r.saga.Operators == nil:
		// Plans from before versionIdentityRecorded recorded nothing in
		// dev mode, and the refusal text alone otherwise.
		return false, nil
	default:
		var refusal string
		if err := workflow.SideEffect(ctx, func(workflow.Context) any { return r.verdict(by, action, runID, sentAt, msg, sig).Refused }).Get(&refusal); err != nil {
			return false, refused("identity check could not be read: %v", err)
		}
		got = identityVerdict{Verified: refusal == "", Refused: refusal}
	}
	if got.Refused != "" {
		return false, refused("%s", got.Refused)
	}
	return got.Verified, r.fresh(ctx, sentAt, got.Verified)
}

func sameApprove(a ApproveSignal) func(Decision) bool {
	return func(d Decision) bool {
		return d.Kind == SignalApprove && d.By == a.By && d.Approved == a.Approved && d.Override == a.Override
	}
}

func sameResolve(s ResolveSignal) func(Decision) bool {
	return func(d Decision) bool {
		return d.Kind == SignalResolve && d.By == s.By && d.Outcome == s.Outcome && (s.ExternalID == "" || d.ExternalID == s.ExternalID)
	}
}

func (r *run) checkApprove(ctx workflow.Context, a ApproveSignal, validating bool) error {
	_, _, err := r.approveTarget(ctx, a, validating)
	return err
}

// CheckApprove checks an approve payload on its own, before any question is
// looked at: every field bounded (by at most MaxByLen bytes and required,
// reason MaxNoteLen, question_id MaxQuestionIDLen, fingerprint
// MaxFingerprintLen, run_id MaxRunIDLen, signature MaxSignatureLen), all
// valid UTF-8 without control characters (reason may hold line feeds and
// tabs), and no invisible character in by.
func CheckApprove(a ApproveSignal) error { return checkApprove(a, true) }

// CheckResolve checks a resolve payload on its own, as CheckApprove does,
// with note for reason, external_id (at most MaxExternalIDLen) and an
// outcome of succeeded, failed or retry.
func CheckResolve(s ResolveSignal) error { return checkResolve(s, true) }

// checkApprove is CheckApprove; not strict, the checks of plans that took a
// decision before versionDecisionRules.
func checkApprove(a ApproveSignal, strict bool) error {
	if strict {
		if err := checkBounded(a.Fingerprint, a.RunID, a.Signature); err != nil {
			return err
		}
		if err := CheckCardDigest(a.CardDigest); err != nil {
			return err
		}
	}
	if err := checkTextRules("by", a.By, MaxByLen, true, strict); err != nil {
		return err
	}
	if err := checkTextRules("reason", a.Reason, MaxNoteLen, false, strict); err != nil {
		return err
	}
	return checkTextRules("question_id", a.QuestionID, MaxQuestionIDLen, false, strict)
}

func checkResolve(s ResolveSignal, strict bool) error {
	if strict {
		if err := checkBounded("", s.RunID, s.Signature); err != nil {
			return err
		}
		if err := CheckCardDigest(s.CardDigest); err != nil {
			return err
		}
		if len(s.Outcome) > len(OutcomeSucceeded) {
			return refused("outcome is %d bytes: it is one of succeeded, failed, retry", len(s.Outcome))
		}
	}
	if err := checkTextRules("by", s.By, MaxByLen, true, strict); err != nil {
		return err
	}
	if err := checkTextRules("note", s.Note, MaxNoteLen, false, strict); err != nil {
		return err
	}
	if err := checkTextRules("external_id", s.ExternalID, MaxExternalIDLen, false, strict); err != nil {
		return err
	}
	if err := checkTextRules("question_id", s.QuestionID, MaxQuestionIDLen, false, strict); err != nil {
		return err
	}
	switch s.Outcome {
	case OutcomeSucceeded, OutcomeFailed, OutcomeRetry:
		return nil
	}
	return refused("outcome %q is not one of succeeded, failed, retry", clip(string(s.Outcome), 40))
}

// checkBounded refuses an oversize fingerprint, run_id or signature: sizes
// first, so nothing the sender chose is looked at (or echoed) whole.
func checkBounded(fingerprint, runID, sig string) error {
	for _, f := range []struct {
		name, v string
		limit   int
	}{{"fingerprint", fingerprint, MaxFingerprintLen}, {"run_id", runID, MaxRunIDLen}, {"signature", sig, MaxSignatureLen}} {
		if err := checkText(f.name, f.v, f.limit, false); err != nil {
			return err
		}
	}
	return nil
}

// approveTarget checks an approval and returns the question it answers (nil
// for a repeated identical decision) and whether the sender's identity was
// verified.
func (r *run) approveTarget(ctx workflow.Context, a ApproveSignal, validating bool) (*question, bool, error) {
	strict := r.strict(ctx, validating)
	if err := checkApprove(a, strict); err != nil {
		return nil, false, err
	}
	q, dup, err := r.openFor(ctx, []string{QuestionApproval}, a.Step, a.QuestionID, sameApprove(a))
	if err != nil || dup != nil {
		return nil, false, err
	}
	if strict {
		if err := r.tooEarly(ctx, q); err != nil {
			return nil, false, err
		}
	}
	if a.Signature != "" && a.QuestionID == "" {
		return nil, false, refused("a signed decision must name its question (question_id): a signature answers one question only")
	}
	if a.Fingerprint != q.Fingerprint {
		return nil, false, refused("fingerprint %q is not step %d's %s: the arguments differ from what was shown; approve the current fingerprint", a.Fingerprint, q.Step, q.Fingerprint)
	}
	if a.Approved && q.Card.Clash != "" && !a.Override {
		return nil, false, refused("the card of question %s shows a clash (%s): approve with override to let it through, or reject", q.ID, q.Card.Clash)
	}
	if a.Approved && r.requester(ctx, a.By, strict, validating) {
		return nil, false, refused("%s requested this plan and cannot approve it (four eyes): another operator must decide", a.By)
	}
	verified, err := r.identify(ctx, a.By, SignalApprove, a.RunID, a.SentAt, a.SigningBytes(r.st.WorkflowID), a.Signature, validating)
	if err != nil {
		return nil, false, err
	}
	return q, verified, nil
}

// requester reports whether by is who requested the plan (four eyes): by
// skeleton (operators.SameIdentity) under versionIdentitySkeleton; strict,
// in one normal form (operators.SameCanonical); otherwise as plans that took
// a decision before versionDecisionRules compared.
func (r *run) requester(ctx workflow.Context, by string, strict, validating bool) bool {
	if r.plan.RequestedBy == "" {
		return false
	}
	if validating || workflow.GetVersion(ctx, versionIdentitySkeleton, workflow.DefaultVersion, 1) != workflow.DefaultVersion {
		return operators.SameIdentity(by, r.plan.RequestedBy)
	}
	if strict {
		return operators.SameCanonical(by, r.plan.RequestedBy)
	}
	return r.plan.RequestedBy != "" && strings.EqualFold(strings.TrimSpace(by), strings.TrimSpace(r.plan.RequestedBy))
}

func (r *run) applyApprove(ctx workflow.Context, a ApproveSignal) (DecisionResult, error) {
	q, verified, err := r.approveTarget(ctx, a, false)
	if err != nil {
		return DecisionResult{}, err
	}
	if q == nil {
		return r.duplicate(a.QuestionID, a.Step), nil
	}
	q.decision = &Decision{
		Kind: SignalApprove, QuestionID: q.ID, By: a.By, Verified: verified, SentAt: a.SentAt, At: workflow.Now(ctx),
		Approved: a.Approved, Override: a.Override, Note: redact.String(a.Reason), CardDigest: a.CardDigest,
	}
	return DecisionResult{QuestionID: q.ID, Applied: true, By: a.By, Verified: verified, SentAt: a.SentAt, Message: decisionWord(*q.decision)}, nil
}

func (r *run) checkResolve(ctx workflow.Context, s ResolveSignal, validating bool) error {
	_, _, err := r.resolveTarget(ctx, s, validating)
	return err
}

func (r *run) resolveTarget(ctx workflow.Context, s ResolveSignal, validating bool) (*question, bool, error) {
	strict := r.strict(ctx, validating)
	if err := checkResolve(s, strict); err != nil {
		return nil, false, err
	}
	q, dup, err := r.openFor(ctx, []string{QuestionOutcome, QuestionReversal}, s.Step, s.QuestionID, sameResolve(s))
	if err != nil || dup != nil {
		return nil, false, err
	}
	if strict {
		if err := r.tooEarly(ctx, q); err != nil {
			return nil, false, err
		}
	}
	if s.Signature != "" && s.QuestionID == "" {
		return nil, false, refused("a signed decision must name its question (question_id): a signature answers one question only")
	}
	if !contains(q.Answers, string(s.Outcome)) {
		return nil, false, refused("question %s accepts %s, not %q", q.ID, strings.Join(q.Answers, ", "), s.Outcome)
	}
	verified, err := r.identify(ctx, s.By, SignalResolve, s.RunID, s.SentAt, s.SigningBytes(r.st.WorkflowID), s.Signature, validating)
	if err != nil {
		return nil, false, err
	}
	return q, verified, nil
}

func (r *run) applyResolve(ctx workflow.Context, s ResolveSignal) (DecisionResult, error) {
	q, verified, err := r.resolveTarget(ctx, s, false)
	if err != nil {
		return DecisionResult{}, err
	}
	if q == nil {
		return r.duplicate(s.QuestionID, s.Step), nil
	}
	d := Decision{
		Kind: SignalResolve, QuestionID: q.ID, By: s.By, Verified: verified, SentAt: s.SentAt,
		Outcome: s.Outcome, ExternalID: redact.String(s.ExternalID), Note: redact.String(s.Note), CardDigest: s.CardDigest,
	}
	if q.Kind == QuestionOutcome && s.Outcome == OutcomeSucceeded {
		// A cancelled plan still takes decisions on its open questions.
		dctx, _ := workflow.NewDisconnectedContext(ctx)
		if err := r.checkSucceeded(dctx, q, &d); err != nil {
			return DecisionResult{}, err
		}
	}
	d.At = workflow.Now(ctx)
	q.decision = &d
	return DecisionResult{QuestionID: q.ID, Applied: true, By: s.By, Verified: verified, SentAt: s.SentAt, Message: decisionWord(d)}, nil
}

// checkSucceeded checks a person's "succeeded" with the provider when the
// tool can look itself up: the effect must exist under the key (and be the
// external id given, if one was). For a tool without lookup the answer is
// recorded as that person's assertion.
func (r *run) checkSucceeded(ctx workflow.Context, q *question, d *Decision) error {
	spec := r.specs[r.step(q.Step).Tool]
	if spec.NoLookup {
		d.Assertion = true
		return nil
	}
	q.checking = true
	defer func() { q.checking = false }()
	opts := bookkeeping
	opts.Summary = "check a person's succeeded for " + q.Key
	opts.RetryPolicy = &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2, MaximumAttempts: 3}
	opts.StartToCloseTimeout = spec.Timeout + 5*time.Second
	var look tool.Lookup
	err := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, opts), activities.LookupToolName, r.request(q.Step)).Get(ctx, &look)
	switch {
	case err != nil:
		return refused("the provider could not be asked whether %s happened (%s): try again, or resolve failed/retry", q.Key, errText(err))
	case look.Status == tool.Mismatch && contains(q.Answers, string(OutcomeSucceeded)) && d.ExternalID != "" && strings.TrimSpace(d.Note) != "":
		// The lookup cannot tell this step's effect (its filter found
		// another's): a person who found it names it and says why. It
		// is their word, recorded with who (Adopted, in the audit).
		d.Adopted = true
		return nil
	case look.Status == tool.Mismatch:
		return refused("the provider's lookup under %s finds an effect made with other arguments (%s, differences: %s): to record this step's effect, resolve succeeded with --external-id (the id you found at the provider) and a note saying why it is this step's; otherwise resolve failed", q.Key, look.Result.ExternalID, strings.Join(look.Differences, "; "))
	case look.Status != tool.Found:
		return refused("the provider has no effect under %s (%s): %s cannot look itself up as succeeded; resolve failed or retry", q.Key, look.Status, q.Key)
	case d.ExternalID != "" && d.ExternalID != look.Result.ExternalID:
		return refused("the provider's effect under %s is %s, not %s: resolve with the real id", q.Key, look.Result.ExternalID, d.ExternalID)
	}
	d.ExternalID = look.Result.ExternalID
	return nil
}

// duplicate is the answer to a repeated identical decision (openFor found
// it): the decision that was applied, Applied false.
func (r *run) duplicate(qid string, step int) DecisionResult {
	d, ok := r.closed[qid]
	switch q := r.qs[step]; {
	case ok:
	case q != nil && q.decision != nil:
		d = *q.decision
	default:
		d = r.lastClosed[step] // openFor found it there: it exists
	}
	qid = d.QuestionID
	return DecisionResult{QuestionID: qid, Applied: false, By: d.By, Verified: d.Verified, SentAt: d.SentAt,
		Message: fmt.Sprintf("already applied: question %s on step %d was %s by %s; nothing happened twice", qid, step, decisionWord(d), d.By)}
}

// refuse records a signal that was not applied, with the time it arrived,
// in the step (when it names one) and in the ledger's audit trail.
//
// Everything it records is clipped (question id, by, note, reason), and only
// the first MaxRefusedRecorded refusals are recorded, none once the history
// is past RefusalHistoryBound: later ones are counted
// (Status.RefusedSignals) and logged, and issue no command at all. So what a
// plan records for refusals is bounded whatever is sent; the signals
// themselves are in the history as Temporal stores them (see the README).
func (r *run) refuse(ctx workflow.Context, kind string, step int, qid, by string, sentAt time.Time, note string, why error) {
	r.refused++
	r.st.RefusedSignals = r.refused
	// Masked first, then clipped: a clip never cuts a secret into a part
	// the masking would not recognise.
	reason := clip(redact.String(why.Error()), MaxRefusedReasonLen)
	workflow.GetLogger(ctx).Warn("decision refused", "step", step, "kind", kind, "refused_so_far", r.refused, "reason", reason)
	r.count(ctx, MetricDecisions, map[string]string{"kind": "refused", "outcome": ""})
	if r.refused > MaxRefusedRecorded || (r.strict(ctx, false) && workflow.GetInfo(ctx).GetCurrentHistorySize() > RefusalHistoryBound) {
		return // counted, not recorded: a flood of signals never grows the history without bound
	}
	d := Decision{Kind: kind, QuestionID: clip(printable(qid), MaxQuestionIDLen), By: clip(printable(by), MaxByLen), SentAt: sentAt, At: workflow.Now(ctx),
		Note: clip(redact.String(note), MaxRefusedNoteLen), Refused: reason}
	if step < 1 || step > len(r.st.Steps) {
		// Aimed at no step of this plan: counted in the status and logged;
		// the ledger's audit trail is per operation key. (Plans from before
		// versionDecisionRules tried to record it under no key.)
		if !r.strict(ctx, false) {
			r.audit(ctx, "", d, nil)
		}
		return
	}
	st := r.step(step)
	st.Decisions = append(st.Decisions, d)
	r.audit(ctx, st.Key, d, nil)
}

// refusedUpdate tells Saga.Refused of a decision Update its validator
// refused, clipped and masked as refuse records a signal. It issues no
// command and changes no state: validators are not replayed.
func (r *run) refusedUpdate(ctx workflow.Context, kind string, step int, qid, by string, sentAt time.Time, note string, why error) {
	if r.saga == nil || r.saga.Refused == nil {
		return
	}
	rec := ledger.DecisionRecord{QuestionID: clip(printable(qid), MaxQuestionIDLen), WorkflowID: r.st.WorkflowID, Kind: "refused",
		By: clip(printable(by), MaxByLen), SentAt: sentAt, AppliedAt: workflow.Now(ctx),
		Note:    clip(redact.String(strings.TrimSpace("("+kind+" Update) "+note)), MaxRefusedNoteLen),
		Refused: clip(redact.String(why.Error()), MaxRefusedReasonLen)}
	if step >= 1 && step <= len(r.st.Steps) {
		rec.Key = r.st.Steps[step-1].Key
	}
	r.saga.Refused(rec)
}

// printable masks secrets and replaces control characters, for text a
// refused sender chose.
func printable(s string) string {
	return strings.Map(func(c rune) rune {
		if unicode.IsControl(c) || c == utf8.RuneError {
			return '?'
		}
		return c
	}, redact.String(s))
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}

// openList returns the open questions, oldest first.
func (r *run) openList() []Question {
	var out []Question
	// Collected, then sorted by (opened, step), which is unique: qs is
	// keyed by step.
	//workflowcheck:ignore
	for _, q := range r.qs {
		out = append(out, q.Question)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].OpenedAt.Equal(out[j].OpenedAt) {
			return out[i].OpenedAt.Before(out[j].OpenedAt)
		}
		return out[i].Step < out[j].Step
	})
	return out
}

func (r *run) openSummary() string {
	var parts []string
	for _, q := range r.openList() {
		parts = append(parts, fmt.Sprintf("%s (step %d, %s)", q.ID, q.Step, q.Kind))
	}
	return strings.Join(parts, ", ")
}

// open opens a question on step n (a step has at most one open question;
// steps running in parallel may each have one).
func (r *run) open(ctx workflow.Context, n int, kind, rule string, answers []string, rep activities.GuardReport, expires time.Duration) *question {
	st := r.step(n)
	r.seq++
	q := &question{Question: Question{
		ID: fmt.Sprintf("q%d-step%d-%s", r.seq, n, kind), Kind: kind, Step: n, Key: st.Key, Fingerprint: st.Fingerprint,
		OpenedAt: workflow.Now(ctx), Answers: answers, Card: r.card(n, kind, rule, answers, rep),
	}}
	q.CardDigest = CardDigest(q.Card)
	if expires > 0 {
		q.ExpiresAt = q.OpenedAt.Add(expires)
	}
	r.qs[n] = q
	r.st.Questions = r.openList()
	r.count(ctx, MetricQuestionsOpened, map[string]string{"kind": kind})
	r.announce(ctx, q)
	return q
}

// close closes the open question with its decision (if any) and writes the
// decision to the step and the ledger's audit trail.
func (r *run) close(ctx workflow.Context, q *question, d Decision) {
	delete(r.qs, q.Step)
	r.st.Questions = r.openList()
	r.closed[q.ID] = d
	r.lastClosed[q.Step] = d
	st := r.step(q.Step)
	st.Decisions = append(st.Decisions, d)
	st.Waiting = ""
	r.announceClosed(ctx, q, d)
	key := q.Key
	if q.Kind == QuestionReversal && st.Compensation != nil {
		key = st.Compensation.Key
	}
	r.audit(ctx, key, d, &q.Question)
	r.count(ctx, MetricDecisions, map[string]string{"kind": auditKind(d), "outcome": string(d.Outcome)})
	r.details(ctx)
}

// audit appends d to the ledger's audit trail, with the card of the
// question it answered (nil for a refused signal that answered none).
func (r *run) audit(ctx workflow.Context, key string, d Decision, q *Question) {
	rec := ledger.DecisionRecord{
		QuestionID: d.QuestionID, Key: key, WorkflowID: r.st.WorkflowID, Kind: auditKind(d), By: d.By, Verified: d.Verified,
		SentAt: d.SentAt, AppliedAt: d.At, Outcome: string(d.Outcome), ExternalID: d.ExternalID, Note: d.Note, Refused: d.Refused,
		CardDigest: d.CardDigest,
	}
	if d.Assertion {
		rec.Note = strings.TrimSpace("(assertion: the tool cannot look itself up) " + rec.Note)
	}
	if d.Adopted {
		rec.Note = strings.TrimSpace("(adopted: an effect made with other arguments, named by its external id) " + rec.Note)
	}
	if q != nil {
		rec.Card, _ = json.Marshal(q.Card)
		rec.OpenedAt = q.OpenedAt
	}
	opts := bookkeeping
	opts.Summary = "audit " + rec.Kind + " " + key
	if err := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, opts), activities.RecordDecisionName, rec).Get(ctx, nil); err != nil {
		workflow.GetLogger(ctx).Error("decision not written to the audit trail", "question", d.QuestionID, "error", err)
		r.st.LedgerErrors = append(r.st.LedgerErrors, fmt.Sprintf("audit of %s: %s", d.QuestionID, errText(err)))
	}
}

func auditKind(d Decision) string {
	switch {
	case d.Refused != "":
		return "refused"
	case d.Kind == "expire":
		return "expire"
	case d.Kind == SignalApprove && d.Approved && d.Override:
		return "override"
	case d.Kind == SignalApprove && d.Approved:
		return "approve"
	case d.Kind == SignalApprove:
		return "reject"
	}
	return d.Kind
}

// askApproval opens an approval question for step n and waits until it is
// answered, expires, or the plan is cancelled. It reports whether the step
// was approved; a rejection, an expiry or a cancellation fails it.
func (r *run) askApproval(ctx, dctx workflow.Context, n int, rule string, rep activities.GuardReport) (Decision, bool) {
	st := r.step(n)
	spec := r.specs[st.Tool]
	window := spec.Approval.Expiry()
	q := r.open(dctx, n, QuestionApproval, rule, []string{"approve", "reject"}, rep, window)
	st.Waiting, st.LastError = "approval", "waiting for approval: "+rule
	r.refresh(dctx)
	// The timer is named after its question, so the UI's timeline says what
	// waits for whom (the summary is encoded like every payload).
	summary := strings.TrimSpace(fmt.Sprintf("approval %s %s %s", q.ID, st.Tool, q.Card.Amount))
	answered, err := workflow.AwaitWithOptions(ctx, workflow.AwaitOptions{Timeout: window, TimerOptions: workflow.TimerOptions{Summary: summary}}, func() bool { return q.decision != nil })
	var d Decision
	switch {
	case q.decision != nil:
		d = *q.decision
	case err != nil:
		d = Decision{Kind: "expire", QuestionID: q.ID, By: System, At: workflow.Now(dctx), Note: withdrawnPrefix + " while waiting for approval: the plan was cancelled or a step running beside it failed"}
	case !answered:
		d = Decision{Kind: "expire", QuestionID: q.ID, By: System, At: workflow.Now(dctx), Note: fmt.Sprintf("approval expired after %s without an answer: counted as rejected", window)}
	}
	r.close(dctx, q, d)
	r.refresh(dctx)
	if d.Kind == SignalApprove && d.Approved {
		st.LastError = ""
		return d, true
	}
	st.State = ledger.FailedFinal
	if d.Kind == SignalApprove {
		st.LastError = fmt.Sprintf("rejected by %s: %s", d.By, d.Note)
	} else {
		st.LastError = d.Note
	}
	return d, false
}

// askResolve opens a question that only a person can close (an unknown
// outcome, a conflict, a failed reversal) and waits for its answer. It is
// not cancelled with the plan: an unknown stays unknown until reconciled or
// decided by a person.
func (r *run) askResolve(dctx workflow.Context, n int, kind, rule string, answers []string) Decision {
	st := r.step(n)
	// The ledger says so at once, so `starter exceptions` lists the row
	// while the question is open. (Plans recorded before this change did
	// not write it: GetVersion keeps their replay unchanged.)
	v := workflow.GetVersion(dctx, versionLedgerFollowsQuestion, workflow.DefaultVersion, 1)
	switch {
	case v == workflow.DefaultVersion:
	case kind == QuestionOutcome:
		r.transition(dctx, st.Key, ledger.NeedsHuman, "", ledger.Unknown, ledger.InProgress, ledger.Pending, ledger.NeedsHuman)
	case kind == QuestionReversal:
		r.transition(dctx, st.Key, ledger.CompensationFailed, "", ledger.Succeeded, ledger.Compensating, ledger.CompensationFailed)
	}
	if kind == QuestionOutcome {
		st.State = ledger.NeedsHuman
	}
	// An outcome card says when the ledger last let the request go, which
	// the guard check reads for every tool (not only guarded ones).
	all := kind == QuestionOutcome && workflow.GetVersion(dctx, versionCardLastSent, workflow.DefaultVersion, 1) == 1
	q := r.open(dctx, n, kind, rule, answers, r.checkGuardOf(dctx, r.request(n), all), 0)
	st.Waiting = "resolve"
	r.refresh(dctx)
	_ = workflow.Await(dctx, func() bool { return q.decision != nil })
	d := *q.decision
	r.close(dctx, q, d)
	r.refresh(dctx)
	return d
}

// checkGuard asks the ledger who else acts on the step's object, for the
// card. A failure leaves the card without that line, never blocks.
func (r *run) checkGuard(ctx workflow.Context, req activities.Request) activities.GuardReport {
	return r.checkGuardOf(ctx, req, false)
}

// checkGuardOf is checkGuard, asking the ledger for a tool without a guard
// too when all is set (for the key's last send: GuardReport.SentAt).
func (r *run) checkGuardOf(ctx workflow.Context, req activities.Request, all bool) activities.GuardReport {
	if r.specs[req.Tool].Guard == nil && !all {
		return activities.GuardReport{}
	}
	opts := bookkeeping
	opts.Summary = "guard check " + req.Key
	opts.RetryPolicy = &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2, MaximumAttempts: 3}
	var rep activities.GuardReport
	if err := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, opts), activities.CheckGuardName, req).Get(ctx, &rep); err != nil {
		workflow.GetLogger(ctx).Warn("guard check failed", "key", req.Key, "error", err)
	}
	return rep
}

// grant stores the approval as a single-use permit for (key, fingerprint,
// policy), bound to the guard holders its card showed, and returns its id.
func (r *run) grant(dctx workflow.Context, n int, d Decision, policy string, holders []string) (string, bool) {
	st := r.step(n)
	// A permit id is unique per key, run and question (a reset or a new
	// run of the same plan asks anew).
	p := ledger.Permit{ID: st.Key + "/" + workflow.GetInfo(dctx).WorkflowExecution.RunID + "/" + d.QuestionID, Key: st.Key, RequestHash: st.Fingerprint,
		Policy: policy, Override: d.Override, By: d.By, GrantedAt: d.At, Holders: holders}
	opts := bookkeeping
	opts.Summary = "permit for " + st.Key
	if err := workflow.ExecuteActivity(workflow.WithActivityOptions(dctx, opts), activities.GrantPermitName, p).Get(dctx, nil); err != nil {
		st.State, st.LastError = ledger.FailedFinal, "the approval could not be written to the ledger, nothing was called: "+errText(err)
		return "", false
	}
	return p.ID, true
}

// approvalRule says which rule asks for approval of a call.
func (r *run) approvalRule(spec tool.Spec, args json.RawMessage) string {
	a := spec.Approval
	if a.Always {
		return fmt.Sprintf("approval policy of %s: every call needs approval", spec.Name)
	}
	obj, _ := tool.DecodeObject(args)
	_, cur := amountOf(spec, obj)
	return fmt.Sprintf("approval policy of %s: %s above %s (%d minor units)", spec.Name, a.Field, formatMinor(a.AboveMinor, cur), a.AboveMinor)
}
