package ledger

import (
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Report is the seeds' operating figures, read from the ledger (the durable
// source) by Store.Report. Windowed figures count the operations created,
// and the decisions applied, at or after Since; Queue and Uncertain are the
// ledger as it is At.
type Report struct {
	Since time.Time `json:"since,omitzero"`
	At    time.Time `json:"at"`
	// Tools has one entry per tool (action type), by name; Totals sums them.
	Tools  []ToolFigures `json:"tools"`
	Totals ToolFigures   `json:"totals"`
	// Unknown: outcomes that were unknown and how they were settled.
	Unknown UnknownFigures `json:"unknown"`
	// Held: calls a guard or the duplicate check held for a person.
	Held HeldFigures `json:"held"`
	// Humans: what people decided, why, and for how long plans waited.
	Humans HumanFigures `json:"humans"`
	// Queue is the exception queue now, one entry per kind of
	// ExceptionKinds, empty kinds included.
	Queue []QueueFigures `json:"queue"`
	// Uncertain is the money in operations whose outcome is not known now.
	Uncertain UncertainFigures `json:"uncertain"`
}

// ToolFigures are the figures of one tool's operations.
type ToolFigures struct {
	Tool       string `json:"tool,omitempty"`
	Operations int    `json:"operations"`
	Succeeded  int    `json:"succeeded"`
	// FirstAttempt: succeeded on the first attempt, the outcome never
	// unknown.
	FirstAttempt int `json:"first_attempt"`
	// Replays: claims answered from the stored success (duplicates
	// absorbed by the ledger; nothing was called).
	Replays     int `json:"replays"`
	Failed      int `json:"failed_final"`
	Compensated int `json:"compensated"`
	// Unknown: operations whose outcome was unknown at some point.
	Unknown int `json:"unknown"`
}

// FirstAttemptShare is FirstAttempt over Operations, 0 without operations.
func (t ToolFigures) FirstAttemptShare() float64 { return share(t.FirstAttempt, t.Operations) }

// UnknownFigures are the unknown outcomes of the window and their settling.
type UnknownFigures struct {
	Total       int `json:"total"`
	Open        int `json:"open"`
	ByReconcile int `json:"settled_by_reconcile"`
	ByHuman     int `json:"settled_by_human"`
	// Mean seconds from unknown to settled, over the settled ones (0 when
	// none), and by how they settled.
	MeanSettleSeconds      float64 `json:"mean_settle_seconds"`
	MeanReconcileSeconds   float64 `json:"mean_settle_seconds_by_reconcile"`
	MeanHumanSettleSeconds float64 `json:"mean_settle_seconds_by_human"`
}

// HeldFigures count held calls: repeats stopped by business guards and
// suspected duplicates. A call a guard refused outright is not stored, so it
// is not counted here (the worker's metrics count it).
type HeldFigures struct {
	Held int `json:"held"`
	// Stopped: held and never run. RunAfterOverride: a person let it run.
	Stopped          int `json:"stopped"`
	RunAfterOverride int `json:"run_after_override"`
}

// HumanFigures are the people's decisions of the window (refusals and
// expiries are counted apart: no person's decision was applied).
type HumanFigures struct {
	// Operations: distinct operation keys a person decided on.
	Operations int `json:"operations"`
	// Share: Operations over the window's operations (plus decided keys
	// the ledger has no row for, such as a rejected approval).
	Share     float64        `json:"share"`
	Decisions int            `json:"decisions"`
	ByKind    map[string]int `json:"by_kind"`
	// Why counts decisions by the question they answered: approval,
	// held (a guard or duplicate hold overridden or refused), outcome (an
	// unknown outcome), reversal (a failed compensation).
	Why      map[string]int `json:"why"`
	Refused  int            `json:"refused"`
	Expired  int            `json:"expired"`
	Measured int            `json:"measured"`
	// WaitMinutes sums, over the Measured decisions, the time from the
	// question's opening to the applied decision: the question's recorded
	// opening time, else the moment the outcome became unknown (an outcome
	// question) or the held call was stored (a hold). It is how long plans
	// waited for people, an upper bound of their working time.
	WaitMinutes float64 `json:"wait_minutes"`
	// Unmeasured decisions have no opening time in the ledger (an approval
	// asked before any ledger row, recorded without OpenedAt).
	Unmeasured int `json:"unmeasured"`
}

// QueueFigures is one kind of the exception queue.
type QueueFigures struct {
	Kind  string `json:"kind"`
	Count int    `json:"count"`
	// OldestAgeSeconds is the age of the oldest entry (since its operation
	// was created), 0 when empty.
	OldestAgeSeconds float64 `json:"oldest_age_seconds"`
}

// UncertainFigures are the amounts in operations whose outcome is unknown
// now (unknown, or waiting for a person after being unknown), read from the
// operations' summaries.
type UncertainFigures struct {
	Operations int      `json:"operations"`
	Amounts    []Amount `json:"amounts"`
	// WithoutAmount: uncertain operations whose summary names no amount.
	WithoutAmount int `json:"without_amount"`
}

// Amount is a sum of money in integer minor units.
type Amount struct {
	Currency   string `json:"currency"`
	Minor      int64  `json:"minor"`
	Operations int    `json:"operations"`
}

// Exception kinds of the queue.
const (
	KindNeedsHuman         = "needs_human"
	KindCompensationFailed = "compensation_failed"
	KindUnknown            = "unknown"
	KindStuck              = "stuck"
	// KindNotification: a webhook notification not acknowledged yet (its
	// row's action type is NotifyActionType); no money hangs on it.
	KindNotification = "notification"
)

// NotifyActionType is the action type of a webhook notification's row
// (activities.Notify): its unknown outcome is kind notification, not
// unknown.
const NotifyActionType = "notify_webhook"

// ExceptionKinds lists the kinds of the exception queue, in report order.
var ExceptionKinds = []string{KindNeedsHuman, KindCompensationFailed, KindUnknown, KindStuck, KindNotification}

// ExceptionKind is the queue kind of a row Exceptions listed: its status,
// stuck for an in_progress row whose lease ended, or notification for a
// webhook notification's row.
func ExceptionKind(op Operation) string {
	if op.ActionType == NotifyActionType {
		return KindNotification
	}
	if op.Status == InProgress {
		return KindStuck
	}
	return string(op.Status)
}

// SummarizeQueue counts ops (as Exceptions lists them) by kind, with the age
// of each kind's oldest entry at at. Every kind of ExceptionKinds is present.
func SummarizeQueue(ops []Operation, at time.Time) []QueueFigures {
	idx := map[string]int{}
	out := make([]QueueFigures, len(ExceptionKinds))
	for i, k := range ExceptionKinds {
		out[i].Kind, idx[k] = k, i
	}
	for _, op := range ops {
		i, ok := idx[ExceptionKind(op)]
		if !ok {
			continue
		}
		out[i].Count++
		if age := at.Sub(op.CreatedAt).Seconds(); age > out[i].OldestAgeSeconds {
			out[i].OldestAgeSeconds = age
		}
	}
	return out
}

// amountRE matches an amount as the workflow's summaries write it:
// "1,500.00 EUR", "500 JPY".
var amountRE = regexp.MustCompile(`(?:^|\s)(-?[0-9]{1,3}(?:,[0-9]{3})*|-?[0-9]+)(?:\.([0-9]{1,3}))? ([A-Z]{3})(?:\s|$)`)

// AmountIn reads the first amount of a summary ("apply_refund order_id
// ord_1 1,500.00 EUR key") in minor units, exactly; ok is false when there
// is none.
func AmountIn(summary string) (minor int64, currency string, ok bool) {
	m := amountRE.FindStringSubmatch(summary)
	if m == nil {
		return 0, "", false
	}
	n, err := strconv.ParseInt(strings.ReplaceAll(m[1], ",", "")+m[2], 10, 64)
	if err != nil {
		return 0, "", false
	}
	return n, m[3], true
}

// AddAmount adds minor units of currency to amounts, keeping them sorted by
// currency.
func AddAmount(amounts []Amount, minor int64, currency string) []Amount {
	for i := range amounts {
		if amounts[i].Currency == currency {
			amounts[i].Minor += minor
			amounts[i].Operations++
			return amounts
		}
	}
	amounts = append(amounts, Amount{Currency: currency, Minor: minor, Operations: 1})
	sort.Slice(amounts, func(i, j int) bool { return amounts[i].Currency < amounts[j].Currency })
	return amounts
}

func share(n, of int) float64 {
	if of <= 0 {
		return 0
	}
	return float64(n) / float64(of)
}

// Share returns n over of, 0 when of is not positive.
func Share(n, of int) float64 { return share(n, of) }
