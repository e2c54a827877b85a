package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"text/tabwriter"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	namespacepb "go.temporal.io/api/namespace/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/agentsaga/agentsaga/sagaworker"
)

// Retention bounds for `cluster setup`: plans wait up to a day for a
// person, and the audit lives in the ledger, so history need not be kept
// for long; Temporal refuses under a day.
const (
	defaultRetention = 30 * 24 * time.Hour
	minRetention     = 24 * time.Hour
	maxRetention     = 3650 * 24 * time.Hour
)

// setupRow is one thing `cluster setup` checked, and what it did.
type setupRow struct {
	What   string `json:"what"`
	Want   string `json:"want"`
	Found  string `json:"found"`
	Action string `json:"action"` // created, added, ok, kept, updated
}

// cmdCluster prepares a Temporal cluster for agentsaga: the namespace with
// its retention and the search attributes, each checked against what
// exists, so it can be run again (and on a cluster someone else set up).
func cmdCluster(ctx context.Context, args []string, _ io.Reader, out io.Writer) error {
	sub, err := subcommands("cluster", args, out, "setup", "certs")
	if err != nil {
		return err
	}
	if sub == "certs" {
		return clusterCerts(args[1:], out, wantsJSON(args[1:]))
	}
	fs := flag.NewFlagSet("cluster setup", flag.ContinueOnError)
	var c conn
	c.register(fs)
	retention := fs.Duration("retention", defaultRetention, "how long Temporal keeps a closed plan's history (a new namespace gets it; at least 24h, at most 3650 days)")
	update := fs.Bool("update-retention", false, "change an existing namespace's retention to --retention (without it a different one is reported and kept)")
	pos, err := parse(fs, args[1:], out)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageErr("cluster setup: takes no arguments (see starter cluster setup --help)")
	}
	if *retention < minRetention || *retention > maxRetention {
		return usageErr("cluster setup: --retention %v is out of range: give 24h to %v", *retention, maxRetention)
	}
	opts, err := c.temporal.ClientOptions()
	if err != nil {
		return usageErr("%v", err)
	}
	opts.Logger = quietLogger()
	opts.Namespace = "" // the namespace may not exist yet
	tc, err := client.Dial(opts)
	if err != nil {
		return fmt.Errorf("connect to Temporal at %s: %w (set --address, and TLS or an API key as the cluster needs)", c.temporal.Address, err)
	}
	defer tc.Close()
	rows, err := setupCluster(ctx, tc, c.temporal.Namespace, *retention, *update)
	if c.json {
		if perr := printJSON(out, rows); perr != nil {
			return perr
		}
	} else {
		tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "WHAT\tWANT\tFOUND\tDONE")
		for _, r := range rows {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", safe(r.What), safe(r.Want), safe(r.Found), r.Action)
		}
		_ = tw.Flush()
	}
	return err
}

// setupCluster makes namespace (with retention) and the search attributes
// exist, and reports each as it found and left it. A search attribute that
// exists with another type is an error: a plan's state could not be listed.
func setupCluster(ctx context.Context, tc client.Client, namespace string, retention time.Duration, update bool) ([]setupRow, error) {
	var rows []setupRow
	want := retention.String()
	desc, err := tc.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: namespace})
	var notFound *serviceerror.NamespaceNotFound
	switch {
	case errors.As(err, &notFound):
		_, err = tc.WorkflowService().RegisterNamespace(ctx, &workflowservice.RegisterNamespaceRequest{
			Namespace: namespace, WorkflowExecutionRetentionPeriod: durationpb.New(retention),
			Description: "agentsaga: AI-agent plans with at most one effect per intent",
		})
		var exists *serviceerror.NamespaceAlreadyExists
		if err != nil && !errors.As(err, &exists) {
			return rows, fmt.Errorf("register namespace %s: %w (the caller needs the cluster's admin rights; or ask its owner to create it)", namespace, err)
		}
		rows = append(rows, setupRow{What: "namespace " + namespace + " retention", Want: want, Found: "absent", Action: "created"})
	case err != nil:
		return rows, fmt.Errorf("describe namespace %s: %w", namespace, err)
	default:
		have := desc.GetConfig().GetWorkflowExecutionRetentionTtl().AsDuration()
		row := setupRow{What: "namespace " + namespace + " retention", Want: want, Found: have.String(), Action: "ok"}
		if have != retention {
			row.Action = "kept (give --update-retention to change it)"
			if update {
				_, err := tc.WorkflowService().UpdateNamespace(ctx, &workflowservice.UpdateNamespaceRequest{
					Namespace: namespace, Config: &namespacepb.NamespaceConfig{WorkflowExecutionRetentionTtl: durationpb.New(retention)},
				})
				if err != nil {
					return append(rows, row), fmt.Errorf("update retention of %s: %w", namespace, err)
				}
				row.Action = "updated"
			}
		}
		rows = append(rows, row)
	}

	have, err := listSearchAttributes(ctx, tc, namespace)
	if err != nil {
		return rows, err
	}
	var wrong []string
	missing := map[string]enumspb.IndexedValueType{}
	for _, name := range sortedAttrs() {
		typ := sagaworker.SearchAttributes[name]
		row := setupRow{What: "search attribute " + name, Want: typ.String(), Found: "absent", Action: "added"}
		if got, ok := have[name]; ok {
			row.Found = got.String()
			row.Action = "ok"
			if got != typ {
				row.Action = "WRONG TYPE"
				wrong = append(wrong, fmt.Sprintf("%s is %s, agentsaga needs %s", name, got, typ))
			}
		} else {
			missing[name] = typ
		}
		rows = append(rows, row)
	}
	if len(missing) > 0 {
		_, err := tc.OperatorService().AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{Namespace: namespace, SearchAttributes: missing})
		var exists *serviceerror.AlreadyExists
		if err != nil && !errors.As(err, &exists) {
			return rows, fmt.Errorf("add search attributes to %s: %w (the caller needs the operator API; or add them with `temporal operator search-attribute create`)", namespace, err)
		}
	}
	if len(wrong) > 0 {
		return rows, fmt.Errorf("namespace %s: %v: remove and recreate those search attributes, or use another namespace", namespace, wrong)
	}
	return rows, nil
}

// listSearchAttributes returns the namespace's custom search attributes; a
// namespace just registered may take a moment to be known to the operator
// API, so NotFound is asked again until ctx ends.
func listSearchAttributes(ctx context.Context, tc client.Client, namespace string) (map[string]enumspb.IndexedValueType, error) {
	for {
		resp, err := tc.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: namespace})
		if err == nil {
			return resp.GetCustomAttributes(), nil
		}
		var nf *serviceerror.NamespaceNotFound
		if !errors.As(err, &nf) {
			return nil, fmt.Errorf("list search attributes of %s: %w", namespace, err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("list search attributes of %s: the new namespace is not known yet: %w", namespace, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func sortedAttrs() []string {
	var names []string
	for n := range sagaworker.SearchAttributes {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
