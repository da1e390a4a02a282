import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import type { RunGraphInput } from '../workflows/defs.js';
import { startWorker, type RunningWorker } from '../src/temporal/worker.js';
import { inject } from 'vitest';
import { startTestApp, type TestApp } from './helpers/app.js';
import { eventually } from './helpers/http-target.js';

/**
 * Retry-safe starts: a client that retries run, replay or the webhook trigger with the same
 * Idempotency-Key gets the first call's execution and no second run, also when the first
 * answer was lost or Temporal never confirmed the first start.
 */
let app: TestApp;
let worker: RunningWorker | undefined;
const W = '/api/workflow/v1/workflows';
const E = '/api/workflow/v1/executions';

beforeAll(async () => {
  // The worker is started by hand: one test needs runs Temporal accepted but nobody ran yet.
  app = await startTestApp();
  worker = await startWorker(app.stack.services, inject('temporalAddress'), { bundlePath: inject('workflowBundle') });
});
afterAll(async () => {
  await worker?.shutdown();
  await app?.close();
});

async function create(def: Record<string, unknown> = {}) {
  const res = await app.admin.post(W, {
    title: `idem ${Math.random()}`,
    trigger: { type: 'manual' },
    nodes: [{ id: 'a', type: 'transform', config: { value: '{{ trigger.n }}' } }],
    edges: [],
    ...def,
  });
  expect(res.status, res.text).toBe(201);
  return res.body.data as { id: number; webhook?: { url: string; secret: string }; slug: string };
}

/** a -> b, for replays from `b`. */
const TWO_NODES = {
  nodes: [
    { id: 'a', type: 'transform', config: { value: 1 } },
    { id: 'b', type: 'transform', config: { value: '{{ nodes.a + 1 }}' } },
  ],
  edges: [{ from: 'a', to: 'b' }],
};
const runsOf = async (workflowId: number) =>
  Number((await app.sql<{ n: string }>('select count(*) as n from executions where workflow_id = $1', [workflowId]))[0]!.n);
const run = (workflowId: number, payload: unknown, key?: string) =>
  app.admin.request('POST', `${W}/${workflowId}/run`, { body: { payload }, ...(key ? { headers: { 'Idempotency-Key': key } } : {}) });
const finished = (executionId: number) =>
  eventually(async () => {
    const v = await app.admin.get(`${E}/${executionId}`);
    return v.body.data.status !== 'running' ? v.body.data : undefined;
  });

/** Temporal runs of one workflow id (a second start would be a second run). */
async function temporalRuns(temporalWorkflowId: string) {
  const runs = [];
  for await (const r of app.stack.services.temporal.client.workflow.list({ query: `WorkflowId = '${temporalWorkflowId}'` })) runs.push(r);
  return runs;
}

describe('Idempotency-Key on run', () => {
  it('a retried call returns the first execution and starts nothing new', async () => {
    const wf = await create();
    const first = await run(wf.id, { n: 1 }, 'order-1001');
    expect(first.status, first.text).toBe(202);
    expect(first.headers.get('idempotent-replayed')).toBeNull();
    const again = await run(wf.id, { n: 1 }, 'order-1001');
    expect(again.status).toBe(202);
    expect(again.body.data.execution_id).toBe(first.body.data.execution_id);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(await runsOf(wf.id)).toBe(1);
    expect((await finished(first.body.data.execution_id)).status).toBe('success');
    // After the run finished, too.
    expect((await run(wf.id, { n: 1 }, 'order-1001')).body.data.execution_id).toBe(first.body.data.execution_id);
    // Without a key, or with another one, a call is a new run.
    expect((await run(wf.id, { n: 1 }, 'order-1002')).body.data.execution_id).not.toBe(first.body.data.execution_id);
    expect((await run(wf.id, { n: 1 })).body.data.execution_id).not.toBe(first.body.data.execution_id);
    expect(await runsOf(wf.id)).toBe(3);
  });

  it('simultaneous retries with one key make one run', async () => {
    const wf = await create();
    const answers = await Promise.all(Array.from({ length: 8 }, () => run(wf.id, { n: 2 }, 'burst')));
    expect(answers.map((a) => a.status)).toEqual(Array(8).fill(202));
    expect(new Set(answers.map((a) => a.body.data.execution_id)).size).toBe(1);
    expect(await runsOf(wf.id)).toBe(1);
  });

  it('a key is per workflow; reused for another request it is refused with 422', async () => {
    const [a, b] = [await create(), await create()];
    const onA = await run(a.id, { n: 3 }, 'shared-key');
    const onB = await run(b.id, { n: 3 }, 'shared-key');
    expect(onB.status).toBe(202);
    expect(onB.body.data.execution_id).not.toBe(onA.body.data.execution_id);
    const other = await run(a.id, { n: 4 }, 'shared-key');
    expect(other.status).toBe(422);
    expect(other.body).toMatchObject({ status: 'fail', error: 'idempotency_key_reused', data: { execution_id: onA.body.data.execution_id } });
  });

  it('is remembered for SVC_IDEMPOTENCY_TTL_HOURS, then a call with the key is new', async () => {
    const wf = await create();
    const first = await run(wf.id, { n: 5 }, 'old-key');
    await app.sql(`update idempotency_keys set created_at = now() - interval '25 hours' where workflow_id = $1`, [wf.id]);
    const later = await run(wf.id, { n: 5 }, 'old-key');
    expect(later.status).toBe(202);
    expect(later.body.data.execution_id).not.toBe(first.body.data.execution_id);
  });

  it('refuses a malformed key with 400 naming the header', async () => {
    const wf = await create();
    for (const key of ['x'.repeat(256), 'with space', 'naïve']) {
      const res = await app.admin.request('POST', `${W}/${wf.id}/run`, { body: {}, headers: { 'Idempotency-Key': key } });
      expect(res.status, key).toBe(400);
      expect(res.body.data.errors[0]).toMatchObject({ field: 'idempotency-key', in: 'header' });
    }
    expect(await runsOf(wf.id)).toBe(0);
  });

  it('a start Temporal accepted but the service could not confirm is not started twice', async () => {
    const wf = await create();
    // The first attempt reached Temporal, but its answer was lost: the record says start_failed.
    await worker!.shutdown();
    worker = undefined;
    const first = await run(wf.id, { n: 6 }, 'lost-answer');
    const executionId = first.body.data.execution_id as number;
    await app.sql(`update executions set status = 'failed', finished_at = now(), error = '{"code":"start_failed","message":"lost"}' where id = $1`, [
      executionId,
    ]);
    const retried = await run(wf.id, { n: 6 }, 'lost-answer');
    expect(retried.status).toBe(202);
    expect(retried.body.data.execution_id).toBe(executionId);
    expect((await app.sql<{ status: string }>('select status from executions where id = $1', [executionId]))[0]!.status).toBe('running');
    worker = await startWorker(app.stack.services, inject('temporalAddress'), { bundlePath: inject('workflowBundle') });
    expect(await finished(executionId)).toMatchObject({ status: 'success', output: 6 });
    expect(await temporalRuns(app.stack.services.temporal.executionWorkflowId(executionId))).toHaveLength(1);
  });

  it('a run that begins while the service holds its record (marking the start) waits and claims that record', async () => {
    const wf = await create();
    await worker!.shutdown();
    worker = undefined;
    const first = await run(wf.id, { n: 8 }, 'held-record');
    const executionId = first.body.data.execution_id as number;
    // The API's update of an unconfirmed start holds the row while the run's first activity looks
    // for it; that activity must wait for the lock, not pass the row by and make a record of its own.
    const holder = new pg.Client({ connectionString: app.databaseUrl });
    await holder.connect();
    try {
      await holder.query('begin');
      await holder.query('select id from executions where id = $1 for update', [executionId]);
      const holderPid = (await holder.query<{ pid: number }>('select pg_backend_pid() as pid')).rows[0]!.pid;
      worker = await startWorker(app.stack.services, inject('temporalAddress'), { bundlePath: inject('workflowBundle') });
      // Let go only once the run's first activity is waiting for the row (its claim is blocked by us).
      await eventually(
        async () =>
          (await app.sql<{ n: number }>('select count(*)::int as n from pg_stat_activity where $1 = any(pg_blocking_pids(pid))', [holderPid]))[0]!.n > 0,
        60_000,
        'the run to wait for the held record',
      );
      await holder.query('commit');
    } finally {
      await holder.end();
    }
    expect(await finished(executionId)).toMatchObject({ status: 'success', output: 8 });
    expect(await runsOf(wf.id)).toBe(1);
  });

  it('a start Temporal never received is sent again by the retry, under the same workflow id', async () => {
    const wf = await create();
    // As if the first call wrote its record and key, then Temporal refused the start.
    const [row] = await app.sql<{ id: string; temporal_workflow_id: string }>(
      `insert into executions (workflow_id, workflow_version, status, trigger, trigger_payload, temporal_workflow_id, finished_at, error)
       values ($1, 1, 'failed', 'manual', '{"n":7}', 'pending', now(), '{"code":"start_failed","message":"Temporal is unavailable"}') returning id, temporal_workflow_id`,
      [wf.id],
    );
    const temporalWorkflowId = app.stack.services.temporal.executionWorkflowId(Number(row!.id));
    await app.sql('update executions set temporal_workflow_id = $1 where id = $2', [temporalWorkflowId, row!.id]);
    const input: RunGraphInput = { workflowId: wf.id, version: 1, payload: { n: 7 }, trigger: 'manual' };
    const { idempotencyOf } = await import('../src/executions/idempotency.js');
    const { fingerprint } = idempotencyOf({ 'idempotency-key': 'never-sent' }, 'run', { payload: { n: 7 } })!;
    await app.sql(`insert into idempotency_keys (workflow_id, key, fingerprint, execution_id, request) values ($1, 'never-sent', $2, $3, $4)`, [
      wf.id,
      fingerprint,
      row!.id,
      JSON.stringify({ kind: 'start', input }),
    ]);
    const retried = await run(wf.id, { n: 7 }, 'never-sent');
    expect(retried.status, retried.text).toBe(202);
    expect(retried.body.data.execution_id).toBe(Number(row!.id));
    expect(await finished(Number(row!.id))).toMatchObject({ status: 'success', output: 7, error: null });
    expect(await runsOf(wf.id)).toBe(1);
  });

  it('a start whose API process died before sending it is sent by the retry (on any API), once', async () => {
    const wf = await create();
    // As if the first call wrote its record and key, then its API process was killed: the record
    // is running, no run has claimed it, Temporal never heard of it.
    const [row] = await app.sql<{ id: string }>(
      `insert into executions (workflow_id, workflow_version, status, trigger, trigger_payload, temporal_workflow_id)
       values ($1, 1, 'running', 'manual', '{"n":9}', 'pending') returning id`,
      [wf.id],
    );
    const executionId = Number(row!.id);
    const temporalWorkflowId = app.stack.services.temporal.executionWorkflowId(executionId);
    await app.sql('update executions set temporal_workflow_id = $1 where id = $2', [temporalWorkflowId, executionId]);
    const input: RunGraphInput = { workflowId: wf.id, version: 1, payload: { n: 9 }, trigger: 'manual' };
    const { idempotencyOf } = await import('../src/executions/idempotency.js');
    const { fingerprint } = idempotencyOf({ 'idempotency-key': 'api-died' }, 'run', { payload: { n: 9 } })!;
    await app.sql(`insert into idempotency_keys (workflow_id, key, fingerprint, execution_id, request) values ($1, 'api-died', $2, $3, $4)`, [
      wf.id,
      fingerprint,
      executionId,
      JSON.stringify({ kind: 'start', input }),
    ]);
    const retried = await run(wf.id, { n: 9 }, 'api-died');
    expect(retried.status, retried.text).toBe(202);
    expect(retried.body.data.execution_id).toBe(executionId);
    expect(retried.headers.get('idempotent-replayed')).toBe('true');
    expect(await finished(executionId)).toMatchObject({ status: 'success', output: 9, error: null });
    // Retried again once the run exists: answered, nothing started.
    expect((await run(wf.id, { n: 9 }, 'api-died')).body.data.execution_id).toBe(executionId);
    expect(await temporalRuns(temporalWorkflowId)).toHaveLength(1);
    expect(await runsOf(wf.id)).toBe(1);
  });
});

describe('Idempotency-Key on the webhook trigger and on replay', () => {
  it('webhook: a retried delivery is one run', async () => {
    const wf = await create({ trigger: { type: 'webhook', config: {} }, status: 'active' });
    const call = () =>
      app.anonymous.request('POST', `/api/workflow/v1/hooks/${wf.slug}`, {
        body: { n: 8 },
        headers: { 'X-Webhook-Secret': wf.webhook!.secret, 'Idempotency-Key': 'delivery-77' },
      });
    const first = await call();
    expect(first.status, first.text).toBe(202);
    const second = await call();
    expect(second.body.data.execution_id).toBe(first.body.data.execution_id);
    expect(second.headers.get('idempotent-replayed')).toBe('true');
    expect(await runsOf(wf.id)).toBe(1);
  });

  it('replay: a retried replay (fresh run or reset) is one replay', async () => {
    const wf = await create(TWO_NODES);
    const original = (await run(wf.id, {})).body.data.execution_id as number;
    await finished(original);
    for (const body of [{ with_payload: { x: 1 } }, { from_node_id: 'b' }]) {
      const replay = () => app.admin.request('POST', `${E}/${original}/replay`, { body, headers: { 'Idempotency-Key': `replay-${JSON.stringify(body)}` } });
      const first = await replay();
      expect(first.status, first.text).toBe(202);
      await finished(first.body.data.execution_id);
      const again = await replay();
      expect(again.status, again.text).toBe(202);
      expect(again.body.data.execution_id).toBe(first.body.data.execution_id);
      expect(again.headers.get('idempotent-replayed')).toBe('true');
    }
    expect(await runsOf(wf.id)).toBe(3);
  });
});

describe('records no run will ever claim are closed, never left running', () => {
  const age = (id: number) => app.sql(`update executions set started_at = now() - interval '2 minutes' where id = $1`, [id]);

  it('a start whose Temporal run was terminated before any worker ran it ends failed/terminated', async () => {
    const wf = await create();
    await worker!.shutdown();
    worker = undefined;
    try {
      const executionId = (await run(wf.id, { n: 9 })).body.data.execution_id as number;
      await app.stack.services.temporal.client.workflow.getHandle(app.stack.services.temporal.executionWorkflowId(executionId)).terminate('no worker came');
      await age(executionId);
      const view = await app.admin.get(`${E}/${executionId}`);
      expect(view.body.data).toMatchObject({ status: 'failed', error: { code: 'terminated' } });
    } finally {
      worker = await startWorker(app.stack.services, inject('temporalAddress'), { bundlePath: inject('workflowBundle') });
    }
  });

  it('a reset replay whose reset was never sent is marked reset_failed, and blocks no later replay', async () => {
    const wf = await create(TWO_NODES);
    const original = (await run(wf.id, {})).body.data.execution_id as number;
    await finished(original);
    const [{ temporal_workflow_id: temporalWorkflowId }] = (await app.sql<{ temporal_workflow_id: string }>(
      'select temporal_workflow_id from executions where id = $1',
      [original],
    )) as [{ temporal_workflow_id: string }];
    // As if the API wrote the replay's record and stopped before asking Temporal for the reset.
    const [{ id }] = (await app.sql<{ id: string }>(
      `insert into executions (workflow_id, workflow_version, status, trigger, trigger_payload, replay_of, replay_reason, temporal_workflow_id, started_at)
       values ($1, 1, 'running', 'replay', '{}', $2, 'replay of execution ${original} from node b', $3, now() - interval '2 minutes') returning id`,
      [wf.id, original, temporalWorkflowId],
    )) as [{ id: string }];
    const view = await app.admin.get(`${E}/${id}`);
    expect(view.body.data).toMatchObject({ status: 'failed', error: { code: 'reset_failed' } });
    const again = await app.admin.post(`${E}/${original}/replay`, { from_node_id: 'b' });
    expect(again.status, again.text).toBe(202);
    expect(await finished(again.body.data.execution_id)).toMatchObject({ status: 'success', replay_of: original });
  });

  it('a reset sent again with its Idempotency-Key waits its turn like any reset: 409 while another replay of the run runs', async () => {
    // `a` is a timer: it has fired (a server event) before the task that starts `wait`, so a
    // reset to `wait` keeps exactly `a`, and the replay from `wait` is a reset.
    const wf = await create({
      nodes: [
        { id: 'a', type: 'delay', config: { duration_ms: 1 } },
        { id: 'wait', type: 'delay', config: { duration_ms: 4000 } },
      ],
      edges: [{ from: 'a', to: 'wait' }],
    });
    const original = (await run(wf.id, {})).body.data.execution_id as number;
    await finished(original);
    // The first reset replay with key K: its record and key are written, Temporal refused the reset.
    const first = await app.admin.request('POST', `${E}/${original}/replay`, { body: { from_node_id: 'wait' }, headers: { 'Idempotency-Key': 'reset-k' } });
    expect(first.status, first.text).toBe(202);
    expect(first.body.data.mode).toBe('reset');
    await finished(first.body.data.execution_id);
    await app.sql(`update executions set status = 'failed', temporal_run_id = null, error = '{"code":"reset_failed","message":"refused"}' where id = $1`, [
      first.body.data.execution_id,
    ]);
    // Another reset replay of the run is running now.
    const second = await app.admin.post(`${E}/${original}/replay`, { from_node_id: 'wait' });
    expect(second.status, second.text).toBe(202);
    const retried = await app.admin.request('POST', `${E}/${original}/replay`, { body: { from_node_id: 'wait' }, headers: { 'Idempotency-Key': 'reset-k' } });
    expect(retried.status, retried.text).toBe(409);
    expect(retried.body).toMatchObject({ error: 'replay_in_progress', data: { execution_id: second.body.data.execution_id } });
    expect(await finished(second.body.data.execution_id)).toMatchObject({ status: 'success' });
  });

  it('a run that ended with a fail node coded start_failed is not reopened as an unconfirmed start', async () => {
    const wf = await create({ nodes: [{ id: 'f', type: 'fail', config: { message: 'stop', code: 'start_failed' } }] });
    const executionId = (await run(wf.id, {})).body.data.execution_id as number;
    expect(await finished(executionId)).toMatchObject({ status: 'failed' });
    await app.stack.services.executionMirror.markConfirmed(executionId);
    expect((await app.admin.get(`${E}/${executionId}`)).body.data.status).toBe('failed');
  });

  it('replaying an execution of an archived workflow is refused with 409 workflow_archived', async () => {
    const wf = await create();
    const executionId = (await run(wf.id, { n: 1 })).body.data.execution_id as number;
    await finished(executionId);
    expect((await app.admin.request('DELETE', `${W}/${wf.id}`)).status).toBe(200);
    for (const body of [{}, { from_node_id: 'a' }, { with_payload: { n: 2 } }]) {
      const res = await app.admin.post(`${E}/${executionId}/replay`, body);
      expect(res.status, JSON.stringify(body)).toBe(409);
      expect(res.body.error).toBe('workflow_archived');
    }
  });
});
