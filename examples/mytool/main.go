// Command mytool is an example of a team's own worker: a Go tool of its own
// (book_shipment, with its reversal cancel_shipment, against the team's
// carrier API) registered with tool.NewRegistry and run by sagaworker, so
// every AgentPlan that books a shipment books it once per intent. Its test
// runs the tool kit (package tool/tooltest) against a small carrier started
// in the test, without Temporal.
//
//	go run ./examples/mytool --carrier-url http://carrier.internal:8080 --ledger sqlite:ledger.db
//
// The Temporal flags are the shipped worker's (--address, --namespace,
// --task-queue, --api-key, --tls*, --codec-keys, and their environment
// variables). Catalogue tools can be registered beside Go ones: pass
// catalog.Load(...).Registry(Tools(...)...) instead of tool.NewRegistry.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"go.temporal.io/sdk/client"

	"github.com/agentsaga/agentsaga/config"
	"github.com/agentsaga/agentsaga/ledger/ledgerdb"
	"github.com/agentsaga/agentsaga/sagaworker"
	"github.com/agentsaga/agentsaga/tool"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "mytool:", err)
		os.Exit(1)
	}
}

// Registry returns the registry of the team's tools calling the carrier at
// carrierURL, or the error naming every tool that lacks what the saga needs.
func Registry(carrierURL string) (*tool.Registry, error) {
	reg, err := tool.NewRegistry(Tools(carrierURL, nil)...)
	if err != nil {
		return nil, fmt.Errorf("shipping tools: %w", err)
	}
	return reg, nil
}

// run parses args, builds the registry, opens the ledger, connects to
// Temporal and runs the worker until ctx is done. It refuses to start on a
// missing flag before connecting to anything.
func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("mytool", flag.ContinueOnError)
	var t config.Temporal
	t.Register(fs)
	var dsn string
	config.RegisterLedger(fs, &dsn, "required")
	carrier := fs.String("carrier-url", os.Getenv("CARRIER_URL"), "base URL of the carrier API (env CARRIER_URL)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *carrier == "" {
		return errors.New("--carrier-url is required: the carrier API the shipping tools call")
	}
	if dsn = config.LedgerDSN(dsn); dsn == "" {
		return fmt.Errorf("--ledger is required (or env %s): %s", config.EnvLedger, ledgerdb.Usage)
	}
	reg, err := Registry(*carrier)
	if err != nil {
		return err
	}
	store, err := ledgerdb.Open(ctx, dsn)
	if err != nil {
		return fmt.Errorf("open the ledger %s: %w", config.SafeDSN(dsn), err)
	}
	defer store.Close()
	opts, err := t.ClientOptions()
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	c, err := client.Dial(opts)
	if err != nil {
		return fmt.Errorf("connect to Temporal at %s: %w", t.Address, err)
	}
	defer c.Close()
	w, err := sagaworker.New(c, sagaworker.Options{TaskQueue: t.TaskQueue, Tools: reg, Ledger: store, Logger: log})
	if err != nil {
		return err
	}
	if err := w.Start(); err != nil {
		return fmt.Errorf("start the worker: %w", err)
	}
	log.Info("worker started", "task_queue", t.TaskQueue, "tools", reg.Names())
	<-ctx.Done()
	w.Stop()
	return nil
}
