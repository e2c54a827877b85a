package chaos

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/agentsaga/agentsaga/internal/demotools"
	"github.com/agentsaga/agentsaga/internal/sandbox"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/workflows"
)

func TestScheduleIsRepeatableFromTheSeed(t *testing.T) {
	a, err := NewSchedule(7, 120, "t", false)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewSchedule(7, 120, "t", false)
	c, _ := NewSchedule(8, 120, "t", false)
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	jc, _ := json.Marshal(c)
	if string(ja) != string(jb) {
		t.Fatal("the same seed made two different schedules")
	}
	if string(ja) == string(jc) {
		t.Fatal("seeds 7 and 8 made the same schedule")
	}
}

// TestScheduleCoversEverything checks, for short and long runs of several
// seeds, that every plan is valid for the demo tools, that every fault kind
// is injected on an operation that accepts it, and that each event the
// run's table counts is scheduled at least once.
func TestScheduleCoversEverything(t *testing.T) {
	specs := demotools.Specs()
	for _, n := range []int{20, 200} {
		for seed := uint64(1); seed <= 5; seed++ {
			s, err := NewSchedule(seed, n, "t", n == 20)
			if err != nil {
				t.Fatal(err)
			}
			kinds := map[sandbox.FaultKind]bool{}
			var tenTimes, early, leave, dup, repeats int
			for _, ps := range s.Plans {
				if err := ps.Plan.Validate(specs); err != nil {
					t.Fatalf("seed %d plan %d (%s) is not valid: %v", seed, ps.Index, ps.Template, err)
				}
				for _, f := range ps.Faults {
					if err := f.Validate(); err != nil {
						t.Fatalf("seed %d plan %d: fault %+v: %v", seed, ps.Index, f, err)
					}
					kinds[f.Fault] = true
				}
				if ps.Starts == 10 {
					tenTimes++
				}
				if ps.Early {
					early++
					if ps.Approval != AnswerApprove || !needsApproval(ps.Plan) {
						t.Fatalf("seed %d plan %d: an early decision on a plan that is not approved", seed, ps.Index)
					}
				}
				if ps.Approval == AnswerLeave {
					leave++
				}
				if ps.Duplicate && needsApproval(ps.Plan) {
					dup++
				}
				if ps.Template == tplRepeat {
					repeats++
				}
			}
			for _, k := range sandbox.FaultKinds {
				if !kinds[k] {
					t.Errorf("seed %d, %d plans: fault %s never injected", seed, n, k)
				}
			}
			if tenTimes == 0 || early == 0 || leave == 0 || dup == 0 {
				t.Errorf("seed %d, %d plans: ten-times starts %d, early %d, left waiting %d, duplicated approvals %d; want each >= 1", seed, n, tenTimes, early, leave, dup)
			}
			if n == 200 && repeats == 0 {
				t.Errorf("seed %d: no same-order repeat", seed)
			}
			if s.RestartBefore < 1 || s.RestartBefore >= n || s.ArmBefore < 1 || s.ArmBefore >= n || len(s.Kills) == 0 {
				t.Errorf("seed %d: restart %d, arm %d, kills %d", seed, s.RestartBefore, s.ArmBefore, len(s.Kills))
			}
		}
	}
}

// clean is the observation of a small healthy run: a refund that
// succeeded, a payment that was compensated, an e-mail that was sent, and
// a plan left waiting for approval and listed.
func clean() Observed {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	return Observed{
		KeyPrefix: "chaos-t-",
		Intents: []Intent{
			{WorkflowID: "agent-plan:chaos-t-0:1", Step: 2, Key: "chaos-t-0:1:2:apply_refund", Tool: demotools.ApplyRefund},
			{WorkflowID: "agent-plan:chaos-t-1:1", Step: 1, Key: "chaos-t-1:1:1:create_payment", Tool: demotools.CreatePayment},
			{WorkflowID: "agent-plan:chaos-t-1:1", Step: 2, Key: "chaos-t-1:1:2:send_email", Tool: demotools.SendEmail, Subject: "chaos t plan 1 step 2"},
			{WorkflowID: "agent-plan:chaos-t-2:1", Step: 1, Key: "chaos-t-2:1:1:apply_refund", Tool: demotools.ApplyRefund},
		},
		Effects: []sandbox.Effect{
			{Provider: "payments", Kind: "refund", ID: "re_1", Key: "chaos-t-0:1:2:apply_refund"},
			{Provider: "payments", Kind: "payment", ID: "pay_1", Key: "chaos-t-1:1:1:create_payment"},
			{Provider: "payments", Kind: "payment_reversal", ID: "rev_1", Key: "chaos-t-1:1:1:create_payment:compensate", Reverses: "pay_1"},
			{Provider: "mail", Kind: "email", ID: "msg_1", Summary: "ana@example.com: chaos t plan 1 step 2"},
			{Provider: "payments", Kind: "refund", ID: "re_other", Key: "someone-else:1:1:apply_refund"},
			{Provider: "mail", Kind: "email", ID: "msg_other", Summary: "ana@example.com: another run"},
		},
		Ledger: map[string]ledger.Operation{
			"chaos-t-0:1:2:apply_refund":              {Status: ledger.Succeeded, ExternalID: "re_1", UnknownAt: at, SettledAt: at.Add(3 * time.Second)},
			"chaos-t-1:1:1:create_payment":            {Status: ledger.Compensated, ExternalID: "pay_1"},
			"chaos-t-1:1:1:create_payment:compensate": {Status: ledger.Succeeded, ExternalID: "rev_1"},
			"chaos-t-1:1:2:send_email":                {Status: ledger.Succeeded, ExternalID: "msg_1"},
		},
		Ends: map[string]End{
			"agent-plan:chaos-t-0:1": {State: workflows.SagaSucceeded},
			"agent-plan:chaos-t-1:1": {State: workflows.SagaCompensated},
			"agent-plan:chaos-t-2:1": {State: workflows.SagaWaitingApproval, Waiting: true, Listed: true},
		},
	}
}

func TestCheckPassesAHealthyRun(t *testing.T) {
	f := Check(clean())
	if len(f.Violations) != 0 {
		t.Fatalf("violations in a healthy run: %v", f.Violations)
	}
	if f.Effects != 4 || f.Reversals != 1 || f.LongestReconcile != 3*time.Second {
		t.Fatalf("effects %d reversals %d longest %s; want 4, 1, 3s (other runs' rows not counted)", f.Effects, f.Reversals, f.LongestReconcile)
	}
}

// A reversal of a later round ({key}:compensate:2, after a person retried
// one the provider rejected) is the plan's own, with its own ledger row; a
// second reversal of the same payment under it is still a duplicate.
func TestCheckKnowsLaterReversalRounds(t *testing.T) {
	o := clean()
	o.Effects[2].Key = "chaos-t-1:1:1:create_payment:compensate:2"
	delete(o.Ledger, "chaos-t-1:1:1:create_payment:compensate")
	o.Ledger["chaos-t-1:1:1:create_payment:compensate:2"] = ledger.Operation{Status: ledger.Succeeded, ExternalID: "rev_1"}
	if f := Check(o); len(f.Violations) != 0 {
		t.Fatalf("violations for a round-2 reversal: %v", f.Violations)
	}
	o.Effects = append(o.Effects, sandbox.Effect{Provider: "payments", Kind: "payment_reversal", ID: "rev_2", Key: "chaos-t-1:1:1:create_payment:compensate", Reverses: "pay_1"})
	if f := Check(o); f.Duplicates != 1 {
		t.Fatalf("a second reversal under round 1 and round 2: %d duplicates, want 1 (%v)", f.Duplicates, f.Violations)
	}
}

// TestCheckCatchesEveryBrokenPromise feeds the checker one broken promise
// at a time and expects exactly that violation.
func TestCheckCatchesEveryBrokenPromise(t *testing.T) {
	cases := []struct {
		name    string
		breakIt func(o *Observed)
		kind    string
		count   func(f Findings) int
	}{
		{"a second refund under one key", func(o *Observed) {
			o.Effects = append(o.Effects, sandbox.Effect{Provider: "payments", Kind: "refund", ID: "re_2", Key: "chaos-t-0:1:2:apply_refund"})
		}, "duplicate", func(f Findings) int { return f.Duplicates }},
		{"a second e-mail of one send_email step", func(o *Observed) {
			o.Effects = append(o.Effects, sandbox.Effect{Provider: "mail", Kind: "email", ID: "msg_2", Summary: "ana@example.com: chaos t plan 1 step 2"})
		}, "duplicate", func(f Findings) int { return f.Duplicates }},
		{"a second reversal of one payment", func(o *Observed) {
			o.Effects = append(o.Effects, sandbox.Effect{Provider: "payments", Kind: "payment_reversal", ID: "rev_2", Key: "chaos-t-1:1:1:create_payment:compensate", Reverses: "pay_1"})
		}, "duplicate", func(f Findings) int { return f.Duplicates }},
		{"a reversal of nothing", func(o *Observed) {
			o.Effects[2].Reverses = "pay_gone"
		}, "dangling_reversal", nil},
		{"a succeeded row without its effect", func(o *Observed) {
			o.Effects = o.Effects[1:]
		}, "lost", func(f Findings) int { return f.Lost }},
		{"an effect without a ledger row", func(o *Observed) {
			delete(o.Ledger, "chaos-t-0:1:2:apply_refund")
		}, "lost", func(f Findings) int { return f.Lost }},
		{"an e-mail without a ledger row", func(o *Observed) {
			delete(o.Ledger, "chaos-t-1:1:2:send_email")
		}, "lost", func(f Findings) int { return f.Lost }},
		{"a row in flight at the end", func(o *Observed) {
			o.Ledger["chaos-t-2:1:1:apply_refund"] = ledger.Operation{Status: ledger.InProgress}
		}, "stuck", func(f Findings) int { return f.Stuck }},
		{"an unknown row of a plan that ended", func(o *Observed) {
			o.Ledger["chaos-t-0:1:2:apply_refund"] = ledger.Operation{Status: ledger.Unknown}
		}, "stuck", func(f Findings) int { return f.Stuck }},
		{"a failed row whose effect exists", func(o *Observed) {
			o.Ledger["chaos-t-0:1:2:apply_refund"] = ledger.Operation{Status: ledger.FailedFinal}
		}, "disagree", nil},
		{"a compensated row without reversal", func(o *Observed) {
			o.Effects = append(o.Effects[:2], o.Effects[3:]...)
		}, "disagree", nil},
		{"a waiting plan escalations does not list", func(o *Observed) {
			o.Ends["agent-plan:chaos-t-2:1"] = End{State: workflows.SagaWaitingApproval, Waiting: true}
		}, "end", nil},
		{"a plan ended compensation_failed without a person's word", func(o *Observed) {
			o.Ends["agent-plan:chaos-t-1:1"] = End{State: workflows.SagaCompensationFailed}
		}, "end", nil},
		{"a plan that never ended", func(o *Observed) {
			o.Ends["agent-plan:chaos-t-0:1"] = End{Err: "deadline exceeded"}
		}, "end", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := clean()
			c.breakIt(&o)
			f := Check(o)
			found := false
			for _, v := range f.Violations {
				found = found || v.Kind == c.kind
			}
			if !found {
				t.Fatalf("no %s violation; got %v", c.kind, f.Violations)
			}
			if c.count != nil && c.count(f) != 1 {
				t.Fatalf("counted %d, want 1: %v", c.count(f), f.Violations)
			}
			for _, v := range f.Violations {
				if !strings.Contains(v.String(), v.Kind) {
					t.Fatalf("violation text %q does not name its kind", v)
				}
			}
		})
	}
}
