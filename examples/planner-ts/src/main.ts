// planner-ts: a planner in TypeScript for agentsaga, with the official
// @temporalio/client and nothing of the Go code. It
//  1. starts an AgentPlan by workflow name with a refund above the approval
//     threshold, waits until `status` shows the approval question, answers it
//     with the `approve` Update and prints the plan's result;
//  2. runs an AgentSession turn by Update-with-Start (a read and an
//     invoice), sends the same turn again and checks it gets the same result,
//     and checks that a changed turn under the same number is a conflict;
//  3. reads `status` of both workflows and ends the session.
// Each phase prints one JSON line on stdout; progress goes to stderr. Any
// mismatch with the contract exits 1.
//
// Environment (flags of the same name win: --order, --session, ...):
//   TEMPORAL_ADDRESS      host:port of the Temporal frontend (127.0.0.1:7233)
//   TEMPORAL_NAMESPACE    namespace (default)
//   AGENTSAGA_TASK_QUEUE  task queue of the worker (agent-saga)
//   PLANNER_ORDER         order to refund (required: --order or env)
//   PLANNER_SESSION       session id (ts-<time>); the session of step 2 is <session>-s
//   PLANNER_AMOUNT_MINOR  refund in minor units, above 50000 (75000)
//   PLANNER_READ_ORDER    order the turn reads with query_order (ord_1001)
//   PLANNER_TIMEOUT_MS    how long to wait for the worker in each phase (60000)
//   AGENTSAGA_CODEC_KEYS_FILE / AGENTSAGA_CODEC_KEYS: payload encryption keys (see codec.ts)

import { isDeepStrictEqual } from 'node:util';
import { Client, Connection, WithStartWorkflowOperation, WorkflowUpdateFailedError } from '@temporalio/client';
import type { Workflow } from '@temporalio/common';
import { AgentSagaCodec, loadKeyring } from './codec';
import {
  DecisionResult,
  EndRequest,
  MEMO_PLAN_FINGERPRINT,
  Plan,
  QUERY_STATUS,
  QUERY_TURN,
  SessionStart,
  Status,
  Step,
  TASK_QUEUE,
  TurnRequest,
  TurnResult,
  UPDATE_APPROVE,
  UPDATE_END,
  UPDATE_TURN,
  WORKFLOW_PLAN,
  WORKFLOW_SESSION,
  ApproveSignal,
  decisionUpdateID,
  operationKey,
  planFingerprint,
  planWorkflowID,
  sessionWorkflowID,
  stepFingerprint,
  turnUpdateID,
} from './contract';

/** A disagreement with the contract: the planner exits 1. */
class Mismatch extends Error {}

function expect(ok: boolean, what: string, got?: unknown): void {
  if (!ok) throw new Mismatch(got === undefined ? what : `${what}; got ${JSON.stringify(got)}`);
}

function log(msg: string): void {
  process.stderr.write(`planner-ts: ${msg}\n`);
}

function emit(line: Record<string, unknown>): void {
  process.stdout.write(JSON.stringify(line) + '\n');
}

interface Config {
  address: string;
  namespace: string;
  taskQueue: string;
  order: string;
  session: string;
  amountMinor: number;
  readOrder: string;
  timeoutMs: number;
}

function config(argv: string[], env: NodeJS.ProcessEnv): Config {
  const flags: Record<string, string> = {};
  for (let i = 0; i < argv.length; i++) {
    const m = /^--([a-z-]+)(?:=(.*))?$/.exec(argv[i]);
    if (!m) throw new Mismatch(`unknown argument ${JSON.stringify(argv[i])}: use --order ID, --session ID, --amount-minor N, --read-order ID`);
    flags[m[1]] = m[2] ?? argv[++i] ?? '';
  }
  const pick = (flag: string, name: string, def: string): string => flags[flag] ?? (env[name] || def);
  const int = (s: string, what: string): number => {
    if (!/^[0-9]+$/.test(s) || !Number.isSafeInteger(Number(s))) throw new Mismatch(`${what} ${JSON.stringify(s)} is not a whole number`);
    return Number(s);
  };
  const c: Config = {
    address: pick('address', 'TEMPORAL_ADDRESS', '127.0.0.1:7233'),
    namespace: pick('namespace', 'TEMPORAL_NAMESPACE', 'default'),
    taskQueue: pick('task-queue', 'AGENTSAGA_TASK_QUEUE', TASK_QUEUE),
    order: pick('order', 'PLANNER_ORDER', ''),
    session: pick('session', 'PLANNER_SESSION', `ts-${Date.now()}`),
    amountMinor: int(pick('amount-minor', 'PLANNER_AMOUNT_MINOR', '75000'), 'amount_minor'),
    readOrder: pick('read-order', 'PLANNER_READ_ORDER', 'ord_1001'),
    timeoutMs: int(pick('timeout-ms', 'PLANNER_TIMEOUT_MS', '60000'), 'timeout'),
  };
  if (c.order === '') throw new Mismatch('no order to refund: give --order ID or PLANNER_ORDER');
  if (c.amountMinor <= 50000) throw new Mismatch(`amount_minor ${c.amountMinor} does not need approval: give more than 50000 (500.00)`);
  return c;
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Polls read until done(value) holds, or fails after timeoutMs. */
async function until<T>(what: string, timeoutMs: number, read: () => Promise<T>, done: (v: T) => boolean): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: T | undefined;
  for (;;) {
    last = await read();
    if (done(last)) return last;
    if (Date.now() > deadline) throw new Mismatch(`timed out after ${timeoutMs} ms waiting for ${what}; last read ${JSON.stringify(last)}`);
    await sleep(100);
  }
}

/** Phase 1: a plan that waits for approval, approved by ts-operator. */
async function runPlan(client: Client, c: Config): Promise<Status> {
  const refund: Step = {
    tool: 'apply_refund',
    args: { order_id: c.order, amount_minor: c.amountMinor, currency: 'EUR', reason: 'damaged in transit (planner-ts)' },
  };
  const plan: Plan = { session_id: c.session, turn: 1, request_id: `req-${c.session}`, requested_by: 'ts-planner', steps: [refund] };
  const workflowId = planWorkflowID(plan.session_id, plan.turn);
  const fp = planFingerprint(plan);
  const key = operationKey(plan.session_id, plan.turn, 1, refund.tool);
  log(`start ${WORKFLOW_PLAN} ${workflowId} (plan fingerprint ${fp})`);
  const handle = await client.workflow.start(WORKFLOW_PLAN, {
    workflowId,
    taskQueue: c.taskQueue,
    args: [plan],
    workflowIdConflictPolicy: 'USE_EXISTING',
    workflowIdReusePolicy: 'REJECT_DUPLICATE',
    memo: { [MEMO_PLAN_FINGERPRINT]: fp },
    staticSummary: `session ${plan.session_id} · turn ${plan.turn} · request ${plan.request_id} · by ${plan.requested_by} · ${refund.tool}`,
  });

  const waiting = await until(
    'the approval question in status',
    c.timeoutMs,
    () => handle.query<Status>(QUERY_STATUS),
    (s) => (s.questions ?? []).some((q) => q.kind === 'approval') || ['succeeded', 'failed', 'compensated', 'compensation_failed'].includes(s.state),
  );
  expect(waiting.workflow_id === workflowId, `status.workflow_id is ${workflowId}`, waiting.workflow_id);
  expect(waiting.plan_fingerprint === fp, `the worker's plan fingerprint equals the one computed here (${fp})`, waiting.plan_fingerprint);
  expect(waiting.state === 'waiting_approval', 'the plan waits for approval', waiting.state);
  const q = (waiting.questions ?? [])[0];
  expect(q.kind === 'approval' && q.step === 1 && q.key === key, `the question asks to approve step 1 (${key})`, q);
  expect(q.fingerprint === stepFingerprint(refund), `the question's fingerprint equals the step fingerprint computed here`, q.fingerprint);
  expect(q.card.amount_minor === c.amountMinor && q.card.currency === 'EUR' && q.card.session === c.session,
    `the card shows ${c.amountMinor} EUR of session ${c.session}`, q.card);
  expect(q.answers.includes('approve'), 'the question may be answered approve', q.answers);
  log(`question ${q.id}: ${q.card.change} ${q.card.amount} (${q.card.rule})`);

  const decisionUpdate = decisionUpdateID(q.id, 'ts-operator', 'approve');
  // One decision: the Update ID is made from the question and the answer, so
  // a second click is the same Update, and Temporal answers it with the
  // first result; that result names the sent_at it applied, so a click whose
  // own sent_at differs knows it was a repeat.
  const decide = async (at: Date): Promise<DecisionResult> => {
    const approve: ApproveSignal = {
      step: q.step, question_id: q.id, run_id: waiting.run_id, fingerprint: q.fingerprint, by: 'ts-operator', approved: true,
      reason: 'customer verified by phone', sent_at: at.toISOString(),
    };
    const r = await handle.executeUpdate<DecisionResult, [ApproveSignal]>(UPDATE_APPROVE, { args: [approve], updateId: decisionUpdate });
    if (r.applied && r.sent_at !== undefined && r.sent_at !== '' && Date.parse(r.sent_at) !== Date.parse(approve.sent_at ?? '')) {
      return { ...r, applied: false, message: `already applied: ${r.message}` };
    }
    return r;
  };
  const clicked = new Date();
  const decision = await decide(clicked);
  expect(decision.applied && decision.question_id === q.id && decision.by === 'ts-operator',
    `the approval of ${q.id} by ts-operator was applied`, decision);
  const again = await decide(new Date(clicked.getTime() + 1000)); // the second click, a second later
  expect(!again.applied && again.question_id === q.id, `a second click on ${q.id} reports not applied`, again);

  const result = (await handle.result()) as Status;
  const step = (result.steps ?? [])[0];
  expect(result.state === 'succeeded', 'the plan succeeded', { state: result.state, error: result.error });
  expect(step?.state === 'succeeded' && step.key === key && (step.external_id ?? '') !== '' && step.attempts === 1,
    'the refund ran once under its key and has an external id', step);
  expect((step.decisions ?? []).some((d) => d.kind === 'approve' && d.approved === true && d.by === 'ts-operator' && d.question_id === q.id),
    'the step records the approval by ts-operator', step.decisions);
  expect((result.questions ?? []).length === 0, 'no question is left open', result.questions);
  emit({ phase: 'plan', workflow_id: workflowId, question: { id: q.id, kind: q.kind, step: q.step, fingerprint: q.fingerprint }, decision_update_id: decisionUpdate, decision, result });
  return result;
}

/** Phase 2: a session turn by Update-with-Start, sent again, and a conflict. */
async function runSession(client: Client, c: Config): Promise<{ session: string; first: TurnResult }> {
  const session = `${c.session}-s`;
  const workflowId = sessionWorkflowID(session);
  const turn: TurnRequest = {
    turn: 1,
    request_id: `req-${session}-1`,
    steps: [
      { tool: 'query_order', args: { order_id: c.readOrder } },
      { tool: 'create_invoice', args: { customer_id: 'cus_ana', order_id: c.order, amount_minor: 1200, currency: 'EUR', description: 'handling fee (planner-ts)' } },
    ],
  };
  const fp = planFingerprint({ session_id: session, turn: turn.turn, steps: turn.steps });
  const send = (t: TurnRequest): Promise<TurnResult> => {
    const start = new WithStartWorkflowOperation(WORKFLOW_SESSION, {
      workflowId,
      taskQueue: c.taskQueue,
      args: [{ session_id: session, requested_by: 'ts-planner' } satisfies SessionStart],
      workflowIdConflictPolicy: 'USE_EXISTING',
      workflowIdReusePolicy: 'REJECT_DUPLICATE',
      staticSummary: `agent session ${session}`,
    });
    return client.workflow.executeUpdateWithStart<Workflow, TurnResult, [TurnRequest]>(UPDATE_TURN, {
      args: [t],
      updateId: turnUpdateID(session, t.turn),
      startWorkflowOperation: start,
    });
  };

  log(`turn 1 of ${workflowId} by Update-with-Start (update id ${turnUpdateID(session, 1)})`);
  const first = await send(turn);
  expect(first.turn === 1 && first.fingerprint === fp, `the turn's fingerprint equals the one computed here (${fp})`, first.fingerprint);
  expect(first.state === 'succeeded', 'the turn succeeded', { state: first.state, error: first.error, question: first.question });
  const steps = first.steps ?? [];
  expect(steps.length === 2, 'the turn returns its two steps', steps.length);
  turn.steps.forEach((s, i) => {
    const st = steps[i];
    expect(st.key === operationKey(session, 1, i + 1, s.tool) && st.turn === 1 && st.state === 'succeeded',
      `step ${i + 1} ran under key ${operationKey(session, 1, i + 1, s.tool)}`, st);
    expect(st.fingerprint === stepFingerprint(s), `step ${i + 1}'s fingerprint equals the one computed here`, st.fingerprint);
  });
  expect(steps[0].class === 'READ' && steps[0].external_id === c.readOrder, `query_order read ${c.readOrder}`, steps[0]);
  expect((steps[1].external_id ?? '') !== '', 'create_invoice has an external id', steps[1]);
  emit({ phase: 'turn', workflow_id: workflowId, update_id: turnUpdateID(session, 1), result: first });

  // A lost response: the agent sends the same turn again.
  const again = await send(structuredClone(turn));
  expect(isDeepStrictEqual(again, first), 'the same turn sent again returns the first result', again);
  const queried = await client.workflow.getHandle(workflowId).query<TurnResult, [number]>(QUERY_TURN, 1);
  expect(isDeepStrictEqual(queried, first), `query ${QUERY_TURN}(1) returns the first result`, queried);
  emit({ phase: 'turn_again', same: true, result: again });

  // A changed turn under the same number: Temporal answers the Update ID
  // with the first result, whose fingerprint is not this payload's, so the
  // client refuses it as a conflict (as sagaclient.Turn does).
  const changed: TurnRequest = { ...turn, steps: [turn.steps[0]] };
  const other = await send(changed);
  const changedFp = planFingerprint({ session_id: session, turn: 1, steps: changed.steps });
  expect(other.fingerprint === fp && other.fingerprint !== changedFp,
    'a changed turn 1 gets the first turn back (a conflict), not a new run', other);
  emit({ phase: 'turn_conflict', existing: other.fingerprint, requested: changedFp });
  return { session, first };
}

/** Phase 3: read `status` of both workflows, then end the session. */
async function readStatus(client: Client, plan: Status, session: string, turn: TurnResult): Promise<void> {
  const ps = await client.workflow.getHandle(plan.workflow_id).query<Status>(QUERY_STATUS);
  expect(ps.state === 'succeeded' && isDeepStrictEqual(ps.steps, plan.steps), 'the plan status query agrees with its result', ps);
  const sh = client.workflow.getHandle(sessionWorkflowID(session));
  const ss = await sh.query<Status>(QUERY_STATUS);
  expect(ss.session_id === session && ss.state === 'running', `session ${session} is running`, { session_id: ss.session_id, state: ss.state });
  expect(isDeepStrictEqual(ss.steps, turn.steps), 'the session status holds the turn\'s steps, once', ss.steps);
  emit({ phase: 'status', plan: ps, session: ss });

  const end: EndRequest = { outcome: 'succeeded', by: 'ts-planner' };
  await sh.executeUpdate<Status, [EndRequest]>(UPDATE_END, { args: [end], updateId: 'end' });
  const final = (await sh.result()) as Status;
  expect(final.state === 'succeeded', 'the session ended succeeded, keeping its invoice', { state: final.state, error: final.error });
  expect((final.steps ?? []).every((s) => !s.compensation), 'nothing of the session was compensated', final.steps);
  emit({ phase: 'end', result: final });
}

async function main(): Promise<number> {
  const c = config(process.argv.slice(2), process.env);
  const keys = loadKeyring(c.address);
  const codec = new AgentSagaCodec(keys.keyring);
  log(`Temporal ${c.address} namespace ${c.namespace} task queue ${c.taskQueue}; payload encryption ${keys.keyring ? `on (${keys.keyring}, from ${keys.from})` : 'off'}`);
  const connection = await Connection.connect({ address: c.address });
  try {
    const client = new Client({
      connection,
      namespace: c.namespace,
      dataConverter: {
        payloadCodecs: [codec],
        // As codec.ClientOptions: with keys, error messages travel in an
        // encoded (so encrypted) payload.
        ...(keys.keyring ? { failureConverterPath: require.resolve('./failure-converter') } : {}),
      },
    });
    const plan = await runPlan(client, c);
    const { session, first } = await runSession(client, c);
    await readStatus(client, plan, session, first);
    emit({ phase: 'done', ok: true, codec: keys.keyring ? { on: true, current: keys.keyring.current } : { on: false } });
    return 0;
  } finally {
    await connection.close();
  }
}

main().then(
  (code) => process.exit(code),
  (err: unknown) => {
    const e = err as Error;
    const cause = err instanceof WorkflowUpdateFailedError && err.cause ? `: ${err.cause.message}` : '';
    log(`FAIL: ${err instanceof Mismatch ? 'mismatch: ' : ''}${e?.message ?? String(err)}${cause}`);
    process.exit(1);
  },
);
