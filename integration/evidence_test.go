package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/catalog"
	"github.com/agentsaga/agentsaga/codec"
	"github.com/agentsaga/agentsaga/internal/devstack"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/plan"
	"github.com/agentsaga/agentsaga/sagaclient"
	"github.com/agentsaga/agentsaga/sagaworker"
	"github.com/agentsaga/agentsaga/tool"
	"github.com/agentsaga/agentsaga/workflows"
)

// The tests of this file hold the engine to "establish what the provider
// holds, never assume it" against a provider that behaves as real ones do and
// the engine cannot change: evidenceAPI, a JSON REST server that never
// deduplicates (the key rides in a body field it merely stores), finds orders
// by a filter, may commit after the client gave up, may show a commit late,
// may refuse connections for a while and may answer 503 with Retry-After.
// Effects are counted in its own store.

// evidenceOrder is an order in evidenceAPI's store.
type evidenceOrder struct {
	ID          int    `json:"id"`
	Reference   string `json:"reference"`
	Customer    string `json:"customer"`
	AmountMinor int64  `json:"amount_minor"`
	Currency    string `json:"currency"`
	created     time.Time
}

// evidenceCancel is a cancellation (a storno of an order) in evidenceAPI's store.
type evidenceCancel struct {
	ID        int    `json:"id"`
	OrderID   int    `json:"order_id"`
	Reference string `json:"reference"`
}

type evidenceAPI struct {
	mu      sync.Mutex
	orders  []evidenceOrder
	cancels []evidenceCancel
	// slow: an order created under one of these references is committed
	// only when the first lookup of the reference arrives, after that
	// lookup read the store: the commit lands after the lookup said absent
	// (and after the client gave up on the create).
	slow map[string]chan struct{}
	// drop: an order created under one of these references is committed
	// and its answer lost (the connection closes).
	drop map[string]bool
	// lag: a committed order is invisible to lookups for this long.
	lag time.Duration
	// ignoreFilter: lookups return every order, oldest first.
	ignoreFilter bool
	// unavailable: the next this many cancellations are answered 503 with
	// Retry-After: 1, before anything is stored.
	unavailable int
	// calls counts requests by "METHOD path".
	calls map[string]int
}

func newEvidenceAPI() *evidenceAPI {
	return &evidenceAPI{slow: map[string]chan struct{}{}, drop: map[string]bool{}, calls: map[string]int{}}
}

func (s *evidenceAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.calls[r.Method+" "+r.URL.Path]++
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/v1/orders":
		s.create(w, r)
	case r.Method == http.MethodGet && r.URL.Path == "/v1/orders":
		s.find(w, r)
	case r.Method == http.MethodPost && strings.HasPrefix(r.URL.Path, "/v1/orders/") && strings.HasSuffix(r.URL.Path, "/cancellations"):
		s.cancel(w, r)
	case r.Method == http.MethodGet && r.URL.Path == "/v1/cancellations":
		s.findCancels(w, r)
	case r.Method == http.MethodPost && r.URL.Path == "/v1/shipments":
		w.WriteHeader(http.StatusUnprocessableEntity)
		_, _ = w.Write([]byte(`{"error":{"code":"address_undeliverable","message":"no carrier serves this address"}}`))
	default:
		http.NotFound(w, r)
	}
}

func (s *evidenceAPI) create(w http.ResponseWriter, r *http.Request) {
	var o evidenceOrder
	if err := json.NewDecoder(r.Body).Decode(&o); err != nil {
		http.Error(w, `{"error":{"code":"bad_json"}}`, http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	wait, slow := s.slow[o.Reference]
	drop := s.drop[o.Reference]
	delete(s.drop, o.Reference)
	s.mu.Unlock()
	if slow {
		<-wait // the client gives up meanwhile; the provider does not
	}
	s.mu.Lock()
	o.ID, o.created = 100+len(s.orders), time.Now()
	s.orders = append(s.orders, o)
	s.mu.Unlock()
	if drop {
		hijackClose(w)
		return
	}
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(o)
}

func (s *evidenceAPI) find(w http.ResponseWriter, r *http.Request) {
	ref := r.URL.Query().Get("reference")
	s.mu.Lock()
	items := []evidenceOrder{}
	for _, o := range s.orders {
		if (s.ignoreFilter || o.Reference == ref) && time.Since(o.created) >= s.lag {
			items = append(items, o)
		}
	}
	wait, slow := s.slow[ref]
	if slow {
		delete(s.slow, ref)
	}
	s.mu.Unlock()
	if slow {
		// The slow create commits now, after this lookup read the store.
		close(wait)
		s.awaitOrder(r.Context(), ref)
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"items": items})
}

// awaitOrder returns once an order under ref is stored (or ctx ends).
func (s *evidenceAPI) awaitOrder(ctx context.Context, ref string) {
	for ctx.Err() == nil {
		if s.count(ref) > 0 {
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(5 * time.Millisecond): // polls the provider's own store
		}
	}
}

func (s *evidenceAPI) cancel(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/v1/orders/"), "/cancellations"))
	if err != nil {
		http.NotFound(w, r)
		return
	}
	var body struct {
		Reference string `json:"reference"`
	}
	_ = json.NewDecoder(r.Body).Decode(&body)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.unavailable > 0 {
		s.unavailable--
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"error":{"code":"maintenance","message":"back in a second"}}`))
		return
	}
	c := evidenceCancel{ID: 900 + len(s.cancels), OrderID: id, Reference: body.Reference}
	s.cancels = append(s.cancels, c)
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(c)
}

func (s *evidenceAPI) findCancels(w http.ResponseWriter, r *http.Request) {
	ref := r.URL.Query().Get("reference")
	s.mu.Lock()
	items := []evidenceCancel{}
	for _, c := range s.cancels {
		if c.Reference == ref {
			items = append(items, c)
		}
	}
	s.mu.Unlock()
	_ = json.NewEncoder(w).Encode(map[string]any{"items": items})
}

// count is how many orders the provider stores under ref.
func (s *evidenceAPI) count(ref string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, o := range s.orders {
		if o.Reference == ref {
			n++
		}
	}
	return n
}

// order is the first order stored under ref.
func (s *evidenceAPI) order(ref string) (evidenceOrder, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, o := range s.orders {
		if o.Reference == ref {
			return o, true
		}
	}
	return evidenceOrder{}, false
}

// cancelsOf counts the cancellations of order id.
func (s *evidenceAPI) cancelsOf(id int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.cancels {
		if c.OrderID == id {
			n++
		}
	}
	return n
}

func hijackClose(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if conn, _, err := hj.Hijack(); err == nil {
			_ = conn.Close()
		}
	}
}

// evidenceCatalogue declares evidenceAPI's tools as a team would: create_order is a
// NON_IDEMPOTENT_WRITE (nothing deduplicates it) with a lookup by the
// reference filter, settle and lag as given; cancel_order its storno.
func evidenceCatalogue(settle, lag string) string {
	lagLine := ""
	if lag != "" {
		lagLine = "\n      lag: " + lag
	}
	return fmt.Sprintf(`version: 1
systems:
  - {name: shop, base_url: "${SHOP_URL}"}
tools:
  - name: create_order
    description: Create an order; the shop never deduplicates and stores the key as the order's reference.
    system: shop
    class: NON_IDEMPOTENT_WRITE
    timeout: 1s
    settle: %s
    reconcile_window: 2m
    compensator: cancel_order
    args:
      - {name: customer, type: string, required: true, description: the customer}
      - {name: amount_minor, type: money, required: true, description: amount in minor units}
      - {name: currency, type: currency, required: true, description: ISO 4217 code}
    match:
      - {arg: customer, result: customer}
      - {arg: amount_minor, result: amount_minor}
    request:
      method: POST
      path: /v1/orders
      key: {body_field: reference}
      body: {fields: {customer: "{customer}", amount_minor: "{amount_minor}", currency: "{currency}"}}
    response:
      external_id: /id
      keep: {customer: /customer, amount_minor: /amount_minor}
    lookup:
      request: {path: /v1/orders, query: {reference: "{key}"}}
      found: {item: /items/0, external_id: /id}
      absent: {authoritative: true}%s

  - name: cancel_order
    description: Cancel an order with a new cancellation entry (storno).
    system: shop
    class: NON_IDEMPOTENT_WRITE
    timeout: 2s
    settle: 2s
    reverses: create_order
    request:
      method: POST
      path: /v1/orders/{original.external_id}/cancellations
      key: {body_field: reference}
      body: {fields: {reason: saga compensation}}
    response:
      external_id: /id
    lookup:
      request: {path: /v1/cancellations, query: {reference: "{key}"}}
      found: {item: /items/0, external_id: /id}
      absent: {authoritative: true}

  - name: book_shipment
    description: Book a shipment of an order.
    system: shop
    class: IDEMPOTENT_WRITE
    timeout: 2s
    args:
      - {name: customer, type: string, required: true, description: the customer}
    request:
      method: POST
      path: /v1/shipments
      key: {header: Idempotency-Key}
      body: {fields: {customer: "{customer}"}}
    response:
      external_id: /id
    lookup:
      request: {path: /v1/shipments, query: {reference: "{key}"}}
      found: {item: /items/0, external_id: /id}
      absent: {status: [404], authoritative: true}
`, settle, lagLine)
}

// evidenceStack is an embedded Temporal and a worker running evidenceCatalogue's
// tools against a evidenceAPI on a port of its own.
type evidenceStack struct {
	api   *evidenceAPI
	plans *sagaclient.Client
	st    *devstack.Stack
	ln    net.Listener
	srv   *http.Server
	addr  string
	mu    sync.Mutex
}

func startEvidenceStack(ctx context.Context, t *testing.T, name, settle, lag string) *evidenceStack {
	t.Helper()
	s := &evidenceStack{api: newEvidenceAPI()}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s.addr = ln.Addr().String()
	s.serve(ln)
	t.Cleanup(s.stop)
	opts := catalog.Options{Getenv: func(k string) (string, bool) {
		if k == "SHOP_URL" {
			return "http://" + s.addr, true
		}
		return "", false
	}}
	src := catalog.Source{Name: name + ".yaml", Data: []byte(evidenceCatalogue(settle, lag))}
	s.st, s.plans, _, _ = catalogueStack(ctx, t, opts, src, "agentsaga-it-evidence-"+name)
	return s
}

func (s *evidenceStack) serve(ln net.Listener) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ln, s.srv = ln, &http.Server{Handler: s.api, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
}

// stop closes the provider's port: connections are refused until reopen.
func (s *evidenceStack) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil {
		_ = s.srv.Close()
		s.srv = nil
	}
}

// reopen listens on the provider's port again.
func (s *evidenceStack) reopen(t *testing.T) {
	t.Helper()
	ln, err := net.Listen("tcp", s.addr)
	require.NoError(t, err, "listen on the provider's port again")
	s.serve(ln)
}

func orderStep(t *testing.T, customer string, amount int) plan.Step {
	return step(t, "create_order", map[string]any{"customer": customer, "amount_minor": amount, "currency": "EUR"})
}

// A provider that commits after the client gave up, and that does not
// deduplicate: the create times out (UNKNOWN), the lookup answers absent
// (the commit lands just after it read its store), and the engine waits out
// the in-flight horizon (last send + settle) on a durable timer before it
// looks again: it finds the order and sends nothing more. One order.
func TestSlowCommitAfterTimeoutIsOneEffect(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	s := startEvidenceStack(ctx, t, "slow-commit", "8s", "")
	p := newPlan("it-evidence-slow", orderStep(t, "cus-ana", 1200))
	s.api.mu.Lock()
	s.api.slow[p.Key(1)] = make(chan struct{})
	s.api.mu.Unlock()

	run, err := s.plans.Start(ctx, p)
	require.NoError(t, err)
	final, err := s.plans.Wait(ctx, run.WorkflowID)
	require.NoError(t, err)
	require.Equal(t, workflows.SagaSucceeded, final.State, "plan: %s", final.Error)
	require.Equal(t, 1, s.api.count(p.Key(1)), "one order in the provider's store under the key")
	o, _ := s.api.order(p.Key(1))
	require.Equal(t, strconv.Itoa(o.ID), final.Steps[0].ExternalID, "the step holds the order the provider made")
	s.api.mu.Lock()
	calls := fmt.Sprint(s.api.calls)
	s.api.mu.Unlock()
	require.GreaterOrEqual(t, s.api.calls["GET /v1/orders"], 2, "an absent answer inside the horizon was asked again after it: calls %s, step %+v", calls, final.Steps[0])
}

// requireHorizonTimer checks that the plan's history holds the durable timer
// of the in-flight horizon, named for the UI.
func requireHorizonTimer(ctx context.Context, t *testing.T, st *devstack.Stack, workflowID string) {
	t.Helper()
	it := st.Client.GetWorkflowHistory(ctx, workflowID, "", false, 0)
	for it.HasNext() {
		ev, err := it.Next()
		require.NoError(t, err)
		if a := ev.GetTimerStartedEventAttributes(); a != nil && ev.GetUserMetadata().GetSummary() != nil {
			var summary string
			require.NoError(t, codec.NewDataConverter(st.Keyring).FromPayload(ev.GetUserMetadata().GetSummary(), &summary))
			if strings.Contains(summary, "in-flight horizon") {
				return
			}
		}
	}
	t.Fatalf("no timer named \"in-flight horizon\" in %s's history", workflowID)
}

// A lookup that lags: the create commits and its answer is lost; the
// provider shows the order to lookups only 4 s later. The catalogue declares
// lag: 6s, so an absent answer before last send + settle + lag settles
// nothing: one order, found by a later lookup.
func TestLaggingLookupIsOneEffect(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	s := startEvidenceStack(ctx, t, "lag", "1s", "6s")
	s.api.mu.Lock()
	s.api.lag = 4 * time.Second
	s.api.mu.Unlock()
	p := newPlan("it-evidence-lag", orderStep(t, "cus-ben", 2300))
	s.api.mu.Lock()
	s.api.drop[p.Key(1)] = true
	s.api.mu.Unlock()

	run, err := s.plans.Start(ctx, p)
	require.NoError(t, err)
	final, err := s.plans.Wait(ctx, run.WorkflowID)
	require.NoError(t, err)
	require.Equal(t, workflows.SagaSucceeded, final.State, "plan: %s", final.Error)
	require.Equal(t, 1, s.api.count(p.Key(1)), "one order in the provider's store under the key")
	require.Equal(t, 1, s.api.calls["POST /v1/orders"], "the create was sent once")
	requireHorizonTimer(ctx, t, s.st, run.WorkflowID)
}

// A provider that refuses connections for 10 s: a call that provably never
// left is retried with backoff for about a minute whatever its class, so a
// blip is no failure. One order.
func TestRefusedConnectionsForTenSecondsAreRiddenOut(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	s := startEvidenceStack(ctx, t, "refused", "2s", "")
	s.stop()
	p := newPlan("it-evidence-refused", orderStep(t, "cus-cy", 3400))
	run, err := s.plans.Start(ctx, p)
	require.NoError(t, err)
	// The outage lasts ten seconds (the scenario, not a synchronisation):
	// the plan is running against a closed port meanwhile.
	select {
	case <-time.After(10 * time.Second):
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	st, err := s.plans.Status(ctx, run.WorkflowID)
	require.NoError(t, err)
	require.NotEqual(t, workflows.SagaFailed, st.State, "a refused connection is no failure: %s", st.Error)
	s.reopen(t)
	final, err := s.plans.Wait(ctx, run.WorkflowID)
	require.NoError(t, err)
	require.Equal(t, workflows.SagaSucceeded, final.State, "plan: %s", final.Error)
	require.Equal(t, 1, s.api.count(p.Key(1)), "one order")
}

// A reversal answered 503 with Retry-After three times: the reversal path
// uses the forward path's retries (backoff, Retry-After, reconcile first),
// so the order is cancelled once and nobody is asked.
func TestReversalRidesOutRetryAfter(t *testing.T) {
	ctx := testContext(t, 4*time.Minute)
	s := startEvidenceStack(ctx, t, "reversal", "2s", "")
	s.api.mu.Lock()
	s.api.unavailable = 3
	s.api.mu.Unlock()
	p := newPlan("it-evidence-reversal", orderStep(t, "cus-dia", 4500), step(t, "book_shipment", map[string]any{"customer": "cus-dia"}))
	run, err := s.plans.Start(ctx, p)
	require.NoError(t, err)
	final, err := s.plans.Wait(ctx, run.WorkflowID)
	require.NoError(t, err)
	require.Equal(t, workflows.SagaCompensated, final.State, "plan: %s", final.Error)
	require.Empty(t, final.Questions, "nobody was asked")
	for _, st := range final.Steps {
		require.Empty(t, st.Decisions, "no decision on step %d", st.Step)
	}
	o, ok := s.api.order(p.Key(1))
	require.True(t, ok)
	require.Equal(t, 1, s.api.count(p.Key(1)), "one order")
	require.Equal(t, 1, s.api.cancelsOf(o.ID), "one cancellation")
	require.Equal(t, 4, s.api.calls[fmt.Sprintf("POST /v1/orders/%d/cancellations", o.ID)], "three 503s, then the cancellation")
}

// A lookup filter the provider ignores returns someone else's order: Match
// refuses to adopt it, and the question says a person may adopt an effect.
// The person finds the step's order in the provider's store and records it:
// resolve succeeded with its external id and why. The step succeeds with
// that id, recorded with who.
func TestPersonAdoptsTheEffectTheyFound(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	s := startEvidenceStack(ctx, t, "adopt", "1s", "")
	s.api.mu.Lock()
	s.api.orders = append(s.api.orders, evidenceOrder{ID: 7, Reference: "someone-else", Customer: "cus-zed", AmountMinor: 99, Currency: "EUR"})
	s.api.ignoreFilter = true
	s.api.mu.Unlock()
	p := newPlan("it-evidence-adopt", orderStep(t, "cus-eve", 5600))
	s.api.mu.Lock()
	s.api.drop[p.Key(1)] = true
	s.api.mu.Unlock()
	run, err := s.plans.Start(ctx, p)
	require.NoError(t, err)
	waiting := waitStatus(ctx, t, s.st, run.WorkflowID, questionOn(1, workflows.QuestionOutcome))
	q := waiting.Questions[0]
	require.Contains(t, q.Answers, string(workflows.OutcomeSucceeded), "the question offers to adopt an effect: %v", q.Answers)
	o, ok := s.api.order(p.Key(1))
	require.True(t, ok, "the provider holds the step's order")

	_, err = s.plans.Resolve(ctx, run.WorkflowID, workflows.ResolveSignal{Step: 1, QuestionID: q.ID, Outcome: workflows.OutcomeSucceeded,
		ExternalID: strconv.Itoa(o.ID), Note: "found it in the shop's back office under the reference", By: "ops-erin"})
	require.NoError(t, err)
	final, err := s.plans.Wait(ctx, run.WorkflowID)
	require.NoError(t, err)
	require.Equal(t, workflows.SagaSucceeded, final.State, "plan: %s", final.Error)
	require.Equal(t, strconv.Itoa(o.ID), final.Steps[0].ExternalID)
	require.Equal(t, 1, s.api.count(p.Key(1)), "one order: nothing was sent again")
	ds := final.Steps[0].Decisions
	require.NotEmpty(t, ds)
	last := ds[len(ds)-1]
	require.True(t, last.Adopted, "recorded as an adoption")
	require.Equal(t, "ops-erin", last.By)
	audit, err := s.st.Ledger.Decisions(ctx, p.Key(1))
	require.NoError(t, err)
	require.True(t, slices.ContainsFunc(audit, func(d ledger.DecisionRecord) bool {
		return d.By == "ops-erin" && strings.Contains(d.Note, "adopted") && d.ExternalID == strconv.Itoa(o.ID)
	}), "the audit trail holds who adopted what and why: %+v", audit)
}

// catalogueStack parses src with opts and runs its tools on an embedded
// Temporal with a worker on task queue tq: the stack, a client for plans on
// that queue and the registry. Everything stops when the test ends.
func catalogueStack(ctx context.Context, t *testing.T, opts catalog.Options, src catalog.Source, tq string) (*devstack.Stack, *sagaclient.Client, *tool.Registry, *catalog.Catalog) {
	t.Helper()
	cat, err := catalog.ParseWith(opts, src)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cat.Close() })
	reg, err := cat.Registry()
	require.NoError(t, err)
	st, err := devstack.Start(ctx, devstack.Options{NoWorker: true, UIPort: -1, TaskQueue: tq})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, st.Close()) })
	w, err := sagaworker.New(st.Client, sagaworker.Options{TaskQueue: tq, Tools: reg, Ledger: st.Ledger})
	require.NoError(t, err)
	require.NoError(t, w.Start())
	t.Cleanup(w.Stop)
	plans := sagaclient.New(codec.DecodeMemos(st.Client, codec.New(st.Keyring)), sagaclient.Options{TaskQueue: tq, Catalog: reg})
	return st, plans, reg, cat
}
