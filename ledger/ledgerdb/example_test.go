package ledgerdb_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"time"

	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/ledger/ledgerdb"
)

// One write step: claim, call the provider (not shown), complete; a second
// claim of the same key replays the stored, redacted result.
func Example() {
	ctx := context.Background()
	store, err := ledgerdb.Open(ctx, "sqlite::memory:")
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	req := ledger.ClaimRequest{
		Key: "s1:1:0:apply_refund", ActionType: "apply_refund", RequestHash: "sha256:ab12",
		Executor: "s1:1:0:apply_refund#1", Lease: 30 * time.Second,
	}
	c, err := store.Claim(ctx, req)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(c.Verdict, c.Operation.AttemptCount)

	// ... the provider is called here, with Idempotency-Key: req.Key ...
	result := json.RawMessage(`{"refund_id":"re_1","card_number":"4111111111111111"}`)
	if _, err := store.Complete(ctx, ledger.Completion{
		Key: req.Key, Executor: req.Executor, Status: ledger.Succeeded, ExternalID: "re_1", Result: result,
	}); err != nil {
		log.Fatal(err)
	}

	req.Executor = "s1:1:0:apply_refund#2" // a retry after a lost response
	c, err = store.Claim(ctx, req)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(c.Verdict, c.Operation.ExternalID, string(c.Operation.Result))
	// Output:
	// execute 1
	// replay re_1 {"card_number":"[redacted]","refund_id":"re_1"}
}

// An approval gate: the human's approval is a permit bound to the step's key
// and request hash. The claim that starts the call consumes it; another step
// cannot use it, and it never starts a call twice.
func Example_permit() {
	ctx := context.Background()
	store, err := ledgerdb.Open(ctx, "sqlite::memory:")
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	req := ledger.ClaimRequest{
		Key: "s1:1:0:apply_refund", ActionType: "apply_refund", RequestHash: "sha256:ab12",
		Executor: "s1:1:0:apply_refund#1", Lease: 30 * time.Second, PermitID: "q-7",
	}
	c, err := store.Claim(ctx, req)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("before approval:", c.Verdict)

	if err := store.GrantPermit(ctx, ledger.Permit{
		ID: "q-7", Key: req.Key, RequestHash: req.RequestHash, Policy: "amount_minor > 50000", By: "alice",
	}); err != nil {
		log.Fatal(err)
	}
	if c, err = store.Claim(ctx, req); err != nil {
		log.Fatal(err)
	}
	fmt.Println("approved:", c.Verdict)

	other := req
	other.Key = "s1:1:1:apply_refund"
	if c, err = store.Claim(ctx, other); err != nil {
		log.Fatal(err)
	}
	fmt.Println("another step, same permit:", c.Verdict)
	// Output:
	// before approval: no_permit
	// approved: execute
	// another step, same permit: no_permit
}
