package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/sagaclient"
	"github.com/agentsaga/agentsaga/workflows"
)

// A plan's index is a memo any client starting a workflow can set: when its
// plan's status cannot be read, the page shows the index's own text
// (object, reason, requester, key). That text is masked and bounded as a
// card's is, never shown as the memo says it.
func TestConsoleIndexLinesAreMaskedAndBounded(t *testing.T) {
	sc := statusClient{statuses: map[string]workflows.Status{}} // no worker answers
	c, err := newConsole(sagaclient.New(sc, sagaclient.Options{}), "alice", true, nil, time.Second, func(id string) string { return id }, "127.0.0.1:1")
	require.NoError(t, err)
	huge := strings.Repeat("x", 1<<20)
	forged := workflows.QuestionIndex{
		ID: "q1-step1-approval", Kind: workflows.QuestionApproval, Step: 1, Key: "k" + huge,
		Object: "card 4111111111111111 " + huge, Reason: "pay 4242424242424242", RequestedBy: "bob " + huge,
	}
	it := c.item(sagaclient.Waiting{WorkflowID: "agent-plan:forged:1"}, forged, time.Now())
	page, _ := c.complete(t.Context(), []consoleItem{it})
	require.Len(t, page, 1)
	shown := page[0]
	for _, l := range shown.Lines {
		require.False(t, strings.Contains(l.Value, "4111111111111111") || strings.Contains(l.Value, "4242424242424242"), "%s shows a card number", l.Label)
		require.LessOrEqual(t, len(l.Value), workflows.MaxCardLineLen+3, l.Label)
	}
	for name, v := range map[string]string{"object": shown.Object, "requester": shown.Requester, "key": shown.Key} {
		require.False(t, strings.Contains(v, "4111111111111111"), "%s shows a card number", name)
		require.LessOrEqual(t, len(v), workflows.MaxCardLineLen+3, name)
	}
}
