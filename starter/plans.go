package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"go.temporal.io/sdk/client"

	"github.com/agentsaga/agentsaga/config"
	"github.com/agentsaga/agentsaga/demotools"
	"github.com/agentsaga/agentsaga/plan"
	"github.com/agentsaga/agentsaga/sagaclient"
	"github.com/agentsaga/agentsaga/workflows"
)

// conn holds the flags every Temporal command shares.
type conn struct {
	temporal config.Temporal
	uiURL    string
	json     bool
}

func (c *conn) register(fs *flag.FlagSet) {
	c.temporal.Register(fs)
	fs.StringVar(&c.uiURL, "ui", "http://127.0.0.1:8233", "Temporal UI base URL, for links")
	fs.BoolVar(&c.json, "json", false, "print JSON")
}

func (c *conn) dial() (*sagaclient.Client, func(), error) {
	opts, err := c.temporal.ClientOptions()
	if err != nil {
		return nil, nil, usageErr("%v", err)
	}
	opts.Logger = quietLogger()
	tc, err := client.Dial(opts)
	if err != nil {
		return nil, nil, fmt.Errorf("connect to Temporal at %s: %w (start one with `go run ./worker --dev`, or set --address)", c.temporal.Address, err)
	}
	return sagaclient.New(tc, sagaclient.Options{TaskQueue: c.temporal.TaskQueue, Catalog: demotools.Specs()}), tc.Close, nil
}

func (c *conn) link(workflowID string) string {
	return fmt.Sprintf("%s/namespaces/%s/workflows/%s", strings.TrimRight(c.uiURL, "/"), c.temporal.Namespace, workflowID)
}

func cmdRun(ctx context.Context, args []string, stdin io.Reader, out io.Writer) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	var c conn
	c.register(fs)
	file := fs.String("plan", "", "plan JSON file, or - for standard input")
	wait := fs.Bool("wait", false, "wait for the plan to finish and print its final status")
	if _, err := parse(fs, args); err != nil {
		return err
	}
	if *file == "" {
		return usageErr("run: --plan FILE|- is required")
	}
	r := stdin
	if *file != "-" {
		f, err := os.Open(*file)
		if err != nil {
			return usageErr("run: open plan: %v", err)
		}
		defer f.Close()
		r = f
	}
	p, err := plan.Parse(r)
	if err != nil {
		return usageErr("%v", err)
	}
	if err := p.Validate(demotools.Specs()); err != nil {
		return usageErr("%v", err)
	}
	sc, closeFn, err := c.dial()
	if err != nil {
		return err
	}
	defer closeFn()
	started, err := sc.Start(ctx, p)
	var conflict *sagaclient.ConflictError
	if errors.As(err, &conflict) {
		return usageErr("%v", err)
	}
	if err != nil {
		return err
	}
	if !*wait {
		if c.json {
			return printJSON(out, map[string]string{"workflow_id": started.WorkflowID, "run_id": started.RunID, "plan_fingerprint": started.PlanFingerprint, "ui": c.link(started.WorkflowID)})
		}
		fmt.Fprintf(out, "workflow %s\nrun      %s\nui       %s\n", started.WorkflowID, started.RunID, c.link(started.WorkflowID))
		return nil
	}
	st, err := sc.Wait(ctx, started.WorkflowID)
	if err != nil {
		return err
	}
	if err := printStatus(out, st, c.json); err != nil {
		return err
	}
	if st.State != workflows.SagaSucceeded {
		return &exitError{code: 1, err: fmt.Errorf("plan %s ended %s", st.WorkflowID, st.State)}
	}
	return nil
}

func cmdStatus(ctx context.Context, args []string, _ io.Reader, out io.Writer) error {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	var c conn
	c.register(fs)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageErr("status: give one workflow ID, like agent-plan:sess-1:1")
	}
	sc, closeFn, err := c.dial()
	if err != nil {
		return err
	}
	defer closeFn()
	st, err := sc.Status(ctx, pos[0])
	if err != nil {
		return err
	}
	return printStatus(out, st, c.json)
}

func printStatus(out io.Writer, st workflows.Status, asJSON bool) error {
	if asJSON {
		return printJSON(out, st)
	}
	fmt.Fprintf(out, "plan %s  state %s  fingerprint %.12s\n", st.WorkflowID, st.State, st.PlanFingerprint)
	if st.Error != "" {
		fmt.Fprintf(out, "error: %s\n", st.Error)
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "STEP\tKEY\tCLASS\tSTATE\tATTEMPTS\tEXTERNAL ID\tWAITING\tCOMPENSATION\tLAST ERROR")
	for _, s := range st.Steps {
		comp := ""
		if s.Compensation != nil {
			comp = fmt.Sprintf("%s %s", s.Compensation.State, s.Compensation.ExternalID)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", s.Step, s.Key, s.Class, s.State, s.Attempts, s.ExternalID, s.Waiting, comp, s.LastError)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, s := range st.Steps {
		for _, d := range s.Decisions {
			verdict := string(d.Outcome)
			if d.Kind == workflows.SignalApprove {
				verdict = map[bool]string{true: "approved", false: "rejected"}[d.Approved]
			}
			if d.Refused != "" {
				verdict = "REFUSED: " + d.Refused
			}
			fmt.Fprintf(out, "step %d %s by %s at %s: %s %s\n", s.Step, d.Kind, d.By, d.At.Format("2006-01-02 15:04:05"), verdict, d.Note)
		}
	}
	return nil
}

func cmdApprove(ctx context.Context, args []string, _ io.Reader, out io.Writer) error {
	fs := flag.NewFlagSet("approve", flag.ContinueOnError)
	var c conn
	c.register(fs)
	stepN := fs.Int("step", 0, "step number (from 1)")
	by := fs.String("by", "", "who decides (required)")
	reject := fs.Bool("reject", false, "reject instead of approve")
	reason := fs.String("reason", "", "why")
	fp := fs.String("fingerprint", "", "the step fingerprint you approve (default: the step's current one, read from status)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || *stepN < 1 || *by == "" {
		return usageErr("approve: usage: approve ID --step N --by NAME [--reject --reason TEXT]")
	}
	sc, closeFn, err := c.dial()
	if err != nil {
		return err
	}
	defer closeFn()
	sig := workflows.ApproveSignal{Step: *stepN, Fingerprint: *fp, By: *by, Approved: !*reject, Reason: *reason}
	if err := sc.Approve(ctx, pos[0], sig); err != nil {
		return err
	}
	return done(out, c.json, "signal approve sent", pos[0], *stepN)
}

func cmdResolve(ctx context.Context, args []string, _ io.Reader, out io.Writer) error {
	fs := flag.NewFlagSet("resolve", flag.ContinueOnError)
	var c conn
	c.register(fs)
	stepN := fs.Int("step", 0, "step number (from 1)")
	by := fs.String("by", "", "who decides (required)")
	outcome := fs.String("outcome", "", "succeeded, failed or retry")
	ext := fs.String("external-id", "", "the provider's id, when the effect is known to exist")
	note := fs.String("note", "", "why")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	o := workflows.Outcome(*outcome)
	if len(pos) != 1 || *stepN < 1 || *by == "" || (o != workflows.OutcomeSucceeded && o != workflows.OutcomeFailed && o != workflows.OutcomeRetry) {
		return usageErr("resolve: usage: resolve ID --step N --outcome succeeded|failed|retry --by NAME [--external-id X] [--note TEXT]")
	}
	sc, closeFn, err := c.dial()
	if err != nil {
		return err
	}
	defer closeFn()
	if err := sc.Resolve(ctx, pos[0], workflows.ResolveSignal{Step: *stepN, Outcome: o, ExternalID: *ext, By: *by, Note: *note}); err != nil {
		return err
	}
	return done(out, c.json, "signal resolve sent", pos[0], *stepN)
}

func done(out io.Writer, asJSON bool, what, id string, stepN int) error {
	if asJSON {
		return printJSON(out, map[string]any{"ok": true, "workflow_id": id, "step": stepN, "message": what})
	}
	fmt.Fprintf(out, "%s to %s step %d; check it with `starter status %s`\n", what, id, stepN, id)
	return nil
}

func cmdEscalations(ctx context.Context, args []string, _ io.Reader, out io.Writer) error {
	fs := flag.NewFlagSet("escalations", flag.ContinueOnError)
	var c conn
	c.register(fs)
	if _, err := parse(fs, args); err != nil {
		return err
	}
	sc, closeFn, err := c.dial()
	if err != nil {
		return err
	}
	defer closeFn()
	list, err := sc.Escalations(ctx)
	if err != nil {
		return err
	}
	if c.json {
		if list == nil {
			list = []sagaclient.Escalation{}
		}
		return printJSON(out, list)
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKFLOW\tSTATE\tSTEP\tKEY\tWAITING FOR\tLAST ERROR")
	for _, e := range list {
		for _, s := range e.Steps {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", e.WorkflowID, e.State, s.Step, s.Key, s.Waiting, s.LastError)
		}
		if len(e.Steps) == 0 {
			fmt.Fprintf(tw, "%s\t%s\t\t\t\t\n", e.WorkflowID, e.State)
		}
	}
	return tw.Flush()
}
