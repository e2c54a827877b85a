package chaos

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/agentsaga/agentsaga/internal/demotools"
	"github.com/agentsaga/agentsaga/internal/sandbox"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/tool"
	"github.com/agentsaga/agentsaga/workflows"
)

// Intent is one write step of a plan: the unit of "at most one effect".
type Intent struct {
	WorkflowID string `json:"workflow_id"`
	Step       int    `json:"step"`
	Key        string `json:"key"`
	Tool       string `json:"tool"`
	// Subject is the unique subject of a send_email step (the mail relay
	// has no key: its effects are matched by subject).
	Subject string `json:"subject,omitempty"`
}

// End is how a plan ended, as the run observed it.
type End struct {
	// State is the final state of a finished plan, or the state it was
	// waiting in.
	State workflows.SagaState `json:"state"`
	// Waiting: the plan was left waiting for a human on purpose.
	Waiting bool `json:"waiting,omitempty"`
	// Listed: escalations listed the waiting plan at the end.
	Listed bool `json:"listed,omitempty"`
	// HumanLeftUnreversed: a person answered a reversal question with
	// failed (the effect stays), which makes compensation_failed an end.
	HumanLeftUnreversed bool `json:"human_left_unreversed,omitempty"`
	// Err is why the plan's end could not be read (it never ended).
	Err string `json:"error,omitempty"`
}

// Observed is what the checker reads: the providers' stores, the ledger
// rows of the run's keys, and how each plan ended. Nothing in it comes from
// a workflow's view of its own steps.
type Observed struct {
	// KeyPrefix selects the run's effects: every key of the run starts
	// with it.
	KeyPrefix string
	Intents   []Intent
	// Effects are every committed row of every provider (all runs).
	Effects []sandbox.Effect
	// Ledger holds the ledger row of every intent key and reversal key
	// that has one.
	Ledger map[string]ledger.Operation
	// Ends holds every plan's end by workflow ID.
	Ends map[string]End
}

// Violation is one broken promise.
type Violation struct {
	Kind   string `json:"kind"` // duplicate, dangling_reversal, lost, stuck, disagree, end
	Key    string `json:"key,omitempty"`
	Detail string `json:"detail"`
}

func (v Violation) String() string {
	if v.Key == "" {
		return v.Kind + ": " + v.Detail
	}
	return v.Kind + " " + v.Key + ": " + v.Detail
}

// Findings are the checker's counts and violations.
type Findings struct {
	// Effects counts the run's rows at the providers (reversals included).
	Effects    int `json:"effects"`
	Reversals  int `json:"reversals"`
	Duplicates int `json:"duplicates"`
	Lost       int `json:"lost"`
	Stuck      int `json:"stuck"`
	// LongestReconcile is the longest time a ledger row of the run spent
	// between unknown and settled.
	LongestReconcile time.Duration `json:"longest_reconcile_ns"`
	Violations       []Violation   `json:"violations"`
}

// Check checks the invariants of a run:
//
//   - at most one effect per intent: per operation key at most one row that
//     is not a reversal, per reversal key and per reversed row at most one
//     reversal, per send_email step at most one e-mail with its subject;
//   - every reversal names a row that exists;
//   - none lost: a ledger row that says succeeded (or compensated) has its
//     effect at the provider, and every row at a provider under a key of
//     the run has a ledger row;
//   - none stuck: no ledger row in_progress, and no unknown row of a plan
//     that ended;
//   - ledger and providers agree: a failed_final row has no effect, a
//     compensated row has its reversal;
//   - every plan ended succeeded, compensated or failed, or waits for a
//     human and is listed by escalations (compensation_failed only when a
//     person said the effect stays).
func Check(o Observed) Findings {
	var f Findings
	bad := func(kind, key, format string, args ...any) {
		f.Violations = append(f.Violations, Violation{Kind: kind, Key: key, Detail: fmt.Sprintf(format, args...)})
	}
	byID := map[string]sandbox.Effect{}
	for _, e := range o.Effects {
		byID[e.ID] = e
	}
	intentKeys := map[string]Intent{}
	subjects := map[string]Intent{}
	for _, in := range o.Intents {
		intentKeys[in.Key] = in
		if in.Subject != "" {
			subjects[in.Subject] = in
		}
	}

	forward := map[string][]sandbox.Effect{}  // run key -> rows that are not reversals
	reversal := map[string][]sandbox.Effect{} // reversal key -> reversals
	reversed := map[string][]sandbox.Effect{} // reversed row id -> reversals
	emails := map[string][]sandbox.Effect{}   // subject -> e-mails
	for _, e := range o.Effects {
		if e.Kind == "email" {
			if _, sub, ok := strings.Cut(e.Summary, ": "); ok {
				if _, mine := subjects[sub]; mine {
					f.Effects++
					emails[sub] = append(emails[sub], e)
				}
			}
			continue
		}
		if o.KeyPrefix == "" || !strings.HasPrefix(e.Key, o.KeyPrefix) {
			continue
		}
		f.Effects++
		if e.Reverses != "" {
			f.Reversals++
			reversal[e.Key] = append(reversal[e.Key], e)
			reversed[e.Reverses] = append(reversed[e.Reverses], e)
			if _, ok := byID[e.Reverses]; !ok {
				bad("dangling_reversal", e.Key, "%s %s reverses %s, which no provider holds", e.Kind, e.ID, e.Reverses)
			}
			continue
		}
		forward[e.Key] = append(forward[e.Key], e)
	}
	for _, key := range sortedKeys(forward) {
		if rows := forward[key]; len(rows) > 1 {
			f.Duplicates += len(rows) - 1
			bad("duplicate", key, "%d effects under one operation key: %s", len(rows), ids(rows))
		}
	}
	for _, key := range sortedKeys(reversal) {
		if rows := reversal[key]; len(rows) > 1 {
			f.Duplicates += len(rows) - 1
			bad("duplicate", key, "%d reversals under one key: %s", len(rows), ids(rows))
		}
	}
	for _, id := range sortedKeys(reversed) {
		// Reversals under one key were counted above; here count the
		// ones under other keys.
		rows := reversed[id]
		keys := map[string]bool{}
		for _, e := range rows {
			keys[e.Key] = true
		}
		if len(keys) > 1 {
			f.Duplicates += len(keys) - 1
			bad("duplicate", rows[0].Key, "%s reversed %d times under %d keys: %s", id, len(rows), len(keys), ids(rows))
		}
	}
	for _, sub := range sortedKeys(emails) {
		if rows := emails[sub]; len(rows) > 1 {
			f.Duplicates += len(rows) - 1
			bad("duplicate", subjects[sub].Key, "%d e-mails for one send_email step (subject %q): %s", len(rows), sub, ids(rows))
		}
	}

	// Every row at a provider under a key of the run has a ledger row.
	for _, m := range []map[string][]sandbox.Effect{forward, reversal} {
		for _, key := range sortedKeys(m) {
			if _, ok := o.Ledger[key]; !ok {
				f.Lost++
				bad("lost", key, "the provider holds %s under this key but the ledger has no row", ids(m[key]))
			}
			if _, ok := intentKeys[reversalBase(key)]; !ok {
				bad("disagree", key, "an effect under a key no plan of the run has: %s", ids(m[key]))
			}
		}
	}

	for _, in := range o.Intents {
		end := o.Ends[in.WorkflowID]
		row, hasRow := o.Ledger[in.Key]
		var effects []sandbox.Effect
		if in.Tool == demotools.SendEmail {
			effects = emails[in.Subject]
		} else {
			effects = forward[in.Key]
		}
		if in.Tool == demotools.SendEmail && !hasRow && len(effects) > 0 {
			f.Lost++
			bad("lost", in.Key, "the mail relay sent %s but the ledger has no row", ids(effects))
		}
		if !hasRow {
			continue
		}
		if !row.UnknownAt.IsZero() && !row.SettledAt.IsZero() {
			f.LongestReconcile = max(f.LongestReconcile, row.SettledAt.Sub(row.UnknownAt))
		}
		switch row.Status {
		case ledger.InProgress:
			f.Stuck++
			bad("stuck", in.Key, "the ledger row is still in_progress at the end (lease until %s)", row.LeaseUntil.Format(time.RFC3339))
		case ledger.Unknown:
			if !end.Waiting {
				f.Stuck++
				bad("stuck", in.Key, "the ledger row is still unknown although the plan ended %s", end.State)
			}
		case ledger.Succeeded:
			if len(effects) == 0 {
				f.Lost++
				bad("lost", in.Key, "the ledger says succeeded (%s) but the provider holds nothing", row.ExternalID)
			} else if row.ExternalID != "" && !hasID(effects, row.ExternalID) {
				bad("disagree", in.Key, "the ledger says %s, the provider holds %s", row.ExternalID, ids(effects))
			}
		case ledger.Compensated:
			if len(effects) == 0 {
				f.Lost++
				bad("lost", in.Key, "the ledger says compensated but the provider holds no effect")
			} else if len(reversed[effects[0].ID]) == 0 {
				bad("disagree", in.Key, "the ledger says compensated but no reversal of %s exists", effects[0].ID)
			}
		case ledger.FailedFinal:
			if len(effects) > 0 {
				bad("disagree", in.Key, "the ledger says failed_final but the provider holds %s", ids(effects))
			}
		}
		// A reversal at the provider has its own ledger row, settled.
		ckey := tool.CompensationKey(in.Key)
		if rows := reversal[ckey]; len(rows) > 0 {
			if c, ok := o.Ledger[ckey]; ok && c.Status == ledger.InProgress {
				f.Stuck++
				bad("stuck", ckey, "the reversal's ledger row is still in_progress at the end")
			}
			if row.Status == ledger.Succeeded {
				bad("disagree", in.Key, "the provider holds the reversal %s but the ledger says the effect stands", ids(rows))
			}
		}
	}
	for _, key := range sortedKeys(o.Ledger) {
		if tool.IsReversalKey(key) && o.Ledger[key].Status == ledger.InProgress {
			if len(reversal[key]) == 0 {
				f.Stuck++
				bad("stuck", key, "the reversal's ledger row is still in_progress at the end")
			}
		}
	}

	for _, id := range sortedKeys(o.Ends) {
		e := o.Ends[id]
		switch {
		case e.Err != "":
			bad("end", "", "%s did not end: %s", id, e.Err)
		case e.Waiting:
			if !e.Listed {
				bad("end", "", "%s waits for a human (%s) but escalations does not list it", id, e.State)
			}
		case e.State == workflows.SagaSucceeded || e.State == workflows.SagaCompensated || e.State == workflows.SagaFailed:
		case e.State == workflows.SagaCompensationFailed && e.HumanLeftUnreversed:
		default:
			bad("end", "", "%s ended %s", id, e.State)
		}
	}
	return f
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func ids(rows []sandbox.Effect) string {
	s := make([]string, len(rows))
	for i, e := range rows {
		s[i] = e.Kind + " " + e.ID
	}
	return strings.Join(s, ", ")
}

func hasID(rows []sandbox.Effect, id string) bool {
	for _, e := range rows {
		if e.ID == id {
			return true
		}
	}
	return false
}

// reversalBase returns the key of the call a reversal key (of any round:
// {key}:compensate, {key}:compensate:N) reverses, or key itself.
func reversalBase(key string) string {
	if !tool.IsReversalKey(key) {
		return key
	}
	if i := strings.LastIndex(key, tool.CompensationKey("")); i >= 0 {
		return key[:i]
	}
	return key
}
