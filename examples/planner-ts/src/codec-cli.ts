// codec-cli: runs the TypeScript codec on payloads given as JSON on stdin,
// so a test in another language can check both codecs read each other.
//
//   echo '{"op":"encode","payloads":[{"metadata":{"encoding":"<b64>"},"data":"<b64>"}]}' | node dist/codec-cli.js
//
// Keys come from AGENTSAGA_CODEC_KEYS_FILE or AGENTSAGA_CODEC_KEYS (see
// codec.ts). Prints {"payloads": [...]} (metadata values and data in
// base64), or {"error": "..."} and exits 1.

import { AgentSagaCodec, loadKeyring } from './codec';
import type { Payload } from '@temporalio/common';

interface WirePayload {
  metadata?: Record<string, string>;
  data?: string;
}

const toPayload = (w: WirePayload): Payload => ({
  metadata: Object.fromEntries(Object.entries(w.metadata ?? {}).map(([k, v]) => [k, Buffer.from(v, 'base64')])),
  data: Buffer.from(w.data ?? '', 'base64'),
});

const toWire = (p: Payload): WirePayload => ({
  metadata: Object.fromEntries(Object.entries(p.metadata ?? {}).map(([k, v]) => [k, Buffer.from(v ?? new Uint8Array()).toString('base64')])),
  data: Buffer.from(p.data ?? new Uint8Array()).toString('base64'),
});

async function main(): Promise<void> {
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
  const req = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { op: string; payloads: WirePayload[] };
  const codec = new AgentSagaCodec(loadKeyring('').keyring);
  const payloads = req.payloads.map(toPayload);
  let out: Payload[];
  if (req.op === 'encode') out = await codec.encode(payloads);
  else if (req.op === 'decode') out = await codec.decode(payloads);
  else throw new Error(`op ${JSON.stringify(req.op)} is not encode or decode`);
  process.stdout.write(JSON.stringify({ payloads: out.map(toWire) }) + '\n');
}

main().catch((err: unknown) => {
  process.stdout.write(JSON.stringify({ error: (err as Error)?.message ?? String(err) }) + '\n');
  process.exit(1);
});
