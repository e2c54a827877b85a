package integration

import (
	"bytes"
	"encoding/base64"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/proxy"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	sdklog "go.temporal.io/sdk/log"
	"google.golang.org/protobuf/proto"

	"github.com/agentsaga/agentsaga/codec"
	"github.com/agentsaga/agentsaga/workflows"
)

// The server keeps a plan's arguments, results and decisions only as
// ciphertext: its raw history, read by a client without the codec, holds
// none of them in plain, while the codec endpoint decodes them for the
// token holder, and refuses anyone without the token.
func TestHistoryHoldsNoPlaintext(t *testing.T) {
	st := sharedStack(t)
	ctx := testContext(t, 2*time.Minute)
	const (
		order    = "ord_it_codec7731"
		argNote  = "codec-refund-reason-qx41"
		decision = "codec-decision-reason-zv58"
		approver = "codec-approver-kw93"
	)
	// Above 500.00 EUR: the refund waits for an approval, a decision that
	// carries a reason.
	p := newPlan("it-codec", step(t, "apply_refund", map[string]any{"order_id": order, "amount_minor": 61000, "currency": "EUR", "reason": argNote}))
	run, err := st.Plans.Start(ctx, p)
	require.NoError(t, err)
	waiting := waitStatus(ctx, t, st, run.WorkflowID, questionOn(1, workflows.QuestionApproval))
	q := waiting.Questions[0]
	_, err = st.Plans.Approve(ctx, run.WorkflowID, workflows.ApproveSignal{Step: 1, QuestionID: q.ID, Fingerprint: q.Fingerprint, By: approver, Approved: true, Reason: decision})
	require.NoError(t, err)
	final, err := st.Plans.Wait(ctx, run.WorkflowID)
	require.NoError(t, err)
	require.Equal(t, workflows.SagaSucceeded, final.State, "plan error: %s", final.Error)
	require.NotEmpty(t, final.Steps[0].ExternalID, "the refund's id, part of the result")

	// Attaching to the same plan reads its (encrypted) fingerprint memo.
	again, err := st.Plans.Start(ctx, p)
	require.NoError(t, err)
	require.Equal(t, run.RunID, again.RunID)

	// A client without the codec sees the history as the server stores it.
	raw, err := client.Dial(client.Options{HostPort: st.Server.FrontendAddr(), Namespace: st.Server.Namespace(), Logger: sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler))})
	require.NoError(t, err)
	defer raw.Close()
	var events []*historypb.HistoryEvent
	it := raw.GetWorkflowHistory(ctx, run.WorkflowID, run.RunID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		e, err := it.Next()
		require.NoError(t, err)
		events = append(events, e)
	}
	desc, err := raw.DescribeWorkflowExecution(ctx, run.WorkflowID, run.RunID)
	require.NoError(t, err)

	var stored []byte // every byte the server returned, payload data included
	var payloads []*commonpb.Payload
	collect := func(msg proto.Message) {
		b, err := proto.Marshal(msg)
		require.NoError(t, err)
		stored = append(stored, b...)
		require.NoError(t, proxy.VisitPayloads(ctx, msg, proxy.VisitPayloadsOptions{
			SkipSearchAttributes: true,
			Visitor: func(_ *proxy.VisitPayloadsContext, ps []*commonpb.Payload) ([]*commonpb.Payload, error) {
				payloads = append(payloads, ps...)
				return ps, nil
			},
		}))
	}
	for _, e := range events {
		collect(e)
	}
	collect(desc)
	// The approver's name too: decision Update IDs are hashes.
	for _, plain := range []string{order, argNote, decision, approver, final.Steps[0].ExternalID} {
		require.False(t, bytes.Contains(stored, []byte(plain)), "the server holds %q in plain", plain)
	}
	require.Greater(t, len(payloads), 5, "the history has payloads to check")
	for i, pl := range payloads {
		enc := string(pl.GetMetadata()[converter.MetadataEncoding])
		require.Equal(t, codec.EncodingEncrypted, enc, "payload %d of the history is %s, not encrypted", i, enc)
	}

	// The codec endpoint decodes them for the token holder only.
	var asUI []uiPayload
	for _, pl := range payloads {
		up := uiPayload{Metadata: map[string]string{}, Data: base64.StdEncoding.EncodeToString(pl.GetData())}
		for k, v := range pl.GetMetadata() {
			up.Metadata[k] = base64.StdEncoding.EncodeToString(v)
		}
		asUI = append(asUI, up)
	}
	status, body := codecPost(ctx, t, st, "/decode", "", asUI)
	require.Equal(t, http.StatusUnauthorized, status, "decode without the token: %s", body)
	require.NotContains(t, string(body), order)
	status, _ = codecPost(ctx, t, st, "/decode", st.CodecToken+"x", asUI)
	require.Equal(t, http.StatusUnauthorized, status, "decode with a wrong token")

	var plain []byte
	for _, d := range codecCall(ctx, t, st, "/decode", st.CodecToken, asUI) {
		b, err := base64.StdEncoding.DecodeString(d.Data)
		require.NoError(t, err)
		plain = append(plain, b...)
	}
	for _, want := range []string{order, argNote, decision, approver, final.Steps[0].ExternalID} {
		require.Contains(t, string(plain), want, "the codec endpoint decodes %q", want)
	}
}
