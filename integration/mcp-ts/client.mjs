// The official MCP TypeScript SDK client against the agentsaga gateway, run
// by integration/mcp_ts_test.go:
//
//   node client.mjs http URL      streamable HTTP at URL
//   node client.mjs stdio CMD...  spawns CMD (the gateway over stdio)
//
// MCP_TS_RUN names this run (sessions, keys and orders are made from it).
// Every event is one JSON line on stdout; the Go test reads them, decides
// the calls that wait for a person while this client waits, and checks the
// effects in the provider's own store.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const [mode, ...rest] = process.argv.slice(2);
const run = process.env.MCP_TS_RUN;
if (!run || !/^[a-z0-9-]{1,40}$/.test(run)) {
  console.error("MCP_TS_RUN must be 1 to 40 of a-z, 0-9 and '-'");
  process.exit(2);
}
let transport;
if (mode === "http" && rest.length === 1) {
  transport = new StreamableHTTPClientTransport(new URL(rest[0]));
} else if (mode === "stdio" && rest.length >= 1) {
  // The gateway child gets this process's environment (the SDK's default
  // passes only a few variables).
  transport = new StdioClientTransport({ command: rest[0], args: rest.slice(1), env: process.env, stderr: "inherit" });
} else {
  console.error("usage: node client.mjs http URL | stdio CMD [ARGS...]");
  process.exit(2);
}

const emit = (e) => process.stdout.write(JSON.stringify(e) + "\n");
const client = new Client({ name: "agentsaga-mcp-ts-test", version: "1.0.0" });
await client.connect(transport);

const tools = await client.listTools();
emit({ event: "tools", names: tools.tools.map((t) => t.name).sort() });

const refund = (order, amount) => ({ order_id: order, amount_minor: amount, currency: "EUR", reason: "arrived damaged" });
const meta = (scenario, key) => {
  const m = { "agentsaga/session": `${run}-${scenario}` };
  if (key) m["agentsaga/key"] = key;
  return m;
};

// call calls apply_refund and emits its result; options go to the SDK.
async function call(scenario, order, amount, key, options) {
  const started = Date.now();
  const params = { name: "apply_refund", arguments: refund(order, amount), _meta: meta(scenario, key) };
  const opts = { ...options };
  if (opts.onprogress) {
    opts.onprogress = (p) => emit({ event: "progress", scenario, message: p.message, progress: p.progress, elapsedMs: Date.now() - started });
  }
  try {
    const res = await client.callTool(params, undefined, opts);
    emit({ event: "result", scenario, isError: res.isError === true, result: res.structuredContent, text: res.content?.[0]?.text, elapsedMs: Date.now() - started });
    return res;
  } catch (err) {
    emit({ event: "result", scenario, thrown: String(err), code: err?.code, elapsedMs: Date.now() - started });
    return null;
  }
}

// Repeats: the same call twice under one agentsaga/key, and an unkeyed
// call twice.
await call("rep", `${run}_rep`, 1500, `${run}-k1`);
await call("rep", `${run}_rep`, 1500, `${run}-k1`);
await call("unk", `${run}_unk`, 1600);
await call("unk", `${run}_unk`, 1600);
// A lost answer (the gateway loses the first answer of orders ending in
// _lost after the turn ran): the client calls again the same way.
await call("lost", `${run}_lost`, 1700, `${run}-lost`);
await call("lost", `${run}_lost`, 1700, `${run}-lost`);
// Calls that wait for a person (above 500.00 needs an approval), decided
// by the test while this client waits. wait-a: the SDK's default timeout
// (60 s) with resetTimeoutOnProgress, as the README says. wait-b: a 1.5 s
// timeout, decided after more than twice that: only the progress
// notifications keep the call alive.
await call("wait-a", `${run}_wa`, 60000, `${run}-wa`, { onprogress: true, resetTimeoutOnProgress: true });
await call("wait-b", `${run}_wb`, 60000, `${run}-wb`, { onprogress: true, resetTimeoutOnProgress: true, timeout: 1500 });
emit({ event: "done" });
await client.close();
