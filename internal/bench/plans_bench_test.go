package bench

import (
	"context"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/agentsaga/agentsaga/internal/devstack"
)

// benchStack starts a stack with the plain worker for one benchmark.
func benchStack(b *testing.B) *runner {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st, err := devstack.Start(ctx, devstack.Options{UIPort: -1})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close() })
	pw, err := startPlainWorker(st.Client, st.SandboxURL)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pw.Stop)
	return &runner{st: st, tag: strconv.FormatInt(time.Now().UnixNano(), 36)}
}

// benchPlans runs one plan per iteration, one at a time, and reports the
// start call's share. Every plan must succeed: a failed one fails the
// benchmark rather than timing an error path.
func benchPlans(b *testing.B, steps int, agentsaga bool) {
	r := benchStack(b)
	ctx := context.Background()
	var starts time.Duration
	for b.Loop() {
		var start time.Duration
		var err error
		if agentsaga {
			start, _, err = r.onePlan(ctx, steps)
		} else {
			start, _, err = r.onePlain(ctx, steps)
		}
		if err != nil {
			b.Fatal(err)
		}
		starts += start
	}
	b.ReportMetric(float64(starts.Microseconds())/1000/float64(b.N), "start-ms/op")
}

// go test -run '^$' -bench Plan -benchtime 50x ./bench/
func BenchmarkPlanOneWriteStepAgentsaga(b *testing.B)    { benchPlans(b, 1, true) }
func BenchmarkPlanOneWriteStepPlain(b *testing.B)        { benchPlans(b, 1, false) }
func BenchmarkPlanThreeWriteStepsAgentsaga(b *testing.B) { benchPlans(b, 3, true) }
func BenchmarkPlanThreeWriteStepsPlain(b *testing.B)     { benchPlans(b, 3, false) }

// benchBatch runs b.N plans of one side, conc at a time (for CPU profiles
// of the concurrent case: -cpuprofile).
func benchBatch(b *testing.B, steps, conc int, agentsaga bool) {
	r := benchStack(b)
	r.o.Logger = slog.New(slog.DiscardHandler)
	b.ResetTimer()
	res, err := r.batch(context.Background(), steps, conc, b.N, agentsaga)
	if err != nil {
		b.Fatal(err)
	}
	if res.errors > 0 {
		b.Fatalf("%d plans failed", res.errors)
	}
	b.ReportMetric(float64(res.use.cpu.Microseconds())/1000/float64(b.N), "cpu-ms/op")
}

// go test -run '^$' -bench Concurrent -benchtime 200x ./bench/
func BenchmarkConcurrent50ThreeWriteStepsAgentsaga(b *testing.B) { benchBatch(b, 3, 50, true) }
func BenchmarkConcurrent50ThreeWriteStepsPlain(b *testing.B)     { benchBatch(b, 3, 50, false) }
