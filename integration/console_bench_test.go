package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentsaga/agentsaga/internal/demotools"
	"github.com/agentsaga/agentsaga/internal/devstack"
	"github.com/agentsaga/agentsaga/plan"
)

// BenchmarkConsoleQuestions measures the console's answer to its page's
// poll (GET /api/questions: the open questions from the console's latest
// listing, the page's questions read whole from their plans' status, the
// claims and the decided history from the ledger) and the listing alone
// (sagaclient.Waiting), with N open questions on the embedded stack: N refunds over the approval
// threshold, each a plan waiting for approval. N is
// AGENTSAGA_BENCH_QUESTIONS (default 10,000; starting them takes minutes):
//
//	go test -run '^$' -bench ConsoleQuestions -benchtime 5x -timeout 60m ./integration/
//
// docs/benchmarks.md records the figures. The listing is one visibility
// query in pages (each plan publishes its questions in its memo), not one
// status query per plan.
func BenchmarkConsoleQuestions(b *testing.B) {
	n := 10000
	if v := os.Getenv("AGENTSAGA_BENCH_QUESTIONS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			b.Fatalf("AGENTSAGA_BENCH_QUESTIONS=%q: give a positive number of questions", v)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Minute)
	defer cancel()
	st, err := devstack.Start(ctx, devstack.Options{DataDir: b.TempDir()})
	if err != nil {
		b.Fatalf("start the stack: %v", err)
	}
	defer st.Close()

	// N plans, 16 at a time, each waiting for approval of a refund.
	t0 := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1)); i <= n; i = int(next.Add(1)) {
				args, _ := json.Marshal(map[string]any{"order_id": fmt.Sprintf("ord_b%05d", i), "amount_minor": 60000 + i, "currency": "EUR", "reason": "bench"})
				p := plan.Plan{SessionID: fmt.Sprintf("bench-q%05d", i), Turn: 1, RequestID: "bench", RequestedBy: fmt.Sprintf("agent%d", i%7),
					Steps: []plan.Step{{Tool: demotools.ApplyRefund, Args: args}}}
				if _, err := st.Plans.Start(ctx, p); err != nil {
					errs <- fmt.Errorf("start plan %d: %w", i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	// Setup, not measured: every question is open and visible.
	for {
		list, err := st.Plans.Waiting(ctx)
		if err != nil {
			b.Fatalf("list: %v", err)
		}
		open := 0
		for _, e := range list {
			open += len(e.Questions)
		}
		if open == n {
			break
		}
		if ctx.Err() != nil {
			b.Fatalf("%d of %d questions open after %s", open, n, time.Since(t0))
		}
		time.Sleep(time.Second) // polling visibility, which lags the plans
	}
	b.Logf("%d questions open after %s", n, time.Since(t0).Round(time.Second))

	base, session := benchConsole(ctx, b, st)
	get := func(b *testing.B, query string) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/questions?"+query, nil)
		req.Header.Set("X-Agentsaga-Session", session)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		var body struct {
			All   int    `json:"all"`
			Total int    `json:"total"`
			Error string `json:"error"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != http.StatusOK || body.Error != "" {
			b.Fatalf("GET /api/questions?%s: %d %v %s", query, resp.StatusCode, err, body.Error)
		}
		if body.All != n {
			b.Fatalf("the console lists %d open questions, want %d", body.All, n)
		}
	}
	// The console's first answer waits for its first listing; later ones
	// are answered from the latest (see listFresh in internal/cli).
	cold := time.Now()
	get(b, "")
	b.Logf("the console's first answer after its start: %s", time.Since(cold).Round(time.Millisecond))
	b.Run("list_waiting", func(b *testing.B) { // the listing alone: one visibility query in pages
		for b.Loop() {
			list, err := st.Plans.Waiting(ctx)
			if err != nil || len(list) != n {
				b.Fatalf("listed %d plans, want %d: %v", len(list), n, err)
			}
		}
	})
	for _, c := range []struct{ name, query string }{
		{"first_page", ""},
		{"search_order", "q=ord_b04242"},
		{"amount_range_sorted_page3", "sort=amount&amount_min=65000&amount_max=70000&page=3"},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				get(b, c.query)
			}
		})
	}
}

// benchConsole starts `starter console` on st (typed name: the stack has
// no operators file) and returns its origin and a page session.
func benchConsole(ctx context.Context, b *testing.B, st *devstack.Stack) (origin, session string) {
	link, _ := startConsoleOn(b, st, "", "127.0.0.1:0", "--by", "bench", "--ledger", st.LedgerDSN)
	u, err := url.Parse(link)
	if err != nil {
		b.Fatalf("the console printed %q: %v", link, err)
	}
	origin = u.Scheme + "://" + u.Host
	body, _ := json.Marshal(map[string]string{"token": strings.TrimPrefix(u.Fragment, "token=")})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, origin+"/api/session", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Origin", origin)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	var s struct {
		Session string `json:"session"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil || s.Session == "" {
		b.Fatalf("no console session (%d): %v", resp.StatusCode, err)
	}
	return origin, s.Session
}
