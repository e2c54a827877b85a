package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/agentsaga/agentsaga/config"
	"github.com/agentsaga/agentsaga/internal/sandbox"
	"github.com/agentsaga/agentsaga/redact"
)

func cmdSandbox(ctx context.Context, args []string, _ io.Reader, out io.Writer) error {
	sub, err := subcommands("sandbox", args, out, "effects", "fault", "serve")
	if err != nil {
		return err
	}
	fs := flag.NewFlagSet("sandbox "+sub, flag.ContinueOnError)
	base := fs.String("sandbox-url", envOr(config.EnvSandboxURL, "http://127.0.0.1:8090"), "sandbox base URL (env "+config.EnvSandboxURL+")")
	asJSON := fs.Bool("json", false, "print JSON (errors too, on standard error)")
	var tokenDir *string
	if sub != "serve" {
		tokenDir = fs.String("data-dir", config.DefaultDataDir(), "where the admin token file is, as `sandbox serve --data-dir` or worker --dev wrote it (env "+config.EnvDataDir+"; env "+config.EnvSandboxToken+" wins when set)")
	}
	switch sub {
	case "effects":
		provider := fs.String("provider", "", "one provider: orders, payments, crm, accounting, mail (default all)")
		if _, err := parse(fs, args[1:], out); err != nil {
			return err
		}
		effects, err := sandboxClient(*base, *tokenDir).Effects(ctx, *provider)
		if err != nil {
			return fmt.Errorf("read effects from %s: %w (is the sandbox running? `go run ./worker --dev` starts one)", *base, err)
		}
		if *asJSON {
			if effects == nil {
				effects = []sandbox.Effect{}
			}
			return printJSON(out, effects)
		}
		tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "PROVIDER\tKIND\tID\tKEY\tREVERSES\tAMOUNT\tSTATUS\tCREATED")
		for _, e := range effects {
			amount := ""
			if e.Currency != "" {
				amount = fmt.Sprintf("%d %s", e.AmountMinor, e.Currency)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", safe(string(e.Provider)), safe(string(e.Kind)), safe(e.ID), safe(e.Key), safe(e.Reverses), safe(amount), safe(string(e.Status)), e.CreatedAt.Format(time.RFC3339))
		}
		return tw.Flush()
	case "fault":
		var f sandbox.FaultSpec
		kind := fs.String("kind", "", "commit_then_drop, drop_before_commit, delay, http_503, http_429, reject, lookup_unavailable, lookup_lag, slow_commit (with --delay), visibility_lag (with --delay)")
		fs.StringVar(&f.Op, "op", "", "operation, such as refunds.create (GET /admin/ops lists them)")
		fs.IntVar(&f.Count, "count", 1, "how many requests it affects (-1: until cleared)")
		fs.DurationVar(&f.Delay, "delay", 0, "for kind delay: how long; slow_commit: how long after the request the write commits; visibility_lag: how long a fresh effect stays hidden")
		fs.IntVar(&f.Status, "status", 0, "for kind reject: the 4xx status")
		fs.StringVar(&f.Code, "code", "", "for kind reject: the error code")
		clear := fs.Bool("clear", false, "clear every pending fault instead")
		if _, err := parse(fs, args[1:], out); err != nil {
			return err
		}
		c := sandboxClient(*base, *tokenDir)
		if *clear {
			if err := c.ClearFaults(ctx); err != nil {
				return err
			}
			if *asJSON {
				return printJSON(out, map[string]any{"ok": true, "sandbox_url": *base, "message": "faults cleared"})
			}
			fmt.Fprintf(out, "faults cleared at %s\n", safe(*base))
			return nil
		}
		f.Fault = sandbox.FaultKind(*kind)
		if err := f.Validate(); err != nil {
			return usageErr("sandbox fault: %v", err)
		}
		if err := c.Fault(ctx, f); err != nil {
			return fmt.Errorf("add fault at %s: %w", *base, err)
		}
		if *asJSON {
			return printJSON(out, f)
		}
		fmt.Fprintf(out, "fault %s on %s for %d call(s)\n", safe(string(f.Fault)), safe(f.Op), f.Count)
		return nil
	case "serve":
		addr := fs.String("addr", "127.0.0.1:8090", "listen address")
		dir := fs.String("data-dir", envOr(config.EnvDataDir, ""), "keep the providers' SQLite files here (default in memory)")
		tokenFile := fs.String("token-file", "", "write the admin API's token here, mode 0600 (default <data-dir>/"+sandbox.TokenFileName+", where `starter sandbox` looks; with env "+config.EnvSandboxToken+" set, that token is used and no file written)")
		if _, err := parse(fs, args[1:], out); err != nil {
			return err
		}
		token, where := os.Getenv(config.EnvSandboxToken), "env "+config.EnvSandboxToken
		if token == "" {
			var err error
			if token, err = sandbox.NewToken(); err != nil {
				return err
			}
			where = *tokenFile
			if where == "" {
				d := *dir
				if d == "" {
					d = config.DefaultDataDir()
				}
				if err := os.MkdirAll(d, 0o750); err != nil {
					return fmt.Errorf("sandbox serve: make %s for the token file: %w (or give --token-file)", d, err)
				}
				where = filepath.Join(d, sandbox.TokenFileName)
			}
			if err := sandbox.WriteTokenFile(where, token); err != nil {
				return fmt.Errorf("sandbox serve: %w (give another --token-file)", err)
			}
		}
		log := slog.New(redact.NewHandler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})))
		return sandbox.Serve(ctx, sandbox.Options{Addr: *addr, Dir: *dir, Logger: log, Token: token}, func(s *sandbox.Sandbox) {
			fmt.Fprintf(out, "sandbox providers at %s (admin %s/admin, token in %s)\n", s.BaseURL(), s.BaseURL(), where)
		})
	}
	return usageErr("sandbox: unknown subcommand %q: give effects, fault or serve", sub)
}

// sandboxClient is an admin client of the sandbox at base with its token:
// env AGENTSAGA_SANDBOX_TOKEN, else the token file worker --dev (or
// `sandbox serve`) keeps in the data directory dir (--data-dir).
func sandboxClient(base, dir string) *sandbox.Client {
	c := sandbox.NewClient(base, nil)
	if os.Getenv(config.EnvSandboxToken) != "" {
		return c
	}
	if tok, err := sandbox.ReadTokenFile(filepath.Join(dir, sandbox.TokenFileName)); err == nil {
		return c.WithToken(tok)
	}
	return c
}
