// The agentsaga contract for other languages, as the Go code defines it
// (workflows/status.go, workflows/session.go, plan/key.go and README.md
// "Contract for other languages"). Field names are the JSON names the Go
// worker reads and writes.

import { createHash } from 'node:crypto';

/** Workflow type of a plan. */
export const WORKFLOW_PLAN = 'AgentPlan';
/** Workflow type of an interactive session. */
export const WORKFLOW_SESSION = 'AgentSession';
/** Default task queue. */
export const TASK_QUEUE = 'agent-saga';
/** Query returning a Status. */
export const QUERY_STATUS = 'status';
/** Query taking a turn number and returning its TurnResult. */
export const QUERY_TURN = 'turn_result';
/** Update taking an ApproveSignal and returning a DecisionResult. */
export const UPDATE_APPROVE = 'approve';
/** Update taking a TurnRequest and returning a TurnResult. */
export const UPDATE_TURN = 'turn';
/** Update taking an EndRequest and returning a Status. */
export const UPDATE_END = 'end';
/** Memo field holding the plan fingerprint. */
export const MEMO_PLAN_FINGERPRINT = 'plan_fingerprint';

/** agent-plan:{session_id}:{turn} */
export const planWorkflowID = (session: string, turn: number): string => `agent-plan:${session}:${turn}`;
/** agent-session:{session_id} */
export const sessionWorkflowID = (session: string): string => `agent-session:${session}`;
/** {session}:{turn}, the Update ID of a turn. */
export const turnUpdateID = (session: string, turn: number): string => `${session}:${turn}`;
/** {session}:{turn}:{step}:{tool}, the operation key of a step. */
export const operationKey = (session: string, turn: number, step: number, tool: string): string =>
  `${session}:${turn}:${step}:${tool}`;
/**
 * The Update ID of a decision, as sagaclient.DecisionUpdateID: the same
 * decision (question, decider, answer) always gets the same ID, so a double
 * click, from Go or from here, is applied once. The server keeps Update IDs
 * in plain text, so the decider's name is hashed away:
 * "decision:" + hex of the first 16 bytes of SHA-256(question \0 by \0 answer).
 */
export const decisionUpdateID = (questionID: string, by: string, answer: string): string =>
  'decision:' + createHash('sha256').update(`${questionID}\0${by}\0${answer}`, 'utf8').digest('hex').slice(0, 32);

/** JSON values a tool's args may hold. Money is an integer of minor units. */
export type JSONValue = string | number | boolean | null | JSONValue[] | { [k: string]: JSONValue };

export interface Step {
  tool: string;
  args: { [k: string]: JSONValue };
}

export interface Plan {
  session_id: string;
  turn: number;
  request_id?: string;
  requested_by?: string;
  steps: Step[];
}

export interface Card {
  change: string;
  system?: string;
  object?: string;
  amount?: string;
  amount_minor?: number;
  currency?: string;
  request_id?: string;
  requested_by?: string;
  session: string;
  rule: string;
  clash?: string;
  already_ran?: string[];
  key: string;
}

export interface Question {
  id: string;
  kind: 'approval' | 'outcome' | 'reversal';
  step: number;
  key: string;
  fingerprint: string;
  opened_at: string;
  expires_at?: string;
  answers: string[];
  card: Card;
}

export interface Decision {
  kind: string;
  question_id?: string;
  by: string;
  verified?: boolean;
  at: string;
  approved?: boolean;
  override?: boolean;
  outcome?: string;
  external_id?: string;
  note?: string;
  refused?: string;
}

export interface StepStatus {
  step: number;
  turn?: number;
  key: string;
  tool: string;
  class: string;
  fingerprint: string;
  state: string;
  attempts: number;
  external_id?: string;
  result?: unknown;
  last_error?: string;
  error_code?: string;
  waiting?: string;
  decisions?: Decision[];
  compensation?: { key: string; tool: string; state: string; attempts: number; external_id?: string };
}

export interface Status {
  workflow_id: string;
  session_id: string;
  turn: number;
  request_id?: string;
  plan_fingerprint: string;
  /** The run the open questions belong to: a decision names it. */
  run_id?: string;
  state: string;
  error?: string;
  steps: StepStatus[] | null;
  ledger_errors?: string[];
  questions?: Question[] | null;
}

export interface ApproveSignal {
  step: number;
  question_id?: string;
  /** The run the question belongs to (status.run_id); required when signed. */
  run_id?: string;
  fingerprint: string;
  by: string;
  approved: boolean;
  override?: boolean;
  reason?: string;
  /** When the decision was sent (RFC 3339); the result names the applied one's. */
  sent_at?: string;
}

export interface DecisionResult {
  question_id: string;
  applied: boolean;
  by: string;
  verified: boolean;
  /** sent_at of the decision that was applied: another one means this decision was a repeat. */
  sent_at?: string;
  message: string;
}

export interface SessionStart {
  session_id: string;
  requested_by?: string;
  keep_failed_turns?: boolean;
  turns_per_run?: number;
}

export interface TurnRequest {
  turn: number;
  request_id?: string;
  steps: Step[];
}

export interface TurnResult {
  turn: number;
  fingerprint: string;
  state: 'running' | 'waiting' | 'succeeded' | 'failed';
  steps: StepStatus[] | null;
  question?: Question;
  error?: string;
}

export interface EndRequest {
  outcome: 'succeeded' | 'failed';
  by?: string;
}

/**
 * canonicalJSON encodes v as Go's encoding/json encodes the decoded value
 * (plan/key.go hashJSON): object keys sorted, no spaces, '<', '>', '&',
 * U+2028 and U+2029 escaped as \u003c, \u003e, \u0026, \u2028, \u2029.
 * Numbers must be safe integers (money is integer minor units): Go keeps a
 * number's literal, JavaScript would reformat a float or a large integer.
 */
export function canonicalJSON(v: JSONValue): string {
  if (v === null || typeof v === 'boolean') return JSON.stringify(v);
  if (typeof v === 'number') {
    if (!Number.isSafeInteger(v)) throw new Error(`canonical JSON: ${v} is not a safe integer; write amounts as integer minor units`);
    return JSON.stringify(v);
  }
  if (typeof v === 'string') {
    return JSON.stringify(v).replace(/[<>&\u2028\u2029]/g, (c) => '\\u' + c.charCodeAt(0).toString(16).padStart(4, '0'));
  }
  if (Array.isArray(v)) return '[' + v.map(canonicalJSON).join(',') + ']';
  // Go sorts map keys by their bytes; for the ASCII keys of a plan this is
  // JavaScript's default code-unit order.
  return '{' + Object.keys(v).sort().map((k) => canonicalJSON(k) + ':' + canonicalJSON(v[k])).join(',') + '}';
}

const sha256 = (s: string): string => createHash('sha256').update(s, 'utf8').digest('hex');

/** The plan fingerprint (plan.Plan.Fingerprint): SHA-256 of {session_id, turn, steps}. */
export function planFingerprint(p: { session_id: string; turn: number; steps: Step[] }): string {
  return sha256(canonicalJSON({ session_id: p.session_id, turn: p.turn, steps: p.steps.map((s) => ({ tool: s.tool, args: s.args })) }));
}

/** The step fingerprint (plan.Fingerprint): SHA-256 of {tool, args}. */
export function stepFingerprint(s: Step): string {
  return sha256(canonicalJSON({ tool: s.tool, args: s.args }));
}
