package bench

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/agentsaga/agentsaga/ledger"
)

// LedgerFloor is what the ledger's two durable commits of a write step (the
// claim before the call, the outcome before the activity completes) cost in
// this process, on the ledger agentsaga's worker used: the floor issue 22
// measures agentsaga's CPU per write step against.
type LedgerFloor struct {
	// Pairs claim+complete pairs on fresh keys were made one at a time,
	// and as many again ten at a time.
	Pairs int `json:"pairs"`
	// CPUMsPerStep is the process's CPU (user+system: the fsyncs
	// included) per pair, one at a time.
	CPUMsPerStep float64 `json:"cpu_ms_per_step"`
	// SysMsPerStep is the kernel's share of CPUMsPerStep and
	// SwitchesPerStep the voluntary context switches per pair, one at a
	// time (compare Side.SysCPUMsPerPlan and SwitchesPerPlan).
	SysMsPerStep    float64 `json:"sys_ms_per_step"`
	SwitchesPerStep float64 `json:"switches_per_step"`
	// CPUMsPerStepAt10 is the same with ten pairs in flight (waits for
	// SQLite's write lock included).
	CPUMsPerStepAt10 float64 `json:"cpu_ms_per_step_at_10"`
}

// floorPairs is how many pairs each LedgerFloor figure is made of.
const floorPairs = 300

// ledgerFloor measures LedgerFloor on store, with nothing else running in
// the bench (the workers only poll).
func ledgerFloor(ctx context.Context, store ledger.Store, pairs int) (LedgerFloor, error) {
	f := LedgerFloor{Pairs: pairs}
	prefix := "bench:floor:" + strconv.FormatInt(time.Now().UnixNano(), 36)
	pair := func(i int) error {
		req := benchClaim(prefix, i)
		req.Summary = "create_ticket bench ticket " + strconv.Itoa(i)
		c, err := store.Claim(ctx, req)
		if err != nil || c.Verdict != ledger.Execute {
			return fmt.Errorf("bench: ledger floor: claim of fresh key %s: verdict %q (want execute), error %v", req.Key, c.Verdict, err)
		}
		if _, err := store.Complete(ctx, benchCompletion(req)); err != nil {
			return fmt.Errorf("bench: ledger floor: complete %s: %w", req.Key, err)
		}
		return nil
	}
	u0 := usageNow()
	for i := range pairs {
		if err := pair(i); err != nil {
			return f, err
		}
	}
	u := usageNow().since(u0)
	f.CPUMsPerStep = round(float64(u.cpu.Microseconds())/1000/float64(pairs), 3)
	f.SysMsPerStep = round(float64(u.sys.Microseconds())/1000/float64(pairs), 3)
	f.SwitchesPerStep = round(float64(u.switches)/float64(pairs), 1)

	cpu0 := cpuTime()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	next := make(chan int)
	for range 10 {
		wg.Go(func() {
			for i := range next {
				if err := pair(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		})
	}
	for i := range pairs {
		next <- pairs + i
	}
	close(next)
	wg.Wait()
	if first != nil {
		return f, first
	}
	f.CPUMsPerStepAt10 = round(float64((cpuTime()-cpu0).Microseconds())/1000/float64(pairs), 3)
	return f, nil
}
