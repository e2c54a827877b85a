// Package integration holds agentsaga's end-to-end tests: plans run on the
// real embedded Temporal server (package devstack) against the sandbox
// providers over HTTP, and every claim about effects is checked by counting
// rows and calls in the providers' own stores through the sandbox admin API,
// never by trusting what the workflow reports.
//
// The package has no code of its own; run it with
//
//	go test ./integration/
//
// The worker-crash test re-executes the test binary as a separate worker
// process (see TestMain), kills it with SIGKILL after the provider committed
// and starts a new one.
package integration
