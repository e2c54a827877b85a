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
	"time"

	"go.temporal.io/sdk/activity"

	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/plan"
	"github.com/agentsaga/agentsaga/redact"
	"github.com/agentsaga/agentsaga/tool"
)

// Activity names, as registered on the worker.
const (
	ExecuteToolName   = "ExecuteTool"
	ReconcileToolName = "ReconcileTool"
	RecordName        = "RecordOutcome"
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
	spec := t.Spec()
	call := tool.Call{Key: req.Key, Args: req.Args, Attempt: info.Attempt}
	log := a.log().With("key", req.Key, "tool", req.Tool, "attempt", info.Attempt)

	if !spec.Class.IsWrite() {
		res, err := t.Execute(ctx, call)
		if err != nil {
			log.Info("read failed", "kind", tool.KindOf(err))
			return Output{}, Classify(spec.Class, info.Attempt, err)
		}
		return Output{ExternalID: res.ExternalID, Result: redact.JSON(res.Data), Attempt: info.Attempt}, nil
	}

	executor := executorOf(info)
	claim, err := a.Ledger.Claim(ctx, a.claimRequest(info, req, spec, executor))
	if err != nil {
		return Output{}, retryable(info.Attempt, ErrLedger, "claim %s in the ledger: %v (nothing was called; check the ledger database)", req.Key, err)
	}
	op := claim.Operation
	switch claim.Verdict {
	case ledger.Replay:
		log.Info("replayed from ledger", "external_id", op.ExternalID)
		return Output{ExternalID: op.ExternalID, Result: op.Result, Replayed: true, Attempt: info.Attempt}, nil
	case ledger.Conflict:
		return Output{}, final(info.Attempt, ErrConflict, "key %s conflict, the tool was not called: %s", req.Key, claim.Reason)
	case ledger.InFlight:
		return Output{}, retryable(info.Attempt, string(tool.KindInFlight), "key %s is being executed by %s until %s; retry later", req.Key, op.LeaseOwner, op.LeaseUntil.Format(time.RFC3339))
	case ledger.Final:
		return Output{}, final(info.Attempt, ErrAlreadyFinal, "key %s is %s in the ledger; the tool was not called", req.Key, op.Status)
	case ledger.GuardRefused:
		return Output{}, final(info.Attempt, ErrGuardRefused, "key %s refused by guard: %s", req.Key, claim.Reason)
	case ledger.Held:
		return Output{}, final(info.Attempt, ErrHeld, "key %s held for approval: %s", req.Key, claim.Reason)
	case ledger.ReconcileFirst:
		look, err := a.lookup(ctx, t, req.Key)
		switch {
		case err == nil && look.Status == tool.Found:
			log.Info("reconciled: provider has the effect", "external_id", look.Result.ExternalID)
			return a.complete(ctx, req, executor, ledger.Succeeded, look.Result, "", Output{Reconciled: true, Attempt: info.Attempt})
		case err == nil && look.Status == tool.Absent && look.Authoritative:
			log.Info("reconciled: provider has no effect, calling again with the same key")
		default:
			cause := "the provider could not say"
			if err != nil {
				cause = err.Error()
			}
			a.completeQuietly(ctx, req, executor, ledger.Unknown, "reconcile_unknown")
			return Output{}, final(info.Attempt, ErrUnknown, "key %s: an earlier attempt may have reached the provider and reconcile could not tell (%s)", req.Key, cause)
		}
	}

	res, err := t.Execute(ctx, call)
	if err == nil {
		return a.complete(ctx, req, executor, ledger.Succeeded, res, "", Output{Attempt: info.Attempt})
	}
	kind := tool.KindOf(err)
	log.Info("write failed", "kind", kind, "code", tool.CodeOf(err))
	a.completeQuietly(ctx, req, executor, ledgerStatus(kind), string(kind)+":"+tool.CodeOf(err))
	return Output{}, Classify(spec.Class, info.Attempt, err)
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
		PermitID:    req.PermitID,
	}
	if g := spec.Guard; g != nil {
		entity := guardEntity(g, req.Args)
		cr.GuardScope = g.Scope + ":" + entity
		cr.GuardHold = g.Hold
		cr.Entity = entity
		if norm, err := plan.Canonical(req.Args); err == nil {
			cr.NormalizedArgs = string(norm)
		}
		cr.DuplicateWindow = g.DuplicateWindow
	}
	return cr
}

// executorOf names the lease holder: one attempt of one activity.
func executorOf(info activity.Info) string {
	return fmt.Sprintf("%s/%s#%d", info.WorkflowExecution.ID, info.ActivityID, info.Attempt)
}

func guardEntity(g *tool.Guard, args json.RawMessage) string {
	obj, _ := tool.DecodeObject(args)
	vals := make([]any, len(g.Fields))
	for i, f := range g.Fields {
		vals[i] = obj[f]
	}
	b, _ := json.Marshal(vals)
	return string(b)
}

func (a *Activities) lookup(ctx context.Context, t tool.Tool, key string) (tool.Lookup, error) {
	rc, ok := t.(tool.Reconciler)
	if !ok {
		return tool.Lookup{Status: tool.Unknown}, nil
	}
	return rc.Reconcile(ctx, key)
}

func (a *Activities) complete(ctx context.Context, req Request, executor string, st ledger.Status, res tool.Result, code string, out Output) (Output, error) {
	op, err := a.Ledger.Complete(ctx, ledger.Completion{
		Key: req.Key, Executor: executor, Status: st,
		ExternalID: res.ExternalID, Result: redact.JSON(res.Data), ErrorCode: code,
	})
	if err != nil {
		// The effect exists at the provider; the next attempt reconciles
		// and finds it, so nothing is sent twice.
		return Output{}, retryable(out.Attempt, ErrLedger, "record %s as %s in the ledger: %v (the next attempt reconciles before calling)", req.Key, st, err)
	}
	out.ExternalID = op.ExternalID
	out.Result = op.Result
	return out, nil
}

func (a *Activities) completeQuietly(ctx context.Context, req Request, executor string, st ledger.Status, code string) {
	if _, err := a.Ledger.Complete(ctx, ledger.Completion{Key: req.Key, Executor: executor, Status: st, ErrorCode: code}); err != nil {
		// The lease expires and the next claimer reconciles first.
		a.log().Warn("ledger complete failed", "key", req.Key, "status", st, "err", err)
	}
}

// ReconcileTool asks the provider what happened under req.Key and records
// the answer in the ledger: found → succeeded; authoritative absent →
// pending, so the next ExecuteTool may call again; otherwise unknown. It
// never calls the tool's Execute.
func (a *Activities) ReconcileTool(ctx context.Context, req Request) (tool.Lookup, error) {
	info := activity.GetInfo(ctx)
	t, ok := a.Tools.Tool(req.Tool)
	if !ok {
		return tool.Lookup{}, final(info.Attempt, ErrNotRegistered, "tool %q is not registered on this worker: deploy a worker that has it", req.Tool)
	}
	spec := t.Spec()
	executor := executorOf(info)
	claim, err := a.Ledger.Claim(ctx, a.claimRequest(info, req, spec, executor))
	if err != nil {
		return tool.Lookup{}, retryable(info.Attempt, ErrLedger, "claim %s in the ledger for reconcile: %v", req.Key, err)
	}
	switch claim.Verdict {
	case ledger.Replay:
		return tool.Lookup{Status: tool.Found, Authoritative: true, Result: tool.Result{ExternalID: claim.Operation.ExternalID, Data: claim.Operation.Result}}, nil
	case ledger.Execute, ledger.ReconcileFirst:
	case ledger.Final:
		// A step the ledger calls failed: ask the provider anyway (was it
		// really not done?) and let the workflow record what it learns.
		look, err := a.lookup(ctx, t, req.Key)
		if err != nil {
			return tool.Lookup{Status: tool.Unknown}, nil
		}
		look.Result.Data = redact.JSON(look.Result.Data)
		return look, nil
	default:
		// In flight elsewhere, conflicting or held: nothing to settle from
		// here now.
		return tool.Lookup{Status: tool.Unknown}, nil
	}
	look, lerr := a.lookup(ctx, t, req.Key)
	st := ledger.Unknown
	switch {
	case lerr != nil:
		look = tool.Lookup{Status: tool.Unknown}
	case look.Status == tool.Found:
		st = ledger.Succeeded
	case look.Status == tool.Absent && look.Authoritative:
		st = ledger.Pending
	}
	if st == ledger.Succeeded {
		if _, err := a.complete(ctx, req, executor, st, look.Result, "", Output{}); err != nil {
			return tool.Lookup{}, err
		}
		look.Result.Data = redact.JSON(look.Result.Data)
		return look, nil
	}
	a.completeQuietly(ctx, req, executor, st, "reconcile_"+string(look.Status))
	return look, nil
}

// Record is a decision written to the ledger outside a tool call: a human's
// resolution, or the saga marking a reversed step compensated.
type Record struct {
	Key        string        `json:"key"`
	Status     ledger.Status `json:"status"`
	ExternalID string        `json:"external_id,omitempty"`
	By         string        `json:"by"`
	Note       string        `json:"note,omitempty"`
}

// RecordOutcome writes r to the ledger, so the ledger and the workflow agree
// on every final state. A key the ledger never saw (a read) is skipped.
func (a *Activities) RecordOutcome(ctx context.Context, r Record) error {
	_, err := a.Ledger.Resolve(ctx, ledger.Resolution{Key: r.Key, Status: r.Status, ExternalID: r.ExternalID, By: r.By, Note: r.Note})
	if errors.Is(err, ledger.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("record %s as %s in the ledger: %w", r.Key, r.Status, err)
	}
	return nil
}
