package bench

import (
	"context"

	"github.com/agentsaga/agentsaga/ledger"
)

// WithoutLedgerWrites wraps s so that a claim always executes and a
// completion is not recorded: the ledger's two durable commits of a write
// step are skipped, and nothing else changes. It exists for one measurement
// only (starter bench --commit-split, Options.CommitSplit): what agentsaga
// costs apart from those commits. No promise holds on a worker that uses it
// (a retry calls the provider again, a duplicate is not stopped); never give
// it to a worker that serves plans.
func WithoutLedgerWrites(s ledger.Store) ledger.Store { return noWrites{s} }

type noWrites struct{ ledger.Store }

func (noWrites) Claim(_ context.Context, req ledger.ClaimRequest) (ledger.Claim, error) {
	return ledger.Claim{Verdict: ledger.Execute, Operation: ledger.Operation{
		Key: req.Key, ActionType: req.ActionType, RequestHash: req.RequestHash, Status: ledger.InProgress, LeaseOwner: req.Executor,
	}}, nil
}

func (noWrites) Complete(_ context.Context, c ledger.Completion) (ledger.Operation, error) {
	return ledger.Operation{Key: c.Key, Status: c.Status, ExternalID: c.ExternalID, Result: c.Result}, nil
}
