package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	sdklog "go.temporal.io/sdk/log"

	"github.com/agentsaga/agentsaga/codec"
	"github.com/agentsaga/agentsaga/internal/demotools"
	"github.com/agentsaga/agentsaga/internal/devstack"
	"github.com/agentsaga/agentsaga/internal/sandbox"
	"github.com/agentsaga/agentsaga/plan"
	"github.com/agentsaga/agentsaga/sagaclient"
	"github.com/agentsaga/agentsaga/sagaworker"
	"github.com/agentsaga/agentsaga/workflows"
)

// npmStep is the command that builds the TypeScript planner; .ci/run runs it
// before the Go tests.
const npmStep = "(cd examples/planner-ts && npm ci --no-audit --no-fund && npm run build)"

// buildOnce builds the TypeScript planner at most once per test binary.
var buildOnce struct {
	sync.Once
	out string
	err error
}

// plannerTS returns node and the planner's dist directory. When dist/ is
// missing or older than its sources and npm is installed, it builds it
// (npmStep, about 15 s), so `go test ./...` on a fresh machine tests the
// planner too. Without node or npm the test fails under CI=true and is
// skipped, with the reason printed, otherwise.
func plannerTS(t *testing.T) (node, dist string) {
	t.Helper()
	missing := missingPeer(t, npmStep, "test the TypeScript planner")
	node, err := exec.LookPath("node")
	if err != nil {
		missing("node is not installed (%v)", err)
	}
	dist, err = filepath.Abs(filepath.Join("..", "examples", "planner-ts", "dist"))
	require.NoError(t, err)
	if stale := staleDist(t, dist); stale != "" {
		npm, err := exec.LookPath("npm")
		if err != nil {
			missing("%s and npm is not installed (%v)", stale, err)
		}
		buildOnce.Do(func() {
			cmd := exec.Command("sh", "-c", "npm ci --no-audit --no-fund && npm run build")
			cmd.Dir = filepath.Dir(dist)
			cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(npm)+string(os.PathListSeparator)+os.Getenv("PATH"))
			out, err := cmd.CombinedOutput()
			buildOnce.out, buildOnce.err = string(out), err
		})
		if buildOnce.err != nil {
			missing("%s and building it failed (%v): %s", stale, buildOnce.err, buildOnce.out)
		}
		if stale := staleDist(t, dist); stale != "" {
			missing("%s even after building it", stale)
		}
	}
	return node, dist
}

// staleDist says why dist/ cannot be run as it is, or "".
func staleDist(t *testing.T, dist string) string {
	t.Helper()
	for _, f := range []string{"main.js", "codec.js", "codec-cli.js", "contract.js"} {
		js, err := os.Stat(filepath.Join(dist, f))
		if err != nil {
			return fmt.Sprintf("the TypeScript planner is not built (%v)", err)
		}
		ts, err := os.Stat(filepath.Join(dist, "..", "src", strings.TrimSuffix(f, ".js")+".ts"))
		require.NoError(t, err, "the source of %s", f)
		if ts.ModTime().After(js.ModTime()) {
			return fmt.Sprintf("dist/%s is older than its source", f)
		}
	}
	return ""
}

// plannerEnv is the environment of a node process: this process's, without
// anything that would point it at another cluster or keyring, plus extra.
// AGENTSAGA_DATA_DIR points at an empty directory so that a dev stack's
// keyring in the user's cache is never picked up by the loopback fallback.
func plannerEnv(t *testing.T, extra ...string) []string {
	t.Helper()
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "TEMPORAL_") || strings.HasPrefix(name, "AGENTSAGA_") || strings.HasPrefix(name, "PLANNER_") {
			continue
		}
		env = append(env, kv)
	}
	return append(append(env, "AGENTSAGA_DATA_DIR="+t.TempDir()), extra...)
}

// runNode runs node script args with env and stdin, bounded by ctx, and
// returns its stdout, stderr and exit code.
func runNode(ctx context.Context, t *testing.T, node, script string, env []string, stdin []byte, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.CommandContext(ctx, node, append([]string{script}, args...)...)
	cmd.Env = env
	cmd.Stdin = bytes.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		code = exit.ExitCode()
	default:
		t.Fatalf("run %s %s: %v\nstderr:\n%s", node, script, err, errb.String())
	}
	return out.String(), errb.String(), code
}

// keyFileEnv writes ring to a private file and returns the variable that
// names it for the TypeScript client.
func keyFileEnv(t *testing.T, ring *codec.Keyring) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), codec.KeysFileName)
	require.NoError(t, ring.WriteKeyFile(path))
	return codec.EnvKeysFile + "=" + path
}

// plannerOutput is what planner-ts prints: one JSON object per phase.
type plannerOutput struct {
	Plan struct {
		WorkflowID       string                   `json:"workflow_id"`
		Question         workflows.Question       `json:"question"`
		DecisionUpdateID string                   `json:"decision_update_id"`
		Decision         workflows.DecisionResult `json:"decision"`
		Result           workflows.Status         `json:"result"`
	}
	Turn struct {
		WorkflowID string               `json:"workflow_id"`
		UpdateID   string               `json:"update_id"`
		Result     workflows.TurnResult `json:"result"`
	}
	TurnAgain struct {
		Same   bool                 `json:"same"`
		Result workflows.TurnResult `json:"result"`
	}
	Conflict struct {
		Existing  string `json:"existing"`
		Requested string `json:"requested"`
	}
	Status struct {
		Plan    workflows.Status `json:"plan"`
		Session workflows.Status `json:"session"`
	}
	End struct {
		Result workflows.Status `json:"result"`
	}
	Done struct {
		OK    bool `json:"ok"`
		Codec struct {
			On      bool   `json:"on"`
			Current string `json:"current"`
		} `json:"codec"`
	}
	phases []string
}

func parsePlannerOutput(t *testing.T, stdout string) plannerOutput {
	t.Helper()
	var out plannerOutput
	sc := bufio.NewScanner(strings.NewReader(stdout))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		line := sc.Bytes()
		var head struct {
			Phase string `json:"phase"`
		}
		require.NoError(t, json.Unmarshal(line, &head), "planner-ts prints JSON lines; got %q", line)
		targets := map[string]any{"plan": &out.Plan, "turn": &out.Turn, "turn_again": &out.TurnAgain, "turn_conflict": &out.Conflict,
			"status": &out.Status, "end": &out.End, "done": &out.Done}
		target, ok := targets[head.Phase]
		require.True(t, ok, "unknown phase %q", head.Phase)
		require.NoError(t, json.Unmarshal(line, target), "phase %s", head.Phase)
		out.phases = append(out.phases, head.Phase)
	}
	require.NoError(t, sc.Err())
	return out
}

// plannerRun is one run of planner-ts against a worker.
type plannerRun struct {
	session, order string
	taskQueue      string
	env            []string // codec variables, if any
	plans          *sagaclient.Client
}

// runPlanner runs planner-ts, checks its exit code and output, and counts
// the refund and the invoice at the sandbox providers.
func runPlanner(t *testing.T, st *devstack.Stack, r plannerRun) plannerOutput {
	t.Helper()
	node, dist := plannerTS(t)
	sb := sandbox.NewClient(st.SandboxURL, nil)
	ctx := testContext(t, 3*time.Minute)
	callsBefore := allCalls(ctx, t, sb)

	env := plannerEnv(t, append([]string{
		"TEMPORAL_ADDRESS=" + st.Server.FrontendAddr(), "TEMPORAL_NAMESPACE=" + st.Server.Namespace(),
		"AGENTSAGA_TASK_QUEUE=" + r.taskQueue, "PLANNER_ORDER=" + r.order, "PLANNER_SESSION=" + r.session,
		"PLANNER_AMOUNT_MINOR=75000", "PLANNER_TIMEOUT_MS=60000",
	}, r.env...)...)
	stdout, stderr, code := runNode(ctx, t, node, filepath.Join(dist, "main.js"), env, nil)
	t.Logf("planner-ts stderr:\n%s", stderr)
	require.Equal(t, 0, code, "planner-ts exit code; stdout:\n%s\nstderr:\n%s", stdout, stderr)
	out := parsePlannerOutput(t, stdout)
	require.Equal(t, []string{"plan", "turn", "turn_again", "turn_conflict", "status", "end", "done"}, out.phases)
	require.True(t, out.Done.OK)

	// (1) The plan: approved by ts-operator, one refund under its key.
	refundKey := plan.Key(r.session, 1, 1, demotools.ApplyRefund)
	require.Equal(t, plan.WorkflowID(r.session, 1), out.Plan.WorkflowID)
	require.Equal(t, workflows.QuestionApproval, out.Plan.Question.Kind)
	require.Equal(t, sagaclient.DecisionUpdateID(out.Plan.Question.ID, "ts-operator", "approve"), out.Plan.DecisionUpdateID,
		"the decision's Update ID is the Go client's, so a double click across languages is applied once")
	require.True(t, out.Plan.Decision.Applied)
	require.Equal(t, "ts-operator", out.Plan.Decision.By)
	require.Equal(t, workflows.SagaSucceeded, out.Plan.Result.State, "plan error: %s", out.Plan.Result.Error)
	refunds := effectsUnder(ctx, t, sb, refundKey)
	require.Len(t, refunds, 1, "one refund under %s in the acquirer's store", refundKey)
	require.Equal(t, "refund", refunds[0].Kind)
	require.Equal(t, int64(75000), refunds[0].AmountMinor)
	require.Equal(t, r.order, refunds[0].OrderID)
	require.Equal(t, refunds[0].ID, out.Plan.Result.Steps[0].ExternalID, "the result names the refund the acquirer holds")

	// The Go client reads the same plan: same fingerprint (the memo the
	// TypeScript client wrote attaches instead of conflicting), the status
	// with the decision, and a changed plan under the same turn refused.
	p := refundPlanTS(t, r.session, r.order)
	run, err := r.plans.Start(ctx, p)
	require.NoError(t, err, "the Go client attaches to the plan the TypeScript client started")
	require.Equal(t, fingerprint(t, p), run.PlanFingerprint)
	s, err := r.plans.Status(ctx, run.WorkflowID)
	require.NoError(t, err)
	require.Equal(t, fingerprint(t, p), s.PlanFingerprint)
	require.Equal(t, "ts-operator", s.Steps[0].Decisions[0].By)
	changed := refundPlanTS(t, r.session, r.order)
	changed.Steps[0].Args = json.RawMessage(`{"order_id":"` + r.order + `","amount_minor":75001,"currency":"EUR"}`)
	_, err = r.plans.Start(ctx, changed)
	var conflict *sagaclient.ConflictError
	require.ErrorAs(t, err, &conflict, "a changed plan under the TypeScript plan's turn is a conflict")

	// (2) The session turn: one invoice, the resend and the conflict
	// called nothing.
	session := r.session + "-s"
	require.Equal(t, workflows.SessionWorkflowID(session), out.Turn.WorkflowID)
	require.Equal(t, workflows.TurnUpdateID(session, 1), out.Turn.UpdateID)
	require.Equal(t, workflows.TurnSucceeded, out.Turn.Result.State)
	require.True(t, out.TurnAgain.Same)
	require.Equal(t, out.Turn.Result, out.TurnAgain.Result)
	require.NotEqual(t, out.Conflict.Existing, out.Conflict.Requested)
	invoiceKey := plan.Key(session, 1, 2, demotools.CreateInvoice)
	invoices := effectsUnder(ctx, t, sb, invoiceKey)
	require.Len(t, invoices, 1, "one invoice under %s in accounting", invoiceKey)
	require.Equal(t, invoices[0].ID, out.Turn.Result.Steps[1].ExternalID)

	// (3) Status and end: the session kept its invoice.
	require.Equal(t, workflows.SagaSucceeded, out.Status.Plan.State)
	require.Equal(t, session, out.Status.Session.SessionID)
	require.Equal(t, workflows.SagaSucceeded, out.End.Result.State)
	for _, e := range allEffects(ctx, t, sb) {
		require.NotEqual(t, invoices[0].ID, e.Reverses, "the invoice was not reversed")
	}

	delta := callsDelta(callsBefore, allCalls(ctx, t, sb))
	require.Equal(t, 1, delta["refunds.create"], "one refund request for the whole run; calls %v", delta)
	require.Equal(t, 1, delta["invoices.create"], "one invoice request: the resent and the changed turn called nothing; calls %v", delta)
	require.Equal(t, 1, delta["orders.get"], "one order read; calls %v", delta)
	return out
}

// refundPlanTS is the plan planner-ts starts, built in Go.
func refundPlanTS(t *testing.T, session, order string) plan.Plan {
	t.Helper()
	p := newPlan(session, step(t, demotools.ApplyRefund, map[string]any{
		"order_id": order, "amount_minor": 75000, "currency": "EUR", "reason": "damaged in transit (planner-ts)"}))
	p.RequestID, p.RequestedBy = "req-"+session, "ts-planner"
	return p
}

// TestPlannerTypeScript runs the TypeScript planner (official
// @temporalio/client) against the dev stack's own worker: it starts a plan
// by name, answers the approval by Update, runs a session turn by
// Update-with-Start, resends it and reads status. The effects are counted at
// the providers, and the Go client reads what the TypeScript client wrote.
// The stack encrypts payloads (devstack.Stack.Keyring): the TypeScript
// client gets the same keys in a key file, as an operator would.
func TestPlannerTypeScript(t *testing.T) {
	plannerTS(t)
	st := sharedStack(t)
	r := plannerRun{session: "it-ts-stack", order: "ord_it_ts_stack", taskQueue: workflows.TaskQueue, plans: st.Plans}
	if st.Keyring != nil {
		r.env = append(r.env, keyFileEnv(t, st.Keyring))
	}
	out := runPlanner(t, st, r)
	require.Equal(t, st.Keyring != nil, out.Done.Codec.On, "the planner encrypts exactly when the stack does")
	if st.Keyring != nil {
		require.Equal(t, st.Keyring.Current(), out.Done.Codec.Current)
	}
}

// TestPlannerTypeScriptEncrypted runs the planner against a worker whose
// client encrypts with the Go codec, the two sides holding the same two
// keys but sealing with different ones: the TypeScript client must open
// what Go sealed under go-1 and seal under ts-1 what Go then opens. The
// history holds only ciphertext, each payload naming the key that sealed it.
func TestPlannerTypeScriptEncrypted(t *testing.T) {
	plannerTS(t)
	st := sharedStack(t)
	ctx := testContext(t, 3*time.Minute)
	goRing, tsRing := twoKeyrings(t)

	opts := client.Options{HostPort: st.Server.FrontendAddr(), Namespace: st.Server.Namespace(),
		Logger: sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler))}
	codec.ClientOptions(&opts, goRing)
	c, err := client.Dial(opts)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	const tq = "agent-saga-ts-codec"
	w, err := sagaworker.New(c, sagaworker.Options{TaskQueue: tq, Tools: st.Tools, Ledger: st.Ledger})
	require.NoError(t, err)
	require.NoError(t, w.Start())
	t.Cleanup(w.Stop)

	r := plannerRun{session: "it-ts-codec", order: "ord_it_ts_codec", taskQueue: tq, env: []string{keyFileEnv(t, tsRing)},
		plans: sagaclient.New(codec.DecodeMemos(c, codec.New(goRing)), sagaclient.Options{TaskQueue: tq, Catalog: st.Tools})}
	out := runPlanner(t, st, r)
	require.True(t, out.Done.Codec.On)
	require.Equal(t, "ts-1", out.Done.Codec.Current)

	// The history, read raw (st.Client has no codec): the input the
	// TypeScript client sent is sealed under ts-1, the result the Go worker
	// wrote under go-1, and neither shows the order id.
	input, result := startAndResult(ctx, t, st.Client, plan.WorkflowID(r.session, 1))
	for _, c := range []struct {
		p   *commonpb.Payload
		key string
	}{{input, "ts-1"}, {result, "go-1"}} {
		require.Equal(t, codec.EncodingEncrypted, string(c.p.GetMetadata()[converter.MetadataEncoding]))
		require.Equal(t, c.key, string(c.p.GetMetadata()[codec.MetadataKeyID]))
		require.NotContains(t, string(c.p.GetData()), r.order)
	}
}

// twoKeyrings returns two keyrings of the same keys go-1 and ts-1, current
// go-1 and ts-1 respectively.
func twoKeyrings(t *testing.T) (goRing, tsRing *codec.Keyring) {
	t.Helper()
	keys := map[string][]byte{"go-1": bytes.Repeat([]byte{0x11}, codec.KeySize), "ts-1": bytes.Repeat([]byte{0x7e}, codec.KeySize)}
	goRing, err := codec.NewKeyring("go-1", keys)
	require.NoError(t, err)
	tsRing, err = codec.NewKeyring("ts-1", keys)
	require.NoError(t, err)
	return goRing, tsRing
}

// startAndResult returns the raw input and result payloads of a closed
// workflow from its history.
func startAndResult(ctx context.Context, t *testing.T, c client.Client, workflowID string) (input, result *commonpb.Payload) {
	t.Helper()
	it := c.GetWorkflowHistory(ctx, workflowID, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		e, err := it.Next()
		require.NoError(t, err)
		if a := e.GetWorkflowExecutionStartedEventAttributes(); a != nil {
			input = a.GetInput().GetPayloads()[0]
		}
		if a := e.GetWorkflowExecutionCompletedEventAttributes(); a != nil {
			result = a.GetResult().GetPayloads()[0]
		}
	}
	require.NotNil(t, input, "started event of %s", workflowID)
	require.NotNil(t, result, "completed event of %s", workflowID)
	return input, result
}

// wirePayload is a payload as codec-cli reads and prints it.
type wirePayload struct {
	Metadata map[string]string `json:"metadata"`
	Data     string            `json:"data"`
}

func toWire(ps []*commonpb.Payload) []wirePayload {
	out := make([]wirePayload, len(ps))
	for i, p := range ps {
		out[i] = wirePayload{Metadata: map[string]string{}, Data: base64.StdEncoding.EncodeToString(p.GetData())}
		for k, v := range p.GetMetadata() {
			out[i].Metadata[k] = base64.StdEncoding.EncodeToString(v)
		}
	}
	return out
}

func fromWire(t *testing.T, ws []wirePayload) []*commonpb.Payload {
	t.Helper()
	out := make([]*commonpb.Payload, len(ws))
	for i, w := range ws {
		data, err := base64.StdEncoding.DecodeString(w.Data)
		require.NoError(t, err)
		out[i] = &commonpb.Payload{Metadata: map[string][]byte{}, Data: data}
		for k, v := range w.Metadata {
			b, err := base64.StdEncoding.DecodeString(v)
			require.NoError(t, err)
			out[i].Metadata[k] = b
		}
	}
	return out
}

// TestTypeScriptCodecMatchesGo checks the TypeScript codec against the Go
// codec byte for byte, without a server: each opens what the other sealed,
// a changed byte or a key it lacks is refused, and plain payloads pass.
func TestTypeScriptCodecMatchesGo(t *testing.T) {
	node, dist := plannerTS(t)
	ctx := testContext(t, time.Minute)
	cli := filepath.Join(dist, "codec-cli.js")
	goRing, tsRing := twoKeyrings(t)
	goCodec := codec.New(goRing)
	ts := func(ring *codec.Keyring, op string, ps []*commonpb.Payload) ([]*commonpb.Payload, string) {
		t.Helper()
		in, err := json.Marshal(map[string]any{"op": op, "payloads": toWire(ps)})
		require.NoError(t, err)
		var env []string
		if ring != nil {
			env = append(env, keyFileEnv(t, ring))
		}
		stdout, stderr, code := runNode(ctx, t, node, cli, plannerEnv(t, env...), in)
		var out struct {
			Payloads []wirePayload `json:"payloads"`
			Error    string        `json:"error"`
		}
		require.NoError(t, json.Unmarshal([]byte(stdout), &out), "codec-cli stdout %q stderr %q", stdout, stderr)
		require.Equal(t, out.Error != "", code != 0, "codec-cli exits 1 exactly on an error")
		return fromWire(t, out.Payloads), out.Error
	}
	plain, err := converter.GetDefaultDataConverter().ToPayloads(
		map[string]any{"order_id": "ord_1002", "amount_minor": 150000, "note": "<&> ünïcode"}, "second", []byte{0, 1, 2})
	require.NoError(t, err)

	// Go seals (under go-1), TypeScript opens.
	sealed, err := goCodec.Encode(plain.Payloads)
	require.NoError(t, err)
	opened, msg := ts(tsRing, "decode", sealed)
	require.Empty(t, msg)
	requireSamePayloads(t, plain.Payloads, opened)

	// TypeScript seals (under ts-1), Go opens.
	tsSealed, msg := ts(tsRing, "encode", plain.Payloads)
	require.Empty(t, msg)
	for _, p := range tsSealed {
		require.Equal(t, codec.EncodingEncrypted, string(p.GetMetadata()[converter.MetadataEncoding]))
		require.Equal(t, "ts-1", string(p.GetMetadata()[codec.MetadataKeyID]))
		require.Len(t, p.GetMetadata(), 2, "an encrypted payload shows only its encoding and key id")
		require.NotContains(t, string(p.GetData()), "ord_1002")
	}
	back, err := goCodec.Decode(tsSealed)
	require.NoError(t, err)
	requireSamePayloads(t, plain.Payloads, back)

	// Plain payloads decode unchanged (histories from before the codec).
	passed, msg := ts(tsRing, "decode", plain.Payloads)
	require.Empty(t, msg)
	requireSamePayloads(t, plain.Payloads, passed)

	// A changed byte is refused by both.
	bad := []*commonpb.Payload{clonePayload(sealed[0])}
	bad[0].Data[len(bad[0].Data)-1] ^= 1
	_, msg = ts(tsRing, "decode", bad)
	require.Contains(t, msg, "does not authenticate")
	_, err = goCodec.Decode(bad)
	require.ErrorIs(t, err, codec.ErrTampered)

	// The key id is bound to the ciphertext: relabelled, it does not open.
	relabelled := []*commonpb.Payload{clonePayload(tsSealed[0])}
	relabelled[0].Metadata[codec.MetadataKeyID] = []byte("go-1")
	_, msg = ts(tsRing, "decode", relabelled)
	require.Contains(t, msg, "does not authenticate")

	// A key the keyring lacks, and no keyring at all, are refused by name.
	other, err := codec.GenerateKeyring("other-1")
	require.NoError(t, err)
	_, msg = ts(other, "decode", sealed[:1])
	require.Contains(t, msg, `"go-1"`)
	require.Contains(t, msg, "not in the keyring")
	_, msg = ts(nil, "decode", sealed[:1])
	require.Contains(t, msg, codec.EnvKeysFile, "without keys the error says how to give them")
}

func requireSamePayloads(t *testing.T, want, got []*commonpb.Payload) {
	t.Helper()
	require.Len(t, got, len(want))
	for i := range want {
		require.Equal(t, want[i].GetData(), got[i].GetData(), "payload %d data", i)
		require.Equal(t, len(want[i].GetMetadata()), len(got[i].GetMetadata()), "payload %d metadata", i)
		for k, v := range want[i].GetMetadata() {
			require.Equal(t, v, got[i].GetMetadata()[k], "payload %d metadata %s", i, k)
		}
	}
}

func clonePayload(p *commonpb.Payload) *commonpb.Payload {
	c := &commonpb.Payload{Metadata: map[string][]byte{}, Data: bytes.Clone(p.GetData())}
	for k, v := range p.GetMetadata() {
		c.Metadata[k] = bytes.Clone(v)
	}
	return c
}
