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
