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
	"strings"
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
	// Deployment, when its DeploymentName is set, runs the worker under
	// Temporal's Worker Versioning as this version of that worker
	// deployment (BuildID is then required): every plan and session runs
	// to its end on the build that started it (VersioningBehavior), new
	// ones go to the deployment's current version, and an operator moves
	// builds with `temporal worker deployment set-current-version` (see
	// the README, "Upgrading and rolling back"). Empty: the worker is
	// unversioned and takes every task of its queue (dev, tests).
	Deployment worker.WorkerDeploymentVersion
}

// MaxDeploymentIDBytes is the longest deployment name or build ID a worker
// takes (Temporal's own limit, from its limit.maxIDLength of 1000, is
// higher).
const MaxDeploymentIDBytes = 200

// CheckDeployment reports what is wrong with v as a worker deployment
// version, naming the field and the rule; an empty v (unversioned) is fine.
// Temporal's rules: neither field is empty or starts with "__", and a
// deployment name holds no '.' or ':' (a build ID may: v0.1.0).
func CheckDeployment(v worker.WorkerDeploymentVersion) error {
	if v.DeploymentName == "" && v.BuildID == "" {
		return nil
	}
	for _, f := range []struct{ name, value string }{{"deployment name", v.DeploymentName}, {"build ID", v.BuildID}} {
		switch {
		case f.value == "":
			return fmt.Errorf("the %s is empty: give both a deployment name and a build ID, or neither for an unversioned worker", f.name)
		case len(f.value) > MaxDeploymentIDBytes:
			return fmt.Errorf("the %s is %d bytes, at most %d are allowed", f.name, len(f.value), MaxDeploymentIDBytes)
		case strings.HasPrefix(f.value, "__"):
			return fmt.Errorf("the %s %q starts with \"__\", which Temporal keeps for itself", f.name, f.value)
		case strings.ContainsAny(f.value, " \t\r\n"):
			return fmt.Errorf("the %s %q holds white space", f.name, f.value)
		}
	}
	if strings.ContainsAny(v.DeploymentName, ".:") {
		return fmt.Errorf("the deployment name %q holds a '.' or ':', which Temporal does not allow in it", v.DeploymentName)
	}
	return nil
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
	if err := CheckDeployment(o.Deployment); err != nil {
		return nil, fmt.Errorf("sagaworker: Options.Deployment: %w", err)
	}
	if o.Deployment.DeploymentName != "" {
		o.Worker.DeploymentOptions = worker.DeploymentOptions{UseVersioning: true, Version: o.Deployment}
	}
	w := worker.New(c, tq, o.Worker)
	Register(w, &workflows.Saga{Specs: o.Tools.Specs(), Operators: o.Operators, Refused: RefusalRecorder(o.Ledger, o.Logger)},
		&activities.Activities{Tools: o.Tools, Ledger: o.Ledger, Log: o.Logger, Webhook: o.Webhook})
	return w, nil
}

// MaxPendingRefusals bounds the refused decision Updates a worker writes to
// the audit trail at once (RefusalRecorder); more at the same moment are
// logged, not written, so a flood of refused attempts cannot pile up.
const MaxPendingRefusals = 64

// RefusalRecorder returns the workflows.Saga.Refused of a worker: each
// refused decision Update is appended to store's audit trail (kind
// "refused") on a goroutine of its own, within activities.RecordTimeout,
// at most MaxPendingRefusals at once; what cannot be written is logged to
// log (nil discards).
func RefusalRecorder(store ledger.Store, log *slog.Logger) func(ledger.DecisionRecord) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	pending := make(chan struct{}, MaxPendingRefusals)
	return func(d ledger.DecisionRecord) {
		select {
		case pending <- struct{}{}:
		default:
			log.Warn("refused decision not written to the audit trail: too many at once", "workflow_id", d.WorkflowID, "by", d.By, "refused", d.Refused)
			return
		}
		go func() {
			defer func() { <-pending }()
			ctx, cancel := context.WithTimeout(context.Background(), activities.RecordTimeout)
			defer cancel()
			if _, err := store.RecordDecision(ctx, d); err != nil {
				log.Warn("refused decision not written to the audit trail", "workflow_id", d.WorkflowID, "by", d.By, "refused", d.Refused, "error", err)
			}
		}()
	}
}

// Register registers AgentPlan, AgentSession and every activity they call under their
// contract names on r: a worker, or the SDK's test environment.
func Register(r worker.Registry, saga *workflows.Saga, acts *activities.Activities) {
	RegisterWorkflows(r, saga)
	for name, fn := range map[string]any{
		activities.ExecuteToolName:    acts.ExecuteTool,
		activities.ReconcileToolName:  acts.ReconcileTool,
		activities.RecordName:         acts.RecordOutcome,
		activities.CheckGuardName:     acts.CheckGuard,
		activities.GrantPermitName:    acts.GrantPermit,
		activities.RecordDecisionName: acts.RecordDecision,
		activities.LookupToolName:     acts.LookupTool,
		activities.NotifyName:         acts.Notify,
		activities.NotifySettingsName: acts.NotifySettings,
	} {
		r.RegisterActivityWithOptions(fn, activity.RegisterOptions{Name: name})
	}
}

// RegisterWorkflows registers AgentPlan, AgentSession and AgentNotify (a
// question's notifications) under their
// contract names on r: a worker, the SDK's test environment or a
// worker.WorkflowReplayer (`worker replay`).
//
// Both are pinned (workflow.VersioningBehaviorPinned), which matters only
// on a versioned worker (Options.Deployment; an unversioned one sends no
// behaviour) and changes no command a workflow issues, so every recorded
// history replays as before. Pinned means a plan runs to its end on the
// build that started it: its approval wait of up to 24 h, its reconcile
// schedule, its reversals and its `status` queries all go to that build's
// workers, whichever version is current meanwhile. A session is pinned too,
// though it lives longer: its turns hold the same waits as a plan, and
// auto-upgrade would hand its next workflow task to the new current build
// with nobody having proved that build replays this history (a replay that
// fails blocks the workflow task: the stuck plans of issue 20). A session,
// like a plan, moves only when an operator has run `worker replay` with the
// new build over it and then sets a versioning override (README,
// "Upgrading and rolling back"); continue-as-new keeps its run on its build.
func RegisterWorkflows(r WorkflowRegistry, saga *workflows.Saga) {
	r.RegisterWorkflowWithOptions(saga.AgentPlan, workflow.RegisterOptions{
		Name: workflows.WorkflowName, VersioningBehavior: PlanVersioning})
	r.RegisterWorkflowWithOptions(saga.AgentSession, workflow.RegisterOptions{
		Name: workflows.SessionWorkflowName, VersioningBehavior: SessionVersioning})
	r.RegisterWorkflowWithOptions(saga.AgentNotify, workflow.RegisterOptions{
		Name: workflows.NotifyWorkflowName, VersioningBehavior: PlanVersioning})
}

// PlanVersioning and SessionVersioning are the versioning behaviours
// AgentPlan and AgentSession are registered with (see RegisterWorkflows).
const (
	PlanVersioning    = workflow.VersioningBehaviorPinned
	SessionVersioning = workflow.VersioningBehaviorPinned
)

// WorkflowRegistry is what RegisterWorkflows needs: a worker, the test
// environment or a worker.WorkflowReplayer.
type WorkflowRegistry interface {
	RegisterWorkflowWithOptions(w any, options workflow.RegisterOptions)
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
