package bench

import (
	"testing"
	"time"

	"github.com/google/pprof/profile"
)

// stack builds a sample of d CPU time whose stack is funcs, leaf first.
func stack(d time.Duration, funcs ...string) *profile.Sample {
	s := &profile.Sample{Value: []int64{1, int64(d)}}
	for _, f := range funcs {
		s.Location = append(s.Location, &profile.Location{Line: []profile.Line{{Function: &profile.Function{Name: f}}}})
	}
	return s
}

// Each sample goes to the first component, in Components order, that any
// frame of its stack belongs to: encryption called by the SDK is the
// codec's, the SQL under an activity the ledger's, a server handler under
// gRPC the server's, and a stack of nobody's the runtime's.
func TestSplitChargesTheFirstComponentOfTheStack(t *testing.T) {
	ms := time.Millisecond
	p := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		Sample: []*profile.Sample{
			stack(ms/2, "crypto/aes.encryptBlock", "github.com/agentsaga/agentsaga/codec.(*Codec).Encode", "go.temporal.io/sdk/internal.(*workflowTaskPoller).poll"),
			stack(ms/2, "encoding/json.Marshal", "go.temporal.io/sdk/converter.(*CodecDataConverter).ToPayloads", "go.temporal.io/sdk/internal.(*workflowTaskPoller).poll"),
			stack(9*ms, "modernc.org/sqlite/lib.X", "go.temporal.io/server/common/persistence/sql.(*sqlExecutionStore).UpdateWorkflowExecution"),
			stack(2*ms, "modernc.org/sqlite/lib.X", "github.com/agentsaga/agentsaga/ledger/ledgersqlite.(*Store).Claim", "github.com/agentsaga/agentsaga/activities.(*Activities).ExecuteTool"),
			stack(3*ms, "runtime.mallocgc", "go.temporal.io/server/service/history.(*handler).RecordActivityTaskStarted", "google.golang.org/grpc.(*Server).handleStream"),
			stack(4*ms, "encoding/json.Unmarshal", "github.com/agentsaga/agentsaga/workflows.(*Saga).AgentPlan", "go.temporal.io/sdk/internal.(*workflowExecutionContextImpl).ProcessWorkflowTask"),
			stack(5*ms, "syscall.Syscall", "google.golang.org/grpc/internal/transport.(*http2Client).reader"),
			stack(6*ms, "runtime.gcBgMarkWorker"),
			stack(7*ms, "go.temporal.io/sdk/internal.(*WorkflowClient).ExecuteWorkflow", "github.com/agentsaga/agentsaga/sagaclient.(*Client).Start", "github.com/agentsaga/agentsaga/internal/bench.(*runner).onePlan"),
			stack(8*ms, "database/sql.(*DB).Exec", "github.com/agentsaga/agentsaga/internal/sandbox.(*Server).refund", "net/http.(*conn).serve"),
		},
	}
	got, err := split(p)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]time.Duration{CompCodec: 1 * ms, CompLedger: 2 * ms, CompServer: 12 * ms, CompWorker: 4 * ms,
		CompNet: 5 * ms, CompRuntime: 6 * ms, CompClient: 7 * ms, CompProviders: 8 * ms}
	for c, d := range want {
		if got[c] != d {
			t.Errorf("%s: %v, want %v (whole split %v)", c, got[c], d, got)
		}
	}
	if len(got) != len(want) {
		t.Errorf("components %v, want exactly %v", got, want)
	}
	per := perPlan(got, 2)
	if per[CompProviders] != 4 || len(per) != len(Components) {
		t.Errorf("per plan %v: want providers 4 ms and every component named", per)
	}
}

// A profile without CPU samples (a heap profile, say) is refused, not read
// as zero.
func TestSplitRefusesAProfileWithoutCPUTime(t *testing.T) {
	p := &profile.Profile{SampleType: []*profile.ValueType{{Type: "alloc_space", Unit: "bytes"}}}
	if _, err := split(p); err == nil {
		t.Fatal("a heap profile was split as CPU time")
	}
}

// A batch's profile comes from the real profiler: a busy loop shows up,
// charged to this package's worker share (internal/bench's own functions
// that are not the client's).
func TestProfilerRecordsABatch(t *testing.T) {
	var pr profiler
	if err := pr.start(); err != nil {
		t.Fatalf("start the profiler (is go test -cpuprofile on? it can't run twice): %v", err)
	}
	deadline := time.Now().Add(300 * time.Millisecond)
	n := 0
	for time.Now().Before(deadline) {
		n += busy(1000)
	}
	p, err := pr.stop()
	if err != nil {
		t.Fatal(err)
	}
	got, err := split(p)
	if err != nil {
		t.Fatal(err)
	}
	if got[CompWorker] == 0 {
		t.Fatalf("300 ms of busy loop in package bench is not in its split: %v (n=%d)", got, n)
	}
}

//go:noinline
func busy(k int) int {
	s := 0
	for i := 0; i < k; i++ {
		s += i * i
	}
	return s
}
