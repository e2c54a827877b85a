package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/agentsaga/agentsaga/app"
	"github.com/agentsaga/agentsaga/httptool"
	"github.com/agentsaga/agentsaga/tool"
	"github.com/agentsaga/agentsaga/tool/tooltest"
)

// carrier is a tiny carrier API, the provider the team's tools call: it
// keeps shipments and cancellations by Idempotency-Key, as the real one
// would, in a store the test counts effects in.
type carrier struct {
	mu            sync.Mutex
	n             int
	shipments     map[string]map[string]any // by key
	bodies        map[string]string         // request body by key
	cancellations map[string]map[string]any // by key
}

func startCarrier(t *testing.T) (*carrier, string) {
	c := &carrier{shipments: map[string]map[string]any{}, bodies: map[string]string{}, cancellations: map[string]map[string]any{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/shipments", c.book)
	mux.HandleFunc("GET /v1/shipments", c.find(c.shipments))
	mux.HandleFunc("POST /v1/shipments/{id}/cancel", c.cancel)
	mux.HandleFunc("GET /v1/cancellations", c.find(c.cancellations))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return c, srv.URL
}

func reply(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func refuse(w http.ResponseWriter, status int, code string) {
	reply(w, status, map[string]any{"error": map[string]string{"code": code, "message": "refused by the carrier"}})
}

func (c *carrier) book(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get(httptool.KeyHeader)
	var in struct {
		OrderID string `json:"order_id"`
		Address string `json:"address"`
		Service string `json:"service"`
	}
	if key == "" || json.NewDecoder(r.Body).Decode(&in) != nil {
		refuse(w, http.StatusBadRequest, "invalid_request")
		return
	}
	if in.Service != "standard" && in.Service != "express" {
		refuse(w, http.StatusUnprocessableEntity, "unknown_service")
		return
	}
	body := strings.Join([]string{in.OrderID, in.Address, in.Service}, "\x00")
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := c.shipments[key]; ok {
		if c.bodies[key] != body {
			refuse(w, http.StatusUnprocessableEntity, httptool.CodeIdempotencyMismatch)
			return
		}
		reply(w, http.StatusOK, s)
		return
	}
	c.n++
	s := map[string]any{"id": fmt.Sprintf("shp_%d", c.n), "order_id": in.OrderID, "address": in.Address, "service": in.Service, "status": "booked"}
	c.shipments[key], c.bodies[key] = s, body
	reply(w, http.StatusCreated, s)
}

func (c *carrier) cancel(w http.ResponseWriter, r *http.Request) {
	key, id := r.Header.Get(httptool.KeyHeader), r.PathValue("id")
	c.mu.Lock()
	defer c.mu.Unlock()
	if prior, ok := c.cancellations[key]; ok {
		if prior["cancels"] != id {
			refuse(w, http.StatusUnprocessableEntity, httptool.CodeIdempotencyMismatch)
			return
		}
		reply(w, http.StatusOK, prior)
		return
	}
	found := false
	for _, s := range c.shipments {
		found = found || s["id"] == id
	}
	if key == "" || !found {
		refuse(w, http.StatusNotFound, "not_found")
		return
	}
	c.n++
	cl := map[string]any{"id": fmt.Sprintf("cnl_%d", c.n), "cancels": id}
	c.cancellations[key] = cl
	reply(w, http.StatusCreated, cl)
}

func (c *carrier) find(store map[string]map[string]any) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		v, ok := store[r.URL.Query().Get("idempotency_key")]
		c.mu.Unlock()
		if !ok {
			refuse(w, http.StatusNotFound, "not_found")
			return
		}
		reply(w, http.StatusOK, v)
	}
}

// effects returns the ids the carrier's store holds under key: shipments
// and cancellations.
func (c *carrier) effects(_ context.Context, key string) ([]string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ids []string
	for _, s := range []map[string]map[string]any{c.shipments, c.cancellations} {
		if v, ok := s[key]; ok {
			ids = append(ids, v["id"].(string))
		}
	}
	return ids, nil
}

// The team's tool keeps every promise of the tool kit against its carrier;
// cancel_shipment runs as its reversal.
func TestShippingToolsPassToolKit(t *testing.T) {
	c, base := startCarrier(t)
	tooltest.Run(t, tooltest.Harness{
		Tool:     BookShipment,
		Provider: base,
		New:      func(_ testing.TB, baseURL string) []tool.Tool { return Tools(baseURL, nil) },
		Args:     json.RawMessage(`{"order_id":"ord_1001","address":"1 Quay St, Dublin","service":"standard"}`),
		Changed:  json.RawMessage(`{"order_id":"ord_1001","address":"1 Quay St, Dublin","service":"express"}`),
		Rejected: json.RawMessage(`{"order_id":"ord_1001","address":"1 Quay St, Dublin","service":"teleport"}`),
		Effects:  c.effects,
	})
}

// The registry the worker is built from accepts the tools: a class, a
// timeout, a Reconcile and a registered Reversal for the compensator.
func TestRegistry(t *testing.T) {
	reg, err := Registry("http://127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(reg.Names(), ","); got != "book_shipment,cancel_shipment" {
		t.Errorf("registered %s", got)
	}
}

// The worker refuses to start without its carrier or its ledger, before
// connecting to anything.
func TestRunRefusesMissingFlags(t *testing.T) {
	t.Setenv("AGENTSAGA_TOOLS", "")
	err := app.Exec(context.Background(), []string{"worker"}, nil, io.Discard, options(""))
	if err == nil || !strings.Contains(err.Error(), "CARRIER_URL is required") {
		t.Errorf("worker without CARRIER_URL = %v, want an error saying so", err)
	}
	// The shipped worker's own checks apply: --dev is not part of a team's
	// worker.
	err = app.Exec(context.Background(), []string{"worker", "--dev"}, nil, io.Discard, options("http://127.0.0.1:1"))
	if err == nil || !strings.Contains(err.Error(), "without the embedded dev stack") {
		t.Errorf("worker --dev = %v, want a refusal", err)
	}
}

// The operator and planner commands of the same binary know the team's
// tools: run checks a plan against them before dialling Temporal (a
// shipment plan gets as far as the connection; a plan for a tool the team
// does not have is refused naming it), and help lists the worker.
func TestOneBinaryKnowsTheTeamsTools(t *testing.T) {
	t.Setenv("AGENTSAGA_TOOLS", "")
	unreachable := []string{"--address", "127.0.0.1:1"}
	ship := `{"session_id":"s-1","turn":1,"steps":[{"tool":"book_shipment","args":{"order_id":"ord_1","address":"1 Main St","service":"express"}}]}`
	err := app.Exec(context.Background(), append([]string{"run", "--plan", "-"}, unreachable...), strings.NewReader(ship), io.Discard, options(""))
	if err == nil || !strings.Contains(err.Error(), "connect to Temporal") {
		t.Errorf("run of a shipment plan = %v, want it checked and sent to the (unreachable) server", err)
	}
	refund := `{"session_id":"s-1","turn":1,"steps":[{"tool":"apply_refund","args":{"order_id":"ord_1"}}]}`
	err = app.Exec(context.Background(), append([]string{"run", "--plan", "-"}, unreachable...), strings.NewReader(refund), io.Discard, options(""))
	if err == nil || !strings.Contains(err.Error(), "apply_refund") {
		t.Errorf("run of a plan for another team's tool = %v, want a refusal naming it", err)
	}
	var help strings.Builder
	if err := app.Exec(context.Background(), []string{"help"}, nil, &help, options("")); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"usage: mytool <command>", "worker [flags]", "approve ID", "mcp (--http"} {
		if !strings.Contains(help.String(), want) {
			t.Errorf("help lacks %q:\n%s", want, help.String())
		}
	}
	if strings.Contains(help.String(), "sandbox") || strings.Contains(help.String(), "demo [") {
		t.Errorf("a team's binary lists agentsaga's dev commands:\n%s", help.String())
	}
}
