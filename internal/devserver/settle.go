package devserver

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// probeWorkflowName is the workflow Start runs to settle search attributes;
// it runs on a task queue of its own and is deleted afterwards.
const probeWorkflowName = "devserver-search-attribute-probe"

// settleSearchAttributes makes the registered search attributes usable
// without the forced refresh, then switches it off. While the refresh is
// forced, a probe workflow started with every attribute, upserting every
// one, makes the frontend and the history service load them from the store
// (a cache loaded before registration would otherwise stay stale for up to
// a minute). Then the refresh is switched off and the probe runs again,
// served by the caches alone: Start returns only once that second run has
// worked, so no plan ever meets a cache that does not know its attributes.
func (s *Server) settleSearchAttributes(ctx context.Context, c client.Client, sas map[string]enums.IndexedValueType) error {
	if len(sas) == 0 || s.config.fixed {
		s.config.settle()
		return nil
	}
	tq := fmt.Sprintf("devserver-probe-%d", time.Now().UnixNano())
	w := worker.New(c, tq, worker.Options{})
	w.RegisterWorkflowWithOptions(func(ctx workflow.Context) error {
		return workflow.UpsertTypedSearchAttributes(ctx, probeValues(sas, "upserted")...)
	}, workflow.RegisterOptions{Name: probeWorkflowName})
	if err := w.Start(); err != nil {
		return fmt.Errorf("devserver: start the search attribute probe's worker: %w", err)
	}
	defer w.Stop()
	if err := s.probe(ctx, c, tq, sas, "forced"); err != nil {
		return err
	}
	s.config.settle()
	return s.probe(ctx, c, tq, sas, "cached")
}

// probe starts the probe workflow with every attribute of sas, waits for it
// to complete (its upsert passed validation), waits until visibility lists
// it, and deletes it (on failure too, as far as it can). Its ID is used for
// one run only: a start retried after its first attempt made the run (and
// timed out) attaches to that run, whether it still runs or has closed.
func (s *Server) probe(ctx context.Context, c client.Client, tq string, sas map[string]enums.IndexedValueType, round string) (err error) {
	id := tq + "-" + round
	defer func() {
		// Delete the run (a running one is terminated first): on success
		// with ctx, and best effort, with a bound of its own, on failure.
		dctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err == nil {
			dctx = ctx
		}
		defer cancel()
		_, derr := c.WorkflowService().DeleteWorkflowExecution(dctx, &workflowservice.DeleteWorkflowExecutionRequest{
			Namespace: s.namespace, WorkflowExecution: &commonpb.WorkflowExecution{WorkflowId: id},
		})
		if err == nil && derr != nil {
			err = fmt.Errorf("devserver: delete the search attribute probe: %w", derr)
		}
	}()
	var run client.WorkflowRun
	err = poll(ctx, "a workflow started with the search attributes ("+round+")", func(ctx context.Context) error {
		var err error
		run, err = c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
			ID: id, TaskQueue: tq, TypedSearchAttributes: temporal.NewSearchAttributes(probeValues(sas, "started")...),
			WorkflowIDConflictPolicy: enums.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
			WorkflowIDReusePolicy:    enums.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		}, probeWorkflowName)
		var closed *serviceerror.WorkflowExecutionAlreadyStarted
		switch {
		case errors.As(err, &closed):
			run = c.GetWorkflow(ctx, id, "")
			return nil
		case err != nil:
			return retryable{err} // "invalid search attribute" until the caches know them
		}
		return nil
	})
	if err != nil {
		return err
	}
	// A rejected upsert fails the workflow task, which is retried: the
	// run completes once the history service accepts the attributes.
	if err := run.Get(ctx, nil); err != nil {
		return fmt.Errorf("devserver: the search attribute probe (%s) failed: %w", round, err)
	}
	conds := []string{fmt.Sprintf("WorkflowId = '%s'", id), "ExecutionStatus = 'Completed'"}
	for _, name := range slices.Sorted(maps.Keys(sas)) {
		conds = append(conds, name+" IS NOT NULL")
	}
	query := strings.Join(conds, " AND ")
	return poll(ctx, "the search attribute probe ("+round+") to be listed", func(ctx context.Context) error {
		resp, err := c.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Namespace: s.namespace, Query: query})
		switch {
		case err != nil:
			return retryable{err}
		case resp.GetCount() != 1:
			return retryable{fmt.Errorf("%d workflows match %s", resp.GetCount(), query)}
		}
		return nil
	})
}

// probeValues returns a value of the right type for every attribute of sas.
func probeValues(sas map[string]enums.IndexedValueType, word string) []temporal.SearchAttributeUpdate {
	out := make([]temporal.SearchAttributeUpdate, 0, len(sas))
	for _, name := range slices.Sorted(maps.Keys(sas)) {
		switch sas[name] {
		case enums.INDEXED_VALUE_TYPE_TEXT:
			out = append(out, temporal.NewSearchAttributeKeyString(name).ValueSet(word))
		case enums.INDEXED_VALUE_TYPE_INT:
			out = append(out, temporal.NewSearchAttributeKeyInt64(name).ValueSet(int64(len(word))))
		case enums.INDEXED_VALUE_TYPE_DOUBLE:
			out = append(out, temporal.NewSearchAttributeKeyFloat64(name).ValueSet(float64(len(word))))
		case enums.INDEXED_VALUE_TYPE_BOOL:
			out = append(out, temporal.NewSearchAttributeKeyBool(name).ValueSet(word == "upserted"))
		case enums.INDEXED_VALUE_TYPE_DATETIME:
			out = append(out, temporal.NewSearchAttributeKeyTime(name).ValueSet(time.Unix(int64(len(word)), 0)))
		case enums.INDEXED_VALUE_TYPE_KEYWORD_LIST:
			out = append(out, temporal.NewSearchAttributeKeyKeywordList(name).ValueSet([]string{word}))
		default:
			out = append(out, temporal.NewSearchAttributeKeyKeyword(name).ValueSet(word))
		}
	}
	return out
}
