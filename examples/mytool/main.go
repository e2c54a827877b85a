// Command mytool is an example of a team's own worker: a Go tool of its own
// (book_shipment, with its reversal cancel_shipment, against the team's
// carrier API) run by the shipped worker (package app), so every AgentPlan
// that books a shipment books it once per intent. Its test runs the tool kit
// (package tool/tooltest) against a small carrier started in the test,
// without Temporal.
//
//	CARRIER_URL=http://carrier.internal:8080 go run ./examples/mytool worker --ledger sqlite:ledger.db
//	go run ./examples/mytool run --plan plan.json
//	CARRIER_URL=http://carrier.internal:8080 go run ./examples/mytool mcp --stdio
//	go run ./examples/mytool approve ID --step 1 --key alice.key
//
// It is one binary (app.Run): `worker` takes every flag of the shipped
// worker (--address, --namespace, --task-queue, --ledger, --operators,
// --codec-keys, --tools for catalogue tools beside the Go ones, ...), and
// the other commands are the starter's operator and planner commands and
// the MCP gateway (see the README), all over the same tools.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/agentsaga/agentsaga/app"
	"github.com/agentsaga/agentsaga/tool"
)

func main() { os.Exit(app.Run(os.Args[1:], options(os.Getenv("CARRIER_URL")))) }

// options are the team's whole command line: the shipped worker, the
// operator CLI and the MCP gateway over the shipping tools calling the
// carrier at carrierURL.
func options(carrierURL string) app.Options {
	return app.Options{
		Name:  "mytool",
		Tools: Tools(carrierURL, nil),
		// The worker calls the carrier: it refuses to start without its
		// URL, before connecting to anything.
		Check: func(command string) error {
			if carrierURL == "" && command == "worker" {
				return app.UsageError{Err: errors.New("CARRIER_URL is required: the carrier API the shipping tools call")}
			}
			return nil
		},
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
