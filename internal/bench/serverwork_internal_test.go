package bench

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseCountsSumsTheSeriesServerWorkReports(t *testing.T) {
	page := `# HELP service_requests_total service_requests counter
# TYPE service_requests_total counter
service_requests_total{namespace="default",operation="StartWorkflowExecution",service_name="frontend"} 3
service_requests_total{namespace="default",operation="StartWorkflowExecution",service_name="history"} 3
service_requests_total{namespace="other",operation="StartWorkflowExecution",service_name="frontend"} 2
# TYPE persistence_requests_total counter
persistence_requests_total{operation="UpdateWorkflowExecution",service_name="history"} 11
persistence_requests_total{operation="GetTransferTasks",service_name="history"} 40
persistence_requests_total{operation="CreateTasks",service_name="matching"} 4
persistence_requests_total{operation="GetNamespace",service_name="frontend"} 1
# TYPE visibility_persistence_requests_total counter
visibility_persistence_requests_total{operation="RecordWorkflowExecutionClosed",service_name="history"} 1
# TYPE activity_payload_size_total counter
activity_payload_size_total{operation="RecordActivityTaskStarted",service_name="history"} 600
activity_payload_size_total{operation="RespondActivityTaskCompleted",service_name="history"} 400
# TYPE poll_success_total counter
poll_success_total{operation="TaskQueueMgr",service_name="matching"} 9
`
	got, err := parseCounts(strings.NewReader(page))
	require.NoError(t, err)
	require.Equal(t, map[string]float64{
		"frontend StartWorkflowExecution":             5, // summed over namespaces; the history service's copy left out
		"history persistence UpdateWorkflowExecution": 11,
		"matching persistence CreateTasks":            4,
		"visibility RecordWorkflowExecutionClosed":    1,
		PayloadBytes: 1000,
	}, got)

	_, err = parseCounts(strings.NewReader("service_requests_total{operation=\"x\" 1\n"))
	require.ErrorContains(t, err, "parse the server's metrics")
}
