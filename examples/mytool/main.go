// Command mytool is an example of a team's own worker: a Go tool of its own
// (book_shipment, with its reversal cancel_shipment, against the team's
// carrier API) run by the shipped worker (package app), so every AgentPlan
// that books a shipment books it once per intent. Its test runs the tool kit
// (package tool/tooltest) against a small carrier started in the test,
// without Temporal.
//
//	CARRIER_URL=http://carrier.internal:8080 go run ./examples/mytool --ledger sqlite:ledger.db
//
// Every flag is the shipped worker's (--address, --namespace, --task-queue,
// --ledger, --operators, --codec-keys, --tools for catalogue tools beside
// the Go ones, ...; see the README), with their environment variables.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/agentsaga/agentsaga/app"
	"github.com/agentsaga/agentsaga/tool"
)

func main() { os.Exit(app.Main(os.Args[1:], run)) }

// Registry returns the registry of the team's tools calling the carrier at
// carrierURL, or the error naming every tool that lacks what the saga needs.
func Registry(carrierURL string) (*tool.Registry, error) {
	reg, err := tool.NewRegistry(Tools(carrierURL, nil)...)
	if err != nil {
		return nil, fmt.Errorf("shipping tools: %w", err)
	}
	return reg, nil
}

// run is the shipped worker with the shipping tools: it refuses to start
// without the carrier's URL, before connecting to anything.
func run(ctx context.Context, args []string) error {
	carrier := os.Getenv("CARRIER_URL")
	if carrier == "" {
		return app.UsageError{Err: errors.New("CARRIER_URL is required: the carrier API the shipping tools call")}
	}
	return app.Worker(ctx, args, app.Options{Name: "mytool", Tools: Tools(carrier, nil)})
}
