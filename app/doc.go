// Package app is the one assembly point of agentsaga's commands for a team's
// own tools: Worker is the shipped worker (flags, environment, codec,
// operators, telemetry, ledger, graceful stop) over the tools of --tools
// catalogue files and the Go tools a main passes in Options.Tools, so a
// team's worker is a few lines (see Main and examples/). It does not import
// the embedded dev stack (the Temporal server): agentsaga's own worker adds
// --dev through Options.Dev.
//
// Run is the same for a whole command line in one binary: the worker, the
// operator and planner CLI and the MCP gateway, over the same tools.
//
// Stability: experimental. The flags are the worker's documented ones and
// follow its compatibility; the Go API may change before 1.0.
package app
