package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/config"
	"github.com/agentsaga/agentsaga/internal/demotools"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/operators"
	"github.com/agentsaga/agentsaga/sagaclient"
	"github.com/agentsaga/agentsaga/workflows"
)

func code(err error) int {
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	if err != nil {
		return 1
	}
	return 0
}

// unreachable is a Temporal address where nothing listens: commands that
// must fail before connecting are given it.
const unreachable = "127.0.0.1:1"

func TestBadPlanIsRefusedBeforeAnythingStarts(t *testing.T) {
	plan := `{"session_id":"s","turn":1,"steps":[
		{"tool":"apply_refund","args":{"order_id":"ord_1001","amount_minor":129.00,"currency":"EUR"}},
		{"tool":"teleport","args":{}}]}`
	t.Setenv("AGENTSAGA_SANDBOX_URL", "http://127.0.0.1:9")
	t.Setenv("AGENTSAGA_TOOLS", "")
	var out bytes.Buffer
	cat := filepath.Join("..", "..", "catalog", "examples", "sandbox.yaml")
	err := run(context.Background(), []string{"run", "--tools", cat, "--plan", "-", "--address", unreachable}, strings.NewReader(plan), &out)
	require.Equal(t, 2, code(err))
	require.ErrorContains(t, err, "steps[1].args.amount_minor: must be an integer, got 129.00")
	require.ErrorContains(t, err, `steps[2].tool: unknown tool "teleport"`)

	// Without a catalogue the starter knows no tool: the plan's own fields
	// are still checked here, the tools' are left to the workflow, which
	// checks them against the worker's own tools.
	err = run(context.Background(), []string{"run", "--plan", "-", "--address", unreachable}, strings.NewReader(plan), &out)
	require.Equal(t, 1, code(err), "it got as far as connecting: %v", err)
	require.ErrorContains(t, err, "connect")
	err = run(context.Background(), []string{"run", "--plan", "-", "--address", unreachable}, strings.NewReader(`{"session_id":"bad session","turn":1,"steps":[{"tool":"x","args":{}}]}`), &out)
	require.Equal(t, 2, code(err))
	require.ErrorContains(t, err, "session_id")
}

func TestUsageErrorsExitTwo(t *testing.T) {
	t.Setenv(envOperatorKey, "")
	for _, args := range [][]string{
		{},
		{"nope"},
		{"run"},
		{"run", "--plan", "-", "extra"},
		{"status"},
		{"status", "a", "b"},
		{"approve", "agent-plan:s:1", "--step", "1"},                              // who decides?
		{"approve", "agent-plan:s:1", "--by", "alice"},                            // which step?
		{"approve", "agent-plan:s:1", "--step", "1", "--by", "al\x1bice"},         // bad name
		{"approve", "agent-plan:s:1", "--step", "1", "--key", "/nonexistent/key"}, // unreadable key
		{"resolve", "agent-plan:s:1", "--step", "1", "--by", "x", "--outcome", "maybe"},
		{"cancel"},
		{"escalations", "extra"},
		{"audit"},
		{"ledger"},
		{"ledger", "compact"},
		{"ledger", "purge", "--older-than", "1h"},
		{"operator"},
		{"operator", "keygen", "--name", "alice"},
		{"operator", "keygen", "--name", "alice", "--out", "x", "--may", "terminate"},
		{"operator", "show"},
		{"status", "--no-such-flag"},
		{"exceptions", "--data-dir", "/nonexistent/agentsaga"},
	} {
		if len(args) > 0 && strings.Contains(" run status approve resolve cancel escalations ", " "+args[0]+" ") {
			args = append(args, "--address", unreachable) // fail before connecting
		}
		err := run(context.Background(), args, strings.NewReader(""), &bytes.Buffer{})
		require.Equal(t, 2, code(err), "%q: %v", args, err)
	}
}

// leaves lists every command and subcommand as argument lists.
func leaves() [][]string {
	var out [][]string
	for name := range commands(context.Background()) {
		switch name {
		case "ledger":
			out = append(out, []string{"ledger", "purge"})
		case "operator":
			out = append(out, []string{"operator", "keygen"}, []string{"operator", "show"})
		case "cluster":
			out = append(out, []string{"cluster", "setup"})
		case "codec":
			out = append(out, []string{"codec", "serve"}, []string{"codec", "keygen"}, []string{"codec", "token"})
		}
		out = append(out, []string{name})
	}
	sort.Slice(out, func(i, j int) bool { return strings.Join(out[i], " ") < strings.Join(out[j], " ") })
	return out
}

var flagLine = regexp.MustCompile(`(?m)^  -([a-z][a-z0-9-]*)`)

func TestHelpOnEveryCommandExitsZeroAndListsItsFlags(t *testing.T) {
	readme, err := docsText()
	require.NoError(t, err)
	for _, cmd := range leaves() {
		for _, h := range []string{"--help", "-h"} {
			var out bytes.Buffer
			err := run(context.Background(), append(append([]string{}, cmd...), h), strings.NewReader(""), &out)
			require.NoError(t, err, "%v %s", cmd, h)
			require.Equal(t, 0, report(&bytes.Buffer{}, err, false))
			require.Contains(t, out.String(), "usage: starter "+cmd[0], "%v", cmd)
		}
		var out bytes.Buffer
		require.NoError(t, run(context.Background(), append(append([]string{}, cmd...), "--help"), strings.NewReader(""), &out))
		if cmd[0] == "ledger" || cmd[0] == "operator" || cmd[0] == "codec" || cmd[0] == "cluster" || cmd[0] == "tools" {
			if len(cmd) == 1 {
				continue // the group's help lists subcommands, not flags
			}
		}
		flags := flagLine.FindAllStringSubmatch(out.String(), -1)
		require.NotEmpty(t, flags, "%v --help lists no flags:\n%s", cmd, out.String())
		for _, f := range flags {
			documented := strings.Contains(string(readme), "`--"+f[1]+"`") || strings.Contains(string(readme), "`--"+f[1]+" ")
			require.True(t, documented, "flag --%s of starter %s is not documented in README.md", f[1], strings.Join(cmd, " "))
		}
	}
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"help", "approve"}, strings.NewReader(""), &out))
	require.Contains(t, out.String(), "-override")
	require.NoError(t, run(context.Background(), []string{"--help"}, strings.NewReader(""), &out))
}

func TestJSONErrors(t *testing.T) {
	for args, want := range map[string]bool{
		"status x --json": true, "status x -json": true, "status --json=true x": true, "status --json=false x": false,
		"status x": false, "status -- --json": false, "status x --jsonx": false, "status x --json --json=0": false,
	} {
		require.Equal(t, want, wantsJSON(strings.Fields(args)), args)
	}
	args := []string{"approve", "agent-plan:s:1", "--step", "1", "--json", "--by", "bad\x1b[2Jname"}
	err := run(context.Background(), args, strings.NewReader(""), &bytes.Buffer{})
	var stderr bytes.Buffer
	require.Equal(t, 2, report(&stderr, err, wantsJSON(args)))
	var got struct {
		Error string `json:"error"`
		Code  int    `json:"code"`
	}
	require.NoError(t, json.Unmarshal(stderr.Bytes(), &got), stderr.String())
	require.Equal(t, 2, got.Code)
	require.Contains(t, got.Error, "--by")
	require.NotContains(t, stderr.String(), "\x1b")

	// A refusal by the workflow exits 1 with its reason, in JSON too.
	rej := decisionErr(&sagaclient.RejectedError{WorkflowID: "agent-plan:s:1", Update: "approve", QuestionID: "q-1", Reason: "question q-1 is not open"})
	stderr.Reset()
	require.Equal(t, 1, report(&stderr, rej, true))
	require.NoError(t, json.Unmarshal(stderr.Bytes(), &got))
	require.Equal(t, 1, got.Code)
	require.Contains(t, got.Error, "question q-1 is not open")
	stderr.Reset()
	require.Equal(t, 1, report(&stderr, decisionErr(sagaclient.ErrNoOpenQuestion), false))
	require.Equal(t, "starter: no open question\n", stderr.String())
	stderr.Reset()
	report(&stderr, errors.New("provider said \x1b]0;owned\x07"), false)
	require.Equal(t, `starter: provider said \x1b]0;owned\x07`+"\n", stderr.String())
}

func TestRunMintsARequestIDOnlyWhenThePlanHasNone(t *testing.T) {
	const without = `{"session_id":"s-1","turn":2,"steps":[{"tool":"query_order","args":{"order_id":"ord_1001"}}]}`
	p, minted, err := readPlan("-", strings.NewReader(without))
	require.NoError(t, err)
	require.True(t, minted)
	id, err := uuid.Parse(p.RequestID)
	require.NoError(t, err)
	require.Equal(t, uuid.Version(5), id.Version())
	again, _, err := readPlan("-", strings.NewReader(without))
	require.NoError(t, err)
	require.Equal(t, p.RequestID, again.RequestID, "the same plan run again must carry the same request id")
	other, _, err := readPlan("-", strings.NewReader(strings.Replace(without, `"turn":2`, `"turn":3`, 1)))
	require.NoError(t, err)
	require.NotEqual(t, p.RequestID, other.RequestID)

	with, minted, err := readPlan("-", strings.NewReader(strings.Replace(without, `"turn":2,`, `"turn":2,"request_id":"req-7",`, 1)))
	require.NoError(t, err)
	require.False(t, minted)
	require.Equal(t, "req-7", with.RequestID)
}

func TestUILinkDefaultsToTheDevUIPort(t *testing.T) {
	t.Setenv(config.EnvUIURL, "")
	dir := t.TempDir()
	t.Setenv(config.EnvDataDir, dir)
	var c conn
	fs := newFlagSet("status")
	c.register(fs)
	require.NoError(t, fs.Parse(nil))
	require.Equal(t, 8233, config.DefaultUIPort)
	require.Equal(t, "http://127.0.0.1:8233/namespaces/default/workflows/agent-plan:s:1", c.link("agent-plan:s:1"))

	// worker --dev --ui-port 9000 wrote where its UI is: the link follows.
	require.NoError(t, os.WriteFile(filepath.Join(dir, config.UIURLFile), []byte("http://127.0.0.1:9000\n"), 0o600))
	require.Equal(t, "http://127.0.0.1:9000/namespaces/default/workflows/agent-plan:s:1", c.link("agent-plan:s:1"))

	t.Setenv(config.EnvUIURL, "https://temporal.example.com/")
	var e conn
	fs = newFlagSet("status")
	e.register(fs)
	require.NoError(t, fs.Parse([]string{"--namespace", "prod"}))
	require.Equal(t, "https://temporal.example.com/namespaces/prod/workflows/agent-plan:s:1", e.link("agent-plan:s:1"))
}

func TestOperatorKeygenSignsDecisionsTheWorkerAccepts(t *testing.T) {
	dir := t.TempDir()
	keyPath := filepath.Join(dir, "alice.key")
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"operator", "keygen", "--name", "alice", "--out", keyPath, "--json"}, nil, &out))
	fi, err := os.Stat(keyPath)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	var entry operators.Operator
	require.NoError(t, json.Unmarshal(out.Bytes(), &entry))
	require.Equal(t, []string{"approve", "resolve"}, entry.May)

	// The printed entry is the operators file the worker loads.
	file, _ := json.Marshal(operators.File{Operators: []operators.Operator{entry}})
	opsPath := filepath.Join(dir, "operators.json")
	require.NoError(t, os.WriteFile(opsPath, file, 0o644))
	ring, err := operators.Load(opsPath)
	require.NoError(t, err)

	// `approve --key` reads it and signs what the validator verifies.
	t.Setenv(envOperatorKey, keyPath)
	d := decider{key: keyPath}
	key, err := d.load("approve")
	require.NoError(t, err)
	a := workflows.ApproveSignal{Step: 3, QuestionID: "q-3-approval-1", Fingerprint: "fp", By: key.Name, Approved: true, SentAt: time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC)}
	a.Signature = operators.Sign(key, a.SigningBytes("agent-plan:s:1"))
	require.NoError(t, ring.Verify("alice", operators.ActionApprove, a.SigningBytes("agent-plan:s:1"), a.Signature))
	a.Approved = false
	require.ErrorIs(t, ring.Verify("alice", operators.ActionApprove, a.SigningBytes("agent-plan:s:1"), a.Signature), operators.ErrBadSignature)

	_, err = (&decider{key: keyPath, by: "bob"}).load("approve")
	require.Equal(t, 2, code(err))
	require.ErrorContains(t, err, "drop --by")

	// show prints the same entry; keygen never overwrites.
	out.Reset()
	require.NoError(t, run(context.Background(), []string{"operator", "show", "--json"}, nil, &out))
	var shown operators.Operator
	require.NoError(t, json.Unmarshal(out.Bytes(), &shown))
	require.Equal(t, entry, shown)
	err = run(context.Background(), []string{"operator", "keygen", "--name", "alice", "--out", keyPath}, nil, &out)
	require.ErrorContains(t, err, "never overwritten")

	// A key others can read is refused.
	require.NoError(t, os.Chmod(keyPath, 0o644))
	_, err = d.load("approve")
	require.ErrorContains(t, err, "chmod 600")
}

// show prints the rights the key was made with, never wider: a key made to
// resolve only shows may [resolve]; a key file from before rights were
// recorded needs --may instead of a guess.
func TestOperatorShowPrintsTheKeysOwnRights(t *testing.T) {
	dir := t.TempDir()
	keyPath := filepath.Join(dir, "r.key")
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"operator", "keygen", "--name", "rita", "--out", keyPath, "--may", "resolve", "--json"}, nil, &out))
	out.Reset()
	require.NoError(t, run(context.Background(), []string{"operator", "show", "--key", keyPath, "--json"}, nil, &out))
	var shown operators.Operator
	require.NoError(t, json.Unmarshal(out.Bytes(), &shown))
	require.Equal(t, []string{"resolve"}, shown.May)

	k, err := operators.NewKey("old", nil)
	require.NoError(t, err)
	oldPath := filepath.Join(dir, "old.key")
	require.NoError(t, k.Write(oldPath)) // no rights recorded, as keys were made before
	err = run(context.Background(), []string{"operator", "show", "--key", oldPath}, nil, &out)
	require.Equal(t, 2, code(err))
	require.ErrorContains(t, err, "give --may")
	out.Reset()
	require.NoError(t, run(context.Background(), []string{"operator", "show", "--key", oldPath, "--may", "approve", "--json"}, nil, &out))
	require.NoError(t, json.Unmarshal(out.Bytes(), &shown))
	require.Equal(t, []string{"approve"}, shown.May)
}

func TestExceptionsFindTheWorkersLedger(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(config.EnvLedger, "")
	t.Setenv(config.EnvDataDir, dir)
	var out bytes.Buffer
	err := run(context.Background(), []string{"exceptions"}, nil, &out)
	require.Equal(t, 2, code(err))
	require.ErrorContains(t, err, "no ledger at "+filepath.Join(dir, "ledger.db"))

	// The worker opens <data-dir>/ledger.db; the starter finds it there,
	// through the environment or --data-dir.
	store, err := openLedger(t, config.DefaultLedger(dir))
	require.NoError(t, err)
	require.NoError(t, store.Close())
	require.NoError(t, run(context.Background(), []string{"exceptions"}, nil, &out))
	require.Contains(t, out.String(), "the exception queue is empty")
	t.Setenv(config.EnvDataDir, "")
	out.Reset()
	require.NoError(t, run(context.Background(), []string{"exceptions", "--data-dir", dir, "--json"}, nil, &out))
	require.Equal(t, "[]\n", out.String())
}

func TestExceptionHintsFitTheTool(t *testing.T) {
	specs := demotools.Specs()
	base := ledger.Operation{WorkflowID: "agent-plan:s:1", Status: ledger.NeedsHuman}
	op := func(key, tool string, edit func(*ledger.Operation)) ledger.Operation {
		o := base
		o.Key, o.ActionType = key, tool
		if edit != nil {
			edit(&o)
		}
		return o
	}
	mail := suggest(op("s:1:2:send_email", "send_email", nil), specs)
	require.Contains(t, mail, "send_email cannot be looked up by key")
	require.Contains(t, mail, "starter resolve agent-plan:s:1 --step 2")
	require.Contains(t, mail, "your assertion")

	refund := suggest(op("s:1:3:apply_refund", "apply_refund", nil), specs)
	require.Contains(t, refund, "look it up at the provider")
	require.Contains(t, refund, "--external-id ID for succeeded (checked at the provider)")
	require.Contains(t, refund, "--step 3")

	held := suggest(op("s:1:3:apply_refund", "apply_refund", func(o *ledger.Operation) { o.HoldReason = "guard: one refund per order" }), specs)
	require.Contains(t, held, "held before any call (guard: one refund per order)")
	require.Contains(t, held, "starter approve agent-plan:s:1 --step 3 --override")

	rev := suggest(op("s:1:2:create_payment:compensate", "void_payment", func(o *ledger.Operation) { o.Status = ledger.CompensationFailed }), specs)
	require.Contains(t, rev, "the reversal s:1:2:create_payment:compensate failed")
	require.Contains(t, rev, "--step 2 --outcome succeeded|retry")

	unknown := suggest(op("s:1:3:apply_refund", "apply_refund", func(o *ledger.Operation) { o.Status = ledger.Unknown }), specs)
	require.Contains(t, unknown, "reconciles key s:1:3:apply_refund")

	at := time.Unix(1000, 0)
	fresh := func(status ledger.Status, tool string) ledger.Operation {
		return ledger.Operation{Key: "s:1:1:" + tool, ActionType: tool, Status: status, UpdatedAt: at.Add(-time.Minute)}
	}
	kept := queue([]ledger.Operation{fresh(ledger.Unknown, "send_email"), fresh(ledger.Unknown, "apply_refund"), fresh(ledger.NeedsHuman, "apply_refund"),
		{Key: "s:1:2:apply_refund", ActionType: "apply_refund", Status: ledger.Unknown, UpdatedAt: at.Add(-time.Hour)}}, specs, 15*time.Minute, at)
	var keys []string
	for _, o := range kept {
		keys = append(keys, o.Key+" "+string(o.Status))
	}
	require.Equal(t, []string{"s:1:1:send_email unknown", "s:1:1:apply_refund needs_human", "s:1:2:apply_refund unknown"}, keys,
		"a fresh unknown refund is still being reconciled; a fresh unknown email goes to a human at once")

	rows := exceptionRows([]ledger.Operation{op("s:1:2:send_email", "send_email", func(o *ledger.Operation) {
		o.CreatedAt = time.Unix(0, 0)
		o.Summary = "send_email to \x1b[8mhidden"
	})}, specs, time.Unix(90, 0))
	require.Equal(t, 2, rows[0].Step)
	require.Equal(t, "1m30s", rows[0].Age)
	var out bytes.Buffer
	require.NoError(t, printExceptions(&out, rows, false))
	require.Contains(t, out.String(), "needs_human")
	require.Contains(t, out.String(), `send_email to \x1b[8mhidden`)
	require.NotContains(t, out.String(), "\x1b")
}

const evil = "\x1b[2J\x1b]0;pwned\x07\u009b31m\u202eevil\nstep 9 approved by cfo\t|"

func requireNeutral(t *testing.T, s string) {
	t.Helper()
	for _, r := range s {
		if r == '\n' || r == '\t' {
			continue // the printers' own layout
		}
		require.False(t, unsafeRune(r), "%U reached the terminal in:\n%s", r, s)
	}
	require.NotContains(t, s, "\nstep 9 approved by cfo", "a forged line reached the terminal")
}

func evilStatus() workflows.Status {
	at := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	return workflows.Status{
		WorkflowID: "agent-plan:s:1", RunID: evil, RefusedSignals: 7, State: workflows.SagaWaitingApproval, Error: evil, RequestID: evil, PlanFingerprint: evil,
		Steps: []workflows.StepStatus{{Step: 1, Key: evil, Tool: evil, State: ledger.Status(evil), ExternalID: evil, LastError: evil, Waiting: evil,
			Compensation: &workflows.Compensation{State: ledger.Status(evil), ExternalID: evil},
			Decisions:    []workflows.Decision{{Kind: evil, By: evil, Note: evil, Refused: evil, ExternalID: evil, QuestionID: evil, At: at}}}},
		Questions: []workflows.Question{{ID: "q-1-approval-1", Kind: workflows.QuestionApproval, Step: 1, Key: evil, Fingerprint: evil, OpenedAt: at.Add(-90 * time.Minute),
			ExpiresAt: at.Add(22 * time.Hour), Answers: []string{"approve", "reject"},
			Card: workflows.Card{Change: "apply_refund: refund an order", System: "payments", Object: "order_id ord_1002", Amount: "1,500.00 EUR", AmountMinor: 150000, Currency: "EUR",
				RequestID: "req-7", RequestedBy: "carol", Session: "s", Rule: "approval policy: amount_minor > 50000", Clash: "one refund per order: " + evil,
				AlreadyRan: []string{"ord_1002 already refunded 1,500.00 EUR by h-1:1:2:apply_refund", evil}, Key: "s:1:1:apply_refund",
				Reason: "arrived damaged", Arguments: []string{"order_id: ord_1002", "note: " + evil}, Calls: []string{evil},
				Does: []workflows.AnswerDoes{{Answer: "reject", Does: "apply_refund is not run"}, {Answer: "approve", Does: evil}}}}},
	}
}

func TestStatusPrintsEachQuestionWithItsCardNeutralised(t *testing.T) {
	st := evilStatus()
	at := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	var out bytes.Buffer
	require.NoError(t, printStatus(&out, st, false, at))
	s := out.String()
	requireNeutral(t, s)
	for _, want := range []string{
		"question q-1-approval-1: approval of step 1, open 1h30m0s, expires in 22h0m0s", "  refused signals 7\n",
		"change       apply_refund: refund an order", "system       payments", "object       order_id ord_1002",
		"amount       1,500.00 EUR (150000 minor units)", "who asked    request req-7, requested by carol, session s",
		"rule         approval policy: amount_minor > 50000", "(approving needs --override)",
		"already ran  ord_1002 already refunded 1,500.00 EUR by h-1:1:2:apply_refund",
		"reason       arrived damaged", "argument     order_id: ord_1002\n               note: ", "if reject    apply_refund is not run",
		"decide       starter approve agent-plan:s:1 --step 1 --question q-1-approval-1 --key FILE --override",
	} {
		require.Contains(t, s, want)
	}
	out.Reset()
	require.NoError(t, printStatus(&out, st, true, at))
	requireNeutral(t, out.String())
	var back workflows.Status
	require.NoError(t, json.Unmarshal(out.Bytes(), &back))
	require.Equal(t, evil, back.Error, "JSON keeps the value, escaped")
}

func TestEscalationsPrintCardsOldestFirstNeutralised(t *testing.T) {
	at := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	old := evilStatus()
	list := []sagaclient.Escalation{
		{WorkflowID: "agent-plan:old:1", State: old.State, OpenSince: at.Add(-3 * time.Hour), Questions: old.Questions},
		{WorkflowID: "agent-plan:new:1", OpenSince: at.Add(-time.Minute), StatusError: evil},
	}
	var out bytes.Buffer
	require.NoError(t, printEscalations(&out, list, false, at, func(id string) string { return "ui/" + id }))
	s := out.String()
	requireNeutral(t, s)
	require.Less(t, strings.Index(s, "agent-plan:old:1"), strings.Index(s, "agent-plan:new:1"))
	require.Contains(t, s, "plan agent-plan:old:1  state waiting_approval  waiting 3h0m0s")
	require.Contains(t, s, "amount       1,500.00 EUR")
	require.Contains(t, s, "status unavailable: \\x1b[2J")
	out.Reset()
	require.NoError(t, printEscalations(&out, nil, false, at, func(string) string { return "" }))
	require.Equal(t, "no plan waits for a human\n", out.String())
	out.Reset()
	require.NoError(t, printEscalations(&out, nil, true, at, func(string) string { return "" }))
	require.Equal(t, "[]\n", out.String())
}

// auditStore answers Get and Decisions; any other call panics.
type auditStore struct {
	ledger.Store
	op    ledger.Operation
	trail []ledger.DecisionRecord
	err   error
}

func (s auditStore) Get(_ context.Context, key string) (ledger.Operation, error) {
	if key != s.op.Key {
		return ledger.Operation{}, ledger.ErrNotFound
	}
	return s.op, nil
}

func (s auditStore) Decisions(_ context.Context, key string) ([]ledger.DecisionRecord, error) {
	var out []ledger.DecisionRecord
	for _, d := range s.trail {
		if d.Key == key || d.Key == key+":compensate" {
			out = append(out, d)
		}
	}
	return out, s.err
}

func TestAuditPrintsTheRowAndItsTrail(t *testing.T) {
	at := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	card, _ := json.Marshal(workflows.Card{Change: "apply_refund", Amount: "1,500.00 EUR", Object: "order_id ord_1002"})
	s := auditStore{
		op: ledger.Operation{Key: "s:1:3:apply_refund", ActionType: "apply_refund", Status: ledger.Succeeded, ExternalID: "re_1", WorkflowID: "agent-plan:s:1",
			ResolvedBy: "bob", ResolvedAt: at, ResolveNote: evil, CreatedAt: at},
		trail: []ledger.DecisionRecord{
			{ID: 1, QuestionID: "q-3-approval-1", Key: "s:1:3:apply_refund", Kind: "refused", By: "carol", Refused: "the plan's requester may not approve it", AppliedAt: at},
			{ID: 2, QuestionID: "q-3-approval-1", Key: "s:1:3:apply_refund", Kind: "approve", By: "alice", Verified: true, SentAt: at.Add(-time.Second), AppliedAt: at, Card: card, Note: evil},
		},
	}
	var out bytes.Buffer
	require.NoError(t, audit(context.Background(), s, "s:1:3:apply_refund", &out, false))
	txt := out.String()
	requireNeutral(t, txt)
	for _, want := range []string{"operation s:1:3:apply_refund  tool apply_refund  status succeeded", "external id  re_1",
		"#1 2025-03-01T12:00:00Z refused by carol (unverified), question q-3-approval-1", "REFUSED    the plan's requester may not approve it",
		"#2 2025-03-01T12:00:00Z approve by alice (verified), question q-3-approval-1, sent 2025-03-01T11:59:59Z",
		"card       apply_refund; order_id ord_1002; 1,500.00 EUR"} {
		require.Contains(t, txt, want)
	}
	out.Reset()
	require.NoError(t, audit(context.Background(), s, "s:1:3:apply_refund", &out, true))
	var got struct {
		Operation ledger.Operation        `json:"operation"`
		Decisions []ledger.DecisionRecord `json:"decisions"`
	}
	require.NoError(t, json.Unmarshal(out.Bytes(), &got))
	require.Len(t, got.Decisions, 2)

	err := audit(context.Background(), s, "s:1:9:nope", &out, false)
	require.Equal(t, 1, code(err))
	require.ErrorContains(t, err, "no operation with key")

	s.err = errors.New("not implemented yet")
	out.Reset()
	err = audit(context.Background(), s, "s:1:3:apply_refund", &out, false)
	require.ErrorContains(t, err, "read the audit trail of s:1:3:apply_refund: not implemented yet")
	require.Contains(t, out.String(), "operation s:1:3:apply_refund", "the row is shown even when the trail cannot be read")
}

// `starter run --tools FILE` checks a plan against that catalogue before it
// connects anywhere: a tool the catalogue does not declare is refused
// (exit 2), and a catalogue with problems names them.
func TestRunChecksPlansAgainstTheCatalogueGiven(t *testing.T) {
	t.Setenv("AGENTSAGA_SANDBOX_URL", "http://127.0.0.1:9")
	cat := filepath.Join("..", "..", "catalog", "examples", "sandbox.yaml")
	var out bytes.Buffer
	p := `{"session_id":"s-cat","turn":1,"steps":[{"tool":"launch_rocket","args":{}}]}`
	err := run(context.Background(), []string{"run", "--tools", cat, "--address", "127.0.0.1:1", "--plan", "-"}, strings.NewReader(p), &out)
	require.Equal(t, 2, code(err), "%v", err)
	require.ErrorContains(t, err, "launch_rocket")

	bad := filepath.Join(t.TempDir(), "bad.yaml")
	require.NoError(t, os.WriteFile(bad, []byte("version: 1\ntools:\n  - name: x\n    class: NOPE\n"), 0o600))
	err = run(context.Background(), []string{"run", "--tools", bad, "--address", "127.0.0.1:1", "--plan", "-"}, strings.NewReader(p), &out)
	require.Equal(t, 2, code(err), "%v", err)
	require.ErrorContains(t, err, "tools[0].class")
}
