// Package sandbox runs the demo's downstream systems as real HTTP services
// in-process: an order system, a card acquirer with payments and refunds, a CRM,
// an accounting system and a mail relay. Each provider keeps its own SQLite
// store (pure Go, modernc.org/sqlite) with the unique constraints the real
// system would have, so effects are counted in the providers' stores, not in
// agentsaga's own bookkeeping.
//
// # Layout
//
// All providers share one listener on 127.0.0.1 (a free port unless
// Options.Addr says otherwise) and are told apart by a path prefix. Each
// provider's base URL (Sandbox.URLs) is what a tool is configured with, so the
// same tools work unchanged against providers on separate hosts.
//
//	/orders       GET  /v1/orders/{id}                       op orders.get
//	              GET  /v1/orders/{id}/refund-policy[?amount_minor=N]
//	                                                         op orders.refund_policy
//	/payments     POST /v1/payments            (Idempotency-Key)  op payments.create
//	              GET  /v1/payments?idempotency_key=K        op payments.lookup
//	              POST /v1/payments/{id}/reverse (Idempotency-Key) op payments.reverse
//	              POST /v1/refunds             (Idempotency-Key)  op refunds.create
//	              GET  /v1/refunds?idempotency_key=K         op refunds.lookup
//	              POST /v1/refunds/{id}/reverse (Idempotency-Key)  op refunds.reverse
//	              GET  /v1/reversals?idempotency_key=K       op reversals.lookup
//	/crm          POST /v1/tickets             (upsert by external_ref)  op tickets.create
//	              GET  /v1/tickets?external_ref=K (search, may lag)      op tickets.search
//	              POST /v1/tickets/{id}/close  (ref unique)  op tickets.close
//	              GET  /v1/closures?ref=K                    op closures.lookup
//	/accounting   POST /v1/invoices            (integration_key unique)  op invoices.create
//	              POST /v1/invoices/{id}/storno (integration_key unique) op invoices.storno
//	              GET  /v1/documents?integration_key=K       op invoices.lookup
//	/mail         POST /v1/messages            (no key; an optional reference, never deduplicated)  op mail.send
//	              GET  /v1/messages?reference=R (every message sent with R)  op mail.lookup
//	/admin        see below
//
// Errors are JSON: {"error":{"code":"...","message":"..."}}.
//
// # Idempotency (payments and refunds)
//
// Like Stripe: the Idempotency-Key header is required on every POST. The first
// request claims the key; the same key and the same body (method, path and
// canonical JSON) replays the first response with header
// Idempotent-Replayed: true; the same key with another body is 422
// idempotency_key_mismatch; the same key while the first request is still
// being processed is 409 request_in_progress. Requests that fail validation
// are not remembered; business answers (a rejection, already_reversed) are.
// A reversal (storno) is a new entry with the opposite amount that names the
// entry it reverses; an entry can be reversed once, and nothing is ever
// updated or deleted.
//
// # Admin API (JSON over HTTP, under /admin)
//
//	GET    /admin/providers              provider name -> base URL
//	GET    /admin/ops                    every operation and its kind (write, read, lookup)
//	POST   /admin/faults                 add a fault (FaultSpec), queued per operation
//	GET    /admin/faults                 pending faults
//	DELETE /admin/faults                 clear every fault
//	GET    /admin/calls[?op=A&op=B]      requests that reached each operation
//	GET    /admin/effects[?provider=P]   every committed row, reversals included
//	PUT    /admin/crm/index-lag          {"searches":N,"duration":"2s"} for new tickets
//	POST   /admin/reset                  clear faults, call counts and the index lag
//
// A fault is {"op":"refunds.create","fault":"commit_then_drop","count":1}; see
// FaultSpec for every field and FaultKind for what each fault does. Client is
// the Go client of this API.
//
// Every admin request needs the sandbox's token (Options.Token, or a random
// one; Sandbox.Token) in X-Admin-Token or Authorization: Bearer, and POST and
// PUT need Content-Type: application/json. A request that carries an Origin
// header other than the sandbox's own (a web page of another site) is
// refused with 403 on every route, providers included, so a page the
// operator visits can neither inject faults nor make payments.
package sandbox
