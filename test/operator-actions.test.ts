import type { ServerResponse } from 'node:http';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { findResetPoint, RunStillOpen, untilClosed } from '../src/executions/reset-point.js';
import { startTestApp, type TestApp } from './helpers/app.js';
import { eventually, fixedServers, startHttpTarget, type HttpTarget } from './helpers/http-target.js';
import { startTcpProxy } from './helpers/tcp-proxy.js';
import { temporalCli } from './helpers/temporal-cli.js';

/**
 * What an operator does to a run from the Temporal Web UI or CLI (cancel, terminate, reset) is
 * reflected in the execution mirror, and replays through the API do not trip over each other.
 * Operator actions go through the real `temporal` CLI binary.
 */
let app: TestApp;
let target: HttpTarget;
let connectionId: number;
const servers = fixedServers();
const W = '/api/workflow/v1/workflows';
const E = '/api/workflow/v1/executions';

beforeAll(async () => {
  app = await startTestApp({ worker: true });
  target = await startHttpTarget((req) => {
    if (req.url.startsWith('/slow')) return { delayMs: 20_000, body: { ok: true } };
    if (req.url.startsWith('/hang')) return { delayMs: 5_000, body: { late: true } };
    return undefined;
  });
  const conn = await app.admin.post('/api/workflow/v1/connections', {
    type: 'http_bearer',
    label: 'target',
    cred: 'tok-operator',
    extra: { base_url: target.url },
  });
  connectionId = conn.body.data.id;
});
afterAll(async () => {
  await app?.close();
  await target?.close();
  await servers.closeAll();
});

async function create(def: Record<string, unknown>) {
  const res = await app.admin.post(W, { title: `ops ${Math.random()}`, trigger: { type: 'manual' }, edges: [], ...def });
  expect(res.status, res.text).toBe(201);
  return res.body.data.id as number;
}

async function view(executionId: number) {
  const res = await app.admin.get(`${E}/${executionId}`);
  expect(res.status, res.text).toBe(200);
  return res.body.data;
}

const settled = (executionId: number) =>
  eventually(
    async () => {
      const v = await view(executionId);
      return v.status !== 'running' ? v : undefined;
    },
    90_000,
    `execution ${executionId} to finish`,
  );

async function start(workflowId: number, payload: unknown = {}) {
  const res = await app.admin.post(`${W}/${workflowId}/run`, { payload });
  expect(res.status, res.text).toBe(202);
  const executionId = res.body.data.execution_id as number;
  return { executionId, temporalWorkflowId: app.stack.services.temporal.executionWorkflowId(executionId) };
}

const nodeOf = (execution: { timeline: { node_id: string }[] }, id: string) => execution.timeline.find((t) => t.node_id === id) as any;
const inFlight = (executionId: number, node: string) =>
  eventually(
    async () =>
      (await app.sql(`select 1 from execution_nodes where execution_id = $1 and node_id = $2 and status = 'running'`, [executionId, node])).length > 0,
  );

/**
 * A node `hold` calling a target that answers only when the test says (`answer`), for a test to
 * act while the run waits on it.
 */
async function heldCall(label: string) {
  let answered!: (res: ServerResponse) => void;
  const asked = new Promise<ServerResponse>((resolve) => (answered = resolve));
  const url = await servers.start((_req, res) => answered(res));
  const conn = await app.admin.post('/api/workflow/v1/connections', { type: 'http_bearer', label, cred: `tok-${label}`, extra: { base_url: url } });
  return {
    node: { id: 'hold', type: 'http_request', connection_id: conn.body.data.id, config: { method: 'GET', path: '/hold' } },
    asked,
    answer: async () => void (await asked).writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true}'),
  };
}

/**
 * Writes a node's timeline entry in a transaction of the test's own and keeps it open, so the
 * worker's write of that entry waits, as on a busy database, until `release`.
 */
async function lockedEntry(executionId: number, node: { id: string; type: string }) {
  const db = new pg.Client({ connectionString: app.databaseUrl });
  await db.connect();
  await db.query('begin');
  await db.query(`insert into execution_nodes (execution_id, node_id, node_type, status) values ($1, $2, $3, 'running')`, [executionId, node.id, node.type]);
  let released = false;
  return {
    /** Until a write of the entry waits on the lock. */
    workerWaits: () =>
      eventually(
        async () =>
          (await app.sql(`select 1 from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock' and query like '%execution_nodes%'`))
            .length > 0,
        30_000,
        `the worker to wait for ${node.id}'s entry`,
      ),
    release: async () => {
      if (released) return;
      released = true;
      await db.query('rollback').catch(() => undefined);
      await db.end();
    },
  };
}

describe('cancel and terminate from the Temporal CLI', () => {
  const longRun = () =>
    create({
      nodes: [
        { id: 'first', type: 'transform', config: { value: 1 } },
        { id: 'wait', type: 'delay', config: { duration_ms: 120_000 } },
        { id: 'after', type: 'transform', config: { value: 2 } },
      ],
      edges: [
        { from: 'first', to: 'wait' },
        { from: 'wait', to: 'after' },
      ],
    });

  it('a cancel during a delay ends the execution cancelled and the delay node cancelled with its finish time', async () => {
    const run = await start(await longRun());
    await inFlight(run.executionId, 'wait');
    await temporalCli(['workflow', 'cancel', '--workflow-id', run.temporalWorkflowId]);
    const done = await settled(run.executionId);
    expect(done.status).toBe('cancelled');
    expect(nodeOf(done, 'first').status).toBe('success');
    expect(nodeOf(done, 'wait')).toMatchObject({ status: 'cancelled', error: { code: 'cancelled' } });
    expect(nodeOf(done, 'wait').finished_at).not.toBeNull();
    expect(nodeOf(done, 'wait').duration_ms).toBeGreaterThanOrEqual(0);
    expect(nodeOf(done, 'after').status).toBe('skipped');
    expect(done.timeline.filter((t: any) => t.status === 'running')).toEqual([]);
  });

  it('a cancel during an activity ends that node cancelled too', async () => {
    const id = await create({
      nodes: [{ id: 'call', type: 'http_request', connection_id: connectionId, config: { method: 'GET', path: '/slow' }, timeout_ms: 60_000 }],
    });
    const run = await start(id);
    await inFlight(run.executionId, 'call');
    await temporalCli(['workflow', 'cancel', '--workflow-id', run.temporalWorkflowId]);
    const done = await settled(run.executionId);
    expect(done.status).toBe('cancelled');
    expect(nodeOf(done, 'call')).toMatchObject({ status: 'cancelled' });
    expect(nodeOf(done, 'call').finished_at).not.toBeNull();
    // The activity learns of the cancel at its next heartbeat; once it has ended (the worker holds
    // no activity any more), it must not have turned the node back.
    const worker = app.stack.worker!.worker;
    await eventually(async () => worker.getStatus().numInFlightNonLocalActivities === 0, 30_000, 'the cancelled activity to end');
    expect(nodeOf(await view(run.executionId), 'call').status).toBe('cancelled');
  });

  it('a terminate ends the execution failed with code terminated and no node left running', async () => {
    const run = await start(await longRun());
    await inFlight(run.executionId, 'wait');
    await temporalCli(['workflow', 'terminate', '--workflow-id', run.temporalWorkflowId, '--reason', 'stuck on a bad deploy']);
    const done = await settled(run.executionId);
    expect(done).toMatchObject({ status: 'failed', error: { code: 'terminated' } });
    expect(nodeOf(done, 'wait')).toMatchObject({ status: 'failed', error: { code: 'terminated' } });
    expect(done.timeline.filter((t: any) => t.status === 'running')).toEqual([]);
  });

  it('the worker sweep closes a terminated run even when nobody reads it', async () => {
    const run = await start(await longRun());
    await inFlight(run.executionId, 'wait');
    await temporalCli(['workflow', 'terminate', '--workflow-id', run.temporalWorkflowId, '--reason', 'cleanup']);
    await eventually(
      async () => (await app.sql<{ status: string }>('select status from executions where id = $1', [run.executionId]))[0]!.status === 'failed',
      60_000,
      'the sweep',
    );
  });
});

describe('reset from the Temporal CLI', () => {
  const idChain = () =>
    create({
      nodes: [
        { id: 'a', type: 'transform', config: { value: '{{ execution.id }}' } },
        { id: 'pause', type: 'delay', config: { duration_ms: 100 } },
        { id: 'b', type: 'transform', config: { value: '{{ execution.id }}' } },
      ],
      edges: [
        { from: 'a', to: 'pause' },
        { from: 'pause', to: 'b' },
      ],
    });

  /** What an operator sees as ended: the record is final a moment before Temporal closes the run. */
  async function closed(run: { executionId: number; temporalWorkflowId: string }) {
    const original = await settled(run.executionId);
    expect(await untilClosed(app.stack.services.temporal, run.temporalWorkflowId, original.temporal.run_id, 60_000)).toBe(true);
    return original;
  }

  async function resetBy(args: string[], run: { executionId: number; temporalWorkflowId: string }, reason: string) {
    const before = await app.sql<{ id: string }>('select id from executions where replay_of = $1', [run.executionId]);
    expect(before).toEqual([]);
    await temporalCli(['workflow', 'reset', '--workflow-id', run.temporalWorkflowId, '--reason', reason, ...args]);
    const [row] = await eventually(async () => {
      const rows = await app.sql<{ id: string }>('select id from executions where replay_of = $1', [run.executionId]);
      return rows.length ? rows : undefined;
    });
    return settled(Number(row!.id));
  }

  it('to the first workflow task: a new execution linked to the old, with the reason, running as itself', async () => {
    const run = await start(await idChain());
    const original = await closed(run);
    expect(nodeOf(original, 'b').output).toBe(run.executionId);
    const reset = await resetBy(['--type', 'FirstWorkflowTask'], run, 'rerun after fixing the target');
    expect(reset).toMatchObject({ status: 'success', trigger: 'replay', replay_of: run.executionId });
    expect(reset.replay_reason).toContain('rerun after fixing the target');
    // Every node ran again, in the new execution, and knows it.
    expect(nodeOf(reset, 'a')).toMatchObject({ output: reset.id, reused: false });
    expect(nodeOf(reset, 'b')).toMatchObject({ output: reset.id, reused: false });
    expect(reset.temporal.run_id).not.toBe(original.temporal.run_id);
    const result = await app.stack.services.temporal.client.workflow.getHandle(run.temporalWorkflowId, reset.temporal.run_id).result();
    expect(result).toMatchObject({ executionId: reset.id, status: 'success' });
    // The original stays as it was.
    expect(await view(run.executionId)).toMatchObject({ status: 'success', output: run.executionId });
  });

  it('to the task that started a node: earlier nodes are carried over, later ones run as the new execution', async () => {
    const run = await start(await idChain());
    const original = await settled(run.executionId);
    // b started in the run's last workflow task: the product's reader waits for Temporal to close it.
    const point = await findResetPoint(app.stack.services.temporal, run.temporalWorkflowId, original.temporal.run_id, 'b');
    expect(point).toMatchObject({ completedNodes: ['a', 'pause'] });
    const reset = await resetBy(['--event-id', String(point!.eventId)], run, 'b had a bug');
    expect(reset).toMatchObject({ status: 'success', replay_of: run.executionId, output: reset.id });
    expect(nodeOf(reset, 'a')).toMatchObject({ reused: true, output: run.executionId });
    expect(nodeOf(reset, 'pause')).toMatchObject({ reused: true, status: 'success' });
    expect(nodeOf(reset, 'b')).toMatchObject({ reused: false, output: reset.id });
  });

  it('of a run still in flight: the old execution is closed as terminated, naming the new one', async () => {
    const id = await create({
      nodes: [
        { id: 'a', type: 'transform', config: { value: 1 } },
        { id: 'wait', type: 'delay', config: { duration_ms: 120_000 } },
      ],
      edges: [{ from: 'a', to: 'wait' }],
    });
    const run = await start(id);
    await inFlight(run.executionId, 'wait');
    await temporalCli(['workflow', 'reset', '--workflow-id', run.temporalWorkflowId, '--type', 'FirstWorkflowTask', '--reason', 'start over']);
    const [row] = await eventually(async () => {
      const rows = await app.sql<{ id: string }>('select id from executions where replay_of = $1', [run.executionId]);
      return rows.length ? rows : undefined;
    });
    const old = await settled(run.executionId);
    expect(old).toMatchObject({ status: 'failed', error: { code: 'terminated' } });
    expect(old.error.message).toContain(`execution ${row!.id}`);
    expect(old.timeline.filter((t: any) => t.status === 'running')).toEqual([]);
    await temporalCli(['workflow', 'terminate', '--workflow-id', run.temporalWorkflowId, '--reason', 'test done']);
  });
});

describe('replays through the API', () => {
  it('a second reset replay while the first runs is refused with 409 replay_in_progress naming it; the first is not cut off', async () => {
    // `a` is a timer that fired before the task that starts `pause`: a reset to `pause` keeps
    // exactly `a`, so the replay from `pause` is a reset.
    const id = await create({
      nodes: [
        { id: 'a', type: 'delay', config: { duration_ms: 1 } },
        { id: 'pause', type: 'delay', config: { duration_ms: 2_000 } },
        { id: 'b', type: 'transform', config: { value: 2 } },
      ],
      edges: [
        { from: 'a', to: 'pause' },
        { from: 'pause', to: 'b' },
      ],
    });
    const run = await start(id);
    await settled(run.executionId);
    const replay = () => app.admin.post(`${E}/${run.executionId}/replay`, { from_node_id: 'pause' });
    const [first, second] = await Promise.all([replay(), replay()]);
    const accepted = [first, second].filter((r) => r.status === 202);
    const refused = [first, second].filter((r) => r.status === 409);
    expect(accepted).toHaveLength(1);
    expect(refused).toHaveLength(1);
    const replayId = accepted[0]!.body.data.execution_id;
    expect(refused[0]!.body).toMatchObject({ error: 'replay_in_progress', data: { execution_id: replayId } });
    const done = await settled(replayId);
    expect(done).toMatchObject({ status: 'success', replay_of: run.executionId });
    expect(done.replay_reason).toContain(`replay of execution ${run.executionId} from node pause`);
    // Once it finished, the run may be replayed again.
    const third = await replay();
    expect(third.status, third.text).toBe(202);
    expect((await settled(third.body.data.execution_id)).status).toBe('success');
  });

  it('from the node after a delay: the delay is carried over, not waited again', async () => {
    const id = await create({
      nodes: [
        { id: 'pause', type: 'delay', config: { duration_ms: 1_500 } },
        { id: 'b', type: 'transform', config: { value: 'b' } },
      ],
      edges: [{ from: 'pause', to: 'b' }],
    });
    const run = await start(id);
    await settled(run.executionId);
    const started = Date.now();
    const replay = await app.admin.post(`${E}/${run.executionId}/replay`, { from_node_id: 'b' });
    const done = await settled(replay.body.data.execution_id);
    expect(done.status).toBe('success');
    expect(nodeOf(done, 'pause')).toMatchObject({ status: 'success', reused: true });
    expect(nodeOf(done, 'b')).toMatchObject({ status: 'success', reused: false });
    expect(Date.now() - started).toBeLessThan(1_500 + 10_000);
  });

  it('from the node after a child workflow: the child is carried over and not run again', async () => {
    const child = await create({ nodes: [{ id: 'double', type: 'transform', config: { value: '{{ trigger.n * 2 }}' } }] });
    const id = await create({
      nodes: [
        { id: 'sub', type: 'run_workflow', config: { workflow_id: child, payload: { n: 21 } } },
        { id: 'after', type: 'transform', config: { value: '{{ nodes.sub.output }}' } },
      ],
      edges: [{ from: 'sub', to: 'after' }],
    });
    const run = await start(id);
    const original = await settled(run.executionId);
    expect(nodeOf(original, 'after').output).toBe(42);
    const childRuns = async () => Number((await app.sql<{ n: string }>('select count(*) as n from executions where workflow_id = $1', [child]))[0]!.n);
    const before = await childRuns();
    const replay = await app.admin.post(`${E}/${run.executionId}/replay`, { from_node_id: 'after' });
    const done = await settled(replay.body.data.execution_id);
    expect(done.status).toBe('success');
    expect(nodeOf(done, 'sub')).toMatchObject({ status: 'success', reused: true });
    expect(nodeOf(done, 'after')).toMatchObject({ output: 42, reused: false });
    expect(await childRuns()).toBe(before);
  });

  it('from the node after one that timed out: the timed-out node is carried over as it ended', async () => {
    const id = await create({
      nodes: [
        {
          id: 'slow',
          type: 'http_request',
          connection_id: connectionId,
          config: { method: 'GET', path: '/hang' },
          timeout_ms: 1_000,
          retry: { max_attempts: 1 },
          on_error: 'continue',
        },
        { id: 'after', type: 'transform', config: { value: '{{ nodes.slow.error.code }}' } },
      ],
      edges: [{ from: 'slow', to: 'after' }],
    });
    const run = await start(id);
    const original = await settled(run.executionId);
    expect(original.status).toBe('partial');
    expect(nodeOf(original, 'slow').status).toBe('failed');
    const calls = target.count('/hang');
    const replay = await app.admin.post(`${E}/${run.executionId}/replay`, { from_node_id: 'after' });
    const done = await settled(replay.body.data.execution_id);
    expect(nodeOf(done, 'slow')).toMatchObject({ status: 'failed', reused: true });
    expect(nodeOf(done, 'after')).toMatchObject({ status: 'success', reused: false, output: nodeOf(original, 'after').output });
    expect(target.count('/hang')).toBe(calls);
  });

  it('a delay still waiting when the replayed node started: a reset would wait it again, so the replay is a new run reusing it', async () => {
    const id = await create({
      nodes: [
        { id: 'start', type: 'transform', config: { value: 0 } },
        { id: 'slowlane', type: 'delay', config: { duration_ms: 5_000 } },
        { id: 'fastlane', type: 'http_request', connection_id: connectionId, config: { method: 'GET', path: '/fast' } },
        { id: 'target', type: 'transform', config: { value: 'target' } },
      ],
      edges: [
        { from: 'start', to: 'slowlane' },
        { from: 'start', to: 'fastlane' },
        { from: 'fastlane', to: 'target' },
      ],
    });
    const run = await start(id);
    await settled(run.executionId);
    const replay = await app.admin.post(`${E}/${run.executionId}/replay`, { from_node_id: 'target' });
    // The timer was pending at the point `target` started: a reset there would run it again.
    expect(replay.body.data.mode).toBe('rerun');
    const done = await settled(replay.body.data.execution_id);
    expect(done.status).toBe('success');
    expect(nodeOf(done, 'start')).toMatchObject({ reused: true });
    expect(nodeOf(done, 'fastlane')).toMatchObject({ reused: true });
    expect(nodeOf(done, 'slowlane')).toMatchObject({ status: 'success', reused: true });
    expect(nodeOf(done, 'target')).toMatchObject({ reused: false });
  });

  it('from a node that started in the last workflow task, while Temporal is still completing it: waits for the run to close, then resets to it', async () => {
    // The run goes to a second worker (its own task queue) that reaches Temporal through a proxy
    // the test holds: when `hold` has finished, one workflow task starts and runs `b` and `check`
    // (local activities), skips `never` and ends with finishExecution; the worker's answer then
    // waits in the proxy, as on a busy Temporal server: the record says `success`, and Temporal
    // has not written the task (nor b's start in it) until the proxy passes it on.
    const [host, port] = inject('temporalAddress').split(':') as [string, string];
    const proxy = await startTcpProxy({ host, port: Number(port) });
    const held = await startTestApp({
      worker: true,
      databaseUrl: app.databaseUrl,
      env: { TEMPORAL_ADDRESS: proxy.address, SVC_ENCRYPTION_KEY: app.config.SVC_ENCRYPTION_KEY!, SVC_INSTANCE_ID: app.config.SVC_INSTANCE_ID },
    });
    let entry: Awaited<ReturnType<typeof lockedEntry>> | undefined;
    try {
      const hold = await heldCall('held');
      const id = await create({
        nodes: [
          hold.node,
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
      const started = await held.admin.post(`${W}/${id}/run`, { payload: {} });
      expect(started.status, started.text).toBe(202);
      const run = { executionId: started.body.data.execution_id as number };
      const workflowId = app.stack.services.temporal.executionWorkflowId(run.executionId);
      await hold.asked;
      // The worker is stopped in the last task (b's entry is locked) before the proxy holds its answers.
      entry = await lockedEntry(run.executionId, { id: 'b', type: 'transform' });
      await hold.answer();
      await entry.workerWaits();
      proxy.set('hold');
      await entry.release();

      const original = await settled(run.executionId);
      expect(original.status).toBe('success');
      expect(nodeOf(original, 'never')).toMatchObject({ status: 'skipped' });
      const temporal = app.stack.services.temporal;
      const handle = temporal.client.workflow.getHandle(workflowId, original.temporal.run_id);
      expect((await handle.describe()).status.name).toBe('RUNNING');

      // The API's replay waits for the run to close rather than answer that b never ran.
      const replay = app.admin.post(`${E}/${run.executionId}/replay`, { from_node_id: 'b' });
      // The reader itself: not closed within its wait, so it cannot say where b started.
      await expect(findResetPoint(temporal, workflowId, original.temporal.run_id, 'b', { closeWaitMs: 500 })).rejects.toBeInstanceOf(RunStillOpen);
      proxy.set('pass');

      const accepted = await replay;
      expect(accepted.status, accepted.text).toBe(202);
      const done = await settled(accepted.body.data.execution_id);
      expect(done).toMatchObject({ status: 'success', replay_of: run.executionId });
      expect(nodeOf(done, 'hold')).toMatchObject({ status: 'success', reused: true });
      expect(nodeOf(done, 'b')).toMatchObject({ reused: false, output: done.id });
      expect(nodeOf(done, 'never')).toMatchObject({ status: 'skipped' });
      // The original run closed as it ended, not terminated by the reset.
      expect((await handle.describe()).status.name).toBe('COMPLETED');
    } finally {
      proxy.set('pass');
      await entry?.release();
      await held.close();
      await proxy.close();
    }
  });
});

describe('the record of a run that ended', () => {
  it('says the run ended only together with the nodes it skipped', async () => {
    // A row this test holds in a transaction stalls the write of `never`'s skipped entry, as a
    // busy database would: the record must not say the run ended in the meantime.
    const hold = await heldCall('skip');
    const id = await create({
      nodes: [hold.node, { id: 'check', type: 'condition', config: { expression: false } }, { id: 'never', type: 'transform', config: { value: 'never' } }],
      edges: [
        { from: 'hold', to: 'check' },
        { from: 'check', to: 'never', branch: 'true' },
      ],
    });
    const run = await start(id);
    await hold.asked;
    const entry = await lockedEntry(run.executionId, { id: 'never', type: 'transform' });
    try {
      await hold.answer();
      await entry.workerWaits();
      expect((await view(run.executionId)).status).toBe('running');
    } finally {
      await entry.release();
    }
    const done = await settled(run.executionId);
    expect(done.status).toBe('success');
    expect(nodeOf(done, 'never')).toMatchObject({ status: 'skipped' });
  });
});
