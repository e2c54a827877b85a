package integration

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/converter"

	"github.com/agentsaga/agentsaga/internal/cli"
	"github.com/agentsaga/agentsaga/internal/devstack"
	"github.com/agentsaga/agentsaga/internal/sandbox"
	"github.com/agentsaga/agentsaga/operators"
	"github.com/agentsaga/agentsaga/plan"
	"github.com/agentsaga/agentsaga/workflows"
)

// consoleBrowserStep installs what the console's browser tests need.
const consoleBrowserStep = "(cd integration/console-browser && npm ci --no-audit --no-fund) and apt-get install -y chromium"

// envScreenshots, when set to a directory, makes the browser test write the
// README's screenshots there (docs/img): the console and the Temporal UI's
// page of the waiting plan.
const envScreenshots = "AGENTSAGA_SCREENSHOTS"

// consoleBrowser returns node, the directory of integration/console-browser
// with playwright-core installed, and Chromium; without them the test fails
// under CI=true and is skipped, with the reason, otherwise.
func consoleBrowser(t *testing.T) (node, dir, chromium string) {
	t.Helper()
	const purpose = "test the console in a browser"
	node, dir = nodePackages(t, "console-browser", filepath.Join("playwright-core", "package.json"), consoleBrowserStep, purpose,
		"PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1")
	chromium = os.Getenv("CHROMIUM")
	if chromium == "" {
		chromium = "/usr/bin/chromium"
	}
	if _, err := os.Stat(chromium); err != nil {
		missingPeer(t, consoleBrowserStep, purpose)("Chromium is not installed at %s (%v)", chromium, err)
	}
	return node, dir, chromium
}

// startConsole runs `starter console` (internal/cli, as a team's binary
// runs it) against st, signing with keyFile, until the test ends, and
// returns the URL it printed.
func startConsole(t *testing.T, st *devstack.Stack, keyFile string) string {
	t.Helper()
	u, _ := startConsoleOn(t, st, keyFile, "127.0.0.1:0")
	return u
}

// startConsoleOn starts the console with keyFile (none when empty: give
// --by in extra) on listen; stop stops it (and is called when the test
// ends).
func startConsoleOn(t testing.TB, st *devstack.Stack, keyFile, listen string, extra ...string) (u string, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	args := []string{"console", "--address", st.Server.FrontendAddr(), "--namespace", st.Server.Namespace(), "--listen", listen, "--ui-url", st.Server.UIURL()}
	if keyFile != "" {
		args = append(args, "--key", keyFile)
	}
	go func() {
		err := cli.Run(ctx, append(args, extra...), nil, pw, cli.Config{})
		_ = pw.CloseWithError(fmt.Errorf("console ended: %v", err))
		done <- err
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			require.NoError(t, <-done, "the console stops cleanly")
		})
	}
	t.Cleanup(stop)
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		if u, ok := strings.CutPrefix(sc.Text(), "open "); ok {
			go func() { _, _ = io.Copy(io.Discard, pr) }()
			return u, stop
		}
	}
	require.FailNow(t, "the console printed no URL", "%v", sc.Err())
	return "", stop
}

// browserResult is what console.mjs saw.
type browserResult struct {
	Card       string   `json:"card"`
	CardDigest string   `json:"card_digest"`
	Age        string   `json:"age"`
	Expiry     string   `json:"expiry"`
	Decided    string   `json:"decided"`
	URL        string   `json:"url_after_login"`
	Buttons    []string `json:"buttons"`
	Does       string   `json:"does"`
}

// runBrowser runs console.mjs with env and returns what it saw.
func runBrowser(ctx context.Context, t *testing.T, env ...string) browserResult {
	t.Helper()
	var res browserResult
	runBrowserInto(ctx, t, &res, env...)
	return res
}

// runBrowserInto runs console.mjs with env and reads what it saw into res.
func runBrowserInto(ctx context.Context, t *testing.T, res any, env ...string) {
	t.Helper()
	node, dir, chromium := consoleBrowser(t)
	cmd := exec.CommandContext(ctx, node, "console.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), append(env, "CHROMIUM="+chromium)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	require.NoError(t, cmd.Run(), "console.mjs: %s", stderr.String())
	t.Logf("browser run took %s", time.Since(start).Round(time.Millisecond))
	require.NoError(t, json.Unmarshal(bytes.TrimSpace(stdout.Bytes()), res), "%s", stdout.String())
}

// consoleStack is a dev stack whose worker verifies decisions against an
// operators file naming alice and bob, and their key files; the browser
// tests use it.
var consoleStack struct {
	once    sync.Once
	st      *devstack.Stack
	keyFile string
	bobFile string
	err     error
}

func operatorStack(t *testing.T) (*devstack.Stack, string) {
	t.Helper()
	consoleStack.once.Do(func() {
		alice, err := operators.NewKey("alice", rand.Reader)
		if err != nil {
			consoleStack.err = err
			return
		}
		dir, err := os.MkdirTemp("", "agentsaga-console-it-")
		if err != nil {
			consoleStack.err = err
			return
		}
		consoleStack.keyFile = filepath.Join(dir, "alice.key")
		if consoleStack.err = alice.Write(consoleStack.keyFile); consoleStack.err != nil {
			return
		}
		bob, err := operators.NewKey("bob", rand.Reader)
		if err != nil {
			consoleStack.err = err
			return
		}
		consoleStack.bobFile = filepath.Join(dir, "bob.key")
		if consoleStack.err = bob.Write(consoleStack.bobFile); consoleStack.err != nil {
			return
		}
		file, _ := json.Marshal(operators.File{Operators: []operators.Operator{alice.Entry(), bob.Entry()}})
		ring, err := operators.Parse(file)
		if err != nil {
			consoleStack.err = err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		consoleStack.st, consoleStack.err = devstack.Start(ctx, devstack.Options{Operators: ring, DataDir: filepath.Join(dir, "data")})
	})
	require.NoError(t, consoleStack.err, "start the operators' stack")
	return consoleStack.st, consoleStack.keyFile
}

// (a) of issue 21: an operator opens the console in Chromium, finds the
// waiting 600.00 EUR refund with its card, and approves it with a reason.
// The acquirer (its own store) holds exactly one refund under the key, and
// the audit trail names alice, verified, with the reason and the digest of
// the card the page showed.
func TestConsoleApprovesARefundInTheBrowser(t *testing.T) {
	consoleBrowser(t) // before anything starts: skip or fail at once
	st, keyFile := operatorStack(t)
	ctx := testContext(t, 2*time.Minute)
	sb := sandbox.NewClient(st.SandboxURL, nil)
	p := newPlan("it-console-refund", step(t, "apply_refund", map[string]any{"order_id": "ord_it_console", "amount_minor": 60000, "currency": "EUR", "reason": "arrived damaged"}))
	run, err := st.Plans.Start(ctx, p)
	require.NoError(t, err)
	waiting := waitStatus(ctx, t, st, run.WorkflowID, questionOn(1, workflows.QuestionApproval))
	q := waiting.Questions[0]
	require.Equal(t, "600.00 EUR", q.Card.Amount)
	listedWaiting(ctx, t, st, run.WorkflowID)

	env := []string{"CONSOLE_URL=" + startConsole(t, st, keyFile), "SCENARIO=approve", "WORKFLOW_ID=" + run.WorkflowID,
		"AMOUNT=600.00 EUR", "REASON=customer verified by phone, ticket 4711"}
	if dir := os.Getenv(envScreenshots); dir != "" {
		// The screenshot shows an outcome question beside the approval: an
		// e-mail whose answer was lost, left for a person.
		require.NoError(t, sb.Fault(ctx, sandbox.FaultSpec{Op: "mail.send", Fault: sandbox.CommitThenDrop, Count: 1}))
		mail, err := st.Plans.Start(ctx, newPlan("it-console-shot-mail", step(t, "send_email", map[string]any{"to": "ana@example.com", "subject": "Your refund of 129.00 EUR", "body": "It is on its way."})))
		require.NoError(t, err)
		waitStatus(ctx, t, st, mail.WorkflowID, questionOn(1, workflows.QuestionOutcome))
		env = append(env, envScreenshots+"="+dir, "UI_PLAN_URL="+st.Server.UIURL()+"/namespaces/"+st.Server.Namespace()+"/workflows/"+run.WorkflowID,
			"CODEC_LOGIN_URL="+st.CodecURL+"/login", "CODEC_TOKEN="+st.CodecToken)
	}
	seen := runBrowser(ctx, t, env...)
	require.NotContains(t, seen.URL, "token", "the token left the address bar")
	require.Contains(t, seen.Card, "order_id ord_it_console")
	require.Contains(t, seen.Expiry, "expires in")
	require.Equal(t, workflows.CardDigest(q.Card), seen.CardDigest, "the page showed the card's digest")
	require.Contains(t, seen.Decided, "alice (verified)")

	final, err := st.Plans.WaitRun(ctx, run)
	require.NoError(t, err)
	require.Equal(t, workflows.SagaSucceeded, final.State, "plan error: %s", final.Error)
	require.Equal(t, 1, countKind(effectsUnder(ctx, t, sb, p.Key(1)), "refund"), "exactly one refund at the acquirer")

	trail, err := st.Ledger.Decisions(ctx, p.Key(1))
	require.NoError(t, err)
	require.Len(t, trail, 1)
	d := trail[0]
	require.Equal(t, "approve", d.Kind)
	require.Equal(t, "alice", d.By)
	require.True(t, d.Verified, "signed with alice's key and verified by the worker")
	require.Equal(t, "customer verified by phone, ticket 4711", d.Note)
	require.Equal(t, seen.CardDigest, d.CardDigest, "the audit trail holds the digest of the card shown")
	var recorded workflows.Card
	require.NoError(t, json.Unmarshal(d.Card, &recorded))
	require.Equal(t, d.CardDigest, workflows.CardDigest(recorded), "and it is the digest of the card recorded")

	// starter audit shows it.
	var out bytes.Buffer
	require.NoError(t, cli.Run(ctx, []string{"audit", p.Key(1), "--ledger", st.LedgerDSN}, nil, &out, cli.Config{}))
	require.Contains(t, out.String(), "approve by alice (verified)")
	require.Contains(t, out.String(), d.CardDigest+" (the card recorded here)")
}

// readmeWaitingQuery is the README's list query for plans waiting for a
// person, with their state ("The Temporal UI says what it shows").
const readmeWaitingQuery = "ExecutionStatus = 'Running' AND AgentSagaNeedsHuman = true AND AgentSagaState IN ('waiting_approval', 'needs_human')"

// listedWaiting waits until the README's query lists id with state
// waiting_approval.
func listedWaiting(ctx context.Context, t *testing.T, st *devstack.Stack, id string) {
	t.Helper()
	require.Contains(t, readme(t), readmeWaitingQuery, "the query tested is the README's")
	for {
		resp, err := st.Client.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: readmeWaitingQuery})
		require.NoError(t, err)
		for _, e := range resp.GetExecutions() {
			if e.GetExecution().GetWorkflowId() == id {
				var state string
				require.NoError(t, converter.GetDefaultDataConverter().FromPayload(e.GetSearchAttributes().GetIndexedFields()[workflows.SearchAttrState], &state))
				require.Equal(t, string(workflows.SagaWaitingApproval), state)
				return
			}
		}
		select {
		case <-ctx.Done():
			require.FailNow(t, "the README's query never listed "+id)
		case <-time.After(100 * time.Millisecond): // visibility is eventually consistent: poll
		}
	}
}

// readme is the repository's README and docs/*.md together.
func readme(t *testing.T) string {
	t.Helper()
	files, err := filepath.Glob("../docs/*.md")
	require.NoError(t, err)
	var all []byte
	for _, f := range append([]string{"../README.md"}, files...) {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		all = append(all, b...)
	}
	return string(all)
}

// (b) of issue 21: an e-mail whose answer was lost (the relay committed it;
// send_email cannot look itself up) waits for a person; the operator
// resolves it from the console as succeeded with the relay's message id.
// The relay holds exactly one e-mail, and the plan and audit trail say
// alice, verified, with the id and the card digest.
func TestConsoleResolvesALostEmailInTheBrowser(t *testing.T) {
	consoleBrowser(t)
	st, keyFile := operatorStack(t)
	ctx := testContext(t, 2*time.Minute)
	sb := sandbox.NewClient(st.SandboxURL, nil)
	before := countEmails(allEffects(ctx, t, sb))
	require.NoError(t, sb.Fault(ctx, sandbox.FaultSpec{Op: "mail.send", Fault: sandbox.CommitThenDrop, Count: 1}))
	p := newPlan("it-console-mail", step(t, "send_email", map[string]any{"to": "cleo@example.com", "subject": "Your refund", "body": "It is on its way."}))
	run, err := st.Plans.Start(ctx, p)
	require.NoError(t, err)
	waiting := waitStatus(ctx, t, st, run.WorkflowID, questionOn(1, workflows.QuestionOutcome))
	var mailID string
	for _, e := range allEffects(ctx, t, sb) {
		if e.Kind == "email" {
			mailID = e.ID // the operator reads it in the relay's log
		}
	}
	require.Equal(t, before+1, countEmails(allEffects(ctx, t, sb)), "the relay committed the e-mail whose answer was lost")

	seen := runBrowser(ctx, t, "CONSOLE_URL="+startConsole(t, st, keyFile), "SCENARIO=resolve", "WORKFLOW_ID="+run.WorkflowID,
		"OUTCOME=succeeded", "EXTERNAL_ID="+mailID, "REASON=found in the relay's log")
	require.Equal(t, workflows.CardDigest(waiting.Questions[0].Card), seen.CardDigest)
	require.Contains(t, seen.Decided, "alice (verified)")
	require.Contains(t, seen.Decided, mailID)
	require.Equal(t, []string{"failed", "succeeded", "retry"}, seen.Buttons, "one order for every kind: no effect first, the riskier last, none the default")
	require.Contains(t, seen.Does, "if the first was delivered, a second send_email effect is made", "the card says what retry will do")

	final, err := st.Plans.WaitRun(ctx, run)
	require.NoError(t, err)
	require.Equal(t, workflows.SagaSucceeded, final.State, "plan error: %s", final.Error)
	require.Equal(t, mailID, final.Steps[0].ExternalID)
	require.Equal(t, before+1, countEmails(allEffects(ctx, t, sb)), "exactly one e-mail at the relay: nothing was sent again")
	trail, err := st.Ledger.Decisions(ctx, p.Key(1))
	require.NoError(t, err)
	require.Len(t, trail, 1)
	require.Equal(t, "resolve", trail[0].Kind)
	require.Equal(t, "alice", trail[0].By)
	require.True(t, trail[0].Verified)
	require.Equal(t, "succeeded", trail[0].Outcome)
	require.Equal(t, mailID, trail[0].ExternalID)
	require.Contains(t, trail[0].Note, "found in the relay's log")
	require.Equal(t, seen.CardDigest, trail[0].CardDigest)
}

// starter approve prints the card of the question it answers and records
// that card's digest with the decision, signed, as the console does.
func TestStarterApproveRecordsTheDigestOfTheCardItPrinted(t *testing.T) {
	st, keyFile := operatorStack(t)
	ctx := testContext(t, 2*time.Minute)
	p := newPlan("it-cli-digest", step(t, "apply_refund", map[string]any{"order_id": "ord_it_cli_digest", "amount_minor": 70000, "currency": "EUR", "reason": "arrived damaged"}))
	run, err := st.Plans.Start(ctx, p)
	require.NoError(t, err)
	waiting := waitStatus(ctx, t, st, run.WorkflowID, questionOn(1, workflows.QuestionApproval))
	digest := workflows.CardDigest(waiting.Questions[0].Card)
	var out bytes.Buffer
	require.NoError(t, cli.Run(ctx, []string{"approve", run.WorkflowID, "--step", "1", "--key", keyFile, "--reason", "checked the order",
		"--address", st.Server.FrontendAddr(), "--namespace", st.Server.Namespace()}, nil, &out, cli.Config{}), out.String())
	require.Contains(t, out.String(), "700.00 EUR", "the card is printed before the decision")
	require.Contains(t, out.String(), "card digest  "+digest)
	require.Contains(t, out.String(), "verified against the operators file")
	_, err = st.Plans.WaitRun(ctx, run)
	require.NoError(t, err)
	trail, err := st.Ledger.Decisions(ctx, p.Key(1))
	require.NoError(t, err)
	require.Len(t, trail, 1)
	require.True(t, trail[0].Verified)
	require.Equal(t, digest, trail[0].CardDigest)
}

// otherServer is a server on another loopback port that the operator's
// browser visits: it records the headers of every request it gets.
type otherServer struct {
	mu   sync.Mutex
	reqs []http.Header
}

func (o *otherServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	o.mu.Lock()
	o.reqs = append(o.reqs, r.Header.Clone())
	o.mu.Unlock()
	switch r.URL.Path {
	case "/pixel.gif":
		w.Header().Set("Content-Type", "image/gif")
		_, _ = w.Write([]byte("GIF89a\x01\x00\x01\x00\x00\x00\x00;"))
	default:
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = io.WriteString(w, `<!doctype html><title>another local server</title><img id="pixel" src="/pixel.gif" alt="">`)
	}
}

// Issue 35 item 1: after alice opens her console, a page on another local
// port that her browser visits gets no credential the console accepts:
// no cookie reaches it (the console sets none), the page there cannot read
// the console's storage nor call its API with the browser's credentials,
// and every header it received, replayed to the console, is refused.
func TestConsoleSessionStaysOnItsOrigin(t *testing.T) {
	consoleBrowser(t)
	st, keyFile := operatorStack(t)
	ctx := testContext(t, 2*time.Minute)
	other := &otherServer{}
	hs := httptest.NewServer(other)
	t.Cleanup(hs.Close)
	url := startConsole(t, st, keyFile)
	origin, _, _ := strings.Cut(url, "/#")
	require.NotEqual(t, origin, hs.URL)
	require.True(t, strings.HasPrefix(hs.URL, "http://127.0.0.1:") && strings.HasPrefix(origin, "http://127.0.0.1:"), "both on the same loopback name, other ports")

	var seen struct {
		OtherStorage *string `json:"other_storage"`
		OtherCookies string  `json:"other_cookies"`
		CrossFetch   string  `json:"cross_fetch"`
		NoCors       string  `json:"no_cors"`
	}
	runBrowserInto(ctx, t, &seen, "CONSOLE_URL="+url, "SCENARIO=port", "OTHER_URL="+hs.URL+"/")
	require.Nil(t, seen.OtherStorage, "the other port cannot read the console's session")
	require.Empty(t, seen.OtherCookies)
	require.Contains(t, seen.CrossFetch, "refused", "a cross-origin read of the console's API fails")

	other.mu.Lock()
	reqs := append([]http.Header(nil), other.reqs...)
	other.mu.Unlock()
	require.GreaterOrEqual(t, len(reqs), 2, "the page and its image reached the other server")
	for _, h := range reqs {
		require.Empty(t, h.Get("Cookie"), "no cookie reached the other port: %v", h)
		// Replay everything it got, as a process on that port could.
		for _, path := range []string{"/api/questions", "/api/decide"} {
			method := http.MethodGet
			if path == "/api/decide" {
				method = http.MethodPost
			}
			req, err := http.NewRequestWithContext(ctx, method, origin+path, strings.NewReader(`{}`))
			require.NoError(t, err)
			req.Header = h.Clone()
			req.Header.Set("Origin", origin)
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			_ = resp.Body.Close()
			require.Equal(t, http.StatusForbidden, resp.StatusCode, "%s %s with what the other port received", method, path)
		}
	}
}

// Issue 36 item 1: bob, whose key may only approve, finds his work: by
// default the questions he may decide (no outcome question, no resolve
// button); all questions on demand, the one he may not decide without
// buttons; a plan search paged by ten; one order; the largest amounts
// first; a bad amount named.
func TestConsoleFindsWorkInTheBrowser(t *testing.T) {
	consoleBrowser(t)
	st, _ := operatorStack(t)
	ctx := testContext(t, 3*time.Minute)
	bob, err := operators.NewKey("bob", rand.Reader)
	require.NoError(t, err)
	bob.May = []string{operators.ActionApprove}
	bobFile := filepath.Join(t.TempDir(), "bob.key")
	require.NoError(t, bob.Write(bobFile))

	var last string
	for i := range 12 {
		p := newPlan(fmt.Sprintf("it-find-%02d", i), step(t, "apply_refund", map[string]any{
			"order_id": fmt.Sprintf("ord_find_%02d", i), "amount_minor": 60000 + 2000*i, "currency": "EUR", "reason": "damaged"}))
		run, err := st.Plans.Start(ctx, p)
		require.NoError(t, err)
		last = run.WorkflowID
	}
	sb := sandbox.NewClient(st.SandboxURL, nil)
	require.NoError(t, sb.Fault(ctx, sandbox.FaultSpec{Op: "mail.send", Fault: sandbox.CommitThenDrop, Count: 1}))
	mail, err := st.Plans.Start(ctx, newPlan("it-find-mail", step(t, "send_email", map[string]any{"to": "dora@example.com", "subject": "Your refund", "body": "On its way."})))
	require.NoError(t, err)
	waitStatus(ctx, t, st, mail.WorkflowID, questionOn(1, workflows.QuestionOutcome))
	waitStatus(ctx, t, st, last, questionOn(1, workflows.QuestionApproval))

	var seen struct {
		MineOutcome    int      `json:"mine_outcome"`
		ApprovalOrder  []string `json:"approval_buttons"`
		ResolveButtons int      `json:"resolve_buttons"`
		AllOutcome     int      `json:"all_outcome"`
		OutcomeButtons int      `json:"outcome_buttons"`
		OutcomeNote    string   `json:"outcome_note"`
		Page1          int      `json:"page1"`
		Page2          int      `json:"page2"`
		One            string   `json:"one"`
		Largest        string   `json:"largest"`
		BadAmount      string   `json:"bad_amount"`
	}
	runBrowserInto(ctx, t, &seen, "CONSOLE_URL="+startConsole(t, st, bobFile), "SCENARIO=find", "PLAN=it-find-", "PREFIX=ord_find_")
	require.Zero(t, seen.MineOutcome, "the default view holds only what bob may decide")
	require.Equal(t, []string{"reject", "approve"}, seen.ApprovalOrder, "no effect first, no default")
	require.Zero(t, seen.ResolveButtons)
	require.Equal(t, 1, seen.AllOutcome)
	require.Zero(t, seen.OutcomeButtons, "no button for a right bob lacks")
	require.Contains(t, seen.OutcomeNote, "needs the resolve right")
	require.Equal(t, 10, seen.Page1)
	require.Equal(t, 2, seen.Page2)
	require.Contains(t, seen.One, "ord_find_07")
	require.Equal(t, "820.00 EUR", seen.Largest)
	require.Contains(t, seen.BadAmount, "amount_min \"lots\" is not a whole number")
}

// Issue 36 item 3: a link to one question (/q/{workflow}/{question}, as the
// webhook sends with --console-url) works after the console restarts: the
// browser's old session is refused, the page keeps the link, and once the
// operator opens the new console's link it shows that question alone.
func TestConsoleDeepLinkSurvivesARestart(t *testing.T) {
	consoleBrowser(t)
	st, keyFile := operatorStack(t)
	ctx := testContext(t, 2*time.Minute)
	p := newPlan("it-console-deeplink", step(t, "apply_refund", map[string]any{"order_id": "ord_it_deeplink", "amount_minor": 61000, "currency": "EUR", "reason": "late"}))
	run, err := st.Plans.Start(ctx, p)
	require.NoError(t, err)
	q := waitStatus(ctx, t, st, run.WorkflowID, questionOn(1, workflows.QuestionApproval)).Questions[0]

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	profile := t.TempDir()
	first, stop := startConsoleOn(t, st, keyFile, addr)
	var before struct {
		Shown []string `json:"shown"`
	}
	runBrowserInto(ctx, t, &before, "CONSOLE_URL="+first, "SCENARIO=login", "PROFILE="+profile)
	stop()
	second, _ := startConsoleOn(t, st, keyFile, addr)
	link := "http://" + addr + "/q/" + url.PathEscape(run.WorkflowID) + "/" + url.PathEscape(q.ID)
	var seen struct {
		Refused string   `json:"refused"`
		Shown   []string `json:"shown"`
		URL     string   `json:"url"`
	}
	runBrowserInto(ctx, t, &seen, "CONSOLE_URL="+second, "SCENARIO=deeplink", "PROFILE="+profile, "LINK="+link)
	require.Contains(t, seen.Refused, "open the link", "the old session is refused after the restart")
	require.Equal(t, []string{run.WorkflowID + " " + q.ID}, seen.Shown, "the link shows its question alone")
	require.Contains(t, seen.URL, "/q/", "the page is back on the question's link")
}

// Issue 36 item 7: a console started with --by (a typed name) against
// workers that require signed decisions is refused at start, not at its
// first decision.
func TestConsoleByRefusedWhenKeysAreRequired(t *testing.T) {
	st, _ := operatorStack(t)
	ctx := testContext(t, time.Minute)
	run, err := st.Plans.Start(ctx, newPlan("it-console-by", step(t, "apply_refund", map[string]any{"order_id": "ord_it_by", "amount_minor": 61000, "currency": "EUR", "reason": "late"})))
	require.NoError(t, err)
	waitStatus(ctx, t, st, run.WorkflowID, questionOn(1, workflows.QuestionApproval))
	err = cli.Run(ctx, []string{"console", "--address", st.Server.FrontendAddr(), "--namespace", st.Server.Namespace(),
		"--by", "alice", "--listen", "127.0.0.1:0"}, nil, io.Discard, cli.Config{})
	require.ErrorContains(t, err, "accept only signed decisions")
}

// Issue 36 item 2: two operators share work through claims kept in the
// ledger. Alice claims a refund's approval in her console; bob's console
// (another process's worth: its own server, session and ledger handle)
// shows "claimed by alice since HH:MM (expires HH:MM)" without a Claim
// button; alice releases it and bob sees it free; she claims it again and
// bob approves anyway. The decision is made once (one refund at the
// acquirer) and the audit trail says bob overrode alice's claim.
func TestConsoleClaimsSharedByTwoOperatorsInTheBrowser(t *testing.T) {
	consoleBrowser(t)
	st, aliceFile := operatorStack(t)
	ctx := testContext(t, 2*time.Minute)
	sb := sandbox.NewClient(st.SandboxURL, nil)
	p := newPlan("it-console-claim", step(t, "apply_refund", map[string]any{"order_id": "ord_it_claim", "amount_minor": 62000, "currency": "EUR", "reason": "twice charged"}))
	run, err := st.Plans.Start(ctx, p)
	require.NoError(t, err)
	waitStatus(ctx, t, st, run.WorkflowID, questionOn(1, workflows.QuestionApproval))

	alice, _ := startConsoleOn(t, st, aliceFile, "127.0.0.1:0", "--ledger", st.LedgerDSN)
	bob, _ := startConsoleOn(t, st, consoleStack.bobFile, "127.0.0.1:0", "--ledger", st.LedgerDSN)
	var seen struct {
		AliceClaimed string `json:"alice_claimed"`
		BobSees      string `json:"bob_sees"`
		BobTake      bool   `json:"bob_take_visible"`
		BobFree      string `json:"bob_free"`
		BobResult    string `json:"bob_result"`
	}
	runBrowserInto(ctx, t, &seen, "CONSOLE_URL="+alice, "OTHER_CONSOLE_URL="+bob, "SCENARIO=claim", "WORKFLOW_ID="+run.WorkflowID,
		"REASON=customer called twice, approving now")
	require.Regexp(t, `^claimed by you \(alice\) since \d\d:\d\d UTC \(expires \d\d:\d\d UTC\)$`, seen.AliceClaimed)
	require.Regexp(t, `^claimed by alice since \d\d:\d\d UTC \(expires \d\d:\d\d UTC\): deciding anyway overrides the claim`, seen.BobSees)
	require.False(t, seen.BobTake, "bob cannot take alice's claim")
	require.Equal(t, "not claimed", seen.BobFree, "released: bob sees it free")
	require.Contains(t, seen.BobResult, "overrode the claim of alice")

	final, err := st.Plans.WaitRun(ctx, run)
	require.NoError(t, err)
	require.Equal(t, workflows.SagaSucceeded, final.State, "plan error: %s", final.Error)
	require.Equal(t, 1, countKind(effectsUnder(ctx, t, sb, p.Key(1)), "refund"), "exactly one refund at the acquirer")
	trail, err := st.Ledger.Decisions(ctx, p.Key(1))
	require.NoError(t, err)
	require.Len(t, trail, 1)
	require.Equal(t, "bob", trail[0].By)
	require.True(t, trail[0].Verified)
	require.Regexp(t, `^\(overrides the claim of alice, held since \d{4}-\d\d-\d\d \d\d:\d\d UTC until \d\d:\d\d UTC\) customer called twice, approving now$`, trail[0].Note)
	claims, err := st.Ledger.QuestionClaims(ctx)
	require.NoError(t, err)
	for _, c := range claims {
		require.NotEqual(t, run.WorkflowID, c.WorkflowID, "the claim was released with the decision")
	}
}

// cardsSeen is what the cards scenario of console.mjs saw, by kind.
type cardsSeen struct {
	Cards map[string]struct {
		Lines []struct {
			Label string `json:"label"`
			Value string `json:"value"`
		} `json:"lines"`
		Buttons []string `json:"buttons"`
		Does    []string `json:"does"`
	} `json:"cards"`
}

// Issue 36, item 4: one question of each kind, as an operator sees it in
// Chromium. The approval card says the request's reason and arguments; the
// lost e-mail's outcome card says when it was sent and what came back, and
// that retry sends a second e-mail if the first was delivered; the failed
// reversal's card names the reversal's own change and key, the payment it
// undoes and the provider's refusal on a line of its own. Every kind has
// one button order (no new effect first, the riskier last) and no default.
func TestConsoleShowsEveryKindOfCardInTheBrowser(t *testing.T) {
	consoleBrowser(t)
	st, keyFile := operatorStack(t)
	ctx := testContext(t, 3*time.Minute)
	sb := sandbox.NewClient(st.SandboxURL, nil)
	for _, f := range []sandbox.FaultSpec{
		{Op: "mail.send", Fault: sandbox.CommitThenDrop, Count: 1},
		{Op: "invoices.create", Fault: sandbox.Reject, Count: 1},
		{Op: "payments.reverse", Fault: sandbox.Reject, Count: 1},
	} {
		require.NoError(t, sb.Fault(ctx, f))
	}
	ids := map[string]string{}
	for kind, p := range map[string]plan.Plan{
		workflows.QuestionApproval: newPlan("it-cards-approval", step(t, "apply_refund", map[string]any{"order_id": "ord_it_cards", "amount_minor": 60000, "currency": "EUR", "reason": "arrived damaged"})),
		workflows.QuestionOutcome:  newPlan("it-cards-outcome", step(t, "send_email", map[string]any{"to": "dora@example.com", "subject": "Your refund of 12.00 EUR", "body": "It is on its way."})),
		workflows.QuestionReversal: newPlan("it-cards-reversal",
			step(t, "create_payment", map[string]any{"customer_id": "cus_ana", "amount_minor": 1200, "currency": "EUR", "payment_method": "tok_visa", "description": "order ord_it_cards"}),
			step(t, "create_invoice", map[string]any{"customer_id": "cus_ana", "amount_minor": 1200, "currency": "EUR"})),
	} {
		run, err := st.Plans.Start(ctx, p)
		require.NoError(t, err)
		ids[kind] = run.WorkflowID
	}
	waitStatus(ctx, t, st, ids[workflows.QuestionApproval], questionOn(1, workflows.QuestionApproval))
	waitStatus(ctx, t, st, ids[workflows.QuestionOutcome], questionOn(1, workflows.QuestionOutcome))
	reversal := waitStatus(ctx, t, st, ids[workflows.QuestionReversal], questionOn(1, workflows.QuestionReversal))
	t.Cleanup(func() {
		// Answered, so the shared stack has no question of this test left.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		conn := []string{"--key", keyFile, "--address", st.Server.FrontendAddr(), "--namespace", st.Server.Namespace()}
		for _, args := range [][]string{
			{"approve", ids[workflows.QuestionApproval], "--step", "1", "--reject", "--reason", "test over"},
			{"resolve", ids[workflows.QuestionOutcome], "--step", "1", "--outcome", "failed", "--note", "test over"},
			{"resolve", ids[workflows.QuestionReversal], "--step", "1", "--outcome", "failed", "--note", "test over"},
		} {
			var out bytes.Buffer
			require.NoError(t, cli.Run(ctx, append(args, conn...), nil, &out, cli.Config{}), out.String())
		}
	})

	cards, _ := json.Marshal(ids)
	var seen cardsSeen
	runBrowserInto(ctx, t, &seen, "CONSOLE_URL="+startConsole(t, st, keyFile), "SCENARIO=cards", "CARDS="+string(cards))
	for kind, c := range seen.Cards {
		for _, l := range c.Lines {
			t.Logf("%s card: %s: %s", kind, l.Label, l.Value)
		}
		t.Logf("%s buttons %v; %s", kind, c.Buttons, strings.Join(c.Does, " | "))
	}
	line := func(kind, label string) []string {
		var out []string
		for _, l := range seen.Cards[kind].Lines {
			if l.Label == label {
				out = append(out, l.Value)
			}
		}
		return out
	}
	does := func(kind, prefix string) string {
		for _, d := range seen.Cards[kind].Does {
			if strings.HasPrefix(d, prefix) {
				return d
			}
		}
		return ""
	}

	a := workflows.QuestionApproval
	require.Equal(t, []string{"arrived damaged"}, line(a, "reason"), "the request's reason")
	require.Contains(t, line(a, "argument"), "amount_minor: 600.00 EUR")
	require.Equal(t, []string{"reject", "approve"}, seen.Cards[a].Buttons)
	require.Contains(t, does(a, "Approve"), "runs apply_refund once")

	o := workflows.QuestionOutcome
	require.Contains(t, line(o, "argument"), "subject: Your refund of 12.00 EUR")
	calls := line(o, "call")
	require.Len(t, calls, 1, "when it was sent and what came back")
	require.Regexp(t, `^\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ, \d+ attempts?: `, calls[0])
	require.Equal(t, []string{"failed", "succeeded", "retry"}, seen.Cards[o].Buttons, "one order, none the default")
	require.Contains(t, does(o, "Call again"), "if the first was delivered, a second send_email effect is made")
	require.Contains(t, does(o, "It happened"), "on your word")

	r := workflows.QuestionReversal
	comp := reversal.Steps[0].Compensation
	require.Equal(t, []string{"failed", "succeeded", "retry"}, seen.Cards[r].Buttons, "the same order as an outcome, none the default")
	require.True(t, strings.HasPrefix(line(r, "change")[0], comp.Tool+":"), "the reversal's own change: %v", line(r, "change"))
	require.Equal(t, []string{"create_payment effect " + reversal.Steps[0].ExternalID + " under key " + reversal.Steps[0].Key}, line(r, "reverses"))
	require.Equal(t, []string{comp.Key}, line(r, "reversal key"))
	answered := line(r, "provider answered")
	require.Len(t, answered, 1, "the provider's refusal, on a line of its own")
	require.NotEmpty(t, answered[0])
	require.NotContains(t, line(r, "rule")[0], answered[0], "and not buried in the rule")
	require.Contains(t, does(r, "Call again"), "new reversal request goes out under key "+comp.Key+":2")
}
