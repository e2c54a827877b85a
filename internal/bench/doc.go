// Package bench measures what agentsaga costs against plain Temporal, on one
// embedded server in one process (a devstack with the sandbox providers).
//
// The same calls run two ways in the same run, in alternating rounds so that
// warm-up, caches and the machine's mood fall on both sides alike:
//
//   - agentsaga: an AgentPlan started with sagaclient.Start and waited for
//     with sagaclient.WaitRun, whose write steps are create_ticket (ledger
//     claim, the CRM call, ledger completion);
//   - plain: a workflow registered by the bench on its own task queue that
//     makes the same CRM call (same body, same Idempotency-Key, the same
//     HTTP client code) as a plain activity, started with
//     client.ExecuteWorkflow and waited for with WorkflowRun.Get.
//
// Run reports plans per second and per-plan latency p50/p99 per side and as
// ratios agentsaga/plain, at each concurrency, for a one-write-step and a
// three-write-step plan; the start call's latency; history events and bytes
// per step (read from the histories); memory per plan waiting for a human;
// a thousand concurrent starts of one plan counted at the provider; and the
// ledger's claim and complete latency. `starter bench` prints it; see
// BENCHMARKS.md for a run and what it means.
package bench
