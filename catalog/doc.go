// Package catalog declares HTTP tools, and tools of existing MCP servers
// (see "Tools of MCP servers"), in a YAML file instead of Go: the
// systems a worker talks to (base URL, TLS CA, auth headers whose secrets
// come from environment variables or files) and, per tool, everything a
// tool.Spec holds plus how to call the provider, read its answer, map its
// errors to tool kinds, look an effect up by key and reverse it.
//
// Stability: experimental. The file format may change before 1.0; a
// `version: 1` line is required so a later format can be told apart.
//
// A catalogue is loaded with Load (or Parse), which refuses the whole file on
// any problem and names every problem at once with its YAML path, such as
// `tools.yaml: tools[2].request.path: {order} is not a declared argument`.
// Unknown keys are errors. The tools it builds use package httptool, so the
// rules of its table hold: the operation key is sent on every attempt, a
// lost answer after the request left is tool.KindUnknown, a refused
// connection tool.KindNotSent, and the transport never resends on its own.
//
// # The file
//
//	version: 1
//	systems:
//	  - name: payments
//	    base_url: https://pay.example.com      # ${NAME} is read from the environment
//	    ca_file: /etc/ssl/pay-ca.pem           # optional, PEM
//	    headers:
//	      - {name: Authorization, prefix: "Bearer ", from_env: PAY_TOKEN}
//	      - {name: X-Api-Key, from_file: /run/secrets/pay_key}
//	tools:
//	  - name: apply_refund
//	    description: Refund an amount of an order.
//	    system: payments
//	    class: NON_IDEMPOTENT_WRITE
//	    timeout: 10s
//	    args:
//	      - {name: order_id, type: string, required: true}
//	      - {name: amount_minor, type: money, required: true}
//	      - {name: currency, type: currency, required: true}
//	    request:
//	      method: POST
//	      path: /v1/refunds
//	      key: {header: Idempotency-Key}
//	      body: {format: json, fields: {order_id: "{order_id}", amount_minor: "{amount_minor}", currency: "{currency}"}}
//	    response: {external_id: /id, keep: {order_id: /order_id, amount_minor: /amount_minor}}
//	    lookup:
//	      request: {path: /v1/refunds, query: {idempotency_key: "{key}"}}
//	      absent: {status: [404], authoritative: true}
//
// catalog.schema.json (JSON Schema 2020-12) describes the same format for
// editors; examples/sandbox.yaml declares the seven sandbox demo tools and
// their reversals, examples/mailpit.yaml a send_email through Mailpit's
// HTTP API, looked up by the Message-ID made from the key.
//
// # Keys of a tool
//
//	name, description, system, class    required; class is READ, IDEMPOTENT_WRITE,
//	                                     CONDITIONAL_WRITE or NON_IDEMPOTENT_WRITE
//	timeout                              required, one attempt (Go duration)
//	retry                                max_attempts, initial_interval,
//	                                     backoff_coefficient (default 2), maximum_interval
//	args                                 name, type (string, integer, money, currency,
//	                                     email, boolean, enum), required, description,
//	                                     multiline, max_len, enum (values of an enum)
//	approval                             always: true, or field + above_minor; window
//	max_amount_minor, reconcile_window   as tool.Spec
//	settle                               how long after a send the provider may still
//	                                     commit (tool.Spec.Settle; at most MaxSettle);
//	                                     default tool.DefaultSettle, MCPSettle for mcp tools
//	guard                                scope, fields, hold, duplicate_window, form
//	match                                arg, result (a key of response.keep), default, if_set
//	compensator / reverses               the reversal's name on the original, and the
//	                                     original's name on the reversal (both required)
//	no_lookup                            a write without a lookup: UNKNOWN goes to a human
//	request                              method, path, query, headers, body {format: json|form,
//	                                     fields}, key {header, body_field}; a JSON body field
//	                                     named by a JSON pointer (/to/0/email) is nested
//	response                             external_id (pointer), keep {name: pointer},
//	                                     reject_if {pointer, equals, code} for a 2xx refusal
//	errors                               code (pointer into the error body, default
//	                                     /error/code), rules [{status, codes, outcome}]:
//	                                     the first matching rule names the outcome
//	                                     (rejected, conflict, throttled, unavailable,
//	                                     in_flight); without one httptool's table holds;
//	                                     a write's rule with a final outcome (rejected,
//	                                     conflict) names its 4xx statuses: never a 5xx,
//	                                     408 or 3xx (the provider may have acted)
//	lookup                               request (GET, must use {key}), found {status
//	                                     (default 200), item (pointer to the effect, such
//	                                     as /tickets/0), external_id (default /id)},
//	                                     absent {status, authoritative, authoritative_if
//	                                     (pointer to a boolean)}, lag (how long a commit may
//	                                     stay invisible to the lookup; at most MaxSettle)
//
// # The in-flight horizon
//
// After a write whose answer never came (a timeout, a connection lost after
// sending, a killed worker, an MCP call the server may finish after the
// client gave up), an absent lookup answer settles nothing until the first
// request can no longer land: its last send + settle + lag. The engine
// waits on a durable timer (named "in-flight horizon" in the UI) and looks
// again; found is succeeded, absent past the horizon (and authoritative) is
// sent again with the same key, anything else is reconciled until the window
// closes and then asked of a person. A tool whose horizon is not shorter
// than its reconcile window is refused at load. `starter tools probe`
// measures lag and settle on a staging provider.
//
// A write must send its key (key.header, key.body_field or {key} in a
// template) and declare a lookup or no_lookup. Pointers are RFC 6901. The
// result of a call is the external id and the kept fields only; the rest of
// the provider's answer is dropped. Throttled and unavailable answers carry
// the provider's Retry-After (capped at httptool.MaxRetryAfter).
//
// # Tools of MCP servers
//
// A catalogue also proxies tools of existing MCP servers (package mcptool):
// mcp_servers declares each upstream, and a tool with an mcp: section (in
// place of system, request, response, errors and lookup) calls one of its
// tools. Upstream tools not declared are not exposed.
//
//	mcp_servers:
//	  - name: filesystem                    # a stdio server: command, args, env, dir
//	    command: npx
//	    args: ["-y", "@modelcontextprotocol/server-filesystem@2026.8.31", "${FS_ROOT}"]
//	    env: [{name: SOME_TOKEN, from_env: FS_TOKEN}]   # value, from_env or from_file
//	  - name: remote                        # a streamable HTTP server: url, headers
//	    url: https://mcp.example.com/mcp
//	    headers: [{name: Authorization, prefix: "Bearer ", from_file: /run/secrets/mcp}]
//	tools:
//	  - name: fs_move
//	    description: Move a file.
//	    class: NON_IDEMPOTENT_WRITE
//	    timeout: 30s
//	    args: [{name: source, type: string, required: true}, {name: destination, type: string, required: true}]
//	    mcp:
//	      server: filesystem
//	      tool: move_file                   # the upstream tool
//	      args: {source: "{source}", destination: "{destination}"}   # default: the call's args
//	      key: {meta: agentsaga/key}        # or {arg: idempotency_key}
//	      external_id: /content             # pointer into the answer's data
//	      item: ""                          # pointer to the effect in the answer (default: lookup.item)
//	      lookup:
//	        tool: get_file_info             # an upstream read tool
//	        args: {path: "{destination}"}   # made from the call's args and {key}
//	        found: {text_contains: "isFile: true"}
//	        absent: {error: true, text_contains: ENOENT}
//	        authoritative: true
//	        item: ""                        # pointer to the effect (Match reads it)
//	        external_id: ""
//	        lag: 5s                         # how long a commit may stay invisible
//
// An answer's data is its structuredContent, or {"text": ...} when it has
// none. A test (found, absent) holds when every key it sets holds: error
// (the answer has isError, default false), text_contains, non_empty and
// empty (pointers into the data). An answer neither found nor absent is
// unknown, and the engine asks again until the reconcile window closes. The
// arguments template is any YAML value whose strings may hold the same
// references as other templates; a string that is exactly one reference
// keeps the value's JSON type, and an absent value drops its entry. A match
// result names a field of the lookup's item (camelCase allowed); a write's
// own answer is read at mcp.item, by default the lookup's item pointer, so
// Match reads the same fields whether the effect was answered or found, and
// the step's result is that item. The
// tool's system, shown on approval cards, is SERVER/TOOL. A stdio server
// gets only PATH, HOME and its declared env, never the worker's own
// environment; ${NAME} in command, args, dir and url is read from the
// environment when the catalogue loads, and an arg that looks like a secret
// is refused (pass it in env). Limits: MaxMCPArgs command arguments,
// MaxMCPEnv variables, MaxHeaders headers, mcptool.MaxTemplateNodes values
// per arguments template; servers count against MaxSystems. Close stops
// the servers a catalogue started.
//
// # Use
//
//	cat, err := catalog.Load(paths...)   // every problem of every file, or the catalogue
//	reg, err := cat.Registry(goTools...) // a tool.Registry with Go tools beside them
//	specs := cat.Specs()                 // for validating plans without any provider
//
// Secrets are read once, when the catalogue is loaded; a relative from_file
// or ca_file path starts at the directory of the catalogue file that names
// it (as in docker compose), not at the worker's working directory. A
// loaded catalogue prints without them.
//
// # Templates
//
// Path, query, body and header templates are text with references in
// braces: {name} is the argument called name, {key} the operation key. In a
// reversal tool (one that declares `reverses: TOOL`) {original.external_id},
// {original.key}, {original.tool} and {original.args.NAME} name what is
// undone, and {key} is the reversal's own key (the original's key plus
// ":compensate"). Values are URL-escaped in paths and queries. A body field
// or query parameter whose template references an argument the call leaves
// out is not sent; a body field that is exactly one reference keeps the
// argument's JSON type (a number stays a number). A JSON body field whose
// name starts with '/' is a JSON pointer: its value goes inside nested
// objects, and a number token below the top level is an array index (such
// as /To/0/Email); an array's indices run from 0 without a gap, and an
// element whose fields are all left out is not sent. A path may reference only
// required arguments. Braces cannot be written literally.
//
// # Limits
//
// A file is at most MaxFileBytes, with at most MaxSystems systems, MaxTools
// tools, MaxArgs arguments per tool, MaxRules error rules per tool and
// MaxTemplateLen bytes per template; Load takes at most MaxFiles files.
// YAML anchors, aliases and merge keys are refused (they are how a small file
// becomes a huge one), and so is nesting deeper than MaxDepth.
//
// # What the format cannot say
//
// An enum argument is checked by the tool before anything is sent (a
// rejection), not by plan validation: tool.Schema has no enum type. Anything
// beyond one HTTP request per call (SMTP, gRPC, an SDK, a multi-step
// protocol) is a Go tool, registered next to the catalogue's tools.
package catalog
