package codec

import (
	"context"
	"fmt"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
)

// DecodeMemos returns c with one difference: the memo fields in
// DescribeWorkflowExecution's and ListWorkflow's answers are decoded with
// codec. The SDK
// encodes memos with the client's data converter, so with a codec they are
// encrypted, and code that reads a described memo with the default data
// converter (sagaclient reads the plan fingerprint so) needs them decoded.
//
// Give the result to such code only: a worker must be built on the client
// that client.Dial returned.
func DecodeMemos(c client.Client, codec converter.PayloadCodec) client.Client {
	return memoClient{Client: c, codec: codec}
}

type memoClient struct {
	client.Client
	codec converter.PayloadCodec
}

// DescribeWorkflowExecution describes the execution with its memo decoded.
func (m memoClient) DescribeWorkflowExecution(ctx context.Context, workflowID, runID string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	resp, err := m.Client.DescribeWorkflowExecution(ctx, workflowID, runID)
	if err != nil || resp == nil {
		return resp, err
	}
	if err := m.decode(workflowID, resp.GetWorkflowExecutionInfo().GetMemo()); err != nil {
		return nil, err
	}
	return resp, nil
}

// ListWorkflow lists executions with their memos decoded. A memo that
// cannot be decoded (another keyring's) is dropped from its execution,
// never fails the list: its reader falls back to what it reads without it.
func (m memoClient) ListWorkflow(ctx context.Context, req *workflowservice.ListWorkflowExecutionsRequest) (*workflowservice.ListWorkflowExecutionsResponse, error) {
	resp, err := m.Client.ListWorkflow(ctx, req)
	if err != nil || resp == nil {
		return resp, err
	}
	for _, e := range resp.GetExecutions() {
		if memo := e.GetMemo(); m.decode(e.GetExecution().GetWorkflowId(), memo) != nil {
			memo.Fields = nil
		}
	}
	return resp, nil
}

// decode decodes memo's fields in place.
func (m memoClient) decode(workflowID string, memo *commonpb.Memo) error {
	for name, p := range memo.GetFields() {
		if p == nil {
			continue
		}
		d, err := m.codec.Decode([]*commonpb.Payload{p})
		if err != nil {
			return fmt.Errorf("decode memo %q of %s: %w", name, workflowID, err)
		}
		memo.Fields[name] = d[0]
	}
	return nil
}
