package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/catalog"
	"github.com/agentsaga/agentsaga/internal/sandbox"
	"github.com/agentsaga/agentsaga/tool/probe"
)

// probeCatalog declares the sandbox's mail relay, which keeps a reference
// but never deduplicates by it, twice: rightly as a NON_IDEMPOTENT_WRITE
// with a lookup, and wrongly as an IDEMPOTENT_WRITE.
const probeCatalog = `version: 1
systems:
  - {name: mail, base_url: "${AGENTSAGA_PROBE_SB}/mail"}
tools:
  - name: send_note
    description: Send a note, the key as its reference.
    system: mail
    class: NON_IDEMPOTENT_WRITE
    timeout: 5s
    args: [{name: to, type: email, required: true}, {name: subject, type: string, required: true}]
    match: [{arg: to, result: to}, {arg: subject, result: subject}]
    request: {method: POST, path: /v1/messages, key: {body_field: reference}, body: {fields: {to: "{to}", subject: "{subject}", body: probe}}}
    response: {external_id: /id, keep: {to: /to, subject: /subject}}
    lookup:
      request: {path: /v1/messages, query: {reference: "{key}"}}
      found: {item: /messages/0, external_id: /id}
      absent: {authoritative: true}
  - name: send_claimed
    description: The same relay, declared as if it deduplicated.
    system: mail
    class: IDEMPOTENT_WRITE
    timeout: 5s
    args: [{name: to, type: email, required: true}, {name: subject, type: string, required: true}]
    request: {method: POST, path: /v1/messages, key: {body_field: reference}, body: {fields: {to: "{to}", subject: "{subject}", body: probe}}}
    response: {external_id: /id}
    lookup:
      request: {path: /v1/messages, query: {reference: "{key}"}}
      found: {item: /messages/0, external_id: /id}
      absent: {authoritative: true}
`

func TestToolsProbe(t *testing.T) {
	sb, err := sandbox.Start(context.Background(), sandbox.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sb.Close() })
	t.Setenv("AGENTSAGA_PROBE_SB", sb.BaseURL())
	file := filepath.Join(t.TempDir(), "tools.yaml")
	require.NoError(t, os.WriteFile(file, []byte(probeCatalog), 0o600))
	const args = `{"to":"qa@example.com","subject":"probe {probe}"}`
	probeRun := func(extra ...string) (string, int) {
		var out bytes.Buffer
		err := run(context.Background(), append([]string{"tools", "probe", "--tools", file, "--poll", "20ms"}, extra...), strings.NewReader(""), &out)
		var msg bytes.Buffer
		code := report(&msg, err, false)
		return out.String() + msg.String(), code
	}

	out, code := probeRun("--args", "send_note="+args)
	require.Contains(t, out, "send_note (NON_IDEMPOTENT_WRITE)")
	require.Regexp(t, `key +agrees +ignores the key: two effects`, out)
	require.Regexp(t, `lookup +agrees +finds a fresh effect at once`, out)
	require.Regexp(t, `absent +agrees +stays absent, authoritatively`, out)
	require.Contains(t, out, "safe settings: class: NON_IDEMPOTENT_WRITE")
	require.Contains(t, out, "send_claimed: not probed: no args")
	// The relay commits an abandoned request at once: that agrees with a
	// settle time of any length, and contradicts an engine that counts an
	// absent answer at once (no settle time: before issue 34's horizon).
	cat, err := catalog.Load(file)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cat.Close() })
	if strings.Contains(out, "the abandoned request did not land") {
		// Given up on at once, a request is sometimes not processed at all.
		require.Regexp(t, `settle +agrees +the abandoned request did not land`, out)
		require.Equal(t, 0, code, out)
	} else if probe.ClaimsOf(cat.Specs()["send_note"]).Settle > 0 {
		require.Regexp(t, `settle +agrees +an abandoned request lands`, out)
		require.Equal(t, 0, code, out)
	} else {
		require.Regexp(t, `settle +contradicts +an abandoned request lands`, out)
		require.Equal(t, 1, code, out)
	}

	out, code = probeRun("--args", "send_note="+args, "--args", "send_claimed="+args, "--tool", "send_claimed")
	require.Equal(t, 1, code, out)
	require.Regexp(t, `key +contradicts +ignores the key: two effects`, out)
	require.Contains(t, out, "safe settings: class: NON_IDEMPOTENT_WRITE")
	require.Contains(t, out, "contradicts the catalogue for send_claimed")
	require.NotContains(t, out, "send_note (", "--tool picks one tool")

	var jsonOut bytes.Buffer
	_ = run(context.Background(), []string{"tools", "probe", "--tools", file, "--json", "--args", "send_note=" + args}, strings.NewReader(""), &jsonOut)
	var res probeResult
	require.NoError(t, json.Unmarshal(jsonOut.Bytes(), &res), jsonOut.String())
	require.Len(t, res.Reports, 1)
	v, ok := res.Reports[0].Verdict(probe.Key)
	require.True(t, ok)
	require.Equal(t, probe.Agrees, v.Outcome)

	for _, bad := range [][]string{
		{},
		{"--args", "send_note={not json}"},
		{"--args", "nope=" + args},
		{"--args", "send_note=" + args, "--tool", "nope"},
		{"--args", "send_note=" + args, "--args", "send_note=" + args},
		{"--args", `send_note={"to": {probe}}`},
		{"--args", "send_note=" + args, "--lag-max", "2h"},
	} {
		out, code := probeRun(bad...)
		require.Equal(t, 2, code, "%v: %s", bad, out)
	}
}

// FuzzParseProbeArgs: any --args value either is refused or gives a name
// and args that stay one JSON object whatever token replaces {probe}.
func FuzzParseProbeArgs(f *testing.F) {
	for _, s := range []string{
		`send_email={"to":"a@example.com","subject":"probe {probe}"}`,
		`x={"a":{probe}}`, `x={}`, `x=`, `=x`, `x={}}`, `x={"a":"{probe}"} trailing`, `x=[1]`, `x=null`,
		`x={"a":"\u0000{probe}\""}`, `x={"{probe}":"{probe}{probe}"}`, "x={\"a\":\"\xff{probe}\"}",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		name, raw, err := parseProbeArgs(v)
		if err != nil {
			return
		}
		if name == "" || len(raw) > maxProbeArgs {
			t.Fatalf("accepted %q: name %q, %d bytes", v, name, len(raw))
		}
		for _, n := range []int{1, 12345} {
			got := probe.ArgsTemplate(raw, "probe-abc123")(n)
			var m map[string]any
			if err := json.Unmarshal(got, &m); err != nil || m == nil {
				t.Fatalf("accepted %q, but the args of call %d are not a JSON object: %s (%v)", v, n, got, err)
			}
		}
	})
}
