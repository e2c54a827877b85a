package cli

import (
	"context"
	"flag"
	"io"

	"github.com/agentsaga/agentsaga/internal/demotools"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/ledger/ledgerdb"
	"github.com/agentsaga/agentsaga/plan"
)

func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	return fs
}

func openLedger(_ interface{ Helper() }, dsn string) (ledger.Store, error) {
	return ledgerdb.Open(context.Background(), dsn)
}

// readPlan reads a plan as `run` does, checked against the demo tools.
func readPlan(file string, stdin io.Reader) (plan.Plan, bool, error) {
	return readPlanContext(context.Background(), file, stdin, demotools.Specs())
}
