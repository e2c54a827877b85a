package devserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
)

// pollInterval is how often start-up probes are repeated until they pass.
const pollInterval = 50 * time.Millisecond

// awaitReady returns once the frontend answers, the namespace is registered and
// every search attribute in sas is registered with its type and visible to the
// frontend's queries.
func (s *Server) awaitReady(ctx context.Context, sas map[string]enums.IndexedValueType) error {
	var c client.Client
	defer func() {
		if c != nil {
			c.Close()
		}
	}()
	err := poll(ctx, "the frontend to answer at "+s.frontend, func(ctx context.Context) error {
		if c == nil {
			copts := client.Options{
				HostPort:  s.frontend,
				Namespace: s.namespace,
				Logger:    sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler)),
			}
			if s.tls != nil {
				tc, err := s.tls.ClientTLS()
				if err != nil {
					return halt{err}
				}
				copts.ConnectionOptions.TLS = tc
			}
			var err error
			c, err = client.DialContext(ctx, copts)
			if err != nil {
				return err
			}
		}
		_, err := c.CheckHealth(ctx, &client.CheckHealthRequest{})
		return err
	})
	if err != nil {
		return err
	}
	err = poll(ctx, "namespace "+s.namespace+" to be registered", func(ctx context.Context) error {
		_, err := c.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: s.namespace})
		return err
	})
	if err != nil {
		return err
	}
	if len(sas) > 0 {
		if err := registerSearchAttributes(ctx, c, s.namespace, sas); err != nil {
			return err
		}
	}
	return s.settleSearchAttributes(ctx, c, sas)
}

// registerSearchAttributes adds the attributes of sas that namespace lacks
// through the operator service, checks that every one has the requested type,
// and waits until the frontend accepts them all in queries.
func registerSearchAttributes(ctx context.Context, c client.Client, namespace string, sas map[string]enums.IndexedValueType) error {
	names := slices.Sorted(maps.Keys(sas))
	listed, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: namespace})
	if err != nil {
		return fmt.Errorf("devserver: list search attributes of namespace %q: %w", namespace, err)
	}
	missing := map[string]enums.IndexedValueType{}
	for _, name := range names {
		got, ok := listed.GetCustomAttributes()[name]
		switch {
		case !ok:
			missing[name] = sas[name]
		case got != sas[name]:
			return fmt.Errorf("devserver: search attribute %s exists in namespace %q as %s, not %s; rename the attribute or start on a fresh DataDir",
				name, namespace, got, sas[name])
		}
	}
	if len(missing) > 0 {
		_, err := c.OperatorService().AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{
			SearchAttributes: missing,
			Namespace:        namespace,
		})
		if err != nil {
			return fmt.Errorf("devserver: add search attributes %v to namespace %q: %w", slices.Sorted(maps.Keys(missing)), namespace, err)
		}
	}

	// The frontend resolves attribute names through a namespace cache that is
	// refreshed in the background; a query naming every attribute passes once
	// the cache knows them all.
	conds := make([]string, len(names))
	for i, name := range names {
		conds[i] = name + " IS NULL"
	}
	query := strings.Join(conds, " AND ")
	return poll(ctx, "search attributes to become queryable", func(ctx context.Context) error {
		_, err := c.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Namespace: namespace, Query: query})
		if err != nil {
			return retryable{err} // "unknown search attribute" until the cache catches up
		}
		return nil
	})
}

// poll calls probe until it returns nil, a permanent error, or ctx ends.
func poll(ctx context.Context, what string, probe func(context.Context) error) error {
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		attemptCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := probe(attemptCtx)
		cancel()
		if err == nil {
			return nil
		}
		if permanent(err) {
			return fmt.Errorf("devserver: waiting for %s: %w", what, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("devserver: gave up waiting for %s (%w); last error: %w; see the server log (Options.Logger) or allow more time",
				what, context.Cause(ctx), err)
		case <-t.C:
		}
	}
}

// retryable marks a probe error that poll must retry even if it looks permanent.
type retryable struct{ error }

func (r retryable) Unwrap() error { return r.error }

// halt marks a probe error that ends polling at once.
type halt struct{ error }

func (h halt) Unwrap() error { return h.error }

// permanent reports errors that retrying cannot fix.
func permanent(err error) bool {
	var r retryable
	if errors.As(err, &r) {
		return false
	}
	var h halt
	if errors.As(err, &h) {
		return true
	}
	var invalid *serviceerror.InvalidArgument
	var denied *serviceerror.PermissionDenied
	var failed *serviceerror.FailedPrecondition
	return errors.As(err, &invalid) || errors.As(err, &denied) || errors.As(err, &failed)
}
