package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/agentsaga/agentsaga/codec"
	"github.com/agentsaga/agentsaga/config"
	"github.com/agentsaga/agentsaga/operators"
	"github.com/agentsaga/agentsaga/plan"
	"github.com/agentsaga/agentsaga/sagaclient"
	"github.com/agentsaga/agentsaga/workflows"
	"path/filepath"

	"github.com/agentsaga/agentsaga/catalog"
	"github.com/agentsaga/agentsaga/tool"
)

// Environment variables the starter reads besides config's.
const (
	// envOperatorKey is the operator's private key file, for signing.
	envOperatorKey = "AGENTSAGA_OPERATOR_KEY"
)

// defaultUIURL is where `worker --dev` serves the Web UI.
var defaultUIURL = "http://127.0.0.1:" + strconv.Itoa(config.DefaultUIPort)

// now is the starter's clock; tests replace it.
var now = time.Now

// conn holds the flags every Temporal command shares.
type conn struct {
	temporal config.Temporal
	uiURL    string
	json     bool
	tools    []string // catalogue files (--tools)
}

func (c *conn) register(fs *flag.FlagSet) {
	c.temporal.Register(fs)
	fs.Func("tools", "a tool catalogue file the worker runs (YAML, see catalog/), to check plans against before they are sent and to serve over MCP; repeatable (env "+catalog.EnvTools+"; without it the workflow checks the tools' args, and mcp needs it or Go tools)", func(v string) error {
		c.tools = append(c.tools, v)
		return nil
	})
	fs.StringVar(&c.uiURL, "ui-url", os.Getenv(config.EnvUIURL), "Temporal Web UI base URL, for links (env "+config.EnvUIURL+"; default the address worker --dev wrote in its data directory, else "+defaultUIURL+")")
	fs.BoolVar(&c.json, "json", false, "print JSON (errors too, on standard error)")
}

func (c *conn) dial(ctx context.Context, key *operators.Key) (*sagaclient.Client, func(), error) {
	opts, err := c.temporal.ClientOptions()
	if err != nil {
		return nil, nil, usageErr("%v", err)
	}
	opts.Logger = quietLogger()
	cd, _, err := c.temporal.Codec()
	if err != nil {
		return nil, nil, usageErr("%v", err)
	}
	if cd.Enabled() {
		// Encrypted payloads do not compress: gzip would only cost both
		// ends CPU (most of a long list's bytes are memos).
		opts.ConnectionOptions.GrpcCompression = &client.GrpcCompressionNone{}
	}
	tc, err := client.Dial(opts)
	if err != nil {
		return nil, nil, fmt.Errorf("connect to Temporal at %s: %w (start one with `go run ./worker --dev`, or set --address)", c.temporal.Address, err)
	}
	// Payloads are encrypted with the keyring config finds (--codec-keys,
	// AGENTSAGA_CODEC_KEYS_FILE, AGENTSAGA_CODEC_KEYS, or worker --dev's
	// under the data directory); sagaclient reads the fingerprint memo with
	// the default converter, so it gets memos decoded.
	specs, err := c.specs(ctx)
	if err != nil {
		tc.Close()
		return nil, nil, err
	}
	return sagaclient.New(codec.DecodeMemos(tc, cd), sagaclient.Options{TaskQueue: c.temporal.TaskQueue, Catalog: specs, Key: key}), tc.Close, nil
}

// registry returns the tools of the catalogue files given with --tools (or
// $AGENTSAGA_TOOLS) and the Config's Go tools together, else the Config's
// demo tools; without any it refuses, naming --tools.
func (c *conn) registry(ctx context.Context) (*tool.Registry, error) {
	return toolRegistry(ctx, c.tools)
}

// toolRegistry is conn.registry for commands without a conn.
func toolRegistry(ctx context.Context, files []string) (*tool.Registry, error) {
	cfg := configFrom(ctx)
	if len(files) == 0 {
		files = filepath.SplitList(os.Getenv(catalog.EnvTools))
	}
	if len(files) == 0 && len(cfg.Tools) == 0 {
		if cfg.DemoTools == nil {
			return nil, usageErr("no tools: give --tools FILE, a tool catalogue of your APIs (env %s)", catalog.EnvTools)
		}
		return cfg.DemoTools()
	}
	reg, err := catalog.Tools(files, cfg.Tools...)
	if err != nil {
		return nil, usageErr("%w", err)
	}
	return reg, nil
}

// specs returns the specs plans are checked against before they are sent:
// those of the catalogue given with --tools (or $AGENTSAGA_TOOLS) and the
// Config's Go tools; nil without any, so a plan for tools this command does
// not know is left to the workflow, which checks it against the worker's
// own tools and names every field.
func (c *conn) specs(ctx context.Context) (tool.Catalog, error) {
	if len(c.tools) == 0 && os.Getenv(catalog.EnvTools) == "" && len(configFrom(ctx).Tools) == 0 {
		return nil, nil
	}
	reg, err := c.registry(ctx)
	if err != nil {
		return nil, err
	}
	return reg.Specs(), nil
}

func (c *conn) link(workflowID string) string {
	ui := c.uiURL
	if ui == "" {
		dir := c.temporal.DataDir
		if dir == "" {
			dir = config.DefaultDataDir()
		}
		if ui = config.DevUIURL(dir); ui == "" {
			ui = defaultUIURL
		}
	}
	return fmt.Sprintf("%s/namespaces/%s/workflows/%s", strings.TrimRight(ui, "/"), url.PathEscape(c.temporal.Namespace), url.PathEscape(workflowID))
}

// requestIDNamespace scopes minted request IDs (UUIDv5) to agentsaga.
var requestIDNamespace = uuid.NewSHA1(uuid.NameSpaceURL, []byte("https://github.com/agentsaga/agentsaga/request_id"))

// mintRequestID gives a plan without request_id one: a UUID derived from the
// workflow ID and the plan fingerprint (version 5), so running the same plan
// again attaches to the same run under the same request ID instead of
// printing a new one that nothing carries.
func mintRequestID(p *plan.Plan) (bool, error) {
	if p.RequestID != "" {
		return false, nil
	}
	fp, err := p.Fingerprint()
	if err != nil {
		return false, err
	}
	p.RequestID = uuid.NewSHA1(requestIDNamespace, []byte(p.WorkflowID()+"\n"+fp)).String()
	return true, nil
}

// readPlanContext reads, validates and completes the plan of `run` without
// any connection. It reads at most the plan size limit + 1 byte (a plan
// over the limit exits 2 naming it, so --plan /dev/zero ends at once) and
// returns when ctx ends (Ctrl-C, SIGTERM), also while a fifo or a terminal
// has nothing to give.
func readPlanContext(ctx context.Context, file string, stdin io.Reader, specs tool.Catalog) (plan.Plan, bool, error) {
	limits := plan.DefaultLimits()
	var (
		data []byte
		err  error
	)
	if file == "-" {
		data, err = plan.ReadLimited(ctx, stdin, limits.MaxPlanBytes)
	} else {
		data, err = plan.ReadFile(ctx, file, limits.MaxPlanBytes)
	}
	switch {
	case errors.Is(err, plan.ErrTooLarge):
		return plan.Plan{}, false, usageErr("run: the plan is over the plan size limit of %d bytes (max_plan_bytes): split it into several turns", limits.MaxPlanBytes)
	case err != nil && ctx.Err() != nil:
		return plan.Plan{}, false, &exitError{code: 1, err: fmt.Errorf("run: reading the plan was interrupted: %w", err)}
	case err != nil:
		return plan.Plan{}, false, usageErr("run: read the plan: %v", err)
	}
	p, err := plan.ParseBytes(data, limits)
	if err != nil {
		return plan.Plan{}, false, usageErr("%v", err)
	}
	if specs == nil {
		// No catalogue given: the strict parse and the plan's own limits
		// here, the tools' checks in the workflow.
		if err := p.Validate(nil); err != nil {
			return plan.Plan{}, false, usageErr("%v", err)
		}
	} else if err := p.Validate(specs); err != nil {
		return plan.Plan{}, false, usageErr("%v", err)
	}
	minted, err := mintRequestID(&p)
	if err != nil {
		return plan.Plan{}, false, usageErr("%v", err)
	}
	return p, minted, nil
}

func cmdRun(ctx context.Context, args []string, stdin io.Reader, out io.Writer) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	var c conn
	c.register(fs)
	file := fs.String("plan", "", "plan JSON file, or - for standard input (required)")
	wait := fs.Bool("wait", false, "wait for the plan to finish and print its final status; exit 1 unless it succeeded")
	checkWait := fs.Duration("check-wait", 30*time.Second, "how long to wait for a worker to check the plan against its tools (exit 2 when it refuses it; the refused plan's session and turn stay free); 0 does not wait")
	pos, err := parse(fs, args, out)
	if err != nil {
		return err
	}
	if *file == "" || len(pos) > 0 {
		return usageErr("run: usage: run --plan FILE|- [--wait]")
	}
	specs, err := c.specs(ctx)
	if err != nil {
		return err
	}
	p, minted, err := readPlanContext(ctx, *file, stdin, specs)
	if err != nil {
		return err
	}
	sc, closeFn, err := c.dial(ctx, nil)
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
	checked := "no worker checked it within --check-wait: it runs once a worker on task queue " + c.temporal.TaskQueue + " takes it"
	if *checkWait > 0 {
		cctx, cancel := context.WithTimeout(ctx, *checkWait)
		err := sc.Checked(cctx, started)
		cancel()
		var refused *sagaclient.RefusedError
		switch {
		case errors.As(err, &refused):
			return usageErr("%v", refused)
		case err == nil:
			checked = "accepted by the worker's tools"
		case ctx.Err() != nil:
			return ctx.Err()
		case !errors.Is(err, context.DeadlineExceeded):
			return err
		}
	}
	if !*wait {
		if c.json {
			return printJSON(out, map[string]any{"workflow_id": started.WorkflowID, "run_id": started.RunID, "plan_fingerprint": started.PlanFingerprint,
				"request_id": p.RequestID, "request_id_minted": minted, "ui": c.link(started.WorkflowID), "checked": checked})
		}
		fmt.Fprintf(out, "workflow   %s\nrun        %s\nrequest id %s%s\nplan       %s\nui         %s\n", safe(started.WorkflowID), safe(started.RunID), safe(p.RequestID),
			map[bool]string{true: " (minted: the plan had none)"}[minted], checked, safe(c.link(started.WorkflowID)))
		return nil
	}
	if !c.json {
		fmt.Fprintf(out, "workflow %s  request id %s  ui %s\n", safe(started.WorkflowID), safe(p.RequestID), safe(c.link(started.WorkflowID)))
	}
	st, err := sc.Wait(ctx, started.WorkflowID)
	var app *temporal.ApplicationError
	if errors.As(err, &app) && strings.HasPrefix(app.Type(), workflows.ErrInvalidPlan) {
		return usageErr("plan %s was refused as invalid, nothing ran (correct it and run it again under the same session and turn): %s", started.WorkflowID, app.Message())
	}
	if err != nil {
		return err
	}
	if err := printStatus(out, st, c.json, now()); err != nil {
		return err
	}
	if st.State != workflows.SagaSucceeded {
		return &exitError{code: 1, err: fmt.Errorf("plan %s ended %s", st.WorkflowID, st.State)}
	}
	return nil
}

func oneID(cmd string, pos []string) error {
	if len(pos) != 1 {
		return usageErr("%s: give one workflow ID, like agent-plan:sess-1:1 (see starter %s --help)", cmd, cmd)
	}
	return nil
}

func cmdStatus(ctx context.Context, args []string, _ io.Reader, out io.Writer) error {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	var c conn
	c.register(fs)
	pos, err := parse(fs, args, out)
	if err != nil {
		return err
	}
	if err := oneID("status", pos); err != nil {
		return err
	}
	sc, closeFn, err := c.dial(ctx, nil)
	if err != nil {
		return err
	}
	defer closeFn()
	st, err := sc.Status(ctx, pos[0])
	var refused *sagaclient.RefusedError
	if errors.As(err, &refused) {
		if c.json {
			return printJSON(out, map[string]any{"workflow_id": refused.WorkflowID, "run_id": refused.RunID, "state": "refused", "error": refused.Reason})
		}
		fmt.Fprintf(out, "plan %s  state refused  run %s\nerror: %s\nNothing ran: the session and turn are free for the corrected plan.\n", safe(refused.WorkflowID), safe(refused.RunID), safe(refused.Reason))
		return nil
	}
	if err != nil {
		return err
	}
	return printStatus(out, st, c.json, now())
}

func printStatus(out io.Writer, st workflows.Status, asJSON bool, at time.Time) error {
	if asJSON {
		return printJSON(out, st)
	}
	fmt.Fprintf(out, "plan %s  state %s  fingerprint %.12s", safe(st.WorkflowID), safe(string(st.State)), safe(st.PlanFingerprint))
	if st.RequestID != "" {
		fmt.Fprintf(out, "  request %s", safe(st.RequestID))
	}
	if st.RunID != "" {
		fmt.Fprintf(out, "  run %s", safe(st.RunID)) // what a signed decision names
	}
	if st.RefusedSignals > 0 {
		fmt.Fprintf(out, "  refused signals %d", st.RefusedSignals)
	}
	fmt.Fprintln(out)
	if st.Error != "" {
		fmt.Fprintf(out, "error: %s\n", safe(st.Error))
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "STEP\tKEY\tCLASS\tSTATE\tATTEMPTS\tEXTERNAL ID\tWAITING\tCOMPENSATION\tLAST ERROR")
	for _, s := range st.Steps {
		comp := ""
		if s.Compensation != nil {
			comp = strings.TrimSpace(fmt.Sprintf("%s %s", s.Compensation.State, s.Compensation.ExternalID))
		}
		waiting := s.Waiting
		if !s.InFlightUntil.IsZero() {
			// The in-flight horizon: an absent lookup answer counts only
			// after it.
			waiting = strings.TrimSpace(waiting + " in-flight until " + s.InFlightUntil.UTC().Format(time.RFC3339))
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", s.Step, safe(s.Key), safe(string(s.Class)), safe(string(s.State)), s.Attempts,
			safe(s.ExternalID), safe(waiting), safe(comp), safe(s.LastError))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, s := range st.Steps {
		for _, d := range s.Decisions {
			fmt.Fprintf(out, "step %d %s\n", s.Step, decisionLine(d))
		}
	}
	for _, q := range st.Questions {
		printQuestion(out, st.WorkflowID, q, at)
	}
	return nil
}

func decisionLine(d workflows.Decision) string {
	verdict := string(d.Outcome)
	if d.Kind == workflows.SignalApprove {
		verdict = map[bool]string{true: "approved", false: "rejected"}[d.Approved]
	}
	if d.ExternalID != "" {
		verdict += " external id " + d.ExternalID
	}
	if d.Refused != "" {
		verdict = "REFUSED: " + d.Refused
	}
	who := d.By + " (unverified)"
	if d.Verified {
		who = d.By + " (verified)"
	}
	line := fmt.Sprintf("%s by %s at %s", safe(d.Kind), safe(who), d.At.UTC().Format(time.RFC3339))
	if d.QuestionID != "" {
		line += " question " + safe(d.QuestionID)
	}
	line += ": " + safe(verdict)
	if d.Note != "" {
		line += " - " + safe(d.Note)
	}
	return line
}

func age(from, at time.Time) string {
	if from.IsZero() {
		return "unknown"
	}
	d := at.Sub(from)
	if d < 0 {
		d = 0
	}
	return d.Round(time.Second).String()
}

// printQuestion prints an open question with its card and the command that
// answers it.
func printQuestion(out io.Writer, workflowID string, q workflows.Question, at time.Time) {
	fmt.Fprintf(out, "\nquestion %s: %s of step %d, open %s", safe(q.ID), safe(q.Kind), q.Step, age(q.OpenedAt, at))
	if !q.ExpiresAt.IsZero() {
		left := q.ExpiresAt.Sub(at).Round(time.Second)
		if left > 0 {
			fmt.Fprintf(out, ", expires in %s (then rejected and compensated)", left)
		} else {
			fmt.Fprint(out, ", expired")
		}
	}
	fmt.Fprintln(out)
	c := q.Card
	row := func(label, v string) {
		if v != "" {
			fmt.Fprintf(out, "  %-12s %s\n", label, safe(v))
		}
	}
	amount := c.Amount
	if c.AmountMinor != 0 || c.Currency != "" {
		amount = strings.TrimSpace(fmt.Sprintf("%s (%d minor units)", c.Amount, c.AmountMinor))
	}
	// The card's lines as every printer words them (Card.Lines), a label
	// repeated (arguments, calls, already ran) printed once.
	last := ""
	for _, l := range c.Lines() {
		v := l.Value
		switch l.Label {
		case "key":
			continue // below, with the question's key when the card has none
		case "amount":
			v = amount
		case "clash":
			v += "  (approving needs --override)"
		}
		label := l.Label
		if label == last {
			label = ""
		} else {
			last = label
		}
		fmt.Fprintf(out, "  %-12s %s\n", label, safe(v))
	}
	key := c.Key
	if key == "" {
		key = q.Key
	}
	row("key", key)
	row("fingerprint", q.Fingerprint)
	row("answers", strings.Join(q.Answers, ", "))
	row("card digest", workflows.CardDigest(q.Card))
	row("decide", answerHint(workflowID, q))
}

func answerHint(workflowID string, q workflows.Question) string {
	base := fmt.Sprintf("--step %d --question %s --key FILE", q.Step, q.ID)
	if q.Kind == workflows.QuestionApproval {
		override := ""
		if q.Card.Clash != "" {
			override = " --override"
		}
		return fmt.Sprintf("starter approve %s %s%s [--reason TEXT]   (or --reject --reason TEXT)", workflowID, base, override)
	}
	return fmt.Sprintf("starter resolve %s %s --outcome %s [--external-id ID] --note TEXT", workflowID, base, outcomes(q))
}

func outcomes(q workflows.Question) string {
	var o []string
	for _, a := range q.Answers {
		if a == string(workflows.OutcomeSucceeded) || a == string(workflows.OutcomeFailed) || a == string(workflows.OutcomeRetry) {
			o = append(o, a)
		}
	}
	if len(o) == 0 {
		return "succeeded|failed|retry"
	}
	return strings.Join(o, "|")
}

// decider holds the flags that say who decides.
type decider struct {
	key     string
	by      string
	timeout time.Duration
}

func (d *decider) register(fs *flag.FlagSet) {
	fs.StringVar(&d.key, "key", os.Getenv(envOperatorKey), "your operator key file (made by starter operator keygen); signs the decision (env "+envOperatorKey+")")
	fs.StringVar(&d.by, "by", "", "who decides, only without --key: the workflow records the name as unverified, and a worker with an operators file refuses it")
	fs.DurationVar(&d.timeout, "timeout", time.Minute, "how long to wait for the workflow's answer")
}

// load checks the identity flags and reads the key, before any connection.
func (d *decider) load(cmd string) (*operators.Key, error) {
	if d.key == "" {
		if d.by == "" {
			return nil, usageErr("%s: say who decides: --key FILE signs the decision (or env %s); --by NAME without a key is recorded as unverified", cmd, envOperatorKey)
		}
		if err := operators.ValidName(d.by); err != nil {
			return nil, usageErr("%s: --by: %v", cmd, err)
		}
		return nil, nil
	}
	k, err := operators.LoadKey(d.key)
	if err != nil {
		return nil, usageErr("%s: --key: %v", cmd, err)
	}
	if d.by != "" && d.by != k.Name {
		return nil, usageErr("%s: --by %q differs from the key's operator %q: a signed decision is made by the key's owner; drop --by", cmd, d.by, k.Name)
	}
	return k, nil
}

// connect reads the decider's key (load), then dials Temporal with it.
func (d *decider) connect(ctx context.Context, c *conn, cmd string) (*operators.Key, *sagaclient.Client, func(), error) {
	key, err := d.load(cmd)
	if err != nil {
		return nil, nil, nil, err
	}
	sc, closeFn, err := c.dial(ctx, key)
	if err != nil {
		return nil, nil, nil, err
	}
	return key, sc, closeFn, nil
}

func cmdApprove(ctx context.Context, args []string, _ io.Reader, out io.Writer) error {
	fs := flag.NewFlagSet("approve", flag.ContinueOnError)
	var c conn
	c.register(fs)
	var d decider
	d.register(fs)
	stepN := fs.Int("step", 0, "step number (from 1); may be left out when --question is given")
	question := fs.String("question", "", "the question id you answer (default: the step's open approval question, read from status)")
	reject := fs.Bool("reject", false, "reject instead of approve: the step fails and the plan compensates")
	override := fs.Bool("override", false, "let the call through the guard clash or suspected duplicate shown on the card (recorded)")
	reason := fs.String("reason", "", "why")
	fp := fs.String("fingerprint", "", "the step fingerprint you approve (default: the question's, read from status)")
	pos, err := parse(fs, args, out)
	if err != nil {
		return err
	}
	if len(pos) != 1 || (*stepN < 1 && *question == "") {
		return usageErr("approve: usage: approve ID --step N [--question Q] (--key FILE | --by NAME) [--reject] [--override] [--reason TEXT]")
	}
	key, sc, closeFn, err := d.connect(ctx, &c, "approve")
	if err != nil {
		return err
	}
	defer closeFn()
	ctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	a := workflows.ApproveSignal{Step: *stepN, QuestionID: *question, Fingerprint: *fp, By: d.by,
		Approved: !*reject, Override: *override, Reason: *reason}
	// The card is printed before the decision is sent, and the decision
	// names its digest: the audit trail says what the decider saw.
	st, q, shown, err := showQuestion(ctx, sc, textOut(out, c.json), pos[0], *stepN, *question, workflows.QuestionApproval)
	if err != nil {
		return err
	}
	var res workflows.DecisionResult
	if shown {
		res, err = approveShown(ctx, sc, deciderName(key, d.by), pos[0], st, q, a)
	} else {
		// Not open (answered already, or none): sent as it is, so a
		// repeat gets its first answer and anything else the reason.
		res, err = sc.Approve(ctx, pos[0], a)
		err = decisionErr(err)
	}
	if err != nil {
		return err
	}
	return printDecision(out, c.json, pos[0], res, cardDigestOf(shown, q))
}

func cmdResolve(ctx context.Context, args []string, _ io.Reader, out io.Writer) error {
	fs := flag.NewFlagSet("resolve", flag.ContinueOnError)
	var c conn
	c.register(fs)
	var d decider
	d.register(fs)
	stepN := fs.Int("step", 0, "step number (from 1)")
	question := fs.String("question", "", "the question id you answer (default: the step's open outcome or reversal question, read from status)")
	outcome := fs.String("outcome", "", "succeeded (it happened; give --external-id), failed (it did not happen, do not retry) or retry (it did not happen, call again with the same key)")
	ext := fs.String("external-id", "", "the provider's id of the effect; for a tool that can look itself up it is checked at the provider")
	note := fs.String("note", "", "why: what you checked")
	pos, err := parse(fs, args, out)
	if err != nil {
		return err
	}
	o := workflows.Outcome(*outcome)
	if len(pos) != 1 || *stepN < 1 || (o != workflows.OutcomeSucceeded && o != workflows.OutcomeFailed && o != workflows.OutcomeRetry) {
		return usageErr("resolve: usage: resolve ID --step N [--question Q] --outcome succeeded|failed|retry (--key FILE | --by NAME) [--external-id X] [--note TEXT]")
	}
	key, sc, closeFn, err := d.connect(ctx, &c, "resolve")
	if err != nil {
		return err
	}
	defer closeFn()
	ctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	r := workflows.ResolveSignal{Step: *stepN, QuestionID: *question, Outcome: o, ExternalID: *ext, By: d.by, Note: *note}
	st, q, shown, err := showQuestion(ctx, sc, textOut(out, c.json), pos[0], *stepN, *question, workflows.QuestionOutcome, workflows.QuestionReversal)
	if err != nil {
		return err
	}
	var res workflows.DecisionResult
	if shown {
		res, err = resolveShown(ctx, sc, deciderName(key, d.by), pos[0], st, q, r)
	} else {
		res, err = sc.Resolve(ctx, pos[0], r)
		err = decisionErr(err)
	}
	if err != nil {
		return err
	}
	return printDecision(out, c.json, pos[0], res, cardDigestOf(shown, q))
}

// decisionErr keeps a refusal's reason and makes it exit 1.
func decisionErr(err error) error {
	var rej *sagaclient.RejectedError
	if errors.As(err, &rej) || errors.Is(err, sagaclient.ErrNoOpenQuestion) {
		return &exitError{code: 1, err: err}
	}
	return err
}

// textOut is out for text output, nil with --json (one JSON document).
func textOut(out io.Writer, asJSON bool) io.Writer {
	if asJSON {
		return nil
	}
	return out
}

// cardDigestOf is the digest of q's card when it was shown, else "".
func cardDigestOf(shown bool, q workflows.Question) string {
	if !shown {
		return ""
	}
	return workflows.CardDigest(q.Card)
}

func printDecision(out io.Writer, asJSON bool, workflowID string, res workflows.DecisionResult, cardDigest string) error {
	if asJSON {
		return printJSON(out, struct {
			WorkflowID string `json:"workflow_id"`
			workflows.DecisionResult
			CardDigest string `json:"card_digest,omitempty"`
		}{workflowID, res, cardDigest})
	}
	what := "applied"
	if !res.Applied {
		what = "already applied (the same decision was sent before; nothing happened twice)"
	}
	who := res.By + " (unverified: typed name)"
	if res.Verified {
		who = res.By + " (verified against the operators file)"
	}
	fmt.Fprintf(out, "%s: question %s of %s, decided by %s\n", what, safe(res.QuestionID), safe(workflowID), safe(who))
	if cardDigest != "" {
		fmt.Fprintf(out, "on the card printed above, %s (recorded with the decision)\n", cardDigest)
	}
	if res.Message != "" {
		fmt.Fprintf(out, "%s\n", safe(res.Message))
	}
	fmt.Fprintf(out, "follow it with `starter status %s`\n", safe(workflowID))
	return nil
}

func cmdCancel(ctx context.Context, args []string, _ io.Reader, out io.Writer) error {
	fs := flag.NewFlagSet("cancel", flag.ContinueOnError)
	var c conn
	c.register(fs)
	pos, err := parse(fs, args, out)
	if err != nil {
		return err
	}
	if err := oneID("cancel", pos); err != nil {
		return err
	}
	sc, closeFn, err := c.dial(ctx, nil)
	if err != nil {
		return err
	}
	defer closeFn()
	if err := sc.Cancel(ctx, pos[0]); err != nil {
		return err
	}
	if c.json {
		return printJSON(out, map[string]any{"ok": true, "workflow_id": pos[0], "message": "cancel requested; the plan compensates what it did"})
	}
	fmt.Fprintf(out, "cancel requested for %s: the plan compensates what it did (reversals newest first) and ends compensated,\n"+
		"or compensation_failed for a human to decide. Follow it with `starter status %s`.\n"+
		"(Terminating the workflow instead would NOT compensate: every effect would stay.)\n", safe(pos[0]), safe(pos[0]))
	return nil
}

func cmdEscalations(ctx context.Context, args []string, _ io.Reader, out io.Writer) error {
	fs := flag.NewFlagSet("escalations", flag.ContinueOnError)
	var c conn
	c.register(fs)
	pos, err := parse(fs, args, out)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageErr("escalations: takes no arguments (see starter escalations --help)")
	}
	sc, closeFn, err := c.dial(ctx, nil)
	if err != nil {
		return err
	}
	defer closeFn()
	list, err := sc.Escalations(ctx)
	if err != nil {
		return err
	}
	return printEscalations(out, list, c.json, now(), c.link)
}

func printEscalations(out io.Writer, list []sagaclient.Escalation, asJSON bool, at time.Time, link func(string) string) error {
	if asJSON {
		if list == nil {
			list = []sagaclient.Escalation{}
		}
		return printJSON(out, list)
	}
	if len(list) == 0 {
		fmt.Fprintln(out, "no plan waits for a human")
		return nil
	}
	for i, e := range list {
		if i > 0 {
			fmt.Fprintln(out, "\n----")
		}
		fmt.Fprintf(out, "plan %s  state %s  waiting %s  ui %s\n", safe(e.WorkflowID), safe(string(e.State)), age(e.OpenSince, at), safe(link(e.WorkflowID)))
		if e.StatusError != "" {
			fmt.Fprintf(out, "  status unavailable: %s\n", safe(e.StatusError))
		}
		for _, q := range e.Questions {
			printQuestion(out, e.WorkflowID, q, at)
		}
		if len(e.Questions) == 0 {
			for _, s := range e.Steps {
				fmt.Fprintf(out, "  step %d %s waits for %s: %s\n", s.Step, safe(s.Key), safe(s.Waiting), safe(s.LastError))
			}
		}
	}
	return nil
}
