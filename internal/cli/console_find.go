package cli

import (
	"encoding/json"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/operators"
	"github.com/agentsaga/agentsaga/workflows"
)

// Limits of the console's search (GET /api/questions); each error names the
// parameter and its limit.
const (
	// maxFindText bounds each text parameter of a search.
	maxFindText = 200
	// defaultPageSize and maxPageSize bound a page of open questions.
	defaultPageSize = 20
	maxPageSize     = 100
)

// findFilter is a search of the open questions: every text parameter is a
// case-insensitive substring match on its field; min and max bound the
// card's amount in minor units; view "mine" keeps the questions this
// console's operator may decide (the default), "all" shows every one.
type findFilter struct {
	text, plan, key, object, requester, tool, system, kind string
	min, max                                               *int64
	mine                                                   bool
	sort                                                   string // age (oldest first), expiry (soonest first), amount (largest first)
	desc                                                   bool   // reverse the sort
	page, size                                             int
}

// parseFind reads a search from q, each parameter within its limit.
func parseFind(q url.Values) (findFilter, error) {
	f := findFilter{mine: true, sort: "age", page: 1, size: defaultPageSize}
	for name, dst := range map[string]*string{"q": &f.text, "plan": &f.plan, "key": &f.key, "object": &f.object,
		"requester": &f.requester, "tool": &f.tool, "system": &f.system, "kind": &f.kind} {
		v := q.Get(name)
		if len(v) > maxFindText {
			return f, badField(name, "%s is %d bytes, the limit is %d", name, len(v), maxFindText)
		}
		*dst = strings.ToLower(strings.TrimSpace(v))
	}
	for name, dst := range map[string]**int64{"amount_min": &f.min, "amount_max": &f.max} {
		v := strings.TrimSpace(q.Get(name))
		if v == "" {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return f, badField(name, "%s %q is not a whole number of minor units from 0 (50000 is 500.00 EUR)", name, clipText(v, 40))
		}
		*dst = &n
	}
	switch v := q.Get("view"); v {
	case "", "mine":
	case "all":
		f.mine = false
	default:
		return f, badField("view", "view %q is not mine or all", clipText(v, 40))
	}
	switch v := q.Get("sort"); v {
	case "", "age":
	case "expiry", "amount":
		f.sort = v
	default:
		return f, badField("sort", "sort %q is not age, expiry or amount", clipText(v, 40))
	}
	f.desc = q.Get("order") == "desc"
	for name, dst := range map[string]*int{"page": &f.page, "size": &f.size} {
		v := q.Get(name)
		if v == "" {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || name == "size" && n > maxPageSize || n > 1_000_000 {
			return f, badField(name, "%s %q is not a number from 1 to %d", name, clipText(v, 40), map[string]int{"page": 1_000_000, "size": maxPageSize}[name])
		}
		*dst = n
	}
	return f, nil
}

// matches reports whether it fits f.
func (f findFilter) matches(it consoleItem) bool {
	has := func(field, want string) bool { return want == "" || strings.Contains(strings.ToLower(field), want) }
	if f.mine && !it.MayDecide {
		return false
	}
	if !has(it.WorkflowID, f.plan) || !has(it.Key, f.key) || !has(it.Object, f.object) || !has(it.Requester, f.requester) ||
		!has(it.Tool, f.tool) || !has(it.System, f.system) || f.kind != "" && strings.ToLower(it.Kind) != f.kind {
		return false
	}
	if f.min != nil && it.AmountMinor < *f.min || f.max != nil && (it.AmountMinor > *f.max || it.Amount == "") {
		return false
	}
	if f.text != "" {
		all := []string{it.WorkflowID, it.QuestionID, it.Key, it.Object, it.Requester, it.Tool, it.System, it.Amount, it.Kind}
		for _, l := range it.Lines {
			all = append(all, l.Value)
		}
		return strings.Contains(strings.ToLower(strings.Join(all, "\x00")), f.text)
	}
	return true
}

// find filters, sorts and pages items (open questions, oldest first) by f;
// it returns the page, how many matched and the page number (the last one
// when f.page is past it).
func find(items []consoleItem, f findFilter) (page []consoleItem, total, n int) {
	hits := sorted(items, f)
	page, lo := pageIn(hits, f)
	return page, len(hits), lo/f.size + 1
}

// pageIn returns f's page of hits (the last one when f.page is past it)
// and the index of its first hit.
func pageIn(hits []consoleItem, f findFilter) (page []consoleItem, lo int) {
	pages := max(1, (len(hits)+f.size-1)/f.size)
	lo = (min(f.page, pages) - 1) * f.size
	page = hits[lo:min(lo+f.size, len(hits))]
	if page == nil {
		page = []consoleItem{}
	}
	return page, lo
}

// sorted returns the items that match f, in f's order.
func sorted(items []consoleItem, f findFilter) []consoleItem {
	var hits []consoleItem
	for _, it := range items {
		if f.matches(it) {
			hits = append(hits, it)
		}
	}
	less := func(a, b consoleItem) bool { return a.OpenedAt.Before(b.OpenedAt) }
	switch f.sort {
	case "expiry": // soonest first; questions that never expire last
		less = func(a, b consoleItem) bool {
			if a.ExpiresAt.IsZero() != b.ExpiresAt.IsZero() {
				return !a.ExpiresAt.IsZero()
			}
			return a.ExpiresAt.Before(b.ExpiresAt)
		}
	case "amount": // largest first
		less = func(a, b consoleItem) bool { return a.AmountMinor > b.AmountMinor }
	}
	sort.SliceStable(hits, func(i, j int) bool {
		if f.desc {
			return less(hits[j], hits[i])
		}
		return less(hits[i], hits[j])
	})
	return hits
}

// facetsOf lists the kinds, tools and systems of the open questions, for
// the page's selects.
func facetsOf(items []consoleItem) map[string][]string {
	sets := map[string]map[string]bool{"kind": {}, "tool": {}, "system": {}}
	for _, it := range items {
		sets["kind"][it.Kind], sets["tool"][it.Tool], sets["system"][it.System] = true, true, true
	}
	out := map[string][]string{}
	for name, set := range sets {
		out[name] = []string{}
		for v := range set {
			if v != "" {
				out[name] = append(out[name], v)
			}
		}
		slices.Sort(out[name])
	}
	return out
}

// rightsOf is the set of rights of a key made for may; a key that records
// none (made before keys recorded them), or no key (the dev stack's typed
// name), may take both: the worker still checks its operators file.
func rightsOf(may []string) map[string]bool {
	if len(may) == 0 {
		may = []string{operators.ActionApprove, operators.ActionResolve}
	}
	out := map[string]bool{}
	for _, a := range may {
		out[a] = true
	}
	return out
}

// rights lists the console operator's rights.
func (c *console) rights() []string {
	out := []string{}
	for _, a := range []string{operators.ActionApprove, operators.ActionResolve} {
		if c.may[a] {
			out = append(out, a)
		}
	}
	return out
}

// maxDecidedShown bounds the decided questions one answer lists.
const maxDecidedShown = 200

// parseDecidedQuery reads the decided history's filters: decided_by (who,
// exactly), outcome (approve, reject, resolve, override, expire, refused)
// and within (a duration back from at, default 7 days, at most a year).
func parseDecidedQuery(q url.Values, at time.Time) (ledger.DecisionQuery, error) {
	dq := ledger.DecisionQuery{By: strings.TrimSpace(q.Get("decided_by")), Kind: q.Get("outcome"), Limit: maxDecidedShown}
	if len(dq.By) > maxFindText {
		return dq, badField("decided_by", "decided_by is %d bytes, the limit is %d", len(dq.By), maxFindText)
	}
	switch dq.Kind {
	case "", "approve", "reject", "resolve", "override", "expire", "refused":
	default:
		return dq, badField("outcome", "outcome %q is not approve, reject, resolve, override, expire or refused", clipText(dq.Kind, 40))
	}
	within := 7 * 24 * time.Hour
	if v := q.Get("within"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 || d > 366*24*time.Hour {
			return dq, badField("within", "within %q is not a duration from 1s to 8784h (such as 24h)", clipText(v, 40))
		}
		within = d
	}
	dq.Since = at.Add(-within)
	return dq, nil
}

// decidedItems words audit-trail entries as the page's decided questions.
func decidedItems(recs []ledger.DecisionRecord, link func(string) string) []consoleItem {
	out := []consoleItem{}
	for _, d := range recs {
		var card workflows.Card
		_ = json.Unmarshal(d.Card, &card) // an entry without a card shows none
		toolName, _, _ := strings.Cut(card.Change, ":")
		verdict := map[string]string{"approve": "approved", "reject": "rejected", "override": "approved with override",
			"expire": "expired", "refused": "refused: " + d.Refused}[d.Kind]
		if d.Kind == "resolve" {
			verdict = "resolved " + d.Outcome
		}
		if verdict == "" {
			verdict = d.Kind
		}
		if d.ExternalID != "" {
			verdict += " (external id " + d.ExternalID + ")"
		}
		seen := "no card digest recorded (decided by a client that sends none)"
		if d.CardDigest != "" {
			seen = "card digest " + d.CardDigest + " recorded with the decision"
		}
		out = append(out, consoleItem{
			WorkflowID: d.WorkflowID, QuestionID: d.QuestionID, Key: d.Key, Tool: toolName, Amount: card.Amount, Object: card.Object,
			Lines: cardLines(card), Answers: []string{}, UI: link(d.WorkflowID),
			Decision: &consoleDecision{By: d.By, Verified: d.Verified, At: d.AppliedAt.UTC().Format(time.RFC3339), Verdict: verdict, Note: d.Note, CardSeen: seen},
		})
	}
	return out
}
