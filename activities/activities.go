// Package activities runs tool calls for the AgentPlan workflow: the ledger
// claim, reconcile-before-retry, the call itself with its operation key, and
// the classification of what happened (see Classify for where a timeout
// becomes UNKNOWN).
package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"go.temporal.io/sdk/activity"

	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/plan"
	"github.com/agentsaga/agentsaga/redact"
	"github.com/agentsaga/agentsaga/tool"
)

// Activity names, as registered on the worker.
const (
	ExecuteToolName    = "ExecuteTool"
	ReconcileToolName  = "ReconcileTool"
	RecordName         = "RecordOutcome"
	CheckGuardName     = "CheckGuard"
	GrantPermitName    = "GrantPermit"
	RecordDecisionName = "RecordDecision"
	LookupToolName     = "LookupTool"
)

// Error codes the activities record in the ledger.
const (
	// CodeReconcileMismatch: a lookup by key found an effect made with
	// other arguments; the row waits for a human (needs_human).
	CodeReconcileMismatch = "reconcile_mismatch"
	// CodeEffectMismatch: the provider answered a call with an existing
	// effect made with other arguments (an upsert by key); the row waits
	// for a human (needs_human).
	CodeEffectMismatch = "effect_mismatch"
)

// leaseGrace is added to a tool's timeout to make the ledger lease: the lease
// must outlive the attempt that holds it.
const leaseGrace = 5 * time.Second

// Request names one operation: a step of a plan, or its reversal.
type Request struct {
	Key         string          `json:"key"`
	Tool        string          `json:"tool"`
	Args        json.RawMessage `json:"args"`
	Fingerprint string          `json:"fingerprint"`
	RequestID   string          `json:"request_id,omitempty"`
	// PermitID names the single-use approval permit a human granted for
	// this key and fingerprint (see ledger.Permit). The ledger consumes it
	// with the claim that starts the call.
	PermitID string `json:"permit_id,omitempty"`
	// Summary is one line for people, nothing secret (tool, object, amount,
	// key): the activity's summary in the UI, kept in the ledger for other
	// plans' approval cards.
	Summary string `json:"summary,omitempty"`
	// Pinned is the tool's spec as the plan pinned it (see Pinned); nil
	// in requests of older histories, which run with the registry's spec.
	Pinned *Pinned `json:"pinned,omitempty"`
}

// Output is what a succeeded ExecuteTool returns.
type Output struct {
	ExternalID string          `json:"external_id,omitempty"`
	Result     json.RawMessage `json:"result,omitempty"` // sanitized
	// Replayed: the ledger already held the success; nothing was called.
	Replayed bool `json:"replayed,omitempty"`
	// Reconciled: the provider already had the effect under this key.
	Reconciled bool  `json:"reconciled,omitempty"`
	Attempt    int32 `json:"attempt"`
}

// Activities holds what tool calls need. Register it with the worker.
type Activities struct {
	Tools  *tool.Registry
	Ledger ledger.Store
	Log    *slog.Logger
	// Webhook, when set, is told about questions (see Notify).
	Webhook *Webhook
}

func (a *Activities) log() *slog.Logger {
	if a.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return a.Log
}

// ExecuteTool makes one attempt of a tool call. Reads call the tool directly.
// Writes claim the key in the ledger first: a stored success is replayed, a
// different fingerprint is a conflict, a live lease elsewhere is in flight;
// when an earlier attempt may have reached the provider, the call is
// reconciled by key before anything is sent again.
func (a *Activities) ExecuteTool(ctx context.Context, req Request) (Output, error) {
	info := activity.GetInfo(ctx)
	t, ok := a.Tools.Tool(req.Tool)
	if !ok {
		return Output{}, final(info.Attempt, ErrNotRegistered, "tool %q is not registered on this worker: deploy a worker that has it", req.Tool)
	}
	spec := specOf(t, req)
	call := tool.Call{Key: req.Key, Args: req.Args, Attempt: info.Attempt}
	log := a.log().With("key", plan.KeyID(req.Key), "tool", req.Tool, "attempt", info.Attempt)

	if spec.Approval.Required(req.Args) && req.PermitID == "" {
		// Defense in depth: the workflow asks first; a call that needs a
		// human's approval never runs without the permit that proves it.
		return Output{}, final(info.Attempt, ErrNoPermit, "key %s: %s needs a human's approval for these arguments and the request carries no permit; the tool was not called: approve the step first", req.Key, req.Tool)
	}

	if !spec.Class.IsWrite() {
		res, err := t.Execute(ctx, call)
		if err != nil {
			log.Info("read failed", "kind", tool.KindOf(err))
			return Output{}, Classify(spec.Class, info.Attempt, err)
		}
		return Output{ExternalID: res.ExternalID, Result: redact.JSON(res.Data), Attempt: info.Attempt}, nil
	}

	executor := executorOf(info, req.Key)
	cr := a.claimRequest(info, req, spec, executor)
	cr.PermitID = req.PermitID
	claim, err := a.Ledger.Claim(ctx, cr)
	if err != nil {
		return Output{}, retryable(info.Attempt, ErrLedger, "claim %s in the ledger: %v (nothing was called; check the ledger database)", req.Key, err)
	}
	op := claim.Operation
	switch claim.Verdict {
	case ledger.Execute:
	case ledger.Replay:
		log.Info("replayed from ledger", "external_id", op.ExternalID)
		return Output{ExternalID: op.ExternalID, Result: redact.JSON(op.Result), Replayed: true, Attempt: info.Attempt}, nil
	case ledger.Conflict:
		return Output{}, final(info.Attempt, ErrConflict, "key %s conflict, the tool was not called: %s", req.Key, claim.Reason)
	case ledger.InFlight:
		return Output{}, retryable(info.Attempt, string(tool.KindInFlight), "key %s is being executed by %s until %s; retry later", req.Key, op.LeaseOwner, op.LeaseUntil.Format(time.RFC3339))
	case ledger.Final:
		if op.Status == ledger.Compensated {
			return Output{}, final(info.Attempt, ErrCompensated, "key %s succeeded (external id %q) and was compensated already, by an earlier run of this plan; neither the tool nor its reversal was called", req.Key, op.ExternalID)
		}
		return Output{}, final(info.Attempt, ErrAlreadyFinal, "key %s is %s in the ledger; the tool was not called", req.Key, op.Status)
	case ledger.GuardRefused:
		return Output{}, final(info.Attempt, ErrGuardRefused, "key %s refused by guard: %s", req.Key, claim.Reason)
	case ledger.Held:
		return Output{}, final(info.Attempt, ErrHeld, "key %s held for approval: %s", req.Key, claim.Reason)
	case ledger.ClashUnseen:
		return Output{}, final(info.Attempt, ErrClashUnseen, "key %s: the approval does not cover the guard as it is now, the tool was not called: %s", req.Key, claim.Reason)
	case ledger.NoPermit:
		return Output{}, final(info.Attempt, ErrNoPermit, "key %s: the ledger refused permit %q (missing, for another key or request, or used already): %s; the tool was not called", req.Key, req.PermitID, claim.Reason)
	case ledger.ReconcileFirst:
		clock := since(op.UpdatedAt)
		look, err := a.lookup(ctx, t, req)
		switch {
		case err == nil && look.Status == tool.Mismatch:
			log.Warn("reconcile found an effect made with other arguments", "external_id", look.Result.ExternalID, "differences", maskAll(look.Differences))
			a.completeQuietly(ctx, req, executor, ledger.NeedsHuman, CodeReconcileMismatch)
			return Output{}, final(info.Attempt, ErrConflict, "key %s: the provider holds effect %s under this key, made with other arguments (%s); it is not this step's effect and was not adopted, nothing was sent: a human must decide", req.Key, look.Result.ExternalID, strings.Join(look.Differences, "; "))
		case err == nil && look.Status == tool.Found:
			log.Info("reconciled: provider has the effect", "external_id", look.Result.ExternalID)
			return a.complete(ctx, req, executor, ledger.Succeeded, look.Result, "", Output{Reconciled: true, Attempt: info.Attempt})
		case err == nil && look.Status == tool.Absent && look.Authoritative && clock().Before(horizon(op, spec)):
			// The provider has nothing yet, but the first request may
			// still land: an absent answer counts only past the horizon.
			until := horizon(op, spec)
			log.Info("reconciled: absent, but the first request may still land", "until", until)
			a.completeQuietly(ctx, req, executor, ledger.Unknown, CodeInFlight)
			return Output{}, final(info.Attempt, ErrUnknown, "key %s: the provider has no effect yet, but the request sent at %s may still land until %s (settle %s + lag %s): nothing was sent again; the step is reconciled after then",
				req.Key, sentAt(op).Format(time.RFC3339), until.Format(time.RFC3339), spec.SettleTime(), spec.Lag)
		case err == nil && look.Status == tool.Absent && look.Authoritative:
			log.Info("reconciled: provider has no effect past the in-flight horizon, calling again with the same key")
			// A new send: record it as one (sent_at, a fresh lease), so
			// the horizon of this request starts now.
			again, err := a.sendAgain(ctx, info, req, spec, executor)
			if err != nil {
				return Output{}, err
			}
			executor = again
		default:
			cause := "the provider could not say"
			if err != nil {
				cause = err.Error()
			}
			a.completeQuietly(ctx, req, executor, ledger.Unknown, "reconcile_unknown")
			return Output{}, final(info.Attempt, ErrUnknown, "key %s: an earlier attempt may have reached the provider and reconcile could not tell (%s)", req.Key, cause)
		}
	default:
		return Output{}, final(info.Attempt, ErrLedger, "key %s: the ledger gave verdict %q, which this worker does not know; the tool was not called: upgrade the worker", req.Key, claim.Verdict)
	}

	res, err := t.Execute(ctx, call)
	if err == nil {
		if diff := answerDifferences(t, spec, req.Args, res); len(diff) > 0 {
			// An upsert by key answered with an effect someone made with
			// other arguments: it is not this step's effect.
			log.Warn("provider answered with an effect made with other arguments", "external_id", res.ExternalID, "differences", maskAll(diff))
			a.completeQuietly(ctx, req, executor, ledger.NeedsHuman, CodeEffectMismatch)
			return Output{}, final(info.Attempt, ErrConflict, "key %s: the provider answered with effect %s, made under this key with other arguments (%s); it is not this step's effect and was not adopted: a human must decide", req.Key, res.ExternalID, strings.Join(diff, "; "))
		}
		return a.complete(ctx, req, executor, ledger.Succeeded, res, "", Output{Attempt: info.Attempt})
	}
	kind := tool.KindOf(err)
	log.Info("write failed", "kind", kind, "code", redact.String(tool.CodeOf(err)))
	a.completeQuietly(ctx, req, executor, ledgerStatus(kind), string(kind)+":"+tool.CodeOf(err))
	return Output{}, Classify(spec.Class, info.Attempt, err)
}

// CodeInFlight is the ledger error code of an absent lookup answer inside
// the in-flight horizon: the first request may still land, so the outcome
// stays unknown until the horizon is past.
const CodeInFlight = "reconcile_in_flight"

// sentAt is when op's last request was sent: its SentAt, or for a row the
// ledger wrote before it kept one, its last update (never earlier than the
// send).
func sentAt(op ledger.Operation) time.Time {
	if !op.SentAt.IsZero() {
		return op.SentAt
	}
	return op.UpdatedAt
}

// horizon is when an absent lookup answer about op starts to count: its last
// send plus the tool's settle time and lookup lag (tool.Spec.Horizon).
func horizon(op ledger.Operation, spec tool.Spec) time.Time {
	return sentAt(op).Add(spec.Horizon())
}

// since returns a clock that reads ledgerNow (the ledger's time when it
// answered a claim) plus the time passed here since: it compares with the
// ledger's SentAt without trusting this machine's clock to agree with the
// database's.
func since(ledgerNow time.Time) func() time.Time {
	start := time.Now()
	return func() time.Time { return ledgerNow.Add(time.Since(start)) }
}

// sendAgain records that the call held by executor is sent again after an
// authoritative absent answer past the horizon: the row goes back to pending
// and is claimed again, which marks the new send (ledger.Operation.SentAt)
// under a fresh lease. It returns the new executor.
func (a *Activities) sendAgain(ctx context.Context, info activity.Info, req Request, spec tool.Spec, executor string) (string, error) {
	if _, err := a.Ledger.Complete(ctx, ledger.Completion{Key: req.Key, Executor: executor, Status: ledger.Pending, ErrorCode: "reconcile_absent"}); err != nil {
		return "", retryable(info.Attempt, ErrLedger, "record %s as absent at the provider in the ledger: %v (nothing was sent; check the ledger database)", req.Key, err)
	}
	again := executor + "+send"
	cr := a.claimRequest(info, req, spec, again)
	claim, err := a.Ledger.Claim(ctx, cr)
	if err != nil {
		return "", retryable(info.Attempt, ErrLedger, "claim %s in the ledger to send it again: %v (nothing was sent; check the ledger database)", req.Key, err)
	}
	if claim.Verdict != ledger.Execute {
		// Someone else took the row meanwhile: their call decides.
		return "", retryable(info.Attempt, string(tool.KindInFlight), "key %s was taken by %s before it could be sent again (verdict %s); retry later", req.Key, claim.Operation.LeaseOwner, claim.Verdict)
	}
	return again, nil
}

// answerDifferences checks a provider's successful answer against the call:
// an upsert by key may answer with an effect made before with other
// arguments. Only an answer that is a JSON object is checked; a provider that
// answers with nothing did what it was asked.
func answerDifferences(t tool.Tool, spec tool.Spec, args json.RawMessage, res tool.Result) []string {
	if obj, err := tool.DecodeObject(res.Data); err != nil || len(obj) == 0 {
		return nil
	}
	return differences(t, spec, args, res)
}

// ledgerStatus is what the ledger records for a failed attempt: only a
// request that provably never left (or was refused before processing) may be
// sent again without reconciling.
func ledgerStatus(k tool.Kind) ledger.Status {
	switch k {
	case tool.KindNotSent, tool.KindThrottled:
		return ledger.Pending
	case tool.KindRejected, tool.KindConflict:
		return ledger.FailedFinal
	}
	return ledger.Unknown
}

// claimRequest is the ledger claim of req. It carries no permit: only
// ExecuteTool, which may call the provider, presents one.
func (a *Activities) claimRequest(info activity.Info, req Request, spec tool.Spec, executor string) ledger.ClaimRequest {
	cr := ledger.ClaimRequest{
		Key:         req.Key,
		ActionType:  req.Tool,
		RequestHash: req.Fingerprint,
		WorkflowID:  info.WorkflowExecution.ID,
		RunID:       info.WorkflowExecution.RunID,
		RequestID:   req.RequestID,
		Executor:    executor,
		Lease:       spec.Timeout + leaseGrace,
		Summary:     storedSummary(req.Summary),
	}
	if g := spec.Guard; g != nil {
		// ScopeKey is Scope + ":" + Entity: the entity and the normalised
		// args come from one decoding.
		ent, norm := g.EntityAndArgs(req.Args)
		cr.Entity = ent
		cr.GuardScope = g.Scope + ":" + ent
		cr.GuardHold = g.Hold
		if norm != nil {
			if b, err := json.Marshal(norm); err == nil { // map keys sorted: canonical
				cr.NormalizedArgs = string(b)
			}
		}
		cr.DuplicateWindow = g.DuplicateWindow
	}
	return cr
}

// providerConflict reports whether op ended because the provider answered
// its call with a key conflict (the same key used before with other
// arguments, such as a 422 idempotency-key mismatch).
func providerConflict(op ledger.Operation) bool {
	return op.Status == ledger.FailedFinal && strings.HasPrefix(op.ErrorCode, string(tool.KindConflict)+":")
}

// canMatch reports whether a found effect can be checked against a call of t:
// the tool implements tool.Matcher or its spec declares Match fields.
func canMatch(t tool.Tool, spec tool.Spec) bool {
	_, ok := t.(tool.Matcher)
	return ok || len(spec.Match) > 0
}

// executorOf names the lease holder: one attempt of one operation. Each
// attempt is its own executor, so an attempt that outlived its timeout (a
// zombie still talking to the provider) never shares its lease with the
// retry: the retry sees InFlight until the lease (timeout + grace) expires,
// then reconciles by key before calling.
func executorOf(info activity.Info, key string) string {
	return fmt.Sprintf("%s/%s#%d", info.WorkflowExecution.ID, key, info.Attempt)
}

// lookup asks the provider what it holds under req.Key and checks a found
// effect against req's args: one made with other arguments is Mismatch,
// never Found.
func (a *Activities) lookup(ctx context.Context, t tool.Tool, req Request) (tool.Lookup, error) {
	spec := specOf(t, req)
	rc, ok := t.(tool.Reconciler)
	if !ok {
		return tool.Lookup{Status: tool.Unknown}, nil
	}
	var (
		look tool.Lookup
		err  error
	)
	if cr, ok := t.(tool.CallReconciler); ok {
		look, err = cr.ReconcileCall(ctx, tool.Call{Key: req.Key, Args: req.Args})
	} else {
		look, err = rc.Reconcile(ctx, req.Key)
	}
	if err != nil {
		return look, err
	}
	if look.Status == tool.Found {
		if diff := differences(t, spec, req.Args, look.Result); len(diff) > 0 {
			look.Status, look.Differences, look.Authoritative = tool.Mismatch, diff, true
		}
	}
	return look, nil
}

// complete records what the provider did. The effect exists at the provider
// by now, so a ledger write that fails is retried at once without the result
// and error code (the parts a database may refuse, such as a NUL byte); if
// that fails too, the activity fails at once as UNKNOWN naming the cause and
// the external id: the workflow reconciles by key (after this attempt's lease
// expires) and never calls again blindly. The writes run on recordContext:
// a worker stopping, or the activity's time running out, after the provider
// answered does not lose the answer.
func (a *Activities) complete(ctx context.Context, req Request, executor string, st ledger.Status, res tool.Result, code string, out Output) (Output, error) {
	ctx, cancel := recordContext(ctx)
	defer cancel()
	result := redact.JSON(res.Data)
	op, err := a.Ledger.Complete(ctx, ledger.Completion{
		Key: req.Key, Executor: executor, Status: st,
		ExternalID: res.ExternalID, Result: storedResult(result), ErrorCode: code,
	})
	if err != nil {
		a.log().Warn("ledger complete failed; retrying without the result", "key", plan.KeyID(req.Key), "status", st, "external_id", res.ExternalID, "err", redact.String(err.Error()))
		var err2 error
		op, err2 = a.Ledger.Complete(ctx, ledger.Completion{Key: req.Key, Executor: executor, Status: st, ExternalID: res.ExternalID})
		if err2 != nil {
			return Output{}, final(out.Attempt, ErrUnknown,
				"the provider's effect for %s exists (external id %q) but recording it as %s in the ledger failed: %v; without the result: %v. The workflow reconciles by key before anything is called again; if the ledger stays down, resolve %s as %s with external id %q",
				req.Key, res.ExternalID, st, err, err2, req.Key, st, res.ExternalID)
		}
	}
	out.ExternalID = op.ExternalID
	if out.ExternalID == "" {
		out.ExternalID = res.ExternalID
	}
	// The workflow gets this call's whole (masked) result; the ledger's
	// (without free text) only when another attempt's completion stands.
	out.Result = result
	if len(result) == 0 || (op.ExternalID != "" && op.ExternalID != res.ExternalID) {
		out.Result = redact.JSON(op.Result)
	}
	return out, nil
}

// maskLookup masks what a lookup carries to the workflow: the provider's
// answer (redact.JSON) and the differences found (redact.String). The
// external id stays as the provider wrote it: compensation needs it.
func maskLookup(look tool.Lookup) tool.Lookup {
	look.Result.Data = redact.JSON(look.Result.Data)
	look.Differences = maskAll(look.Differences)
	return look
}

// maskAll returns texts passed through redact.String.
func maskAll(texts []string) []string {
	if texts == nil {
		return nil
	}
	out := make([]string, len(texts))
	for i, t := range texts {
		out[i] = redact.String(t)
	}
	return out
}

func (a *Activities) completeQuietly(ctx context.Context, req Request, executor string, st ledger.Status, code string) {
	ctx, cancel := recordContext(ctx)
	defer cancel()
	code = redact.String(code)
	if _, err := a.Ledger.Complete(ctx, ledger.Completion{Key: req.Key, Executor: executor, Status: st, ErrorCode: code}); err != nil {
		// The lease expires and the next claimer reconciles first.
		a.log().Warn("ledger complete failed", "key", plan.KeyID(req.Key), "status", st, "err", redact.String(err.Error()))
	}
}

// ReconcileTool asks the provider what happened under req.Key and records
// the answer in the ledger: found → succeeded; authoritative absent →
// pending, so the next ExecuteTool may call again; an effect made with other
// arguments → Mismatch, recorded needs_human with error code
// reconcile_mismatch and never adopted; otherwise unknown. It never calls
// the tool's Execute.
func (a *Activities) ReconcileTool(ctx context.Context, req Request) (tool.Lookup, error) {
	info := activity.GetInfo(ctx)
	t, ok := a.Tools.Tool(req.Tool)
	if !ok {
		return tool.Lookup{}, final(info.Attempt, ErrNotRegistered, "tool %q is not registered on this worker: deploy a worker that has it", req.Tool)
	}
	spec := specOf(t, req)
	// A key the ledger never claimed was never sent by this engine: ask the
	// provider (a purge may have forgotten a real effect) but create no
	// row, so a reconcile never leaves a phantom row holding a guard scope.
	if _, err := a.Ledger.Get(ctx, req.Key); errors.Is(err, ledger.ErrNotFound) {
		look, lerr := a.lookup(ctx, t, req)
		if lerr != nil {
			return tool.Lookup{Status: tool.Unknown}, nil
		}
		return maskLookup(look), nil
	}
	executor := executorOf(info, req.Key)
	cr := a.claimRequest(info, req, spec, executor)
	cr.LookOnly = true
	claim, err := a.Ledger.Claim(ctx, cr)
	if err != nil {
		return tool.Lookup{}, retryable(info.Attempt, ErrLedger, "claim %s in the ledger for reconcile: %v", req.Key, err)
	}
	switch claim.Verdict {
	case ledger.Replay:
		return maskLookup(tool.Lookup{Status: tool.Found, Authoritative: true, Result: tool.Result{ExternalID: claim.Operation.ExternalID, Data: claim.Operation.Result}}), nil
	case ledger.Execute, ledger.ReconcileFirst:
	case ledger.Final:
		// A step the ledger calls failed: ask the provider anyway (was it
		// really not done?) and let the workflow record what it learns. An
		// effect made with other arguments is someone else's: the failed
		// row goes to a human instead.
		look, err := a.lookup(ctx, t, req)
		if err != nil {
			return tool.Lookup{Status: tool.Unknown}, nil
		}
		if look.Status == tool.Found && providerConflict(claim.Operation) && !canMatch(t, spec) {
			// The provider refused this call because the key was used
			// with other arguments: what it holds is someone else's
			// until shown otherwise, and this tool declares no way to
			// show it. Never adopted (and so never reversed).
			look.Status, look.Authoritative = tool.Mismatch, true
			look.Differences = []string{fmt.Sprintf("the provider refused this call as a key conflict (%s) and %s declares no Match, so the effect it holds under the key cannot be shown to be this step's", claim.Operation.ErrorCode, req.Tool)}
		}
		if look.Status == tool.Mismatch && claim.Operation.Status == ledger.FailedFinal {
			if _, terr := a.Ledger.Transition(ctx, ledger.Transition{Key: req.Key, From: []ledger.Status{ledger.FailedFinal},
				Status: ledger.NeedsHuman, ErrorCode: CodeReconcileMismatch}); terr != nil {
				a.log().Warn("ledger transition to needs_human failed", "key", plan.KeyID(req.Key), "err", terr)
			}
		}
		return maskLookup(look), nil
	default:
		// In flight elsewhere, conflicting or held: nothing to settle from
		// here now.
		return tool.Lookup{Status: tool.Unknown}, nil
	}
	clock := since(claim.Operation.UpdatedAt)
	look, lerr := a.lookup(ctx, t, req)
	st, code := ledger.Unknown, ""
	switch {
	case lerr != nil:
		look = tool.Lookup{Status: tool.Unknown}
	case look.Status == tool.Found:
		st = ledger.Succeeded
	case look.Status == tool.Mismatch:
		st, code = ledger.NeedsHuman, CodeReconcileMismatch
	case look.Status == tool.Absent && look.Authoritative && claim.Verdict == ledger.ReconcileFirst && clock().Before(horizon(claim.Operation, spec)):
		// An earlier request may still land (a pending row, whose last
		// call provably did not reach the provider, has none in flight):
		// absent settles nothing yet.
		look.NotBefore, code = horizon(claim.Operation, spec), CodeInFlight
	case look.Status == tool.Absent && look.Authoritative:
		st = ledger.Pending
	}
	if st == ledger.Succeeded {
		if _, err := a.complete(ctx, req, executor, st, look.Result, "", Output{Attempt: info.Attempt}); err != nil {
			return tool.Lookup{}, err
		}
		return maskLookup(look), nil
	}
	if code == "" {
		code = "reconcile_" + string(look.Status)
	}
	a.completeQuietly(ctx, req, executor, st, code)
	return maskLookup(look), nil
}

// LookupTool asks the provider what it holds under req.Key, read-only: no
// ledger read or write, no Execute. A found effect made with other arguments
// is Mismatch. It verifies a human's "succeeded --external-id X" before the
// workflow believes it. A provider that cannot answer gives Unknown.
func (a *Activities) LookupTool(ctx context.Context, req Request) (tool.Lookup, error) {
	info := activity.GetInfo(ctx)
	t, ok := a.Tools.Tool(req.Tool)
	if !ok {
		return tool.Lookup{}, final(info.Attempt, ErrNotRegistered, "tool %q is not registered on this worker: deploy a worker that has it", req.Tool)
	}
	look, err := a.lookup(ctx, t, req)
	if err != nil {
		a.log().Info("lookup failed", "key", plan.KeyID(req.Key), "tool", req.Tool, "err", redact.String(err.Error()))
		return tool.Lookup{Status: tool.Unknown}, nil
	}
	return maskLookup(look), nil
}

// GuardReport is what the ledger knows about a call's guard scope, for an
// approval card: who else acts on the same entity.
type GuardReport struct {
	// Scope is the guard scope key, such as `refund-per-order:["o-16"]`;
	// empty when the tool has no guard.
	Scope string `json:"scope,omitempty"`
	// Entity is the normalised entity, such as `["o-16"]`.
	Entity string `json:"entity,omitempty"`
	// Clash is empty when no other active operation holds the scope; else
	// a sentence naming the holder's key and state.
	Clash string `json:"clash,omitempty"`
	// Others are the other operations of the scope, any state, newest
	// first, at most 10 (the request's own key excluded).
	Others []ledger.Operation `json:"others,omitempty"`
	// Holders are the keys of every operation that holds the scope (all
	// of them are in Others); an override permit granted on this card names
	// them (ledger.Permit.Holders).
	Holders []string `json:"holders,omitempty"`
	// SentAt is when the ledger last let a request for the request's own
	// key go to the provider (ledger.Operation.SentAt); zero when it never
	// did or the ledger does not know the key.
	SentAt time.Time `json:"sent_at,omitzero"`
}

// maxOthers is how many other operations a GuardReport lists.
const maxOthers = 10

// CheckGuard reports the guard scope of req and who else is in it. It is
// read-only. A tool without a guard gives an empty report.
func (a *Activities) CheckGuard(ctx context.Context, req Request) (GuardReport, error) {
	info := activity.GetInfo(ctx)
	t, ok := a.Tools.Tool(req.Tool)
	if !ok {
		return GuardReport{}, final(info.Attempt, ErrNotRegistered, "tool %q is not registered on this worker: deploy a worker that has it", req.Tool)
	}
	var rep GuardReport
	switch op, err := a.Ledger.Get(ctx, req.Key); {
	case err == nil:
		rep.SentAt = op.SentAt
	case !errors.Is(err, ledger.ErrNotFound):
		return GuardReport{}, retryable(info.Attempt, ErrLedger, "read %s in the ledger: %v (check the ledger database)", req.Key, err)
	}
	g := specOf(t, req).Guard
	if g == nil {
		return rep, nil
	}
	rep.Scope, rep.Entity = g.ScopeKey(req.Args), g.Entity(req.Args)
	// Ask for more than are listed, so an older holder is still seen.
	ops, err := a.Ledger.InScope(ctx, rep.Scope, 5*maxOthers)
	if err != nil {
		return GuardReport{}, retryable(info.Attempt, ErrLedger, "list guard scope %s in the ledger: %v (check the ledger database)", rep.Scope, err)
	}
	for _, op := range ops {
		if op.Key == req.Key {
			continue
		}
		if rep.Clash == "" && holdsScope(op) {
			rep.Clash = fmt.Sprintf("operation %s (%s, workflow %s) holds guard %s", op.Key, op.Status, op.WorkflowID, rep.Scope)
		}
		if len(rep.Others) < maxOthers {
			rep.Others = append(rep.Others, op)
		}
	}
	rep.Holders, rep.Others = cardHolders(ops, req.Key, rep.Others)
	return rep, nil
}

// holdsScope mirrors the ledger's rule of an operation that counts for its
// guard: not ended for good, and not itself only held for approval.
func holdsScope(op ledger.Operation) bool {
	switch op.Status {
	case ledger.FailedFinal, ledger.Compensated:
		return false
	case ledger.NeedsHuman:
		return op.AttemptCount > 0 || op.HoldReason == ""
	}
	return true
}

// GrantPermit stores a human's single-use approval permit in the ledger.
func (a *Activities) GrantPermit(ctx context.Context, p ledger.Permit) error {
	if p.ID == "" || p.Key == "" || p.RequestHash == "" {
		return refused("grant permit %q: set ID, Key and RequestHash (key %q); the permit was not stored", p.ID, p.Key)
	}
	if err := a.Ledger.GrantPermit(ctx, p); err != nil {
		return MaskedChain(fmt.Errorf("grant permit %s for %s in the ledger: %w (retried; check the ledger database)", p.ID, p.Key, err))
	}
	return nil
}

// RecordDecision appends d to the ledger's audit trail and returns its id.
func (a *Activities) RecordDecision(ctx context.Context, d ledger.DecisionRecord) (int64, error) {
	if d.Kind == "" {
		return 0, refused("record decision for %s: set Kind (approve, reject, resolve, override, expire, refused)", d.Key)
	}
	id, err := a.Ledger.RecordDecision(ctx, d)
	if err != nil {
		return 0, MaskedChain(fmt.Errorf("record %s decision on %s in the ledger: %w (retried; check the ledger database)", d.Kind, d.Key, err))
	}
	return id, nil
}

// Record is a decision written to the ledger outside a tool call: a human's
// resolution, or the saga's own change of state (Machine).
type Record struct {
	Key        string        `json:"key"`
	Status     ledger.Status `json:"status"`
	ExternalID string        `json:"external_id,omitempty"`
	By         string        `json:"by"`
	Note       string        `json:"note,omitempty"`
	// Machine marks a change the saga makes itself (marking a reversed
	// step compensated): it is a ledger Transition, which leaves the
	// resolved_by of any human decision alone. Otherwise the record is a
	// human's decision (ledger Resolve).
	Machine bool `json:"machine,omitempty"`
	// From, for Machine, lists the states the row may be in; another state
	// refuses the record (RecordRefused). Empty means any state.
	From []ledger.Status `json:"from,omitempty"`
	// ErrorCode, for Machine, is recorded when not empty.
	ErrorCode string `json:"error_code,omitempty"`
}

// RecordOutcome writes r to the ledger, so the ledger and the workflow agree
// on every final state. A key the ledger never saw (a read) is skipped. A
// record the ledger can never accept (an unknown status, a row in none of
// From) fails with the non-retryable ErrRecordRefused, so the workflow is
// told instead of retrying forever; a ledger that cannot be reached is
// retried.
func (a *Activities) RecordOutcome(ctx context.Context, r Record) error {
	if !validStatus(r.Status) {
		return refused("record %s as %q: not a ledger status (pending, succeeded, failed_final, unknown, needs_human, compensating, compensated, compensation_failed)", r.Key, r.Status)
	}
	var err error
	if r.Machine {
		_, err = a.Ledger.Transition(ctx, ledger.Transition{Key: r.Key, From: r.From, Status: r.Status, ExternalID: r.ExternalID, ErrorCode: r.ErrorCode})
	} else {
		_, err = a.Ledger.Resolve(ctx, ledger.Resolution{Key: r.Key, Status: r.Status, ExternalID: r.ExternalID, By: r.By, Note: r.Note})
	}
	switch {
	case err == nil, errors.Is(err, ledger.ErrNotFound):
		return nil
	case errors.Is(err, ledger.ErrTransition):
		return refused("record %s as %s: %v (the row is not in %v); nothing changed: look at the row with the ledger tools", r.Key, r.Status, err, r.From)
	}
	return MaskedChain(fmt.Errorf("record %s as %s in the ledger: %w (retried; check the ledger database)", r.Key, r.Status, err))
}

// validStatus reports whether st is a state a record may set.
func validStatus(st ledger.Status) bool {
	switch st {
	case ledger.Pending, ledger.Succeeded, ledger.FailedFinal, ledger.Unknown, ledger.NeedsHuman,
		ledger.Compensating, ledger.Compensated, ledger.CompensationFailed:
		return true
	}
	return false
}
