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
// DescribeWorkflowExecution's answer are decoded with codec. The SDK
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
	fields := resp.GetWorkflowExecutionInfo().GetMemo().GetFields()
	for name, p := range fields {
		if p == nil {
			continue
		}
		d, err := m.codec.Decode([]*commonpb.Payload{p})
		if err != nil {
			return nil, fmt.Errorf("decode memo %q of %s: %w", name, workflowID, err)
		}
		fields[name] = d[0]
	}
	return resp, nil
}
