package probe_test

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/agentsaga/agentsaga/catalog"
	"github.com/agentsaga/agentsaga/internal/sandbox"
	"github.com/agentsaga/agentsaga/tool"
	"github.com/agentsaga/agentsaga/tool/probe"
)

// mailCatalog declares the sandbox's mail relay as a lookup-only provider:
// the key goes in a body field the relay keeps but never deduplicates by,
// and the lookup searches by it. class is the class the test declares.
func mailCatalog(class string) string {
	return `version: 1
systems:
  - {name: mail, base_url: "${SB}/mail"}
tools:
  - name: send_note
    description: Send a note through the relay, the key as its reference.
    system: mail
    class: ` + class + `
    timeout: 5s
    args:
      - {name: to, type: email, required: true}
      - {name: subject, type: string, required: true}
      - {name: body, type: string, required: true}
    match:
      - {arg: to, result: to}
      - {arg: subject, result: subject}
    request:
      method: POST
      path: /v1/messages
      key: {body_field: reference}
      body: {fields: {to: "{to}", subject: "{subject}", body: "{body}"}}
    response: {external_id: /id, keep: {to: /to, subject: /subject}}
    lookup:
      request: {path: /v1/messages, query: {reference: "{key}"}}
      found: {item: /messages/0, external_id: /id}
      absent: {authoritative: true}
`
}

const mailArgs = `{"to":"ana@example.com","subject":"probe {probe}","body":"a probe"}`

func startSandbox(t *testing.T) *sandbox.Sandbox {
	t.Helper()
	sb, err := sandbox.Start(context.Background(), sandbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.Close() })
	return sb
}

func getenv(sb *sandbox.Sandbox) func(string) (string, bool) {
	env := map[string]string{"SB": sb.BaseURL(), "AGENTSAGA_SANDBOX_URL": sb.BaseURL()}
	return func(k string) (string, bool) { v, ok := env[k]; return v, ok }
}

func toolOf(t *testing.T, cat *catalog.Catalog, name string) tool.Tool {
	t.Helper()
	for _, tl := range cat.Tools() {
		if tl.Spec().Name == name {
			return tl
		}
	}
	t.Fatalf("no tool %s", name)
	return nil
}

func mailTool(t *testing.T, sb *sandbox.Sandbox, class string) tool.Tool {
	t.Helper()
	cat, err := catalog.ParseWith(catalog.Options{Getenv: getenv(sb)}, catalog.Source{Name: "mail.yaml", Data: []byte(mailCatalog(class))})
	if err != nil {
		t.Fatal(err)
	}
	return toolOf(t, cat, "send_note")
}

func sandboxTool(t *testing.T, sb *sandbox.Sandbox, name string) tool.Tool {
	t.Helper()
	_, self, _, _ := runtime.Caller(0)
	cat, err := catalog.LoadWith(catalog.Options{Getenv: getenv(sb)}, filepath.Join(filepath.Dir(self), "..", "..", "catalog", "examples", "sandbox.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return toolOf(t, cat, name)
}

func run(t *testing.T, tl tool.Tool, args string, claims probe.Claims) probe.Report {
	t.Helper()
	session := probe.NewSession()
	rep, err := probe.Run(context.Background(), tl, probe.Options{Args: probe.ArgsTemplate(json.RawMessage(args), session), Session: session,
		Claims: claims, LagMax: 10 * time.Second, SettleMax: 10 * time.Second, Poll: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	_ = rep.WriteText(&b)
	t.Log("\n" + b.String())
	return rep
}

// want checks the outcome and finding of one promise.
func want(t *testing.T, rep probe.Report, promise string, outcome probe.Outcome, finding string) {
	t.Helper()
	v, ok := rep.Verdict(promise)
	if !ok {
		t.Fatalf("no verdict on %s", promise)
	}
	if v.Outcome != outcome || !strings.Contains(v.Finding, finding) {
		t.Errorf("%s: %s %q, want %s %q; evidence:\n%s", promise, v.Outcome, v.Finding, outcome, finding, strings.Join(v.Evidence, "\n"))
	}
}

// effectsUnder counts the provider's own rows under the probe's keys.
func effectsUnder(t *testing.T, sb *sandbox.Sandbox, provider, key string) int {
	t.Helper()
	all, err := sb.Client().Effects(context.Background(), provider)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range all {
		if e.Key == key {
			n++
		}
	}
	return n
}

func firstKey(t *testing.T, rep probe.Report) string {
	t.Helper()
	v, _ := rep.Verdict(probe.Key)
	for _, e := range v.Evidence {
		if rest, ok := strings.CutPrefix(e, "send 1 under key "); ok {
			return rest[:strings.Index(rest, ": ")]
		}
	}
	t.Fatalf("no key in the evidence %v", v.Evidence)
	return ""
}

func TestProbeDeduplicatingProvider(t *testing.T) {
	sb := startSandbox(t)
	tl := sandboxTool(t, sb, "create_payment")
	rep := run(t, tl, `{"customer_id":"cus_ana","amount_minor":2500,"currency":"EUR","payment_method":"tok_visa"}`, probe.Claims{})
	want(t, rep, probe.Key, probe.Agrees, "honours the key")
	want(t, rep, probe.Lookup, probe.Agrees, "at once")
	want(t, rep, probe.Absent, probe.Agrees, "authoritatively")
	want(t, rep, probe.Settle, probe.Agrees, "") // a fast provider may answer or drop the abandoned request
	if rep.Contradicted() || !rep.Safe.Authoritative || rep.Safe.Class != tool.IdempotentWrite {
		t.Errorf("contradicted %v, safe %s", rep.Contradicted(), rep.Safe)
	}
	if n := effectsUnder(t, sb, sandbox.Payments, firstKey(t, rep)); n != 1 {
		t.Errorf("the payments store holds %d payments under the key sent twice, want 1", n)
	}
}

func TestProbeProviderThatIgnoresKeys(t *testing.T) {
	sb := startSandbox(t)
	t.Run("declared NON_IDEMPOTENT_WRITE", func(t *testing.T) {
		rep := run(t, mailTool(t, sb, "NON_IDEMPOTENT_WRITE"), mailArgs, probe.Claims{Settle: 10 * time.Second})
		want(t, rep, probe.Key, probe.Agrees, "ignores the key: two effects")
		want(t, rep, probe.Lookup, probe.Agrees, "at once")
		want(t, rep, probe.Absent, probe.Agrees, "authoritatively")
		want(t, rep, probe.Settle, probe.Agrees, "") // a fast provider may answer or drop the abandoned request
		if rep.Contradicted() || rep.Safe.Class != tool.NonIdempotentWrite || !rep.Safe.Authoritative {
			t.Errorf("contradicted %v, safe %s", rep.Contradicted(), rep.Safe)
		}
		if n := effectsUnder(t, sb, sandbox.Mail, firstKey(t, rep)); n != 2 {
			t.Errorf("the relay holds %d messages under the key sent twice, want 2 (it ignores keys)", n)
		}
	})
	t.Run("declared IDEMPOTENT_WRITE", func(t *testing.T) {
		rep := run(t, mailTool(t, sb, "IDEMPOTENT_WRITE"), mailArgs, probe.Claims{})
		want(t, rep, probe.Key, probe.Contradicts, "ignores the key")
		if !rep.Contradicted() || rep.Safe.Class != tool.NonIdempotentWrite {
			t.Errorf("contradicted %v, safe %s: want a contradiction and NON_IDEMPOTENT_WRITE", rep.Contradicted(), rep.Safe)
		}
	})
}

func TestProbeLaggingLookup(t *testing.T) {
	sb := startSandbox(t)
	const lag = 1200 * time.Millisecond
	if err := sb.Client().Fault(context.Background(), sandbox.FaultSpec{Op: "mail.lookup", Fault: sandbox.VisibilityLag, Delay: lag, Count: -1}); err != nil {
		t.Fatal(err)
	}
	tl := mailTool(t, sb, "NON_IDEMPOTENT_WRITE")
	t.Run("lag not declared", func(t *testing.T) {
		rep := run(t, tl, mailArgs, probe.Claims{Settle: 10 * time.Second})
		want(t, rep, probe.Lookup, probe.Contradicts, "answered absent authoritatively meanwhile")
		if !rep.Contradicted() || rep.Safe.Authoritative || rep.Safe.Lag < lag {
			t.Errorf("contradicted %v, safe %s: want a contradiction, a lag of at least %s and authoritative false", rep.Contradicted(), rep.Safe, lag)
		}
	})
	t.Run("lag declared", func(t *testing.T) {
		rep := run(t, tl, mailArgs, probe.Claims{Settle: 10 * time.Second, Lag: 3 * time.Second})
		want(t, rep, probe.Lookup, probe.Agrees, "within the declared lag")
		want(t, rep, probe.Settle, probe.Agrees, "") // a fast provider may answer or drop the abandoned request
		if rep.Contradicted() || rep.Safe.Authoritative {
			t.Errorf("contradicted %v, safe %s: a lag was seen, so authoritative is never safe on its own", rep.Contradicted(), rep.Safe)
		}
	})
}

func TestProbeSlowCommit(t *testing.T) {
	sb := startSandbox(t)
	const slow = 1500 * time.Millisecond
	for _, op := range []string{"mail.send", "payments.create"} {
		if err := sb.Client().Fault(context.Background(), sandbox.FaultSpec{Op: op, Fault: sandbox.SlowCommit, Delay: slow, Count: -1}); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("settle too short", func(t *testing.T) {
		rep := run(t, mailTool(t, sb, "NON_IDEMPOTENT_WRITE"), mailArgs, probe.Claims{Settle: 500 * time.Millisecond})
		want(t, rep, probe.Settle, probe.Contradicts, "an abandoned request lands")
		if !rep.Contradicted() || rep.Safe.Settle < slow {
			t.Errorf("contradicted %v, safe %s: want a contradiction and a settle of at least %s", rep.Contradicted(), rep.Safe, slow)
		}
	})
	t.Run("settle declared", func(t *testing.T) {
		rep := run(t, mailTool(t, sb, "NON_IDEMPOTENT_WRITE"), mailArgs, probe.Claims{Settle: 4 * time.Second})
		want(t, rep, probe.Settle, probe.Agrees, "an abandoned request lands")
		if rep.Contradicted() {
			t.Errorf("contradicted: %+v", rep.Verdicts)
		}
	})
	t.Run("deduplicating provider", func(t *testing.T) {
		rep := run(t, sandboxTool(t, sb, "create_payment"), `{"customer_id":"cus_ana","amount_minor":2500,"currency":"EUR","payment_method":"tok_visa"}`, probe.Claims{})
		want(t, rep, probe.Key, probe.Agrees, "honours the key")
		want(t, rep, probe.Settle, probe.Agrees, "the key holds it")
	})
}
