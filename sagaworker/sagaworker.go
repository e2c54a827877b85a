// Package sagaworker assembles a Temporal worker that runs AgentPlan: the
// saga workflow and the tool activities, over one tool registry and one
// ledger. The worker and starter mains, the demo and the integration tests
// all build their workers here, so there is one way to wire it.
package sagaworker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/agentsaga/agentsaga/activities"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/tool"
	"github.com/agentsaga/agentsaga/workflows"
)

// Options configure a worker.
type Options struct {
	// TaskQueue defaults to workflows.TaskQueue.
	TaskQueue string
	// Tools is the registry; tool.NewRegistry has already refused any tool
	// that lacks a class, a compensator or a reconciler.
	Tools *tool.Registry
	// Ledger records every write.
	Ledger ledger.Store
	// Logger receives activity logs; nil discards them.
	Logger *slog.Logger
	// Operators verifies who decides (an *operators.Keyring); nil accepts
	// typed names, recorded as unverified (the dev stack).
	Operators workflows.Verifier
	// Webhook, when set, is told when a question opens, ages past its
	// After, and is decided or expires (activities.Notify).
	Webhook *activities.Webhook
	// Worker passes SDK worker options through. Its WorkerStopTimeout is
	// raised to StopTimeout of the tools when it is shorter.
	Worker worker.Options
}

// StopMargin is what StopTimeout adds beyond the longest tool call and the
// ledger record that follows it: a reconcile runs up to 5 s longer than its
// tool's timeout, and the answer must still reach Temporal.
const StopMargin = 10 * time.Second

// StopTimeout is how long a stopping worker lets its in-flight activities
// finish and record their outcome before it cancels them: the longest tool
// timeout of specs, plus activities.RecordTimeout, plus StopMargin. A call
// cancelled mid-flight is an unknown outcome, for a tool without a lookup a
// question for a person; give the process at least this much time to stop
// (docker compose's stop_grace_period, Kubernetes'
// terminationGracePeriodSeconds).
func StopTimeout(specs tool.Specs) time.Duration {
	var longest time.Duration
	for _, s := range specs {
		longest = max(longest, s.Timeout)
	}
	return longest + activities.RecordTimeout + StopMargin
}

// New returns a worker with AgentPlan and its activities registered. Start it
// with Run or Start.
func New(c client.Client, o Options) (worker.Worker, error) {
	if o.Tools == nil {
		return nil, errors.New("sagaworker: Options.Tools is nil: build a registry with tool.NewRegistry")
	}
	if o.Ledger == nil {
		return nil, errors.New("sagaworker: Options.Ledger is nil: open one with ledgerdb.Open")
	}
	tq := o.TaskQueue
	if tq == "" {
		tq = workflows.TaskQueue
	}
	// A stopping worker takes no new task and lets the running calls
	// finish and record what they did.
	o.Worker.WorkerStopTimeout = max(o.Worker.WorkerStopTimeout, StopTimeout(o.Tools.Specs()))
	w := worker.New(c, tq, o.Worker)
	Register(w, &workflows.Saga{Specs: o.Tools.Specs(), Operators: o.Operators},
		&activities.Activities{Tools: o.Tools, Ledger: o.Ledger, Log: o.Logger, Webhook: o.Webhook})
	return w, nil
}

// Register registers AgentPlan, AgentSession and every activity they call under their
// contract names on r: a worker, or the SDK's test environment.
func Register(r worker.Registry, saga *workflows.Saga, acts *activities.Activities) {
	r.RegisterWorkflowWithOptions(saga.AgentPlan, workflow.RegisterOptions{Name: workflows.WorkflowName})
	r.RegisterWorkflowWithOptions(saga.AgentSession, workflow.RegisterOptions{Name: workflows.SessionWorkflowName})
	for name, fn := range map[string]any{
		activities.ExecuteToolName:    acts.ExecuteTool,
		activities.ReconcileToolName:  acts.ReconcileTool,
		activities.RecordName:         acts.RecordOutcome,
		activities.CheckGuardName:     acts.CheckGuard,
		activities.GrantPermitName:    acts.GrantPermit,
		activities.RecordDecisionName: acts.RecordDecision,
		activities.LookupToolName:     acts.LookupTool,
		activities.NotifyName:         acts.Notify,
	} {
		r.RegisterActivityWithOptions(fn, activity.RegisterOptions{Name: name})
	}
}

// SearchAttributes are the product's search attributes and their types.
var SearchAttributes = map[string]enumspb.IndexedValueType{
	workflows.SearchAttrSession:    enumspb.INDEXED_VALUE_TYPE_KEYWORD,
	workflows.SearchAttrState:      enumspb.INDEXED_VALUE_TYPE_KEYWORD,
	workflows.SearchAttrNeedsHuman: enumspb.INDEXED_VALUE_TYPE_BOOL,
}

// RegisterSearchAttributes adds the product's search attributes to the
// namespace, keeping any that exist. Clusters that forbid it (Temporal Cloud
// without admin rights) return an error saying what to add by hand.
func RegisterSearchAttributes(ctx context.Context, c client.Client, namespace string) error {
	have, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: namespace})
	if err != nil {
		return fmt.Errorf("list search attributes of %s: %w (add %v by hand with `temporal operator search-attribute create`)", namespace, err, names())
	}
	missing := map[string]enumspb.IndexedValueType{}
	for name, typ := range SearchAttributes {
		if _, ok := have.GetCustomAttributes()[name]; !ok {
			missing[name] = typ
		}
	}
	if len(missing) == 0 {
		return nil
	}
	_, err = c.OperatorService().AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{Namespace: namespace, SearchAttributes: missing})
	var exists *serviceerror.AlreadyExists
	if err != nil && !errors.As(err, &exists) {
		return fmt.Errorf("add search attributes to %s: %w (add %v by hand with `temporal operator search-attribute create`)", namespace, err, names())
	}
	return nil
}

func names() []string {
	return []string{workflows.SearchAttrSession + " Keyword", workflows.SearchAttrState + " Keyword", workflows.SearchAttrNeedsHuman + " Bool"}
}
