package probe_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/agentsaga/agentsaga/catalog"
	"github.com/agentsaga/agentsaga/mcptool/mcptest"
	"github.com/agentsaga/agentsaga/tool"
	"github.com/agentsaga/agentsaga/tool/probe"
)

// envRecord, set to 1, makes TestProbeMailpit write its output to
// docs/probe-mailpit.txt, which the docs include.
const envRecord = "AGENTSAGA_RECORD_PROBE"

// mailpitRoot returns the Mailpit .ci/run starts (env
// AGENTSAGA_TEST_MAILPIT_URL), or skips (fails under CI=true).
func mailpitRoot(t *testing.T) string {
	t.Helper()
	const env = "AGENTSAGA_TEST_MAILPIT_URL"
	u := os.Getenv(env)
	if u == "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is not set under CI=true: .ci/run starts Mailpit and sets it", env)
		}
		t.Skipf("%s is not set: start Mailpit (go install github.com/axllent/mailpit@v1.33.1; mailpit --max 0 --ignore-duplicate-ids) and set it to its HTTP root", env)
	}
	return strings.TrimRight(u, "/")
}

func repoPath(parts ...string) string {
	_, self, _, _ := runtime.Caller(0)
	return filepath.Join(append([]string{filepath.Dir(self), "..", ".."}, parts...)...)
}

// claimsFor is what `starter tools probe` assumes of a catalogue tool.
func claimsFor(cat *catalog.Catalog, tl tool.Tool) probe.Claims {
	return probe.ClaimsOf(tl.Spec())
}

// settleWant checks the settle verdict on a provider that commits an
// abandoned request at once: it agrees when the key holds a resend or the
// horizon is longer than the landing, and contradicts an engine that
// counts an absent answer at once.
func settleWant(t *testing.T, rep probe.Report) {
	t.Helper()
	v, _ := rep.Verdict(probe.Settle)
	k, _ := rep.Verdict(probe.Key)
	if strings.Contains(v.Finding, "did not land") && v.Outcome == probe.Agrees {
		// Given up on at once, a request is sometimes not processed at all.
		t.Logf("the abandoned request did not land this time: %v", v.Evidence)
		return
	}
	if !strings.Contains(v.Finding, "an abandoned request lands") {
		t.Fatalf("settle: %s %q, want an abandoned request that lands; evidence:\n%s", v.Outcome, v.Finding, strings.Join(v.Evidence, "\n"))
	}
	honours := strings.HasPrefix(k.Finding, "honours")
	if (honours || rep.Claims.Horizon() >= time.Second) != (v.Outcome == probe.Agrees) {
		t.Errorf("settle: %s with the key %q and a horizon of %s", v.Outcome, k.Finding, rep.Claims.Horizon())
	}
}

// Mailpit (catalog/examples/mailpit.yaml): a real mail server nobody here
// wrote, run by .ci/run with --ignore-duplicate-ids, so it honours the
// Message-ID made from the key; its search finds a message at once and
// never one that was not sent.
func TestProbeMailpit(t *testing.T) {
	root := mailpitRoot(t)
	cat, err := catalog.LoadWith(catalog.Options{Getenv: func(k string) (string, bool) {
		if k == "AGENTSAGA_MAILPIT_URL" {
			return root, true
		}
		return "", false
	}}, repoPath("catalog", "examples", "mailpit.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	tl := toolOf(t, cat, "send_email")
	session := probe.NewSession()
	rep, err := probe.Run(context.Background(), tl, probe.Options{Session: session, Claims: claimsFor(cat, tl),
		Args: probe.ArgsTemplate(json.RawMessage(`{"to":"qa@example.com","subject":"probe {probe}","body":"A probe of send_email."}`), session)})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := rep.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + b.String())
	k, _ := rep.Verdict(probe.Key)
	if k.Outcome != probe.Agrees || !strings.Contains(k.Finding, "the key") {
		t.Errorf("key: %s %q, want agrees (NON_IDEMPOTENT_WRITE assumes nothing of the key)", k.Outcome, k.Finding)
	}
	want(t, rep, probe.Lookup, probe.Agrees, "finds a fresh effect at once")
	want(t, rep, probe.Absent, probe.Agrees, "stays absent, authoritatively")
	settleWant(t, rep)
	if !rep.Safe.Authoritative || rep.Safe.Lag != 0 || rep.Safe.Class != tool.NonIdempotentWrite {
		t.Errorf("safe settings %s, want NON_IDEMPOTENT_WRITE, no lag, authoritative", rep.Safe)
	}
	if os.Getenv(envRecord) == "1" {
		out := "$ starter tools probe --tools catalog/examples/mailpit.yaml \\\n    --args 'send_email={\"to\":\"qa@example.com\",\"subject\":\"probe {probe}\",\"body\":\"A probe of send_email.\"}'\n" + b.String()
		if err := os.WriteFile(repoPath("docs", "probe-mailpit.txt"), []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// An MCP server from npm (@modelcontextprotocol/server-memory, the
// remember tool of catalog/examples/mcp-filesystem.yaml): it ignores the
// key and makes an entity once per name, its lookup (open_nodes by name)
// finds one at once, and a call the client gave up on still lands: MCP
// cancellation is advisory.
func TestProbeMCPServer(t *testing.T) {
	src, env, _ := mcptest.Example(t)
	cat, err := catalog.ParseWith(catalog.Options{Getenv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }},
		catalog.Source{Name: "mcp-filesystem.yaml", Data: src})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cat.Close() })
	tl := toolOf(t, cat, "remember")
	session := probe.NewSession()
	rep, err := probe.Run(context.Background(), tl, probe.Options{Session: session, Claims: claimsFor(cat, tl), Poll: 50 * time.Millisecond,
		Args: probe.ArgsTemplate(json.RawMessage(`{"name":"probe-{probe}","kind":"probe","fact":"a probe of remember"}`), session)})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	_ = rep.WriteText(&b)
	t.Log("\n" + b.String())
	want(t, rep, probe.Lookup, probe.Agrees, "finds a fresh effect at once")
	want(t, rep, probe.Absent, probe.Agrees, "stays absent, authoritatively")
	settleWant(t, rep)
}
