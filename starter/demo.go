package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/agentsaga/agentsaga/internal/cli"
	"github.com/agentsaga/agentsaga/internal/demo"
	"github.com/agentsaga/agentsaga/internal/devstack"
)

func cmdDemo(ctx context.Context, args []string, _ io.Reader, out io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	keep := fs.Bool("ui", false, "keep the server, UI, sandbox and worker up afterwards (Ctrl-C stops)")
	asJSON := fs.Bool("json", false, "print the report as JSON (errors too, on standard error)")
	pos, err := parse(fs, args, out)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageErr("demo: takes no arguments (see starter demo --help)")
	}
	if !*asJSON {
		fmt.Fprintln(out, "starting an embedded Temporal server, the Web UI, the sandbox providers and a worker ...")
	}
	st, err := devstack.Start(ctx, devstack.Options{})
	if err != nil {
		return err
	}
	defer st.Close()
	rep, err := demo.Run(ctx, st)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	if *asJSON {
		if err := printJSON(out, rep); err != nil {
			return err
		}
	} else {
		printReport(out, rep)
	}
	if *keep {
		fmt.Fprintf(out, "\nTemporal UI: %s  (Temporal %s; sandbox %s)\nCtrl-C stops.\n", st.Server.UIURL(), st.Server.FrontendAddr(), st.SandboxURL)
		<-ctx.Done()
	}
	if !rep.OK {
		return cli.Exit(1, fmt.Errorf("demo: a count did not match what the story promises (see FAIL above)"))
	}
	return nil
}

func printReport(out io.Writer, rep demo.Report) {
	for _, s := range rep.Stories {
		fmt.Fprintf(out, "\n(%s) %s\n    workflow %s", safe(s.Name), safe(s.Title), safe(s.WorkflowID))
		if s.State != "" {
			fmt.Fprintf(out, "  state %s", safe(string(s.State)))
		}
		fmt.Fprintln(out)
		for _, st := range s.Steps {
			fmt.Fprintf(out, "    %-40s %-12s attempts %d  %s", safe(st.Key), safe(string(st.State)), st.Attempts, safe(st.ExternalID))
			if st.Compensation != "" {
				fmt.Fprintf(out, "  storno %s", safe(string(st.Compensation)))
			}
			fmt.Fprintln(out)
		}
		for _, n := range s.Notes {
			fmt.Fprintf(out, "    note: %s\n", safe(n))
		}
		for _, c := range s.Checks {
			mark := "ok  "
			if !c.OK {
				mark = "FAIL"
			}
			fmt.Fprintf(out, "    %s %s: want %s, got %s\n", mark, safe(c.What), safe(c.Want), safe(c.Got))
		}
	}
	verdict := "every count matches the providers' stores"
	if !rep.OK {
		verdict = "SOME COUNTS DO NOT MATCH"
	}
	fmt.Fprintf(out, "\nresult: %s; UI was at %s\n", verdict, safe(rep.UI))
}
