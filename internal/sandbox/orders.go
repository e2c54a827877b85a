package sandbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// orders is the shop's order system, read only.
type orders struct {
	s  *Sandbox
	db *sql.DB
}

// Order is an order as the orders API answers it.
type Order struct {
	ID               string      `json:"id"`
	CustomerID       string      `json:"customer_id"`
	Status           string      `json:"status"` // delivered, shipped, cancelled
	Currency         string      `json:"currency"`
	TotalMinor       int64       `json:"total_minor"`
	PlacedAt         time.Time   `json:"placed_at"`
	DeliveredAt      *time.Time  `json:"delivered_at,omitempty"`
	RefundWindowDays int         `json:"refund_window_days"`
	Lines            []OrderLine `json:"lines"`
}

// OrderLine is one line of an order.
type OrderLine struct {
	LineNo         int    `json:"line_no"`
	SKU            string `json:"sku"`
	Name           string `json:"name"`
	Quantity       int    `json:"quantity"`
	UnitPriceMinor int64  `json:"unit_price_minor"`
	AmountMinor    int64  `json:"amount_minor"`
}

// RefundPolicy is the answer of the refund-policy endpoint.
type RefundPolicy struct {
	OrderID           string `json:"order_id"`
	Refundable        bool   `json:"refundable"`
	Reason            string `json:"reason,omitempty"` // why not: refund_window_closed, order_not_delivered, amount_exceeds_order
	MaxRefundMinor    int64  `json:"max_refund_minor"`
	Currency          string `json:"currency"`
	WindowDays        int    `json:"window_days"`
	DaysSinceDelivery int    `json:"days_since_delivery,omitempty"`
	RequestedMinor    int64  `json:"requested_minor,omitempty"`
}

// SeedOrders are the orders every sandbox starts with. Delivery dates are
// relative to the sandbox's start.
var SeedOrders = []struct {
	ID, Customer, Status, Currency string
	DeliveredDaysAgo, WindowDays   int
	Lines                          []OrderLine
}{
	{"ord_1001", "cus_ana", "delivered", "EUR", 3, 30, []OrderLine{
		{LineNo: 1, SKU: "HP-200", Name: "Wireless headphones", Quantity: 1, UnitPriceMinor: 12900}}},
	{"ord_1002", "cus_ben", "delivered", "EUR", 5, 30, []OrderLine{
		{LineNo: 1, SKU: "LT-14", Name: "Laptop 14 inch", Quantity: 1, UnitPriceMinor: 189900},
		{LineNo: 2, SKU: "SL-14", Name: "Laptop sleeve", Quantity: 1, UnitPriceMinor: 3900}}},
	{"ord_1003", "cus_cleo", "delivered", "EUR", 45, 30, []OrderLine{
		{LineNo: 1, SKU: "KB-01", Name: "Mechanical keyboard", Quantity: 1, UnitPriceMinor: 8900}}},
	{"ord_1004", "cus_dan", "cancelled", "USD", 0, 30, []OrderLine{
		{LineNo: 1, SKU: "MS-02", Name: "Mouse", Quantity: 2, UnitPriceMinor: 2500}}},
}

func newOrders(ctx context.Context, s *Sandbox, open func(string) (*sql.DB, error)) (*orders, error) {
	db, err := open(Orders)
	if err != nil {
		return nil, err
	}
	o := &orders{s: s, db: db}
	err = migrate(ctx, db, Orders,
		`CREATE TABLE IF NOT EXISTS orders (
			id                 TEXT PRIMARY KEY,
			customer_id        TEXT NOT NULL,
			status             TEXT NOT NULL,
			currency           TEXT NOT NULL,
			placed_at          INTEGER NOT NULL,
			delivered_at       INTEGER,
			refund_window_days INTEGER NOT NULL)`,
		`CREATE TABLE IF NOT EXISTS order_lines (
			order_id         TEXT NOT NULL REFERENCES orders(id),
			line_no          INTEGER NOT NULL,
			sku              TEXT NOT NULL,
			name             TEXT NOT NULL,
			quantity         INTEGER NOT NULL CHECK (quantity > 0),
			unit_price_minor INTEGER NOT NULL CHECK (unit_price_minor > 0),
			PRIMARY KEY (order_id, line_no))`)
	if err == nil {
		err = o.seed(ctx)
	}
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	return o, nil
}

func (o *orders) seed(ctx context.Context) error {
	t := time.Now().UTC()
	day := 24 * time.Hour
	for _, so := range SeedOrders {
		var delivered any
		if so.Status == "delivered" {
			delivered = t.Add(-time.Duration(so.DeliveredDaysAgo) * day).UnixNano()
		}
		placed := t.Add(-time.Duration(so.DeliveredDaysAgo+2) * day).UnixNano()
		if _, err := o.db.ExecContext(ctx, `INSERT OR IGNORE INTO orders VALUES (?,?,?,?,?,?,?)`,
			so.ID, so.Customer, so.Status, so.Currency, placed, delivered, so.WindowDays); err != nil {
			return fmt.Errorf("sandbox: seed order %s: %w", so.ID, err)
		}
		for _, l := range so.Lines {
			if _, err := o.db.ExecContext(ctx, `INSERT OR IGNORE INTO order_lines VALUES (?,?,?,?,?,?)`,
				so.ID, l.LineNo, l.SKU, l.Name, l.Quantity, l.UnitPriceMinor); err != nil {
				return fmt.Errorf("sandbox: seed order %s: %w", so.ID, err)
			}
		}
	}
	return nil
}

func (o *orders) name() string { return Orders }
func (o *orders) close() error { return o.db.Close() }

func (o *orders) effects(context.Context) ([]Effect, error) { return nil, nil }

func (o *orders) routes(mux *http.ServeMux, prefix string) {
	mux.HandleFunc("GET "+prefix+"/v1/orders/{id}", o.get)
	mux.HandleFunc("GET "+prefix+"/v1/orders/{id}/refund-policy", o.policy)
}

func (o *orders) load(ctx context.Context, id string) (Order, error) {
	var (
		ord       Order
		placed    int64
		delivered sql.NullInt64
	)
	err := o.db.QueryRowContext(ctx, `SELECT id, customer_id, status, currency, placed_at, delivered_at, refund_window_days
		FROM orders WHERE id = ?`, id).Scan(&ord.ID, &ord.CustomerID, &ord.Status, &ord.Currency, &placed, &delivered, &ord.RefundWindowDays)
	if err != nil {
		return Order{}, err
	}
	ord.PlacedAt = fromNanos(placed)
	if delivered.Valid {
		t := fromNanos(delivered.Int64)
		ord.DeliveredAt = &t
	}
	rows, err := o.db.QueryContext(ctx, `SELECT line_no, sku, name, quantity, unit_price_minor FROM order_lines WHERE order_id = ? ORDER BY line_no`, id)
	if err != nil {
		return Order{}, err
	}
	defer rows.Close()
	ord.Lines = []OrderLine{}
	for rows.Next() {
		var l OrderLine
		if err := rows.Scan(&l.LineNo, &l.SKU, &l.Name, &l.Quantity, &l.UnitPriceMinor); err != nil {
			return Order{}, err
		}
		l.AmountMinor = int64(l.Quantity) * l.UnitPriceMinor
		ord.TotalMinor += l.AmountMinor
		ord.Lines = append(ord.Lines, l)
	}
	return ord, rows.Err()
}

// read runs the common part of both endpoints: faults, then the order.
func (o *orders) read(w http.ResponseWriter, r *http.Request, op string) (*exchange, Order, bool) {
	x, ok := o.s.begin(w, r, op)
	if !ok {
		return nil, Order{}, false
	}
	if x.is(DropBeforeCommit) {
		x.drop()
		return nil, Order{}, false
	}
	x.pause()
	if x.is(Reject) {
		status, body := x.rejection()
		writeRaw(w, status, body)
		return nil, Order{}, false
	}
	id := r.PathValue("id")
	ord, err := o.load(x.ctx, id)
	if errors.Is(err, sql.ErrNoRows) {
		writeError(w, http.StatusNotFound, "order_not_found", fmt.Sprintf("no order %s: check the order id", id))
		return nil, Order{}, false
	}
	if err != nil {
		internal(w, o.s.log, op, err)
		return nil, Order{}, false
	}
	return x, ord, true
}

func (o *orders) get(w http.ResponseWriter, r *http.Request) {
	x, ord, ok := o.read(w, r, "orders.get")
	if !ok {
		return
	}
	if x.is(CommitThenDrop) {
		x.drop()
		return
	}
	writeJSON(w, http.StatusOK, ord)
}

func (o *orders) policy(w http.ResponseWriter, r *http.Request) {
	x, ord, ok := o.read(w, r, "orders.refund_policy")
	if !ok {
		return
	}
	var requested int64
	if v := r.URL.Query().Get("amount_minor"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			writeError(w, http.StatusBadRequest, "invalid_amount", "amount_minor must be a positive integer of minor units")
			return
		}
		requested = n
	}
	p := RefundPolicy{OrderID: ord.ID, Refundable: true, MaxRefundMinor: ord.TotalMinor, Currency: ord.Currency,
		WindowDays: ord.RefundWindowDays, RequestedMinor: requested}
	switch {
	case ord.Status != "delivered" || ord.DeliveredAt == nil:
		p.Refundable, p.Reason, p.MaxRefundMinor = false, "order_not_delivered", 0
	default:
		p.DaysSinceDelivery = int(time.Since(*ord.DeliveredAt) / (24 * time.Hour))
		if p.DaysSinceDelivery > ord.RefundWindowDays {
			p.Refundable, p.Reason, p.MaxRefundMinor = false, "refund_window_closed", 0
		} else if requested > ord.TotalMinor {
			p.Refundable, p.Reason = false, "amount_exceeds_order"
		}
	}
	if x.is(CommitThenDrop) {
		x.drop()
		return
	}
	writeJSON(w, http.StatusOK, p)
}
