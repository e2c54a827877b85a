package cli

import (
	"encoding/json"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/workflows"
)

func findItems() []consoleItem {
	t0 := time.Date(2026, 12, 6, 9, 0, 0, 0, time.UTC)
	var out []consoleItem
	for i := range 25 {
		it := consoleItem{
			WorkflowID: fmt.Sprintf("agent-plan:s%02d:1", i), QuestionID: "q1-step1-approval", Kind: "approval", Tool: "apply_refund",
			System: "acquirer", Key: fmt.Sprintf("s%02d:1:1:apply_refund", i), Object: fmt.Sprintf("order_id ord_%02d", i),
			Requester: "agent-7", AmountMinor: int64(1000 * (i + 1)), Amount: fmt.Sprintf("%d.00 EUR", 10*(i+1)), Currency: "EUR",
			OpenedAt: t0.Add(time.Duration(i) * time.Minute), ExpiresAt: t0.Add(time.Duration(48-i) * time.Hour), Needs: "approve", MayDecide: true,
		}
		if i%5 == 4 {
			it.Kind, it.Needs, it.MayDecide, it.Tool, it.System, it.ExpiresAt = "outcome", "resolve", false, "send_email", "mail", time.Time{}
		}
		out = append(out, it)
	}
	return out
}

// The console's search: the default view keeps what the operator may
// decide; text, field and amount filters narrow it; sorts and pages are
// stable; each bad parameter is named with its limit.
func TestConsoleFind(t *testing.T) {
	items := findItems()
	search := func(q string) ([]consoleItem, int, int) {
		v, err := url.ParseQuery(q)
		require.NoError(t, err)
		f, err := parseFind(v)
		require.NoError(t, err, q)
		return find(items, f)
	}
	page, total, n := search("")
	require.Equal(t, 20, total, "five outcome questions need resolve: not in the default view")
	require.Len(t, page, 20)
	require.Equal(t, 1, n)
	_, total, _ = search("view=all")
	require.Equal(t, 25, total)
	page, total, n = search("view=all&size=10&page=3")
	require.Equal(t, 25, total)
	require.Equal(t, 3, n)
	require.Len(t, page, 5)
	require.Equal(t, "agent-plan:s20:1", page[0].WorkflowID, "oldest first")
	page, _, n = search("view=all&size=10&page=9")
	require.Equal(t, 3, n, "past the end: the last page")
	require.Len(t, page, 5)

	page, total, _ = search("object=ORD_07")
	require.Equal(t, 1, total)
	require.Equal(t, "order_id ord_07", page[0].Object)
	_, total, _ = search("q=ord_1")
	require.Equal(t, 8, total, "ord_10..ord_19 less the outcome questions 14 and 19")
	page, total, _ = search("amount_min=5000&amount_max=8000")
	require.Equal(t, 3, total, "5000, 6000, 7000, 8000 less 5000 (an outcome question)")
	require.Equal(t, int64(6000), page[0].AmountMinor)
	page, _, _ = search("sort=amount")
	require.Equal(t, int64(24000), page[0].AmountMinor, "largest first")
	page, _, _ = search("sort=amount&order=desc")
	require.Equal(t, int64(1000), page[0].AmountMinor)
	page, _, _ = search("sort=expiry&view=all")
	require.Equal(t, "agent-plan:s23:1", page[0].WorkflowID, "soonest expiry first")
	require.True(t, page[len(page)-1].ExpiresAt.IsZero() || len(page) == 20)
	_, total, _ = search("view=all&kind=outcome&system=mail&tool=send_email")
	require.Equal(t, 5, total)
	_, total, _ = search("plan=s03&key=s03:1:1&requester=agent-7")
	require.Equal(t, 1, total)

	for q, want := range map[string]string{
		"size=101":                            "size \"101\" is not a number from 1 to 100",
		"page=0":                              "page \"0\" is not a number from 1",
		"amount_min=-1":                       "amount_min \"-1\" is not a whole number",
		"amount_max=1.5":                      "amount_max \"1.5\" is not a whole number",
		"sort=name":                           "sort \"name\" is not age, expiry or amount",
		"view=theirs":                         "view \"theirs\" is not mine or all",
		"object=" + string(make([]byte, 201)): "object is 201 bytes, the limit is 200",
	} {
		v, _ := url.ParseQuery(q)
		_, err := parseFind(v)
		require.ErrorContains(t, err, want, q)
		var fe *fieldError
		require.ErrorAs(t, err, &fe)
	}
}

// FuzzParseFind: whatever query the page (or anything else) sends, the
// search is bounded and find never panics.
func FuzzParseFind(f *testing.F) {
	for _, seed := range []string{"", "view=all&size=100&page=1000000", "q=%00%ff", "amount_min=9223372036854775807&amount_max=0",
		"page=-1", "size=0", "sort=amount&order=desc", "q=" + string(make([]byte, 300)), "kind=APPROVAL&tool=%E2%80%AE"} {
		f.Add(seed)
	}
	items := findItems()
	f.Fuzz(func(t *testing.T, raw string) {
		v, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		fl, err := parseFind(v)
		if err != nil {
			return
		}
		if fl.size < 1 || fl.size > maxPageSize || fl.page < 1 {
			t.Fatalf("accepted size %d page %d", fl.size, fl.page)
		}
		page, total, n := find(items, fl)
		if len(page) > fl.size || total > len(items) || n < 1 {
			t.Fatalf("page of %d (size %d), total %d, n %d", len(page), fl.size, total, n)
		}
	})
}

// The decided history's filters are bounded and named; entries of the
// audit trail are worded with what was decided, by whom, on which card.
func TestConsoleDecidedFromTheLedger(t *testing.T) {
	at := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	v, _ := url.ParseQuery("decided_by=bob&outcome=reject&within=24h")
	dq, err := parseDecidedQuery(v, at)
	require.NoError(t, err)
	require.Equal(t, ledger.DecisionQuery{By: "bob", Kind: "reject", Since: at.Add(-24 * time.Hour), Limit: maxDecidedShown}, dq)
	for q, want := range map[string]string{"outcome=delete": `outcome "delete" is not`, "within=forever": `within "forever" is not a duration`, "within=9000h": "is not a duration from 1s"} {
		v, _ := url.ParseQuery(q)
		_, err := parseDecidedQuery(v, at)
		require.ErrorContains(t, err, want, q)
	}
	card, _ := json.Marshal(workflows.Card{Change: "apply_refund: refund", Amount: "600.00 EUR", Object: "order_id ord_1"})
	items := decidedItems([]ledger.DecisionRecord{
		{WorkflowID: "agent-plan:s:1", QuestionID: "q1", Key: "s:1:1:apply_refund", Kind: "reject", By: "bob", Verified: true, AppliedAt: at, Card: card, Note: "not ours", CardDigest: "sha256:ab"},
		{WorkflowID: "agent-plan:t:1", QuestionID: "q2", Kind: "resolve", By: "alice", Outcome: "succeeded", ExternalID: "msg_1"},
	}, func(id string) string { return "ui/" + id })
	require.Len(t, items, 2)
	require.Equal(t, "rejected", items[0].Decision.Verdict)
	require.Equal(t, "apply_refund", items[0].Tool)
	require.Equal(t, "600.00 EUR", items[0].Amount)
	require.Contains(t, items[0].Decision.CardSeen, "sha256:ab")
	require.Equal(t, "resolved succeeded (external id msg_1)", items[1].Decision.Verdict)
}

// BenchmarkConsoleFind measures the console's search over 10,000 open
// questions once they are listed (the listing itself, sagaclient's
// Escalations, still asks each waiting plan for its status).
func BenchmarkConsoleFind(b *testing.B) {
	t0 := time.Date(2026, 12, 6, 9, 0, 0, 0, time.UTC)
	items := make([]consoleItem, 10000)
	for i := range items {
		items[i] = consoleItem{WorkflowID: fmt.Sprintf("agent-plan:s%05d:1", i), QuestionID: "q1-step1-approval", Kind: "approval",
			Tool: "apply_refund", System: "acquirer", Key: fmt.Sprintf("s%05d:1:1:apply_refund", i), Object: fmt.Sprintf("order_id ord_%05d", i),
			AmountMinor: int64(i * 100), Amount: "x", OpenedAt: t0.Add(time.Duration(i) * time.Second), MayDecide: i%3 != 0,
			Lines: []cardLine{{"change", "apply_refund: refund a card payment"}, {"rule", "amount_minor > 50000"}}}
	}
	for _, q := range []string{"", "q=ord_0999&view=all", "sort=amount&amount_min=500000&page=3"} {
		v, _ := url.ParseQuery(q)
		f, err := parseFind(v)
		if err != nil {
			b.Fatal(err)
		}
		b.Run("query="+q, func(b *testing.B) {
			for b.Loop() {
				find(items, f)
			}
		})
	}
}
