package workflows

import (
	"fmt"
	"strconv"
	"strings"

	"go.temporal.io/sdk/workflow"

	"github.com/agentsaga/agentsaga/activities"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/plan"
	"github.com/agentsaga/agentsaga/redact"
	"github.com/agentsaga/agentsaga/tool"
)

// card builds the approval card of a question on step n: what changes, where,
// on which object, how much, who asked, which rule, and what already ran on
// the same object.
func (r *run) card(n int, rule string, rep activities.GuardReport) Card {
	st := r.step(n)
	spec := r.specs[st.Tool]
	args, _ := tool.DecodeObject(r.plan.Steps[n-1].Args)
	c := Card{
		Change: strings.TrimSpace(spec.Name + ": " + spec.Description), System: spec.System,
		Object: objectOf(spec, args), RequestID: r.plan.RequestID, RequestedBy: r.plan.RequestedBy,
		Session: r.plan.SessionID, Rule: rule, Clash: rep.Clash, Key: st.Key,
	}
	if minor, cur := amountOf(spec, args); minor != 0 || cur != "" {
		c.AmountMinor, c.Currency, c.Amount = minor, cur, formatMinor(minor, cur)
	}
	listed := map[string]bool{}
	for _, op := range rep.Others {
		c.AlreadyRan = append(c.AlreadyRan, alreadyRan(c.Object, op))
		listed[op.Key] = true
	}
	c.AlreadyRan = append(c.AlreadyRan, r.identical(n, listed)...)
	return redactCard(c)
}

// maxIdentical bounds the identical calls a card lists.
const maxIdentical = 10

// identical words the other calls of the plan or session with step n's tool
// and arguments that made, or may have made, an effect (any state but
// pending and failed_final), oldest first, leaving out keys already listed:
// a person deciding a call sees that the same call already ran (a repeat
// sent without a key, a second turn of the same intent).
func (r *run) identical(n int, listed map[string]bool) []string {
	me := r.step(n)
	var out []string
	for i := range r.st.Steps {
		s := &r.st.Steps[i]
		if s.Step == n || s.Tool != me.Tool || s.Fingerprint != me.Fingerprint || listed[s.Key] ||
			s.State == ledger.Pending || s.State == ledger.FailedFinal {
			continue
		}
		if len(out) == maxIdentical {
			break
		}
		line := fmt.Sprintf("the same %s with the same arguments by %s (%s", s.Tool, s.Key, s.State)
		if s.ExternalID != "" {
			line += ", external id " + s.ExternalID
		}
		out = append(out, line+")")
	}
	return out
}

func alreadyRan(object string, op ledger.Operation) string {
	what := op.ActionType
	if op.Summary != "" {
		what = strings.TrimSuffix(op.Summary, " "+op.Key)
	}
	return fmt.Sprintf("%s: %s by %s (%s, %s)", object, what, op.Key, op.Status, op.CreatedAt.Format("2006-01-02 15:04Z07:00"))
}

// redactCard masks anything secret-shaped a card could carry from args.
func redactCard(c Card) Card {
	c.Object, c.RequestID, c.RequestedBy = redact.String(c.Object), redact.String(c.RequestID), redact.String(c.RequestedBy)
	c.Rule, c.Clash = redact.String(c.Rule), redact.String(c.Clash)
	for i, s := range c.AlreadyRan {
		c.AlreadyRan[i] = redact.String(s)
	}
	return c
}

// objectOf names the business object of a call: the guard's fields, else the
// first required string argument.
func objectOf(spec tool.Spec, obj map[string]any) string {
	var fields []string
	if spec.Guard != nil {
		fields = spec.Guard.Fields
	} else {
		for _, f := range spec.Args.Fields {
			if (f.Type == tool.String || f.Type == tool.Email) && f.Required {
				fields = []string{f.Name}
				break
			}
		}
	}
	var parts []string
	for _, f := range fields {
		if v, ok := obj[f]; ok {
			parts = append(parts, fmt.Sprintf("%s %v", f, v))
		}
	}
	return strings.Join(parts, ", ")
}

// amountOf returns the first money argument and the currency argument of
// the args obj (as tool.DecodeObject decodes them).
func amountOf(spec tool.Spec, obj map[string]any) (int64, string) {
	var minor int64
	for _, f := range spec.Args.Fields {
		if f.Type == tool.Money {
			if v, ok := tool.IntOf(obj, f.Name); ok {
				minor = v
				break
			}
		}
	}
	cur, _ := obj["currency"].(string)
	return minor, strings.ToUpper(cur)
}

// formatMinor renders minor units as "1,500.00 EUR" (exactly, no floats).
func formatMinor(minor int64, currency string) string {
	digits, ok := tool.MinorDigits(currency)
	if !ok {
		digits = 2
	}
	neg := minor < 0
	u := uint64(minor)
	if neg {
		u = uint64(-minor)
	}
	s := strconv.FormatUint(u, 10)
	for len(s) <= digits {
		s = "0" + s
	}
	whole, frac := s[:len(s)-digits], s[len(s)-digits:]
	var b strings.Builder
	for i, c := range whole {
		if i > 0 && (len(whole)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	out := b.String()
	if digits > 0 {
		out += "." + frac
	}
	if neg {
		out = "-" + out
	}
	return strings.TrimSpace(out + " " + currency)
}

// StaticSummary is the workflow's summary for the Temporal UI: session, turn,
// request and the tools it calls; nothing secret.
func StaticSummary(p plan.Plan) string {
	tools := make([]string, len(p.Steps))
	for i, s := range p.Steps {
		tools[i] = s.Tool
	}
	out := fmt.Sprintf("session %s · turn %d", p.SessionID, p.Turn)
	if p.RequestID != "" {
		out += " · request " + p.RequestID
	}
	if p.RequestedBy != "" {
		out += " · by " + p.RequestedBy
	}
	return redact.String(out + " · " + strings.Join(tools, " → "))
}

// summary is the one line the Temporal UI shows for a tool call: tool,
// object, amount and key, nothing secret.
func (r *run) summary(spec tool.Spec, req activities.Request) string {
	parts := []string{req.Tool}
	args, _ := tool.DecodeObject(req.Args)
	if o := objectOf(spec, args); o != "" {
		parts = append(parts, o)
	}
	if minor, cur := amountOf(spec, args); minor != 0 {
		parts = append(parts, formatMinor(minor, cur))
	}
	parts = append(parts, req.Key)
	return redact.String(strings.Join(parts, " "))
}

// details sets the workflow's current details for the Temporal UI: one line
// per step (the UI renders lists, not tables: a table's cells ran together),
// with why it failed, its reversal and the decisions taken on it, then each
// open question with its card and the command that answers it.
func (r *run) details(ctx workflow.Context) {
	var b strings.Builder
	fmt.Fprintf(&b, "**%s** · session %s · turn %d", r.st.State, r.plan.SessionID, r.plan.Turn)
	if r.plan.RequestID != "" {
		fmt.Fprintf(&b, " · request %s", r.plan.RequestID)
	}
	if r.st.Error != "" {
		fmt.Fprintf(&b, "\n\nwhy: %s", r.st.Error)
	}
	b.WriteString("\n\n**Steps**\n\n")
	for _, s := range r.st.Steps {
		fmt.Fprintf(&b, "- step %d · %s · **%s**", s.Step, s.Tool, s.State)
		if s.ExternalID != "" {
			fmt.Fprintf(&b, " · id %s", s.ExternalID)
		}
		if s.Waiting != "" {
			fmt.Fprintf(&b, " · waiting for %s", s.Waiting)
		}
		if !s.InFlightUntil.IsZero() {
			fmt.Fprintf(&b, " · waiting until %s: its request may still land at the provider, then it is looked up again", s.InFlightUntil.UTC().Format("15:04:05Z"))
		}
		if c := s.Compensation; c != nil {
			fmt.Fprintf(&b, " · reversal %s %s", c.Tool, c.State)
			if c.ExternalID != "" {
				fmt.Fprintf(&b, " (id %s)", c.ExternalID)
			}
		}
		b.WriteString("\n")
		if s.LastError != "" && s.Waiting == "" {
			fmt.Fprintf(&b, "  - why: %s\n", s.LastError)
		}
		for _, d := range s.Decisions {
			who := d.By + " (unverified)"
			if d.Verified {
				who = d.By + " (verified)"
			}
			line := fmt.Sprintf("  - %s by %s at %s", decisionVerb(d), who, d.At.UTC().Format("2006-01-02 15:04:05Z"))
			if d.Note != "" {
				line += ": " + d.Note
			}
			b.WriteString(line + "\n")
		}
	}
	id := workflow.GetInfo(ctx).WorkflowExecution.ID
	for _, q := range r.openList() {
		c := q.Card
		fmt.Fprintf(&b, "\n**Open question %s** (%s, step %d), answers: %s\n\n", q.ID, q.Kind, q.Step, strings.Join(q.Answers, ", "))
		for _, l := range c.Lines() {
			fmt.Fprintf(&b, "- %s: %s\n", l.Label, l.Value)
		}
		if !q.ExpiresAt.IsZero() {
			fmt.Fprintf(&b, "- expires: %s\n", q.ExpiresAt.Format("2006-01-02 15:04:05Z07:00"))
		}
		fmt.Fprintf(&b, "- how to decide: %s\n", howToDecide(id, q))
	}
	workflow.SetCurrentDetails(ctx, redact.String(b.String()))
}

// decisionVerb is a decision in one word or two, for the details.
func decisionVerb(d Decision) string {
	switch {
	case d.Refused != "":
		return "refused " + d.Kind
	case d.Kind == SignalApprove && d.Approved && d.Override:
		return "approved with override"
	case d.Kind == SignalApprove && d.Approved:
		return "approved"
	case d.Kind == SignalApprove:
		return "rejected"
	case d.Outcome != "":
		return "resolved " + string(d.Outcome)
	}
	return d.Kind
}

// howToDecide is the command that answers q, as an operator types it.
func howToDecide(id string, q Question) string {
	base := fmt.Sprintf("`starter %%s %s --step %d --question %s --key YOUR.key", id, q.Step, q.ID)
	if q.Kind == QuestionApproval {
		cmd := fmt.Sprintf(base, "approve") + " --reason TEXT` (add `--reject` to refuse"
		if q.Card.Clash != "" {
			cmd += "; `--override` to let it through the clash shown"
		}
		return cmd + ")"
	}
	return fmt.Sprintf(base, "resolve") + " --outcome succeeded|failed|retry` (succeeded takes `--external-id`; the effect MAY HAVE HAPPENED: check the provider first)"
}
