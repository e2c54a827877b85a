package activities_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/activities"
	"github.com/agentsaga/agentsaga/internal/demotools"
	"github.com/agentsaga/agentsaga/internal/sandbox"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/tool"
)

// After the provider answered a call with a key conflict (422), the failed
// step's reconcile finds an effect under the key. A tool that declares no
// Match cannot show it is this step's: it is a Mismatch for a person, never
// Found. A tool whose Match fields agree may adopt it.
func TestProviderConflictIsAdoptedOnlyWhenChecked(t *testing.T) {
	conflict := func(int, tool.Call) (tool.Result, error) {
		return tool.Result{}, tool.Fail(tool.KindConflict, "idempotency_key_mismatch", errors.New("key used with other parameters"))
	}
	found := func(int) (tool.Lookup, error) {
		return tool.Lookup{Status: tool.Found, Authoritative: true, Result: tool.Result{ExternalID: "ch_other", Data: json.RawMessage(`{"order_id":"o-1","amount_minor":100}`)}}, nil
	}
	unchecked := &fakeTool{spec: tool.Spec{Name: "charge", Class: tool.IdempotentWrite, Args: amountArgs, Timeout: 5e9}, execute: conflict, reconcile: found}
	checked := writeTool("pay", tool.IdempotentWrite)
	checked.execute, checked.reconcile = conflict, found
	e := newEnv(t, nil, unchecked, checked)

	req := request(t, "k:1:1:charge", "charge", `{"order_id":"o-1","amount_minor":100}`)
	_, err := e.execute(req)
	require.Equal(t, activities.ErrConflict, appErr(t, err).Type())
	l := e.reconcile(req)
	require.Equal(t, tool.Mismatch, l.Status, "an unchecked effect under a conflicting key is not adopted")
	require.Contains(t, l.Differences[0], "declares no Match")
	op := e.row(req.Key)
	require.Equal(t, ledger.NeedsHuman, op.Status)
	require.Equal(t, activities.CodeReconcileMismatch, op.ErrorCode)

	req = request(t, "k:1:1:pay", "pay", `{"order_id":"o-1","amount_minor":100}`)
	_, err = e.execute(req)
	require.Equal(t, activities.ErrConflict, appErr(t, err).Type())
	require.Equal(t, tool.Found, e.reconcile(req).Status, "Match shows the effect is this call's")
}

// The CRM upserts tickets by external_ref = the operation key: a call under
// a key that already holds a ticket made with another subject is answered
// with that ticket. It is not this step's effect and is never adopted: the
// row waits for a person and no second ticket exists.
func TestUpsertAnswerWithAnotherEffectIsNeverAdopted(t *testing.T) {
	sb, err := sandbox.Start(context.Background(), sandbox.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sb.Close() })
	reg, err := demotools.Registry(demotools.SandboxConfig(sb.BaseURL()))
	require.NoError(t, err)
	var tools []tool.Tool
	for _, name := range reg.Names() {
		tl, _ := reg.Tool(name)
		tools = append(tools, tl)
	}
	e := newEnv(t, nil, tools...)
	ctx := context.Background()
	ticket, _ := reg.Tool(demotools.CreateTicket)
	const key = "purged:1:1:create_ticket"
	_, err = ticket.Execute(ctx, tool.Call{Key: key, Args: json.RawMessage(`{"subject":"refund ord_1001","order_id":"ord_1001"}`), Attempt: 1})
	require.NoError(t, err)

	_, err = e.execute(request(t, key, demotools.CreateTicket, `{"subject":"close account","order_id":"ord_1001"}`))
	ae := appErr(t, err)
	require.Equal(t, activities.ErrConflict, ae.Type())
	require.True(t, ae.NonRetryable())
	require.Contains(t, ae.Error(), "subject")
	op := e.row(key)
	require.Equal(t, ledger.NeedsHuman, op.Status, "the other ticket was not adopted")
	require.Equal(t, activities.CodeEffectMismatch, op.ErrorCode)
	tickets, err := sb.Client().Effects(ctx, sandbox.CRM)
	require.NoError(t, err)
	require.Len(t, tickets, 1, "the CRM holds one ticket: the earlier one")
}
