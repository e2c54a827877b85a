package workflows

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/agentsaga/agentsaga/activities"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/plan"
	"github.com/agentsaga/agentsaga/redact"
	"github.com/agentsaga/agentsaga/tool"
)

// card builds the card of a question of kind on step n: what changes, where,
// on which object, how much, why and with which arguments, who asked, which
// rule, what the calls of the key got back, what already ran on the same
// object, and what each of answers does.
func (r *run) card(n int, kind, rule string, answers []string, rep activities.GuardReport) Card {
	st := r.step(n)
	spec := r.specs[st.Tool]
	args, _ := tool.DecodeObject(r.plan.Steps[n-1].Args)
	c := Card{
		Change: strings.TrimSpace(spec.Name + ": " + spec.Description), System: spec.System,
		Object: objectOf(spec, args), RequestID: r.plan.RequestID, RequestedBy: r.plan.RequestedBy,
		Session: r.plan.SessionID, Rule: rule, Clash: rep.Clash, Key: st.Key,
		Reason: reasonOf(args, r.plan.Steps[n-1].Hold), Arguments: argumentsOf(spec, args),
	}
	if minor, cur := amountOf(spec, args); minor != 0 || cur != "" {
		c.AmountMinor, c.Currency, c.Amount = minor, cur, formatMinor(minor, cur)
	}
	calls := st.Key
	if kind == QuestionReversal && st.Compensation != nil {
		// The reversal's own change, key and answer; the effect it
		// undoes on a line of its own.
		comp := st.Compensation
		cspec := r.specs[comp.Tool]
		c.Change, c.System = strings.TrimSpace(cspec.Name+": "+cspec.Description), cmp.Or(cspec.System, spec.System)
		c.Reverses = fmt.Sprintf("%s effect %s under key %s", st.Tool, cmp.Or(st.ExternalID, "(no external id)"), st.Key)
		c.ReversalKey = comp.Key
		c.ProviderAnswered = clip(redact.String(oneLine(comp.LastError)), MaxCardLineLen)
		calls = comp.Key
	}
	if kind != QuestionApproval {
		c.Calls, c.Lookup = r.callLines(calls)
	}
	if kind == QuestionOutcome && !rep.SentAt.IsZero() {
		c.LastSent = cardTime(rep.SentAt) + " (the ledger's time of the key's last request to the provider)"
	}
	c.Does = r.does(n, kind, answers, rep.Clash != "")
	listed := map[string]bool{}
	for _, op := range rep.Others {
		c.AlreadyRan = append(c.AlreadyRan, alreadyRan(c.Object, op))
		listed[op.Key] = true
	}
	c.AlreadyRan = append(c.AlreadyRan, r.identical(n, listed)...)
	return redactCard(c)
}

// reasonFields are the arguments that say why a call is made, in the order
// a card prefers them.
var reasonFields = []string{"reason", "description", "note", "purpose"}

// reasonOf is why a call is made: its first reason argument, else the
// step's hold text, clipped to MaxCardValueLen.
func reasonOf(args map[string]any, hold string) string {
	for _, f := range reasonFields {
		if v, ok := args[f].(string); ok && strings.TrimSpace(v) != "" {
			return clip(redact.String(oneLine(v)), MaxCardValueLen)
		}
	}
	return clip(redact.String(oneLine(hold)), MaxCardValueLen)
}

// argumentsOf renders the arguments of a call as "name: value": the spec's
// fields in their order, then any other argument by name; money formatted
// with its currency; each value on one line, clipped to MaxCardValueLen (a
// card masks them all with redact.String); at most MaxCardArguments, the
// rest counted.
func argumentsOf(spec tool.Spec, args map[string]any) []string {
	var names []string
	known := map[string]bool{}
	for _, f := range spec.Args.Fields {
		known[f.Name] = true
		if _, ok := args[f.Name]; ok {
			names = append(names, f.Name)
		}
	}
	var other []string
	// Collected, then sorted.
	//workflowcheck:ignore
	for k := range args {
		if !known[k] {
			other = append(other, k)
		}
	}
	sort.Strings(other)
	names = append(names, other...)
	_, cur := amountOf(spec, args)
	var out []string
	for i, name := range names {
		if i == MaxCardArguments {
			out = append(out, fmt.Sprintf("(%d more arguments not shown)", len(names)-i))
			break
		}
		v := args[name]
		var text string
		if redact.SensitiveKey(name) { // token, password, card...: never its value, whatever it looks like
			out = append(out, name+": "+redact.Mask)
			continue
		}
		if f, ok := spec.Args.Field(name); ok && f.Type == tool.Money {
			if minor, ok := tool.IntOf(args, name); ok {
				text = formatMinor(minor, cur)
			}
		}
		if text == "" {
			if sv, ok := v.(string); ok {
				text = sv
			} else {
				b, _ := json.Marshal(v)
				text = string(b)
			}
		}
		// Masked first, then clipped: a clip never cuts a secret into a
		// part the masking would not recognise.
		out = append(out, clip(redact.String(name+": "+oneLine(text)), len(name)+2+MaxCardValueLen))
	}
	return out
}

// oneLine puts text on one line: control characters (line feeds, tabs)
// become spaces, runs of spaces one.
func oneLine(text string) string {
	return strings.Join(strings.FieldsFunc(text, func(c rune) bool { return unicode.IsSpace(c) || unicode.IsControl(c) }), " ")
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

// redactCard masks anything secret-shaped a card could carry from args or
// a provider's answer.
func redactCard(c Card) Card {
	c.Object, c.RequestID, c.RequestedBy = redact.String(c.Object), redact.String(c.RequestID), redact.String(c.RequestedBy)
	c.Rule, c.Clash = redact.String(c.Rule), redact.String(c.Clash)
	c.Reason, c.Reverses, c.ProviderAnswered, c.Lookup = redact.String(c.Reason), redact.String(c.Reverses), redact.String(c.ProviderAnswered), redact.String(c.Lookup)
	for _, list := range [][]string{c.AlreadyRan, c.Arguments, c.Calls} {
		for i, s := range list {
			list[i] = redact.String(s)
		}
	}
	for i := range c.Does {
		c.Does[i].Does = redact.String(c.Does[i].Does)
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
			if redact.SensitiveKey(f) {
				v = redact.Mask // a secret-named field never shows its value
			}
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

// callLog is what the calls and lookups of one operation key got back, for
// the cards of its questions (workflow state only: recording it issues no
// command).
type callLog struct {
	lines   []string // the latest MaxCardCalls
	dropped int      // earlier lines no longer kept
	lookup  string   // the latest lookup's answer
	lookups int      // lookups so far
}

// callLogOf returns the call log of key.
func (r *run) callLogOf(key string) *callLog {
	l := r.calls[key]
	if l == nil {
		l = &callLog{}
		r.calls[key] = l
	}
	return l
}

// cardTime is how a card words an instant: UTC, to the second.
func cardTime(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") }

// logCall records one call of req (the ExecuteTool activity, with its own
// retries as attempts) made at at, the workflow's clock when it was
// scheduled, and what came back.
func (r *run) logCall(key string, at time.Time, spec tool.Spec, attempts int, out activities.Output, err error) {
	var what string
	var te *temporal.TimeoutError
	switch {
	case err == nil && out.Replayed:
		what = "nothing sent: the ledger already held its success"
	case err == nil && out.Reconciled:
		what = "nothing sent: the provider already held it under the key"
	case err == nil:
		what = "done"
	case errors.As(err, &te):
		what = fmt.Sprintf("no answer within %s (timeout): the request may have reached the provider", spec.Timeout)
	default:
		what = errText(err)
		if code := activities.DetailOf(err).Code; code != "" && !strings.Contains(what, code) {
			what += " (" + code + ")"
		}
	}
	if err == nil && out.ExternalID != "" {
		what += ", external id " + out.ExternalID
	}
	word := "attempts"
	if attempts == 1 {
		word = "attempt"
	}
	line := clip(redact.String(oneLine(fmt.Sprintf("%s, %d %s: %s", cardTime(at), attempts, word, what))), MaxCardLineLen)
	l := r.callLogOf(key)
	l.lines = append(l.lines, line)
	if len(l.lines) > MaxCardCalls {
		l.dropped += len(l.lines) - MaxCardCalls
		l.lines = append([]string(nil), l.lines[len(l.lines)-MaxCardCalls:]...)
	}
}

// logLookup records the provider's answer to a lookup of key at at.
func (r *run) logLookup(key string, at time.Time, look tool.Lookup, err error) {
	var what string
	switch {
	case err != nil:
		what = "the provider could not be asked: " + errText(err)
	case look.Status == tool.Found:
		what = "found under the key, external id " + look.Result.ExternalID
	case look.Status == tool.Mismatch:
		what = fmt.Sprintf("an effect made with other arguments is under the key (%s)", look.Result.ExternalID)
	case look.Status == tool.Absent && look.Authoritative && !look.NotBefore.IsZero():
		what = "absent (the provider's word), but the last request may still land until " + cardTime(look.NotBefore)
	case look.Status == tool.Absent && look.Authoritative:
		what = "absent (the provider's word)"
	case look.Status == tool.Absent:
		what = "absent from a lookup that may lag (not the provider's word)"
	default:
		what = "the provider could not say"
	}
	l := r.callLogOf(key)
	l.lookups++
	l.lookup = clip(redact.String(oneLine(fmt.Sprintf("%s (lookup %d): %s", cardTime(at), l.lookups, what))), MaxCardLineLen)
}

// callLines are the card lines of key's calls (the earlier ones counted in
// a first line) and its latest lookup.
func (r *run) callLines(key string) ([]string, string) {
	l := r.calls[key]
	if l == nil {
		return nil, ""
	}
	var out []string
	if l.dropped > 0 {
		out = append(out, fmt.Sprintf("(%d earlier calls not shown)", l.dropped))
	}
	return append(out, l.lines...), l.lookup
}

// answerOrder is the one order of answers on every card and in the
// console: the answer that makes no new effect first, the one that may
// make a second effect last.
var answerOrder = []string{"reject", "approve", string(OutcomeFailed), string(OutcomeSucceeded), string(OutcomeRetry)}

// failTail says what a step that fails for good leads to.
const failTail = "the plan stops and reverses its steps that succeeded (in a session, the turn's own, unless the session keeps failed turns)"

// does says what each of answers to a question of kind on step n does, as
// the workflow carries it out (askApproval, settle, reconcileFailed,
// checkSucceeded, retryStatus, escalateCompensation,
// retryRejectedReversal), in answerOrder.
func (r *run) does(n int, kind string, answers []string, clash bool) []AnswerDoes {
	st := r.step(n)
	spec := r.specs[st.Tool]
	name := st.Tool
	reversed := ""
	if spec.Compensable() {
		reversed = fmt.Sprintf(" (if the plan then fails, it is reversed by %s)", spec.Compensator)
	}
	m := map[string]string{}
	switch kind {
	case QuestionApproval:
		m["reject"] = fmt.Sprintf("%s is not run; %s", name, failTail)
		m["approve"] = fmt.Sprintf("runs %s once, under key %s with the arguments on this card (a single-use permit)", name, st.Key)
		if clash {
			m["approve"] += "; it must be sent with override, past the clash shown"
		}
	case QuestionOutcome:
		mismatch := !contains(answers, string(OutcomeRetry))
		switch {
		case mismatch:
			m[string(OutcomeSucceeded)] = "adopts the effect found under the key as this step's: give its external id and say why in the reason; nothing is sent" + reversed
			m[string(OutcomeFailed)] = fmt.Sprintf("records that this step made no effect; the effect found under the key is left alone (never reversed); nothing is sent; %s", failTail)
		case spec.NoLookup:
			m[string(OutcomeSucceeded)] = "records it as done on your word, with the external id you give (the tool cannot look itself up); nothing is sent" + reversed
			m[string(OutcomeFailed)] = fmt.Sprintf("records that nothing happened; nothing is sent again; %s", failTail)
			m[string(OutcomeRetry)] = fmt.Sprintf("sends it again at once under the same key (%s cannot look itself up): if the first was delivered, a second %s effect is made", name, name)
		default:
			m[string(OutcomeSucceeded)] = "asks the provider first and is accepted only if it holds the effect under the key (its external id is recorded); nothing is sent" + reversed
			m[string(OutcomeFailed)] = fmt.Sprintf("records that nothing happened; nothing is sent again; %s (if the provider is then found to hold it, it is recorded as succeeded%s)", failTail, map[bool]string{true: " and reversed", false: ""}[spec.Compensable()])
			retry := fmt.Sprintf("looks the key up at the provider first: found, it is done and nothing is sent; absent on the provider's word (and past the time the first request could still land), it is sent again under the same key; otherwise it is looked up for %s and you are asked again", spec.Window())
			if spec.Class == tool.NonIdempotentWrite {
				retry += fmt.Sprintf(": if the first was made but the lookup cannot find it, a second %s effect is made", name)
			} else {
				retry += fmt.Sprintf(": %s is a %s, so the provider answers the same key with the first effect", name, spec.Class)
			}
			m[string(OutcomeRetry)] = retry
		}
	case QuestionReversal:
		comp := st.Compensation
		if comp == nil {
			break
		}
		cspec := r.specs[comp.Tool]
		m[string(OutcomeSucceeded)] = "records the step as reversed by hand, with the external id you give; nothing is sent"
		m[string(OutcomeFailed)] = fmt.Sprintf("accepts that %s's effect stays unreversed (compensation_failed); nothing is sent", name)
		if r.revErr[n] == activities.ErrRejected {
			m[string(OutcomeRetry)] = fmt.Sprintf("asks the provider about %s first: if it holds that reversal after all, it is recorded as done and nothing is sent; otherwise a new reversal request goes out under key %s (the provider would answer the same key with the same refusal)",
				comp.Key, tool.ReversalRetryKey(st.Key, r.round(n)+1))
		} else {
			retry := fmt.Sprintf("runs %s again under the same key %s", comp.Tool, comp.Key)
			if cspec.NoLookup {
				retry += ", at once (it cannot look itself up)"
			} else {
				retry += ", after looking the key up at the provider (found: done, nothing sent)"
			}
			if cspec.Class == tool.NonIdempotentWrite {
				retry += fmt.Sprintf(": if the first reversal took effect unseen, a second %s effect is made", comp.Tool)
			}
			m[string(OutcomeRetry)] = retry
		}
	}
	var out []AnswerDoes
	for _, a := range answerOrder {
		if contains(answers, a) && m[a] != "" {
			out = append(out, AnswerDoes{Answer: a, Does: m[a]})
		}
	}
	return out
}
