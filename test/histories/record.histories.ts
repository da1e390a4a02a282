/**
 * Records the Temporal histories the replay test (test/replay.test.ts) replays: one scenario per
 * workflow type and path, run through the real API against the real servers, every payload
 * decrypted so the files are readable and replay without the service key.
 *
 *   npm run histories:record -- <set name>      (writes test/histories/<set name>/)
 *
 * Record a new set whenever workflow code gains a path; never rewrite an old set: the old sets
 * are the runs in flight on earlier code that the current code must still finish.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import type { ServerResponse } from 'node:http';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Client } from '@temporalio/client';
import { historyToJSON, type History } from '@temporalio/common/lib/proto-utils.js';
import pg from 'pg';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { readNodeEvents } from '../../src/executions/reset-point.js';
import { agentSessionWorkflowId } from '../../workflows/defs.js';
import { startTestApp, type TestApp } from '../helpers/app.js';
import { providerConnection, startFakeAnthropic, startFakeOpenAi, type FakeProvider } from '../helpers/fake-providers.js';
import { eventually, fixedServers, startHttpTarget, type HttpTarget } from '../helpers/http-target.js';

const set = process.env.HISTORY_SET;
if (!set || !/^[a-z0-9][a-z0-9.-]*$/.test(set)) throw new Error('HISTORY_SET must name the set (lower case, digits, dots and dashes)');
const outDir = join(fileURLToPath(new URL('.', import.meta.url)), set);

const W = '/api/workflow/v1/workflows';
const E = '/api/workflow/v1/executions';
const A = '/api/agent/v1';
const M = '/api/management/v1';

let app: TestApp;
let regular: TestApp;
let target: HttpTarget;
let openai: FakeProvider;
let anthropic: FakeProvider;
const servers = fixedServers();
let flaky = 0;
let vendorCalls = 0;
/** Scenario name -> Temporal workflow ids whose runs it recorded. */
const recorded = new Map<string, string[]>();
/** File name -> Temporal workflow id (the history itself does not name it; replay needs it). */
const manifest: Record<string, string> = {};

beforeAll(async () => {
  app = await startTestApp({
    worker: true,
    env: {
      SVC_AGENT_UPDATES_PER_RUN: '4',
      SVC_AGENT_MAX_MODEL_CALLS: '4',
      SVC_LICENSE_WEBHOOK_RETRY_MS: '100',
      SVC_LICENSE_WEBHOOK_MAX_ATTEMPTS: '3',
      // A loop of a few hundred items continues as new.
      SVC_FOR_EACH_HISTORY_EVENTS: '500',
    },
  });
  // Pure nodes and calls as regular activities: the other branch of the interpreter's node dispatch.
  regular = await startTestApp({ worker: true, env: { SVC_LOCAL_PURE_NODES: 'false', SVC_LOCAL_CALL_MAX_MS: '0' } });
  target = await startHttpTarget((req) => {
    if (req.url.startsWith('/flaky')) return ++flaky % 2 === 1 ? { status: 503, body: { error: 'busy' } } : { body: { ok: true } };
    if (req.url.startsWith('/missing')) return { status: 404, body: { error: 'no such thing' } };
    if (req.url.startsWith('/slow')) return { delayMs: 30_000, body: { ok: true } };
    if (req.url.startsWith('/vendor-once')) return ++vendorCalls === 1 ? { status: 500, body: { error: 'down' } } : { body: { ok: true } };
    if (req.url.startsWith('/vendor-never')) return { status: 500, body: { error: 'down' } };
    return { body: { lead: { name: 'Ada', score: 42 } } };
  });
  [openai, anthropic] = await Promise.all([startFakeOpenAi(), startFakeAnthropic()]);
  await mkdir(outDir, { recursive: true });
});
afterAll(async () => {
  await app?.close();
  await regular?.close();
  await target?.close();
  await openai?.close();
  await anthropic?.close();
  await servers.closeAll();
});

/** Every Payload in a history, decrypted in place (failures, memos and headers included). */
async function decryptPayloads(value: unknown, client: TestApp): Promise<void> {
  if (!value || typeof value !== 'object') return;
  if (Array.isArray(value)) {
    for (const item of value) await decryptPayloads(item, client);
    return;
  }
  const record = value as Record<string, unknown>;
  for (const [key, child] of Object.entries(record)) {
    if (child && typeof child === 'object' && 'metadata' in child && 'data' in child && (child as { data: unknown }).data instanceof Uint8Array) {
      const [plain] = await client.stack.services.temporal.codec.decode([child as never]);
      record[key] = plain;
    } else if (Array.isArray(child) && child.every((c) => c && typeof c === 'object' && 'metadata' in c && 'data' in c)) {
      record[key] = await client.stack.services.temporal.codec.decode(child as never);
    } else {
      await decryptPayloads(child, client);
    }
  }
}

/** Writes one history, as it is now (a run in flight too), under the scenario's name. */
async function saveRun(scenario: string, from: TestApp, workflowId: string, runId: string, type: string) {
  const history = (await from.stack.services.temporal.client.workflow.getHandle(workflowId, runId).fetchHistory()) as History;
  await decryptPayloads(history, from);
  const name = `${scenario}.01.${type}.json`;
  await writeFile(join(outDir, name), historyToJSON(history) + '\n');
  manifest[name] = workflowId;
  recorded.set(scenario, [workflowId]);
  await writeFile(join(outDir, 'workflow-ids.json'), JSON.stringify(manifest, null, 2) + '\n');
}

/** Writes every closed run of the given Temporal workflow ids under the scenario's name. */
async function save(scenario: string, from: TestApp, workflowIds: string[]) {
  const client: Client = from.stack.services.temporal.client;
  let n = 0;
  for (const workflowId of workflowIds) {
    const runs = await eventually(async () => {
      const found = [];
      for await (const run of client.workflow.list({ query: `WorkflowId = '${workflowId}'` })) found.push(run);
      return found.length > 0 && found.every((r) => r.status.name !== 'RUNNING') ? found : undefined;
    }, 60_000, `closed runs of ${workflowId}`);
    runs.sort((a, b) => a.startTime.getTime() - b.startTime.getTime());
    for (const run of runs) {
      const history = (await client.workflow.getHandle(workflowId, run.runId).fetchHistory()) as History;
      await decryptPayloads(history, from);
      const name = `${scenario}.${String(++n).padStart(2, '0')}.${run.type}.json`;
      await writeFile(join(outDir, name), historyToJSON(history) + '\n');
      manifest[name] = workflowId;
    }
  }
  recorded.set(scenario, workflowIds);
  await writeFile(join(outDir, 'workflow-ids.json'), JSON.stringify(manifest, null, 2) + '\n');
}

async function create(on: TestApp, def: Record<string, unknown>) {
  const res = await on.admin.post(W, { title: `history ${Math.random()}`, trigger: { type: 'manual' }, edges: [], ...def });
  expect(res.status, res.text).toBe(201);
  return res.body.data.id as number;
}

async function run(on: TestApp, workflowId: number, payload: unknown = {}) {
  const res = await on.admin.post(`${W}/${workflowId}/run?wait=true&timeout_ms=90000`, { payload });
  expect(res.status, res.text).toBe(200);
  return view(on, res.body.data.execution_id);
}

async function view(on: TestApp, executionId: number) {
  const res = await on.admin.get(`${E}/${executionId}`);
  expect(res.status, res.text).toBe(200);
  return res.body.data as { id: number; status: string; temporal: { workflow_id: string; run_id: string } };
}

const settled = (on: TestApp, executionId: number, status?: string) =>
  eventually(async () => {
    const v = await view(on, executionId);
    return (status ? v.status === status : v.status !== 'running') ? v : undefined;
  }, 90_000, `execution ${executionId} ${status ?? 'finished'}`);

/** A graph with every node kind: http_request (retried once), transform, condition, switch,
 * delay, the record nodes, run_workflow, llm_prompt and fail (continued). */
async function everyNodeKind(on: TestApp) {
  const http = (await on.admin.post('/api/workflow/v1/connections', { type: 'http_bearer', label: 'target', cred: 'tok-history', extra: { base_url: target.url } })).body.data.id;
  const llm = await providerConnection(on.admin, 'anthropic', anthropic.url);
  const entity = await on.admin.post(`${M}/entities`, { slug: 'lead', name: 'Lead', schema: { fields: { name: { type: 'string', required: true }, score: { type: 'integer' }, stage: { type: 'string' } } } });
  expect(entity.status, entity.text).toBe(201);
  const child = await create(on, { nodes: [{ id: 'double', type: 'transform', config: { value: '{{ trigger.n * 2 }}' } }] });
  anthropic.script({ text: 'A short summary.', usage: { in: 12, out: 4 } });
  const id = await create(on, {
    nodes: [
      { id: 'fetch', type: 'http_request', connection_id: http, config: { method: 'GET', path: '/flaky' }, retry: { max_attempts: 3, initial_interval_ms: 100 } },
      { id: 'lead', type: 'http_request', connection_id: http, config: { method: 'GET', path: '/lead' } },
      { id: 'shape', type: 'transform', config: { value: { name: '{{ nodes.lead.body.lead.name }}', score: '{{ nodes.lead.body.lead.score }}' } } },
      { id: 'big', type: 'condition', config: { expression: '{{ nodes.shape.score > 10 }}' } },
      { id: 'route', type: 'switch', config: { value: '{{ trigger.kind }}', cases: ['lead', 'customer'] } },
      { id: 'pause', type: 'delay', config: { duration_ms: 200 } },
      { id: 'save', type: 'record_create', config: { entity: 'lead', fields: { name: '{{ nodes.shape.name }}', score: '{{ nodes.shape.score }}' } } },
      { id: 'mark', type: 'record_update', config: { entity: 'lead', uuid: '{{ nodes.save.uuid }}', fields: { stage: 'hot' } } },
      { id: 'find', type: 'record_query', config: { entity: 'lead', eql: "stage = 'hot'", per_page: 5 } },
      { id: 'sub', type: 'run_workflow', config: { workflow_id: child, payload: { n: '{{ nodes.shape.score }}' } } },
      { id: 'ask', type: 'llm_prompt', connection_id: llm, config: { model: 'claude-test', prompt: 'Summarise {{ nodes.shape.name }}' } },
      { id: 'oops', type: 'fail', on_error: 'continue', config: { message: 'expected failure', code: 'custom_code' } },
      { id: 'small', type: 'transform', config: { value: 'never' } },
    ],
    edges: [
      { from: 'fetch', to: 'lead' },
      { from: 'lead', to: 'shape' },
      { from: 'shape', to: 'big' },
      { from: 'big', to: 'route', branch: 'true' },
      { from: 'big', to: 'small', branch: 'false' },
      { from: 'route', to: 'pause', branch: 'lead' },
      { from: 'pause', to: 'save' },
      { from: 'save', to: 'mark' },
      { from: 'mark', to: 'find' },
      { from: 'find', to: 'sub' },
      { from: 'sub', to: 'ask' },
      { from: 'ask', to: 'oops' },
    ],
  });
  const execution = await run(on, id, { kind: 'lead' });
  expect(execution.status).toBe('partial');
  return { execution, http, workflowId: id };
}

it('records a graph run with every node kind, pure nodes local', async () => {
  const { execution } = await everyNodeKind(app);
  await save('graph-every-node-local', app, [execution.temporal.workflow_id, `${execution.temporal.workflow_id}-sub`]);
});

it('records a graph run with every node kind, pure nodes and calls as regular activities', async () => {
  const { execution } = await everyNodeKind(regular);
  await save('graph-every-node-regular', regular, [execution.temporal.workflow_id, `${execution.temporal.workflow_id}-sub`]);
});

it('records values kept out of history: large outputs, a large payload, a child with both, more ready nodes than may run at once', async () => {
  const child = await create(app, { nodes: [{ id: 'echo', type: 'transform', config: { value: { got: '{{ $length(trigger.blob) }}', again: '{{ trigger.blob }}' } } }] });
  const wide = Array.from({ length: 40 }, (_, i) => `w${i}`);
  const id = await create(app, {
    nodes: [
      { id: 'make', type: 'transform', config: { value: `{{ $pad('', 100000, 'p') }}` } },
      ...wide.map((w) => ({ id: w, type: 'transform', config: { value: `{{ $length(nodes.make) + ${w.slice(1)} }}` } })),
      { id: 'call', type: 'run_workflow', config: { workflow_id: child, payload: { blob: '{{ nodes.make }}' } } },
      { id: 'last', type: 'transform', config: { value: { back: '{{ $length(nodes.call.output.again) }}', big: '{{ nodes.make }}', payload: '{{ $length(trigger.text) }}' } } },
    ],
    edges: [...wide.map((w) => ({ from: 'make', to: w })), { from: 'make', to: 'call' }, ...wide.map((w) => ({ from: w, to: 'last' })), { from: 'call', to: 'last' }],
  });
  const execution = await run(app, id, { text: 'x'.repeat(50_000) });
  expect(execution.status).toBe('success');
  await save('graph-large-values', app, [execution.temporal.workflow_id, `${execution.temporal.workflow_id}-call`]);
});

it('records a failed run, both replays of it, a cancelled run and a terminated run', async () => {
  const http = (await app.admin.post('/api/workflow/v1/connections', { type: 'http_bearer', label: 'target2', cred: 'tok-history', extra: { base_url: target.url } })).body.data.id;
  const failing = await create(app, {
    nodes: [
      { id: 'first', type: 'transform', config: { value: '{{ trigger.v }}' } },
      { id: 'pause', type: 'delay', config: { duration_ms: 100 } },
      { id: 'call', type: 'http_request', connection_id: http, config: { method: 'GET', path: '/missing' } },
      { id: 'never', type: 'transform', config: { value: 1 } },
    ],
    edges: [
      { from: 'first', to: 'pause' },
      { from: 'pause', to: 'call' },
      { from: 'call', to: 'never' },
    ],
  });
  const failed = await run(app, failing, { v: 1 });
  expect(failed.status).toBe('failed');
  // Reset replay: the same Temporal workflow id, a new run.
  const reset = await app.admin.post(`${E}/${failed.id}/replay`, { from_node_id: 'call' });
  expect(reset.status, reset.text).toBe(202);
  await settled(app, reset.body.data.execution_id);
  // Seeded replay: a new workflow id whose run starts at the node with upstream outputs reused.
  const seeded = await app.admin.post(`${E}/${failed.id}/replay`, { from_node_id: 'call', with_payload: { v: 2 } });
  expect(seeded.status, seeded.text).toBe(202);
  const seededView = await settled(app, seeded.body.data.execution_id);
  await save('graph-failed-and-reset', app, [failed.temporal.workflow_id]);
  await save('graph-replay-seeded', app, [seededView.temporal.workflow_id]);

  const long = await create(app, {
    nodes: [
      { id: 'wait', type: 'delay', config: { duration_ms: 60_000 } },
      { id: 'after', type: 'transform', config: { value: 1 } },
    ],
    edges: [{ from: 'wait', to: 'after' }],
  });
  const temporal = app.stack.services.temporal;
  for (const [scenario, stop] of [
    ['graph-cancelled-in-delay', (id: string) => temporal.client.workflow.getHandle(id).cancel()],
    ['graph-terminated-in-delay', (id: string) => temporal.client.workflow.getHandle(id).terminate('operator stopped it')],
  ] as const) {
    const started = await app.admin.post(`${W}/${long}/run`, { payload: {} });
    expect(started.status).toBe(202);
    const workflowId = temporal.executionWorkflowId(started.body.data.execution_id);
    await eventually(async () => (await app.sql(`select 1 from execution_nodes where execution_id = $1 and node_id = 'wait'`, [started.body.data.execution_id])).length > 0);
    await stop(workflowId);
    await settled(app, started.body.data.execution_id);
    await save(scenario, app, [workflowId]);
  }

  // An activity in flight when cancelled (the target answers after 30 s).
  const slow = await create(app, { nodes: [{ id: 'call', type: 'http_request', connection_id: http, config: { method: 'GET', path: '/slow' }, timeout_ms: 60_000 }] });
  const started = await app.admin.post(`${W}/${slow}/run`, { payload: {} });
  const workflowId = temporal.executionWorkflowId(started.body.data.execution_id);
  await eventually(async () => (await app.sql(`select 1 from execution_nodes where execution_id = $1 and node_id = 'call'`, [started.body.data.execution_id])).length > 0);
  await temporal.client.workflow.getHandle(workflowId).cancel();
  await settled(app, started.body.data.execution_id);
  await save('graph-cancelled-in-activity', app, [workflowId]);
});

// The path this scenario recorded (a record that says success while its last workflow task is
// still open, its skipped nodes written apart) is gone: the record ends in one transaction with its
// skipped nodes, so holding that write holds the record too. Its histories stay in 2026-11-23-last-task.
it.skip('records a run whose last workflow task outlives its record: read while the task is open, and closed after a task heartbeat', async () => {
  // `hold` waits for this server's answer; then one workflow task runs `b` and `check` (local
  // activities), skips `never` and ends with finishExecution, whose last write (`never` skipped)
  // waits on a row held here. The record says success while Temporal has not written the task.
  let answer!: (res: ServerResponse) => void;
  const asked = new Promise<ServerResponse>((resolve) => (answer = resolve));
  const url = await servers.start((_req, res) => answer(res));
  const http = (await app.admin.post('/api/workflow/v1/connections', { type: 'http_bearer', label: 'held', cred: 'tok-history', extra: { base_url: url } })).body.data.id;
  const id = await create(app, {
    nodes: [
      { id: 'hold', type: 'http_request', connection_id: http, config: { method: 'GET', path: '/hold' } },
      { id: 'b', type: 'transform', config: { value: '{{ execution.id }}' } },
      { id: 'check', type: 'condition', config: { expression: false } },
      { id: 'never', type: 'transform', config: { value: 'never' } },
    ],
    edges: [
      { from: 'hold', to: 'b' },
      { from: 'b', to: 'check' },
      { from: 'check', to: 'never', branch: 'true' },
    ],
  });
  const started = await app.admin.post(`${W}/${id}/run`, { payload: {} });
  expect(started.status, started.text).toBe(202);
  const executionId = started.body.data.execution_id as number;
  const temporal = app.stack.services.temporal;
  const workflowId = temporal.executionWorkflowId(executionId);
  const held = await asked;
  const db = new pg.Client({ connectionString: app.databaseUrl });
  await db.connect();
  try {
    await db.query('begin');
    await db.query(`insert into execution_nodes (execution_id, node_id, node_type, status) values ($1, 'never', 'transform', 'skipped')`, [executionId]);
    held.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true}');
    const record = await settled(app, executionId);
    const runId = record.temporal.run_id;
    expect((await readNodeEvents(temporal, workflowId, runId)).started.has('b')).toBe(false);
    await saveRun('graph-last-task-open', app, workflowId, runId, 'runGraph');
    // Past 80% of the workflow task timeout the worker completes the task so far (b's start and
    // end in it) and asks for a new one for finishExecution's result: a task heartbeat.
    await eventually(async () => (await readNodeEvents(temporal, workflowId, runId)).started.has('b'), 60_000, 'the task heartbeat');
    await db.query('rollback');
    await temporal.client.workflow.getHandle(workflowId, runId).result();
    await save('graph-last-task-heartbeat', app, [workflowId]);
  } finally {
    await db.end();
  }
});

it('records an agent session: answer, approve, reject, a failed model call, continue-as-new', async () => {
  const provider = await providerConnection(app.admin, 'openai', openai.url);
  await app.admin.post(`${M}/entities`, { slug: 'note', name: 'Note', schema: { fields: { title: { type: 'string', required: true } } } });
  const created = await app.admin.post(`${A}/sessions`, { provider_id: provider, model_id: 'gpt-test' });
  expect(created.status, created.text).toBe(201);
  const session = created.body.data.session_id as string;
  const say = async (content: string) => {
    const res = await app.admin.post(`${A}/sessions/${session}/messages`, { content, stream: false });
    expect(res.status, res.text).toBe(200);
    return res.body.data;
  };
  openai.script({ text: 'Hello.' });
  expect((await say('Hi')).outcome).toBe('answered');
  openai.script({ toolCalls: [{ name: 'records_search', args: { entity: 'note' } }, { name: 'records_create', args: { entity: 'note', fields: { title: 'one' } } }] }, { text: 'Created it.' });
  const gate = await say('Make a note');
  expect(gate.outcome).toBe('gate_pending');
  const approved = await app.admin.post(`${A}/actions/${gate.pending_action.action_id}/approve`, { note: 'fine' });
  expect(approved.body.data.outcome).toBe('answered');
  openai.script({ toolCalls: [{ name: 'records_delete', args: { entity: 'note', uuid: '00000000-0000-4000-8000-000000000000' } }] }, { text: 'Left it.' });
  const second = await say('Delete it');
  expect(second.outcome).toBe('gate_pending');
  const rejected = await app.admin.post(`${A}/actions/${second.pending_action.action_id}/reject`, { note: 'no' });
  expect(rejected.body.data.outcome).toBe('answered');
  // Four updates handled: the run continues as new; the next turn is on the new run.
  openai.script({ status: 401 });
  const failed = await app.admin.post(`${A}/sessions/${session}/messages`, { content: 'Again', stream: false });
  expect(failed.body.data?.outcome ?? failed.body.error, failed.text).toBeDefined();
  openai.script({ text: 'Still here.' });
  expect((await say('Still there?')).outcome).toBe('answered');
  const workflowId = agentSessionWorkflowId(session);
  const handle = app.stack.services.temporal.client.workflow.getHandle(workflowId);
  await handle.terminate('history recorded');
  await save('agent-session', app, [workflowId]);
});

it('records the gate: an expiry the turn goes on from, an edited approval, two gates in a turn, a gate waiting on its timer', async () => {
  const provider = await providerConnection(app.admin, 'openai', openai.url);
  const approver = await app.createUser('editor', 'history-approver');
  const open = async (body: Record<string, unknown>) => {
    const created = await app.admin.post(`${A}/sessions`, { provider_id: provider, model_id: 'gpt-test', ...body });
    expect(created.status, created.text).toBe(201);
    return created.body.data.session_id as string;
  };
  const say = async (session: string, content: string) => {
    const res = await app.admin.post(`${A}/sessions/${session}/messages`, { content, stream: false });
    expect(res.status, res.text).toBe(200);
    return res.body.data;
  };
  const create = (title: string) => ({ name: 'records_create', args: { entity: 'note', fields: { title } } });

  // Expiry: the timer fires, the expiry is stored, the model reads it and the turn goes on.
  const expiring = await open({ gate_ttl_s: 1 });
  openai.script({ toolCalls: [create('never')] }, { text: 'It expired.' });
  const gate = await say(expiring, 'Make a note');
  expect(gate.outcome).toBe('gate_pending');
  await eventually(async () => (await app.sql(`select 1 from agent_messages where session_id = $1 and content = 'It expired.'`, [expiring])).length > 0, 30_000, 'the expiry');

  // Four eyes, edited arguments, two gates in one turn (the second rejected), then a gate left
  // waiting on its timer when the run ends.
  const reviewed = await open({ gate_ttl_s: 3600, approval: 'others' });
  openai.script({ toolCalls: [create('propsed'), create('second')] }, { text: 'One of two.' });
  const first = await say(reviewed, 'Make two notes');
  // A decider who is not the session's owner is answered the decision, with the turn's next outcome as `turn`.
  const turnOf = (data: { outcome: string; turn?: string }) => (data.outcome === 'decided' ? data.turn : data.outcome);
  const second = await approver.client.post(`${A}/actions/${first.pending_action.action_id}/approve`, { args: { entity: 'note', fields: { title: 'proposed' } } });
  expect(turnOf(second.body.data), second.text).toBe('gate_pending');
  const done = await approver.client.post(`${A}/actions/${second.body.data.pending_action.action_id}/reject`, { note: 'one is enough' });
  expect(turnOf(done.body.data), done.text).toBe('answered');
  openai.script({ toolCalls: [create('waiting')] });
  expect((await say(reviewed, 'One more')).outcome).toBe('gate_pending');

  const workflowIds = [agentSessionWorkflowId(expiring), agentSessionWorkflowId(reviewed)];
  for (const workflowId of workflowIds) await app.stack.services.temporal.client.workflow.getHandle(workflowId).terminate('history recorded');
  await save('agent-gate', app, workflowIds);
});

it('records licence webhook deliveries: delivered after a failed attempt, and failed after the last', async () => {
  for (const path of ['/vendor-once', '/vendor-never']) {
    const hook = await app.admin.post('/api/management/v1/licence-webhooks', { url: `${target.url}${path}`, events: ['license.activated'] });
    expect(hook.status, hook.text).toBe(201);
  }
  const licence = await app.admin.post('/api/management/v1/licenses', { product_slug: 'history', product_name: 'History', domain_limit: 2 });
  expect(licence.status, licence.text).toBe(201);
  const activated = await app.anonymous.request('POST', `/api/portal/v1/licenses/${licence.body.data.token}/activate`, {
    form: { site_url: 'https://history.example', site_fingerprint: 'a'.repeat(64) },
  });
  expect(activated.status, activated.text).toBe(200);
  const deliveries = await eventually(async () => {
    const rows = await app.sql<{ id: string; status: string }>('select id, status from license_webhook_deliveries order by id');
    return rows.length === 2 && rows.every((r) => r.status !== 'pending') ? rows : undefined;
  });
  await save(
    'licence-webhooks',
    app,
    deliveries.map((d) => app.stack.services.licenseWebhooks.workflowId(d.id)),
  );
});

it('records error paths: a failure taking its error edges, an error workflow started by a failed run, and a replay reusing a handled failure', async () => {
  const http = (await app.admin.post('/api/workflow/v1/connections', { type: 'http_bearer', label: 'errors', cred: 'tok-history', extra: { base_url: target.url } })).body.data
    .id;
  // A failure taking its error edges: an http_error's data read by the error branch, a condition failing into its own.
  const branching = await create(app, {
    nodes: [
      { id: 'call', type: 'http_request', connection_id: http, config: { method: 'GET', path: '/missing' }, retry: { max_attempts: 1 }, on_error: 'branch' },
      { id: 'ok', type: 'transform', config: { value: '{{ nodes.call.body }}' } },
      { id: 'handle', type: 'transform', config: { value: '{{ nodes.call.error.data.status }}' } },
      { id: 'check', type: 'condition', on_error: 'branch', config: { expression: '{{ $number(trigger.n) > 1 }}' } },
      { id: 'yes', type: 'transform', config: { value: 'yes' } },
      { id: 'bad', type: 'delay', config: { duration_ms: 50 } },
      { id: 'close', type: 'http_request', connection_id: http, config: { method: 'GET', path: '/flaky' }, retry: { max_attempts: 3, initial_interval_ms: 100 } },
    ],
    edges: [
      { from: 'call', to: 'ok' },
      { from: 'call', to: 'handle', branch: 'error' },
      { from: 'handle', to: 'check' },
      { from: 'check', to: 'yes', branch: 'true' },
      { from: 'check', to: 'bad', branch: 'error' },
      { from: 'bad', to: 'close' },
    ],
  });
  const branched = await run(app, branching, { n: 'not a number' });
  expect(branched.status).toBe('success');
  // A replay from the last node, reusing both handled failures (seeded into their error edges); a
  // payload makes it a new run whatever a reset would keep.
  const replay = await app.admin.post(`${E}/${branched.id}/replay`, { from_node_id: 'close', with_payload: { n: 'still not a number' } });
  expect(replay.status, replay.text).toBe(202);
  expect(replay.body.data.mode).toBe('rerun');
  const replayed = await settled(app, replay.body.data.execution_id);
  expect(replayed.status).toBe('success');
  await save('graph-error-branch', app, [branched.temporal.workflow_id]);
  await save('graph-replay-error-seeded', app, [replayed.temporal.workflow_id]);

  // A failed run whose workflow names an error workflow, and that workflow's run.
  const handler = await create(app, { nodes: [{ id: 'echo', type: 'transform', config: { value: '{{ trigger.error.code }}' } }] });
  const failing = await create(app, {
    error_workflow_id: handler,
    nodes: [{ id: 'boom', type: 'fail', config: { message: 'handled elsewhere', code: 'custom_code' } }],
  });
  const failed = await run(app, failing);
  expect(failed.status).toBe('failed');
  const handled = await eventually(async () => ((await app.admin.get(`${E}/${failed.id}`)).body.data.error_workflow_execution_id ?? undefined) as number | undefined);
  const handlerRun = await settled(app, handled, 'success');
  await save('graph-error-workflow', app, [failed.temporal.workflow_id, handlerRun.temporal.workflow_id]);
});

/** A wait_for_event graph: `then` on the received branch, `gave_up` on the timeout branch. */
async function waitGraph(on: TestApp, event: string, wait: Record<string, unknown> = {}) {
  return create(on, {
    nodes: [
      { id: 'wait', type: 'wait_for_event', config: { event, key: '{{ trigger.order }}', timeout_ms: 60_000, ...wait } },
      { id: 'then', type: 'transform', config: { value: '{{ nodes.wait.event.data }}' } },
      { id: 'gave_up', type: 'transform', config: { value: 'timed out' } },
    ],
    edges: [
      { from: 'wait', to: 'then', branch: 'received' },
      { from: 'wait', to: 'gave_up', branch: 'timeout' },
    ],
  });
}

const waitOf = (on: TestApp, executionId: number) =>
  eventually(async () => (await on.sql(`select 1 from workflow_event_waits where execution_id = $1 and status = 'waiting'`, [executionId])).length > 0);

it('records waits: an event during the wait, one sent before it, a timeout, an event from an emit_event node, a cancelled wait, a replay from the wait', async () => {
  const started = async (workflowId: number, payload: unknown) => (await app.admin.post(`${W}/${workflowId}/run`, { payload })).body.data.execution_id as number;
  const during = await waitGraph(app, 'paid.during');
  const duringRun = await started(during, { order: 'o-1' });
  await waitOf(app, duringRun);
  expect((await app.admin.post('/api/workflow/v1/events', { name: 'paid.during', key: 'o-1', data: { amount: 1 } })).body.data.delivered).toEqual([duringRun]);
  const duringView = await settled(app, duringRun, 'success');

  const before = await waitGraph(app, 'paid.before');
  await app.admin.post('/api/workflow/v1/events', { name: 'paid.before', key: 'o-2', data: { amount: 2 } });
  const beforeView = await settled(app, await started(before, { order: 'o-2' }), 'success');

  const timeout = await waitGraph(app, 'paid.never', { timeout_ms: 200 });
  const timeoutView = await settled(app, await started(timeout, { order: 'o-3' }), 'success');

  const emitted = await waitGraph(app, 'paid.emitted');
  const emittedRun = await started(emitted, { order: 'o-4' });
  await waitOf(app, emittedRun);
  const emitter = await create(app, { nodes: [{ id: 'tell', type: 'emit_event', config: { event: 'paid.emitted', key: '{{ trigger.order }}', data: { amount: 4 } } }] });
  const emitterView = await run(app, emitter, { order: 'o-4' });
  const emittedView = await settled(app, emittedRun, 'success');

  const cancelled = await waitGraph(app, 'paid.cancelled');
  const cancelledRun = await started(cancelled, { order: 'o-5' });
  await waitOf(app, cancelledRun);
  expect((await app.admin.post(`${E}/${cancelledRun}/cancel`)).status).toBe(200);
  const cancelledView = await view(app, cancelledRun);

  // A reset replay from the wait itself: the new run waits again, for a new event.
  const replay = await app.admin.post(`${E}/${duringRun}/replay`, { from_node_id: 'wait' });
  expect(replay.status, replay.text).toBe(202);
  await waitOf(app, replay.body.data.execution_id);
  await app.admin.post('/api/workflow/v1/events', { name: 'paid.during', key: 'o-1', data: { amount: 5 } });
  await settled(app, replay.body.data.execution_id, 'success');

  await save('waits-received-during', app, [duringView.temporal.workflow_id]);
  await save('waits-received-before', app, [beforeView.temporal.workflow_id]);
  await save('waits-timeout', app, [timeoutView.temporal.workflow_id]);
  await save('waits-emitted', app, [emitterView.temporal.workflow_id, emittedView.temporal.workflow_id]);
  await save('waits-cancelled', app, [cancelledView.temporal.workflow_id]);
});

it('records approvals: two approvers with an edit, reminders and an escalation; a rejection; an expiry; a cancelled approval; replays around one', async () => {
  const [grace, linus, barbara] = [await app.createUser('editor', 'grace'), await app.createUser('editor', 'linus'), await app.createUser('editor', 'barbara')];
  const chat = (await app.admin.post('/api/workflow/v1/connections', { type: 'http_bearer', label: 'chat', cred: 'tok-chat', extra: { base_url: target.url } })).body.data.id;
  const approvalGraph = (config: Record<string, unknown>) =>
    create(app, {
      nodes: [
        {
          id: 'ask',
          type: 'approval',
          config: {
            summary: 'Expense of {{ trigger.amount }}',
            fields: { amount: '{{ trigger.amount }}' },
            editable: { type: 'object', properties: { amount: { type: 'number', maximum: 5000 } } },
            approvers: { users: ['grace', 'linus'] },
            timeout_ms: 60_000,
            ...config,
          },
        },
        { id: 'pay', type: 'transform', config: { value: '{{ nodes.ask.fields.amount }}' } },
        { id: 'refuse', type: 'transform', config: { value: '{{ nodes.ask.decision }}' } },
      ],
      edges: [
        { from: 'ask', to: 'pay', branch: 'approved' },
        { from: 'ask', to: 'refuse', branch: 'rejected' },
        { from: 'ask', to: 'refuse', branch: 'expired' },
      ],
    });
  const started = async (workflowId: number) => (await app.admin.post(`${W}/${workflowId}/run`, { payload: { amount: 1800 } })).body.data.execution_id as number;
  const actionOf = (executionId: number) =>
    eventually(async () => (await app.sql<{ action_id: string }>(`select action_id from agent_actions where execution_id = $1`, [executionId]))[0]?.action_id);
  const decide = (user: { client: TestApp['admin'] }, actionId: string, verb: 'approve' | 'reject', body: unknown = {}) =>
    user.client.post(`${A}/actions/${actionId}/${verb}`, body);

  const twice = await approvalGraph({
    required: 2,
    notify: { connection_id: chat, path: '/chat' },
    remind_every_ms: 1000,
    escalate_after_ms: 1500,
    escalate_to: { users: ['barbara'] },
  });
  const twiceRun = await started(twice);
  const twiceAction = await actionOf(twiceRun);
  expect((await decide(grace, twiceAction, 'approve', { fields: { amount: 1500 } })).status).toBe(202);
  await eventually(async () => target.requests.filter((r) => r.url === '/chat' && r.body.includes('"escalated"')).length > 0);
  expect((await decide(barbara, twiceAction, 'approve')).status).toBe(202);
  const twiceView = await settled(app, twiceRun, 'success');

  const rejected = await approvalGraph({});
  const rejectedRun = await started(rejected);
  expect((await decide(linus, await actionOf(rejectedRun), 'reject', { note: 'no' })).status).toBe(202);
  const rejectedView = await settled(app, rejectedRun, 'success');

  const expiring = await approvalGraph({ timeout_ms: 300 });
  const expiredView = await settled(app, await started(expiring), 'success');

  const cancelledRun = await started(rejected);
  await actionOf(cancelledRun);
  expect((await app.admin.post(`${E}/${cancelledRun}/cancel`)).status).toBe(200);
  const cancelledView = await view(app, cancelledRun);

  // Replays of the approved run: from the node after the approval (its outcome reused), seeded
  // with a new payload, and from the approval itself (asked again).
  const after = await app.admin.post(`${E}/${twiceRun}/replay`, { from_node_id: 'pay' });
  await settled(app, after.body.data.execution_id, 'success');
  const seeded = await app.admin.post(`${E}/${twiceRun}/replay`, { from_node_id: 'pay', with_payload: { amount: 1800 } });
  const seededView = await settled(app, seeded.body.data.execution_id, 'success');
  const again = await app.admin.post(`${E}/${twiceRun}/replay`, { from_node_id: 'ask' });
  const againAction = await actionOf(again.body.data.execution_id);
  expect((await decide(grace, againAction, 'reject')).status).toBe(202);
  await settled(app, again.body.data.execution_id, 'success');

  await save('approval-twice-reminded-escalated-replayed', app, [twiceView.temporal.workflow_id]);
  await save('approval-rejected', app, [rejectedView.temporal.workflow_id]);
  await save('approval-expired', app, [expiredView.temporal.workflow_id]);
  await save('approval-cancelled', app, [cancelledView.temporal.workflow_id]);
  await save('approval-replay-seeded', app, [seededView.temporal.workflow_id]);
  expect(linus.id).toBeGreaterThan(0);
});

it('records loops: a body of every kind of step with a nested loop, a workflow as the body, a loop that continues as new, a failed loop and the replay of its failed items, a cancelled loop', async () => {
  const http = (await app.admin.post('/api/workflow/v1/connections', { type: 'http_bearer', label: 'loops', cred: 'tok-history', extra: { base_url: target.url } })).body.data.id;
  const child = await create(app, { nodes: [{ id: 'twice', type: 'transform', config: { value: '{{ trigger.item * 2 }}' } }] });
  const loops = await create(app, {
    nodes: [
      { id: 'start', type: 'transform', config: { value: { rows: [1, 2, 3] } } },
      {
        id: 'rows',
        type: 'for_each',
        config: {
          items: '{{ nodes.start.rows }}',
          concurrency: 2,
          body: {
            nodes: [
              { id: 'fetch', type: 'http_request', connection_id: http, config: { method: 'GET', path: '/lead?row={{ item }}' } },
              { id: 'nap', type: 'delay', config: { duration_ms: 50 } },
              { id: 'sub', type: 'run_workflow', config: { workflow_id: child, payload: { item: '{{ item }}' } } },
              {
                id: 'cells',
                type: 'for_each',
                config: { items: '{{ [1..item] }}', concurrency: 2, body: { nodes: [{ id: 'cell', type: 'transform', config: { value: '{{ item * 10 }}' } }] } },
              },
              { id: 'sum', type: 'transform', config: { value: '{{ $sum(nodes.cells.results) + nodes.sub.output }}' } },
            ],
            edges: [
              { from: 'fetch', to: 'nap' },
              { from: 'nap', to: 'sub' },
              { from: 'sub', to: 'cells' },
              { from: 'cells', to: 'sum' },
            ],
          },
        },
      },
      { id: 'each_run', type: 'for_each', config: { items: [4, 5], workflow_id: child } },
      { id: 'total', type: 'transform', config: { value: '{{ $sum(nodes.rows.results) + $sum(nodes.each_run.results) }}' } },
    ],
    edges: [
      { from: 'start', to: 'rows' },
      { from: 'rows', to: 'each_run' },
      { from: 'each_run', to: 'total' },
    ],
  });
  const nested = await run(app, loops);
  expect(nested.status).toBe('success');
  const g = nested.temporal.workflow_id;
  await save('loop-every-step-nested', app, [
    g,
    `${g}/rows`,
    ...[0, 1, 2].flatMap((i) => [`${g}/rows/${i}/cells`, `${g}/rows/${i}/sub`]),
    `${g}/each_run`,
    `${g}/each_run/0`,
    `${g}/each_run/1`,
  ]);

  const many = await create(app, {
    nodes: [
      {
        id: 'many',
        type: 'for_each',
        config: {
          items: '{{ [0..119] }}',
          concurrency: 5,
          body: {
            nodes: [
              { id: 'a', type: 'http_request', connection_id: http, config: { method: 'GET', path: '/lead?n={{ item }}' } },
              { id: 'b', type: 'transform', config: { value: '{{ nodes.a.body.lead.score + index }}' } },
            ],
            edges: [{ from: 'a', to: 'b' }],
          },
        },
      },
    ],
  });
  const long = await run(app, many);
  expect(long.status).toBe('success');
  await save('loop-continued-as-new', app, [long.temporal.workflow_id, `${long.temporal.workflow_id}/many`]);

  const failing = await create(app, {
    nodes: [
      {
        id: 'send',
        type: 'for_each',
        config: {
          items: ['/lead', '/missing', '/lead'],
          concurrency: 1,
          on_item_error: 'fail',
          body: { nodes: [{ id: 'post', type: 'http_request', connection_id: http, config: { method: 'GET', path: '{{ item }}' } }] },
        },
      },
      { id: 'after', type: 'transform', config: { value: '{{ nodes.send.succeeded }}' } },
    ],
    edges: [{ from: 'send', to: 'after' }],
  });
  const failed = await run(app, failing);
  expect(failed.status).toBe('failed');
  const retried = await app.admin.post(`${E}/${failed.id}/replay`, { from_node_id: 'send', only_failed_items: true });
  expect(retried.status, retried.text).toBe(202);
  const retriedView = await settled(app, retried.body.data.execution_id);
  await save('loop-failed', app, [failed.temporal.workflow_id, `${failed.temporal.workflow_id}/send`]);
  await save('loop-only-failed-items', app, [retriedView.temporal.workflow_id, `${retriedView.temporal.workflow_id}/send`]);

  const slow = await create(app, {
    nodes: [
      {
        id: 'slow',
        type: 'for_each',
        config: { items: [1, 2, 3], concurrency: 2, body: { nodes: [{ id: 'wait', type: 'http_request', connection_id: http, config: { method: 'GET', path: '/slow-loop' }, timeout_ms: 60_000 }] } },
      },
    ],
  });
  const started = await app.admin.post(`${W}/${slow}/run`, { payload: {} });
  const cancelled = await eventually(async () => {
    const v = await view(app, started.body.data.execution_id);
    return target.requests.filter((r) => r.url === '/slow-loop').length >= 2 ? v : undefined;
  }, 60_000, 'two slow items in flight');
  await app.stack.services.temporal.client.workflow.getHandle(cancelled.temporal.workflow_id).cancel();
  await settled(app, started.body.data.execution_id, 'cancelled');
  await save('loop-cancelled', app, [cancelled.temporal.workflow_id, `${cancelled.temporal.workflow_id}/slow`]);
});

it('wrote every scenario', () => {
  expect([...recorded.keys()].length).toBeGreaterThanOrEqual(10);
});
