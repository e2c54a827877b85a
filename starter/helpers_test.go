package main

import (
	"context"
	"flag"

	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/ledger/ledgerdb"
)

func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	return fs
}

func openLedger(_ interface{ Helper() }, dsn string) (ledger.Store, error) {
	return ledgerdb.Open(context.Background(), dsn)
}
