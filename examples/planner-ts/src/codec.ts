// The agentsaga payload codec in TypeScript: the same wire format as the Go
// package codec/ (codec/codec.go, codec/keyring.go), so a TypeScript client
// and the Go worker read each other's encrypted payloads.
//
// Wire format of one encrypted payload:
//   metadata: {"encoding": "binary/encrypted", "encryption-key-id": <key id>}
//   data:     nonce (12 random bytes) || AES-256-GCM ciphertext || tag (16 bytes)
// The plaintext is the whole original Payload (metadata and data) serialised
// as the protobuf temporal.api.common.v1.Payload; the associated data is
// "agentsaga/codec/v1\x00" + key id, which binds the key id to the ciphertext.
//
// Keys: a keyring of named 32-byte keys, one of them current (it seals); a
// payload is opened with the key it names, so old keys still read after a
// rotation. Keyrings are read in the Go formats (see parseKeyring) from
// AGENTSAGA_CODEC_KEYS_FILE, else AGENTSAGA_CODEC_KEYS, else, for a loopback
// Temporal address, the keyring `worker --dev` keeps in its data directory.
// Keys are never printed: Keyring.toString and toJSON show key ids only.

import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import type { Payload, PayloadCodec } from '@temporalio/common';
import { temporal } from '@temporalio/proto';

/** The "encoding" metadata of an encrypted payload. */
export const ENCODING_ENCRYPTED = 'binary/encrypted';
/** The metadata field naming the key that sealed a payload. */
export const METADATA_KEY_ID = 'encryption-key-id';
/** Size of the random nonce in front of every ciphertext (96 bits). */
export const NONCE_SIZE = 12;
/** Size of the GCM authentication tag at the end of every ciphertext. */
export const TAG_SIZE = 16;
/** Size of every key: AES-256. */
export const KEY_SIZE = 32;
/** Environment variable holding a keyring inline (a secret). */
export const ENV_KEYS = 'AGENTSAGA_CODEC_KEYS';
/** Environment variable naming a keyring file. */
export const ENV_KEYS_FILE = 'AGENTSAGA_CODEC_KEYS_FILE';
/** The keyring file `worker --dev` keeps in its data directory. */
export const KEYS_FILE_NAME = 'codec-keys.json';

const MAX_KEYRING_BYTES = 1 << 20;
const KEY_ID = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;
const AAD_PREFIX = Buffer.from('agentsaga/codec/v1\x00', 'utf8');
const PayloadProto = temporal.api.common.v1.Payload;

/** A named set of 32-byte keys, one current. Never prints its keys. */
export class Keyring {
  readonly #keys: Map<string, Buffer>;

  constructor(
    readonly current: string,
    keys: Map<string, Buffer>,
  ) {
    if (keys.size === 0) throw new Error('codec: the keyring holds no key: give at least one id:base64-key');
    for (const [id, key] of keys) {
      if (!KEY_ID.test(id)) {
        throw new Error(`codec: key id ${JSON.stringify(clip(id))} is not 1-64 letters, digits, '.', '_' or '-' starting with a letter or digit: rename it`);
      }
      if (key.length !== KEY_SIZE) {
        throw new Error(`codec: key ${JSON.stringify(id)} is ${key.length} bytes; AES-256 needs exactly ${KEY_SIZE}`);
      }
    }
    if (!keys.has(current)) {
      throw new Error(`codec: the current key ${JSON.stringify(clip(current))} is not in the keyring (it holds ${[...keys.keys()].join(', ')}): name one of them current`);
    }
    this.#keys = new Map([...keys].map(([id, k]) => [id, Buffer.from(k)]));
  }

  /** The ids of every key. */
  ids(): string[] {
    return [...this.#keys.keys()];
  }

  /** The key named id, or undefined. */
  key(id: string): Buffer | undefined {
    return this.#keys.get(id);
  }

  toString(): string {
    return `Keyring(current ${this.current}, ids ${this.ids().join(',')}, keys masked)`;
  }

  toJSON(): unknown {
    return { current: this.current, ids: this.ids(), keys: 'masked' };
  }

  [Symbol.for('nodejs.util.inspect.custom')](): string {
    return this.toString();
  }
}

/**
 * Parses a keyring in either Go format:
 *  - JSON {"current": "k2", "keys": {"k1": "<base64>", "k2": "<base64>"}} (only those
 *    two fields; "current" may be left out when there is one key);
 *  - lines "id:base64-key" (blank lines and lines starting with '#' skipped); the
 *    last line's key is current.
 * Keys are standard or URL-safe base64, padded or not, of exactly 32 bytes.
 * Errors name the key id or line, never a key.
 */
export function parseKeyring(text: string): Keyring {
  if (Buffer.byteLength(text) > MAX_KEYRING_BYTES) {
    throw new Error(`codec: keyring of ${Buffer.byteLength(text)} bytes is over the ${MAX_KEYRING_BYTES}-byte limit`);
  }
  const trimmed = text.trim();
  if (trimmed === '') throw new Error('codec: the keyring is empty: give at least one id:base64-key');
  if (trimmed.startsWith('{')) return parseJSONKeyring(trimmed);
  return parseLineKeyring(trimmed.split('\n'));
}

function parseJSONKeyring(text: string): Keyring {
  let f: unknown;
  try {
    f = JSON.parse(text);
  } catch {
    throw new Error('codec: the keyring is not valid JSON: write {"current": ID, "keys": {ID: BASE64}}');
  }
  const shape = 'codec: the keyring JSON is not {"current": ID, "keys": {ID: BASE64}}: only those two fields, string values';
  if (typeof f !== 'object' || f === null || Array.isArray(f)) throw new Error(shape);
  const obj = f as Record<string, unknown>;
  for (const k of Object.keys(obj)) if (k !== 'current' && k !== 'keys') throw new Error(shape);
  if (obj.current !== undefined && typeof obj.current !== 'string') throw new Error(shape);
  if (obj.keys === undefined || obj.keys === null) throw new Error('codec: the keyring JSON has no "keys"');
  if (typeof obj.keys !== 'object' || Array.isArray(obj.keys)) throw new Error(shape);
  const entries = Object.entries(obj.keys as Record<string, unknown>);
  if (entries.length === 0) throw new Error('codec: the keyring JSON has no "keys"');
  const keys = new Map<string, Buffer>();
  for (const [id, enc] of entries.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) {
    if (typeof enc !== 'string') throw new Error(shape);
    keys.set(id, decodeKey(enc, `key ${JSON.stringify(clip(id))}`));
  }
  let current = (obj.current as string | undefined) ?? '';
  if (current === '') {
    if (keys.size !== 1) throw new Error(`codec: the keyring holds ${keys.size} keys and no "current": name the key to encrypt with`);
    current = [...keys.keys()][0];
  }
  return new Keyring(current, keys);
}

function parseLineKeyring(lines: string[]): Keyring {
  const keys = new Map<string, Buffer>();
  let last = '';
  lines.forEach((raw, n) => {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) return;
    const at = line.indexOf(':');
    const id = at < 0 ? '' : line.slice(0, at).trim();
    if (id === '') throw new Error(`codec: keyring line ${n + 1} is not id:base64-key`);
    if (keys.has(id)) throw new Error(`codec: keyring line ${n + 1}: key id ${JSON.stringify(clip(id))} appears twice: give each key its own id`);
    keys.set(id, decodeKey(line.slice(at + 1).trim(), `keyring line ${n + 1}, key ${JSON.stringify(clip(id))}`));
    last = id;
  });
  if (keys.size === 0) throw new Error('codec: the keyring holds no key: give at least one id:base64-key');
  return new Keyring(last, keys);
}

function decodeKey(enc: string, where: string): Buffer {
  // Node's base64 decoder skips characters it does not know; check the
  // alphabet first so that a typo is an error, as in Go.
  const std = /^[A-Za-z0-9+/]*={0,2}$/.test(enc);
  const url = /^[A-Za-z0-9_-]*={0,2}$/.test(enc);
  if (enc === '' || !(std || url) || (enc.includes('=') && enc.length % 4 !== 0)) {
    throw new Error(`codec: ${where}: it is not base64`);
  }
  const key = Buffer.from(enc, std ? 'base64' : 'base64url');
  if (key.length !== KEY_SIZE) {
    throw new Error(`codec: ${where}: it is ${key.length} bytes; AES-256 needs exactly ${KEY_SIZE} (make one with \`head -c 32 /dev/urandom | base64\`)`);
  }
  return key;
}

/** Reads a keyring file (either format). */
export function keyringFile(path: string): Keyring {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (e) {
    throw new Error(`codec: read the keyring ${path}: ${(e as Error).message}`);
  }
  try {
    return parseKeyring(text);
  } catch (e) {
    throw new Error(`${(e as Error).message} (in ${path})`);
  }
}

/**
 * Reads the keyring inline in AGENTSAGA_CODEC_KEYS (undefined when unset):
 * JSON, or "id:base64" entries separated by newlines, commas or spaces (the
 * last is current).
 */
export function keyringFromEnv(env: NodeJS.ProcessEnv = process.env): Keyring | undefined {
  const v = (env[ENV_KEYS] ?? '').trim();
  if (v === '') return undefined;
  try {
    return v.startsWith('{') ? parseKeyring(v) : parseLineKeyring(v.split(/[,\n \t\r]+/));
  } catch (e) {
    throw new Error(`${(e as Error).message} (in ${ENV_KEYS})`);
  }
}

/** Where a keyring came from, for a banner (never the keys). */
export interface KeyringSource {
  keyring?: Keyring;
  from: string;
}

/**
 * Finds the keyring as the Go client does (config.Temporal.Keyring): the
 * file in AGENTSAGA_CODEC_KEYS_FILE, else the keys in AGENTSAGA_CODEC_KEYS,
 * else, when address is a loopback address, the keyring `worker --dev` keeps
 * at <data dir>/codec-keys.json (data dir: AGENTSAGA_DATA_DIR, else
 * $XDG_CACHE_HOME/agentsaga, else ~/.cache/agentsaga), else none.
 */
export function loadKeyring(address: string, env: NodeJS.ProcessEnv = process.env): KeyringSource {
  const file = env[ENV_KEYS_FILE] ?? '';
  if (file !== '') return { keyring: keyringFile(file), from: file };
  const inline = keyringFromEnv(env);
  if (inline) return { keyring: inline, from: `env ${ENV_KEYS}` };
  if (!isLoopback(address)) return { from: 'off' };
  const dir = env.AGENTSAGA_DATA_DIR || join(env.XDG_CACHE_HOME || join(homedir(), '.cache'), 'agentsaga');
  const path = join(dir, KEYS_FILE_NAME);
  if (!existsSync(path)) return { from: 'off' };
  return { keyring: keyringFile(path), from: path };
}

function isLoopback(address: string): boolean {
  let host = address;
  const m = /^\[([^\]]+)\](?::\d+)?$/.exec(address) ?? /^([^:]+):\d+$/.exec(address);
  if (m) host = m[1];
  return host === 'localhost' || host === '::1' || /^127\.\d+\.\d+\.\d+$/.test(host);
}

function aad(keyID: string): Buffer {
  return Buffer.concat([AAD_PREFIX, Buffer.from(keyID, 'utf8')]);
}

/**
 * AgentSagaCodec is a PayloadCodec for @temporalio/client's DataConverter
 * that encrypts every payload with the keyring's current key and decrypts
 * encrypted payloads with the key they name; payloads that are not
 * encrypted decode unchanged. Without a keyring it encodes nothing and
 * refuses to decode an encrypted payload, saying how to configure keys.
 */
export class AgentSagaCodec implements PayloadCodec {
  constructor(readonly keyring?: Keyring) {}

  async encode(payloads: Payload[]): Promise<Payload[]> {
    const ring = this.keyring;
    if (!ring) return payloads;
    const id = ring.current;
    const key = ring.key(id)!;
    return payloads.map((p) => {
      const plain = PayloadProto.encode(p).finish();
      const nonce = randomBytes(NONCE_SIZE);
      const c = createCipheriv('aes-256-gcm', key, nonce, { authTagLength: TAG_SIZE });
      c.setAAD(aad(id));
      const sealed = Buffer.concat([nonce, c.update(plain), c.final(), c.getAuthTag()]);
      return {
        metadata: { encoding: Buffer.from(ENCODING_ENCRYPTED), [METADATA_KEY_ID]: Buffer.from(id) },
        data: sealed,
      };
    });
  }

  async decode(payloads: Payload[]): Promise<Payload[]> {
    return payloads.map((p, i) => {
      const enc = p?.metadata?.encoding;
      if (!enc || Buffer.from(enc).toString() !== ENCODING_ENCRYPTED) return p;
      try {
        return this.open(p);
      } catch (e) {
        throw new Error(`codec: decode payload ${i}: ${(e as Error).message}`);
      }
    });
  }

  private open(p: Payload): Payload {
    const rawID = p.metadata?.[METADATA_KEY_ID];
    if (!rawID || rawID.length === 0) throw new Error(`encrypted payload is malformed: it has no ${METADATA_KEY_ID} metadata`);
    const id = Buffer.from(rawID).toString('utf8');
    const shown = JSON.stringify(clip(id));
    if (!this.keyring) {
      throw new Error(`payload is encrypted and no codec keys are configured (it names key ${shown}): set ${ENV_KEYS_FILE} or ${ENV_KEYS} (worker --dev keeps its keys at <data-dir>/${KEYS_FILE_NAME})`);
    }
    const key = this.keyring.key(id);
    if (!key) {
      throw new Error(`payload encrypted with a key that is not in the keyring: it names key ${shown}, the keyring holds ${this.keyring.ids().join(', ')}; add that key to the keyring`);
    }
    const data = Buffer.from(p.data ?? new Uint8Array());
    if (data.length < NONCE_SIZE + TAG_SIZE) {
      throw new Error(`encrypted payload is malformed: ${data.length} bytes is shorter than a nonce and a tag`);
    }
    let plain: Buffer;
    try {
      const d = createDecipheriv('aes-256-gcm', key, data.subarray(0, NONCE_SIZE), { authTagLength: TAG_SIZE });
      d.setAAD(aad(id));
      d.setAuthTag(data.subarray(data.length - TAG_SIZE));
      plain = Buffer.concat([d.update(data.subarray(NONCE_SIZE, data.length - TAG_SIZE)), d.final()]);
    } catch {
      throw new Error(`encrypted payload does not authenticate under key ${shown}: it was altered, or the key with that id is not the one that sealed it`);
    }
    try {
      const out = PayloadProto.decode(plain);
      return { metadata: out.metadata ?? {}, data: out.data ?? new Uint8Array() };
    } catch (e) {
      throw new Error(`encrypted payload is malformed: the plaintext under key ${shown} is not a payload: ${(e as Error).message}`);
    }
  }
}

function clip(s: string): string {
  return s.length > 64 ? s.slice(0, 64) + '...' : s;
}
