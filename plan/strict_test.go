package plan_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/internal/demotools"
	"github.com/agentsaga/agentsaga/plan"
)

// refusal parses and validates s against the demo tools and returns the
// problems by field; it fails when the plan is accepted.
func refusal(t *testing.T, s string, l plan.Limits) map[string]string {
	t.Helper()
	p, err := plan.ParseBytes([]byte(s), l)
	if err == nil {
		err = p.ValidateWith(demotools.Specs(), l)
	}
	require.Error(t, err, "plan accepted: %.200s", s)
	var v *plan.ValidationError
	require.ErrorAs(t, err, &v, "%v", err)
	out := map[string]string{}
	for _, e := range v.Problems {
		out[e.Path] += e.Problem
	}
	return out
}

const ticket = `{"tool":"create_ticket","args":{"subject":"ok"}}`

func planWith(steps ...string) string {
	return `{"session_id":"s","turn":1,"steps":[` + strings.Join(steps, ",") + `]}`
}

func TestParseIsStrict(t *testing.T) {
	for _, c := range []struct{ name, in, field, want string }{
		{"duplicate key in args", planWith(`{"tool":"create_ticket","args":{"subject":"4111111111111111","subject":"ok"}}`), "steps[1].args.subject", "appears twice"},
		{"duplicate top-level key", `{"session_id":"s","session_id":"t","turn":1,"steps":[` + ticket + `]}`, "session_id", "appears twice"},
		{"duplicate by escape", `{"session_id":"s","turn":1,"steps":[` + ticket + `],"t\u0075rn":2}`, "turn", "appears twice"},
		{"duplicate deep", planWith(`{"tool":"create_ticket","args":{"subject":"ok","x":{"a":[{"b":1,"b":2}]}}}`), "steps[1].args.x.a[1].b", "appears twice"},
		{"trailing object", planWith(ticket) + `{"session_id":"evil"}`, "plan", "data after the plan"},
		{"trailing garbage", planWith(ticket) + ` x`, "plan", "data after the plan"},
		{"invalid UTF-8", planWith(`{"tool":"create_ticket","args":{"subject":"caf` + "\xe9" + `"}}`), "plan", "not valid UTF-8 (byte 82)"},
		{"lone surrogate", planWith(`{"tool":"create_ticket","args":{"subject":"a\ud800b"}}`), "steps[1].args.subject", "lone UTF-16 surrogate"},
		{"NUL", planWith(`{"tool":"create_ticket","args":{"subject":"a\u0000b"}}`), "steps[1].args.subject", "control character (U+0000"},
		{"escape", planWith(`{"tool":"create_ticket","args":{"subject":"\u001b[2Jhi"}}`), "steps[1].args.subject", "control character (U+001B"},
		{"newline outside multi-line", planWith(`{"tool":"create_ticket","args":{"subject":"a\nb"}}`), "steps[1].args.subject", "control character (U+000A"},
		{"CR in multi-line", planWith(`{"tool":"create_ticket","args":{"subject":"s","body":"a\r\nb"}}`), "steps[1].args.body", "other than line feed and tab"},
		{"turn as string", `{"session_id":"s","turn":"1","steps":[` + ticket + `]}`, "turn", `must be an integer >= 1, got "1"`},
		{"turn 1.0", `{"session_id":"s","turn":1.0,"steps":[` + ticket + `]}`, "turn", "got 1.0"},
		{"turn 1.5e3", `{"session_id":"s","turn":1.5e3,"steps":[` + ticket + `]}`, "turn", "got 1.5e3"},
		{"turn huge", `{"session_id":"s","turn":99999999999999999999999,"steps":[` + ticket + `]}`, "turn", "must be an integer >= 1"},
		{"turn zero", `{"session_id":"s","turn":0,"steps":[` + ticket + `]}`, "turn", "got 0"},
		{"not an object", `[1,2]`, "plan", "got a JSON array"},
		{"wrong type", `{"session_id":5,"turn":1,"steps":[` + ticket + `]}`, "session_id", "must be a JSON string, got a JSON number"},
		{"unknown field", `{"session_id":"s","turn":1,"steps":[` + ticket + `],"model_key":"x"}`, "model_key", "is not a field of the plan format"},
		{"card in free text", planWith(`{"tool":"create_ticket","args":{"subject":"s","body":"card 4111 1111 1111 1111 was charged"}}`), "steps[1].args.body", "holds a card number; pass a vault token such as tok_visa"},
		{"api key", planWith(`{"tool":"create_ticket","args":{"subject":"key sk_live_51HxYzABCDEFGHIJKLMNOP"}}`), "steps[1].args.subject", "holds an API key"},
		{"bearer", planWith(`{"tool":"create_ticket","args":{"subject":"s","body":"Authorization: Bearer abc.DEF-123"}}`), "steps[1].args.body", "holds a bearer token"},
		{"iban", planWith(`{"tool":"create_ticket","args":{"subject":"refund to DE89370400440532013000"}}`), "steps[1].args.subject", "holds an IBAN"},
		{"card in request_id", `{"session_id":"s","turn":1,"request_id":"4111-1111-1111-1111","steps":[` + ticket + `]}`, "request_id", "holds a card number"},
		{"NUL in requested_by", `{"session_id":"s","turn":1,"requested_by":"ana\u0000","steps":[` + ticket + `]}`, "requested_by", "control character"},
		{"long request_id", `{"session_id":"s","turn":1,"request_id":"` + strings.Repeat("r", 129) + `","steps":[` + ticket + `]}`, "request_id", "is 129 bytes long, the limit is 128 bytes"},
		{"long requested_by", `{"session_id":"s","turn":1,"requested_by":"` + strings.Repeat("r", 65) + `","steps":[` + ticket + `]}`, "requested_by", "the limit is 64 bytes"},
		{"long session", `{"session_id":"` + strings.Repeat("s", 129) + `","turn":1,"steps":[` + ticket + `]}`, "session_id", "must be 1 to 128"},
		{"long string arg", planWith(`{"tool":"create_ticket","args":{"subject":"` + strings.Repeat("x", 1001) + `"}}`), "steps[1].args.subject", "the limit is 1000 bytes"},
		{"huge invoice", planWith(`{"tool":"create_invoice","args":{"customer_id":"c","amount_minor":9223372036854775807,"currency":"EUR"}}`), "steps[1].args.amount_minor", "above this tool's ceiling of 10000000"},
		{"bad address", planWith(`{"tool":"send_email","args":{"to":"Ana <ana@example.com>","subject":"s","body":"b"}}`), "steps[1].args.to", "bare e-mail address"},
		{"currency not ISO 4217", planWith(`{"tool":"apply_refund","args":{"order_id":"o","amount_minor":100,"currency":"XYZ","reason":"r"}}`), "steps[1].args.currency", "must be a current ISO 4217 currency code"},
		{"currency lower case", planWith(`{"tool":"apply_refund","args":{"order_id":"o","amount_minor":100,"currency":"eur","reason":"r"}}`), "steps[1].args.currency", "write EUR, not eur"},
		{"20-digit amount", planWith(`{"tool":"apply_refund","args":{"order_id":"o","amount_minor":12345678901234567890,"currency":"EUR","reason":"r"}}`), "steps[1].args.amount_minor", "above this tool's ceiling of"},
		{"card with dots", planWith(`{"tool":"send_email","args":{"to":"a@example.com","subject":"s","body":"4242.4242.4242.4242"}}`), "steps[1].args.body", "holds a card number"},
		{"card split by line feeds", planWith(`{"tool":"send_email","args":{"to":"a@example.com","subject":"s","body":"4242\n4242\n4242\n4242"}}`), "steps[1].args.body", "holds a card number"},
		{"full-width card", planWith(`{"tool":"create_ticket","args":{"subject":"４２４２４２４２４２４２４２４２"}}`), "steps[1].args.subject", "holds a card number"},
		{"password in a URL", planWith(`{"tool":"create_ticket","args":{"subject":"see https://user:password@host.example/"}}`), "steps[1].args.subject", "holds a credential"},
		{"too many steps", planWith(strings.Repeat(ticket+",", 50) + ticket), "steps", "lists 51 tool calls, the limit is 50 (max_steps)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := refusal(t, c.in, plan.Limits{})
			if c.field == "" {
				return
			}
			require.Contains(t, got[c.field], c.want, "%v", got)
			for f, p := range got {
				require.NotContains(t, f+p, "4111111111111111", "a refusal never echoes a secret")
				require.NotContains(t, f+p, "4111 1111", "a refusal never echoes a secret")
			}
		})
	}
}

func TestLimitsAreConfigurable(t *testing.T) {
	l := plan.Limits{MaxSteps: 2, MaxStringLen: 5, MaxRequestIDLen: 3, ToolMaxAmountMinor: map[string]int64{"create_invoice": 100}}
	got := refusal(t, planWith(ticket, ticket, ticket), l)
	require.Contains(t, got["steps"], "the limit is 2")
	got = refusal(t, `{"session_id":"s","turn":1,"request_id":"abcd","steps":[{"tool":"create_ticket","args":{"subject":"abcdef"}},
		{"tool":"create_invoice","args":{"customer_id":"c","amount_minor":101,"currency":"EUR"}}]}`, l)
	require.Contains(t, got["request_id"], "the limit is 3 bytes")
	require.Contains(t, got["steps[1].args.subject"], "the limit is 5 bytes")
	require.Contains(t, got["steps[2].args.amount_minor"], "ceiling of 100 (1.00)")

	big := plan.Limits{MaxPlanBytes: 100}
	got = refusal(t, planWith(ticket, ticket, ticket), big)
	require.Contains(t, got["plan"], "the limit is 100 bytes (max_plan_bytes)")
	// The same limit holds for a plan built by a client, not parsed.
	p, err := plan.ParseBytes([]byte(planWith(ticket, ticket, ticket)), plan.Limits{})
	require.NoError(t, err)
	require.ErrorContains(t, p.ValidateWith(demotools.Specs(), big), "the limit is 100 bytes")

	require.Equal(t, plan.DefaultLimits(), plan.Limits{}.WithDefaults())
	require.Equal(t, 256<<10, plan.DefaultLimits().MaxPlanBytes)
	require.NoError(t, plan.DefaultLimits().Check())
	require.ErrorContains(t, plan.Limits{MaxSteps: -1, ToolMaxAmountMinor: map[string]int64{"x": 0}}.Check(), "max_steps is -1; tool_max_amount_minor[x] is 0")
}

func TestParseAcceptsWhatIsClean(t *testing.T) {
	in := `{"session_id":"s","turn":1,"request_id":"req-1","requested_by":"ana","steps":[
		{"tool":"create_ticket","args":{"subject":"Refund for ord_1001 ✓","body":"Hello,\n\tthe customer asked twice.\n","order_id":"ord_1001"}},
		{"tool":"create_payment","args":{"customer_id":"cus_ana","amount_minor":4200,"currency":"EUR","payment_method":"tok_visa"}},
		{"tool":"send_email","args":{"to":"ana@example.com","subject":"Done","body":"We refunded 129.00 EUR."}}]}` + "\n\n"
	p, err := plan.ParseBytes([]byte(in), plan.Limits{})
	require.NoError(t, err)
	require.NoError(t, p.ValidateWith(demotools.Specs(), plan.Limits{}))
	require.Equal(t, 1, p.Turn)
}

func TestProblemsAreCapped(t *testing.T) {
	var steps []string
	for i := 0; i < 30; i++ {
		steps = append(steps, `{"tool":"teleport"}`)
	}
	p, err := plan.ParseBytes([]byte(planWith(steps...)), plan.Limits{})
	require.NoError(t, err)
	var v *plan.ValidationError
	require.ErrorAs(t, p.ValidateWith(demotools.Specs(), plan.Limits{}), &v)
	require.Len(t, v.Problems, 20)
	require.Equal(t, "11 more problem(s) not listed: fix the ones above and submit again", v.Problems[19].Problem)
}

// blocking is a reader that never returns until closed.
type blocking struct{ stop chan struct{} }

func (b blocking) Read([]byte) (int, error) { <-b.stop; return 0, io.EOF }

func TestReadLimited(t *testing.T) {
	ctx := context.Background()
	data, err := plan.ReadLimited(ctx, strings.NewReader("12345"), 5)
	require.NoError(t, err)
	require.Equal(t, "12345", string(data))

	_, err = plan.ReadLimited(ctx, strings.NewReader("123456"), 5)
	require.ErrorIs(t, err, plan.ErrTooLarge)
	require.ErrorContains(t, err, "the limit is 5 bytes")

	// An endless input (as /dev/zero) stops at the limit.
	zero, err := os.Open("/dev/zero")
	require.NoError(t, err)
	defer zero.Close()
	_, err = plan.ReadLimited(ctx, zero, 1<<10)
	require.ErrorIs(t, err, plan.ErrTooLarge)

	// A reader that blocks forever: cancelling returns at once.
	stop := make(chan struct{})
	defer close(stop)
	cctx, cancel := context.WithCancel(ctx)
	res := make(chan error, 1)
	go func() { _, err := plan.ReadLimited(cctx, blocking{stop}, 10); res <- err }()
	cancel()
	require.ErrorIs(t, <-res, context.Canceled)
}

// A fifo nobody writes to: Ctrl-C (a cancelled context) ends both the open
// and the read, and the reading goroutine is released by the deadline.
func TestReadFileFifo(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "plan.fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))

	// Nobody opens the write end: the open blocks until cancelled.
	ctx, cancel := context.WithCancel(context.Background())
	res := make(chan error, 1)
	go func() { _, err := plan.ReadFile(ctx, fifo, 100); res <- err }()
	cancel()
	err := <-res
	require.ErrorIs(t, err, context.Canceled)
	// Release the abandoned open so the test leaves nothing behind.
	if w, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
		w.Close()
	}

	// A writer that never writes nor closes: the read blocks until cancelled.
	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer w.Close()
	ctx, cancel = context.WithCancel(context.Background())
	go func() { _, err := plan.ReadLimited(ctx, r, 100); res <- err }()
	_, err = w.Write([]byte(`{"session`))
	require.NoError(t, err)
	cancel()
	require.ErrorIs(t, <-res, context.Canceled)

	// A plan written to a fifo is read whole. A fifo of its own: the open
	// abandoned above may still be pending (a signal that interrupts a
	// blocked fifo open restarts it after its writer left, as the race
	// detector's preemption makes likely), and would take this writer.
	fifo2 := filepath.Join(dir, "plan2.fifo")
	require.NoError(t, syscall.Mkfifo(fifo2, 0o600))
	ctx = context.Background()
	go func() {
		w, err := os.OpenFile(fifo2, os.O_WRONLY, 0)
		if err == nil {
			fmt.Fprint(w, planWith(ticket))
			w.Close()
		}
	}()
	data, err := plan.ReadFile(ctx, fifo2, 1000)
	require.NoError(t, err)
	require.True(t, bytes.HasPrefix(data, []byte(`{"session_id"`)))
}
