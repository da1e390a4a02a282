import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp, type TestUser } from './helpers/app.js';
import { eventually } from './helpers/http-target.js';

/**
 * wait_for_event, POST /events, emit_event and cancelling a run from the API, against the real
 * servers: an event resumes the run waiting for its name and key (and only runs the sender may
 * see), one sent a moment before the wait began is taken from the lookback window, an event and
 * the timeout at once give one outcome, and a cancelled run stops waiting.
 */

let app: TestApp;
let editor: TestUser;
let other: TestUser;
const W = '/api/workflow/v1/workflows';
const E = '/api/workflow/v1/executions';
const EVENTS = '/api/workflow/v1/events';

beforeAll(async () => {
  app = await startTestApp({ worker: true });
  editor = await app.createUser('editor');
  other = await app.createUser('editor');
});
afterAll(async () => {
  await app?.close();
});

let n = 0;
/** A fresh event name per test, so no test's event reaches another's run. */
const eventName = (what: string) => `${what}.${++n}.${Math.random().toString(36).slice(2, 8)}`;

/** wait_for_event on the order id of the trigger, then `after` on received, `gave_up` on timeout. */
async function waitingWorkflow(client = app.admin, wait: Record<string, unknown> = {}, shared: number[] = []) {
  const res = await client.post(W, {
    title: `wait ${Math.random()}`,
    trigger: { type: 'manual' },
    ...(shared.length ? { shared_with: shared } : {}),
    nodes: [
      { id: 'wait', type: 'wait_for_event', config: { event: 'payment.received', key: '{{ trigger.order_id }}', timeout_ms: 120_000, ...wait } },
      { id: 'after', type: 'transform', config: { value: { paid: '{{ nodes.wait.event.data.amount }}' } } },
      { id: 'gave_up', type: 'transform', config: { value: 'cancel the order' } },
    ],
    edges: [
      { from: 'wait', to: 'after', branch: 'received' },
      { from: 'wait', to: 'gave_up', branch: 'timeout' },
    ],
  });
  expect(res.status, res.text).toBe(201);
  return res.body.data.id as number;
}

async function start(workflowId: number, payload: unknown, client = app.admin) {
  const res = await client.post(`${W}/${workflowId}/run`, { payload });
  expect(res.status, res.text).toBe(202);
  return res.body.data.execution_id as number;
}

const waitRow = (executionId: number) =>
  eventually(
    async () => {
      const [row] = await app.sql<{ id: string; status: string }>(`select id, status from workflow_event_waits where execution_id = $1`, [executionId]);
      return row;
    },
    60_000,
    `the wait of execution ${executionId}`,
  );

const waiting = async (executionId: number) => {
  const row = await waitRow(executionId);
  expect(row.status).toBe('waiting');
  return row;
};

/** A run of a fresh waiting workflow (an event name of its own), started on `key` and waiting: the name, the workflow and the execution. */
async function runWaiting(what: string, key: string, shared: number[] = []) {
  const name = eventName(what);
  const id = await waitingWorkflow(app.admin, { event: name }, shared);
  const run = await start(id, { order_id: key });
  await waiting(run);
  return { name, id, run };
}

async function finished(executionId: number, client = app.admin) {
  return eventually(
    async () => {
      const v = (await client.get(`${E}/${executionId}`)).body.data;
      return v.status !== 'running' ? v : undefined;
    },
    90_000,
    `execution ${executionId} to finish`,
  );
}

const nodeOf = (view: { timeline: { node_id: string }[] }, id: string) => view.timeline.find((t) => t.node_id === id) as Record<string, any>;

function send(name: string, key: string, data: unknown = {}, client = app.admin) {
  return client.post(EVENTS, { name, key, data });
}

describe('saving a wait_for_event node', () => {
  it('checks the name, the key, the timeout and the branches its edges carry', async () => {
    const res = await app.admin.post(W, {
      title: 'bad wait',
      trigger: { type: 'manual' },
      nodes: [
        { id: 'w', type: 'wait_for_event', config: { event: 'has space', key: '', timeout_ms: 0, lookback_ms: 90_000_000 } },
        { id: 'x', type: 'transform', config: { value: 1 } },
      ],
      edges: [{ from: 'w', to: 'x', branch: 'approved' }],
    });
    expect(res.status).toBe(400);
    const fields = res.body.data.errors.map((e: { field: string }) => e.field);
    for (const f of ['nodes.0.config.event', 'nodes.0.config.key', 'nodes.0.config.timeout_ms', 'nodes.0.config.lookback_ms', 'edges.0.branch'])
      expect(fields).toContain(f);
  });
});

describe('an event resumes the run waiting for it', () => {
  it('received: the run goes on with the event as the node output, the timeout branch is skipped', async () => {
    const id = await waitingWorkflow(app.admin, { event: 'payment.received' });
    const run = await start(id, { order_id: 'order-1' });
    await waiting(run);
    const sent = await send('payment.received', 'order-1', { amount: 49.9 });
    expect(sent.status, sent.text).toBe(200);
    expect(sent.body.data.delivered).toEqual([run]);
    const done = await finished(run);
    expect(done.status).toBe('success');
    const wait = nodeOf(done, 'wait');
    expect(wait.status).toBe('success');
    expect(wait.output).toMatchObject({ branch: 'received', event: { name: 'payment.received', key: 'order-1', data: { amount: 49.9 } } });
    expect(Date.parse(wait.output.event.received_at)).toBeGreaterThanOrEqual(Date.parse(wait.output.event.sent_at));
    expect(nodeOf(done, 'after').output).toEqual({ paid: 49.9 });
    expect(nodeOf(done, 'gave_up').status).toBe('skipped');
    // The event reached its run once: sending it again resumes nothing.
    expect((await send('payment.received', 'order-1', { amount: 1 })).body.data.delivered).toEqual([]);
  });

  it('timeout: the run takes the timeout branch and outputs timed_out', async () => {
    const name = eventName('never');
    const id = await waitingWorkflow(app.admin, { event: name, timeout_ms: 300 });
    const done = await finished(await start(id, { order_id: 'order-2' }));
    expect(done.status).toBe('success');
    expect(nodeOf(done, 'wait').output).toEqual({ timed_out: true, branch: 'timeout' });
    expect(nodeOf(done, 'gave_up').output).toBe('cancel the order');
    expect(nodeOf(done, 'after').status).toBe('skipped');
  });

  it('an event for another key, or of another name, resumes nothing', async () => {
    const name = eventName('keyed');
    const id = await waitingWorkflow(app.admin, { event: name });
    const run = await start(id, { order_id: 'A-1' });
    const wait = await waiting(run);
    expect((await send(name, 'A-2')).body.data.delivered).toEqual([]);
    expect((await send(`${name}.other`, 'A-1')).body.data.delivered).toEqual([]);
    expect((await waitRow(run)).status).toBe('waiting');
    expect((await send(name, 'A-1', { amount: 3 })).body.data.delivered).toEqual([run]);
    expect(nodeOf(await finished(run), 'after').output).toEqual({ paid: 3 });
    expect(wait.id).toBeTruthy();
  });

  it('every run waiting for the name and key resumes, and the answer lists each', async () => {
    const name = eventName('fanout');
    const id = await waitingWorkflow(app.admin, { event: name });
    const runs = [await start(id, { order_id: 'F' }), await start(id, { order_id: 'F' })];
    for (const run of runs) await waiting(run);
    const sent = await send(name, 'F', { amount: 7 });
    expect([...sent.body.data.delivered].sort()).toEqual([...runs].sort());
    for (const run of runs) expect((await finished(run)).status).toBe('success');
  });
});

describe('an event sent a moment before the wait begins', () => {
  it('is taken from the lookback window: it is never lost', async () => {
    const name = eventName('early');
    const id = await waitingWorkflow(app.admin, { event: name });
    expect((await send(name, 'order-early', { amount: 12 })).body.data.delivered).toEqual([]);
    const run = await start(id, { order_id: 'order-early' });
    const done = await finished(run);
    expect(nodeOf(done, 'wait').output).toMatchObject({ branch: 'received', event: { key: 'order-early', data: { amount: 12 } } });
    expect(nodeOf(done, 'after').output).toEqual({ paid: 12 });
  });

  it('is not taken by a wait with no lookback, nor twice by one run', async () => {
    const name = eventName('nolook');
    const none = await waitingWorkflow(app.admin, { event: name, lookback_ms: 0, timeout_ms: 500 });
    await send(name, 'k', { amount: 1 });
    expect(nodeOf(await finished(await start(none, { order_id: 'k' })), 'wait').output).toEqual({ timed_out: true, branch: 'timeout' });
    // Two waits in a row in one run: the first takes the kept event, the second waits for a new one.
    const twice = (
      await app.admin.post(W, {
        title: 'two waits',
        trigger: { type: 'manual' },
        nodes: [
          { id: 'first', type: 'wait_for_event', config: { event: name, key: 'twice', timeout_ms: 60_000 } },
          { id: 'second', type: 'wait_for_event', config: { event: name, key: 'twice', timeout_ms: 400 } },
        ],
        edges: [{ from: 'first', to: 'second', branch: 'received' }],
      })
    ).body.data.id;
    await send(name, 'twice', { amount: 2 });
    const done = await finished(await start(twice, {}));
    expect(nodeOf(done, 'first').output.branch).toBe('received');
    expect(nodeOf(done, 'second').output).toEqual({ timed_out: true, branch: 'timeout' });
  });
});

/** A connection of its own holding the wait's row lock: what arrives at the row queues behind it. */
async function holdWaitRow(waitId: string) {
  const client = new pg.Client({ connectionString: app.databaseUrl });
  await client.connect();
  await client.query('begin');
  const [row] = (await client.query<{ status: string }>('select status from workflow_event_waits where id = $1 for update', [waitId])).rows;
  return {
    pid: (await client.query<{ pid: number }>('select pg_backend_pid() as pid')).rows[0]!.pid,
    status: row!.status,
    release: async () => {
      await client.query('commit');
      await client.end();
    },
  };
}

/** The statements queued for a row lock whose text matches `pattern`, with what each waits behind. */
const queued = (pattern: string) =>
  app.sql<{ pid: number; behind: number[] }>(
    `select pid, pg_blocking_pids(pid) as behind from pg_stat_activity where datname = current_database() and cardinality(pg_blocking_pids(pid)) > 0 and query ilike $1`,
    [pattern],
  );
const queuedFor = (pattern: string) => eventually(async () => (await queued(pattern))[0], 60_000, `a statement like ${pattern} to queue for the row`);

const TIMEOUT_STEP = '%timed_out%';
const DELIVERY = '%for update of w%';

/**
 * Runs a wait whose timer and event meet at its row, the row held until both queue for it in the
 * order `first` says; answers what the sender was told and how the run ended. Under load the timer
 * may fire before the row is held (or before the event queues): the race is run again with a
 * longer timeout then.
 */
async function race(first: 'timeout' | 'event') {
  for (let timeoutMs = 2000; ; timeoutMs *= 2) {
    const name = eventName(`race-${first}`);
    const id = await waitingWorkflow(app.admin, { event: name, timeout_ms: timeoutMs });
    const run = await start(id, { order_id: 'race' });
    const wait = await waitRow(run);
    const held = await holdWaitRow(wait.id);
    if (held.status !== 'waiting') {
      await held.release();
      if (timeoutMs > 30_000) throw new Error('the timer kept firing before the row could be held');
      continue;
    }
    let sending;
    if (first === 'timeout') {
      await queuedFor(TIMEOUT_STEP);
      sending = send(name, 'race', { amount: 5 });
      await queuedFor(DELIVERY);
    } else {
      sending = send(name, 'race', { amount: 6 });
      const delivery = await queuedFor(DELIVERY);
      const inOrder = delivery.behind.length === 1 && delivery.behind[0] === held.pid;
      await queuedFor(TIMEOUT_STEP);
      if (!inOrder && timeoutMs <= 30_000) {
        await held.release();
        await sending;
        await finished(run);
        continue;
      }
    }
    await held.release();
    return { run, sent: await sending, done: await finished(run) };
  }
}

describe('an event and the timeout at the same moment', () => {
  it('give one outcome: the timeout stored first wins, and the sender is told the run was not resumed', async () => {
    const { sent, done } = await race('timeout');
    expect(sent.body.data.delivered).toEqual([]);
    expect(nodeOf(done, 'wait').output).toEqual({ timed_out: true, branch: 'timeout' });
    expect(nodeOf(done, 'gave_up').status).toBe('success');
    expect(nodeOf(done, 'after').status).toBe('skipped');
  });

  it('give one outcome: the delivery stored first wins over the timer that fired meanwhile', async () => {
    const { run, sent, done } = await race('event');
    expect(sent.body.data.delivered).toEqual([run]);
    expect(nodeOf(done, 'wait').output).toMatchObject({ branch: 'received', event: { data: { amount: 6 } } });
    expect(nodeOf(done, 'after').output).toEqual({ paid: 6 });
    expect(nodeOf(done, 'gave_up').status).toBe('skipped');
  });
});

describe('who an event reaches', () => {
  it("an editor's event never resumes another owner's run; the owner's does", async () => {
    const { name, id, run } = await runWaiting('owned', 'mine');
    const foreign = await send(name, 'mine', { amount: 666 }, editor.client);
    expect(foreign.status).toBe(200);
    expect(foreign.body.data.delivered).toEqual([]);
    expect((await waitRow(run)).status).toBe('waiting');
    // Nor does the kept event reach a wait of that owner's that begins afterwards.
    const later = await start(id, { order_id: 'mine' });
    await waiting(later);
    expect((await send(name, 'mine', { amount: 1 })).body.data.delivered.sort()).toEqual([run, later].sort());
    expect(nodeOf(await finished(run), 'after').output).toEqual({ paid: 1 });
  });

  it('a workflow shared with the sender is reachable by them', async () => {
    const { name, run } = await runWaiting('shared', 's', [editor.id]);
    expect((await send(name, 's', { amount: 2 }, other.client)).body.data.delivered).toEqual([]);
    expect((await send(name, 's', { amount: 2 }, editor.client)).body.data.delivered).toEqual([run]);
  });

  it('needs svc_manage_workflows, and refuses bad names, keys and data with 400 naming the field', async () => {
    const subscriber = await app.createUser('subscriber');
    expect((await subscriber.client.post(EVENTS, { name: 'x', key: 'y' })).status).toBe(403);
    const bad = async (body: unknown) => {
      const res = await app.admin.post(EVENTS, body);
      expect(res.status, res.text).toBe(400);
      return res.body.data.errors.map((e: { field: string }) => e.field);
    };
    expect(await bad({ name: '', key: 'k' })).toContain('name');
    expect(await bad({ name: 'a b', key: 'k' })).toContain('name');
    expect(await bad({ name: 'x'.repeat(101), key: 'k' })).toContain('name');
    expect(await bad({ name: 'ok', key: '' })).toContain('key');
    expect(await bad({ name: 'ok', key: 'k'.repeat(201) })).toContain('key');
    expect(await bad({ name: 'ok', key: 'line\nbreak' })).toContain('key');
    expect(await bad({ name: 'ok', key: 'k', data: { blob: 'x'.repeat(70_000) } })).toContain('data');
    expect(await bad({ name: 'ok', key: 'k', extra: 1 })).toContain('extra');
  });
});

describe('emit_event', () => {
  it('a run sends an event that resumes another run, as the people it acts for', async () => {
    const { name, run } = await runWaiting('emitted', 'o-77');
    const sender = (
      await app.admin.post(W, {
        title: 'payment webhook',
        trigger: { type: 'manual' },
        nodes: [{ id: 'tell', type: 'emit_event', config: { event: name, key: '{{ trigger.order }}', data: { amount: '{{ trigger.amount }}' } } }],
      })
    ).body.data.id;
    const res = await app.admin.post(`${W}/${sender}/run?wait=true`, { payload: { order: 'o-77', amount: 19 } });
    expect(res.status, res.text).toBe(200);
    expect(res.body.data.output).toMatchObject({ delivered: [run] });
    expect(nodeOf(await finished(run), 'after').output).toEqual({ paid: 19 });
  });

  it("an editor's workflow cannot resume another owner's run with it", async () => {
    const { name, run } = await runWaiting('emitted-foreign', 'f-1');
    const sender = (
      await editor.client.post(W, {
        title: 'foreign emitter',
        trigger: { type: 'manual' },
        nodes: [{ id: 'tell', type: 'emit_event', config: { event: name, key: 'f-1' } }],
      })
    ).body.data.id;
    const res = await editor.client.post(`${W}/${sender}/run?wait=true`, { payload: {} });
    expect(res.body.data.output).toMatchObject({ delivered: [] });
    expect((await waitRow(run)).status).toBe('waiting');
  });

  it('refuses data over the limit without retrying', async () => {
    const id = (
      await app.admin.post(W, {
        title: 'big emitter',
        trigger: { type: 'manual' },
        nodes: [{ id: 'tell', type: 'emit_event', config: { event: 'big', key: 'k', data: '{{ trigger.blob }}' } }],
      })
    ).body.data.id;
    const done = await finished(await start(id, { blob: 'x'.repeat(70_000) }));
    expect(done.status).toBe('failed');
    expect(nodeOf(done, 'tell')).toMatchObject({ status: 'failed', attempts: 1, error: { code: 'validation_failed' } });
  });
});

describe('cancelling a run from the API', () => {
  it('stops a waiting run: it ends cancelled, its wait takes no event, and a second cancel answers the same', async () => {
    const { name, run } = await runWaiting('cancel', 'c-1');
    const res = await app.admin.post(`${E}/${run}/cancel`);
    expect(res.status, res.text).toBe(200);
    expect(res.body.data).toEqual({ execution_id: run, status: 'cancelled' });
    const view = (await app.admin.get(`${E}/${run}`)).body.data;
    expect(view.status).toBe('cancelled');
    expect(nodeOf(view, 'wait')).toMatchObject({ status: 'cancelled', error: { code: 'cancelled' } });
    expect(nodeOf(view, 'after').status).toBe('skipped');
    expect((await waitRow(run)).status).toBe('cancelled');
    expect((await send(name, 'c-1')).body.data.delivered).toEqual([]);
    const again = await app.admin.post(`${E}/${run}/cancel`);
    expect(again.status).toBe(200);
    expect(again.body.data.status).toBe('cancelled');
  });

  it('refuses a finished run (409), a run the caller cannot see (404) and a caller without svc_manage_workflows (403)', async () => {
    const quick = (await app.admin.post(W, { title: 'quick', trigger: { type: 'manual' }, nodes: [{ id: 'a', type: 'transform', config: { value: 1 } }] })).body
      .data.id;
    const done = (await app.admin.post(`${W}/${quick}/run?wait=true`, { payload: {} })).body.data.execution_id;
    const finishedRun = await app.admin.post(`${E}/${done}/cancel`);
    expect(finishedRun.status).toBe(409);
    expect(finishedRun.body).toMatchObject({ error: 'execution_finished', data: { status: 'success' } });
    const name = eventName('cancel-rights');
    const run = await start(await waitingWorkflow(app.admin, { event: name }), { order_id: 'x' });
    await waiting(run);
    expect((await editor.client.post(`${E}/${run}/cancel`)).status).toBe(404);
    const subscriber = await app.createUser('subscriber');
    expect((await subscriber.client.post(`${E}/${run}/cancel`)).status).toBe(403);
    expect((await app.admin.post(`${E}/${run}/cancel`)).status).toBe(200);
  });

  it('a cancel sent to Temporal directly (as the Web UI does) closes the wait too', async () => {
    const name = eventName('ui-cancel');
    const run = await start(await waitingWorkflow(app.admin, { event: name }), { order_id: 'u' });
    await waiting(run);
    const view = (await app.admin.get(`${E}/${run}`)).body.data;
    await app.stack.services.temporal.client.workflow.getHandle(view.temporal.workflow_id).cancel();
    expect((await finished(run)).status).toBe('cancelled');
    expect((await waitRow(run)).status).toBe('cancelled');
  });
});

describe('replaying around a wait', () => {
  it('from a node after the wait reuses its outcome; from the wait itself it waits again', async () => {
    const { name, run } = await runWaiting('replay', 'r-1');
    await send(name, 'r-1', { amount: 10 });
    expect((await finished(run)).status).toBe('success');

    const after = await app.admin.post(`${E}/${run}/replay`, { from_node_id: 'after' });
    expect(after.status, after.text).toBe(202);
    const reused = await finished(after.body.data.execution_id);
    expect(reused.status).toBe('success');
    expect(nodeOf(reused, 'wait')).toMatchObject({ reused: true, output: { branch: 'received' } });
    expect(nodeOf(reused, 'after').output).toEqual({ paid: 10 });

    const seeded = await app.admin.post(`${E}/${run}/replay`, { from_node_id: 'after', with_payload: { order_id: 'r-1' } });
    const seededDone = await finished(seeded.body.data.execution_id);
    expect(nodeOf(seededDone, 'after').output).toEqual({ paid: 10 });
    expect(nodeOf(seededDone, 'gave_up').status).toBe('skipped');

    // A new run from the wait with the same payload: it does not take the event its original took either.
    const rerun = await app.admin.post(`${E}/${run}/replay`, { from_node_id: 'wait', with_payload: { order_id: 'r-1' } });
    expect(rerun.status, rerun.text).toBe(202);
    await waiting(rerun.body.data.execution_id);
    expect((await app.admin.post(`${E}/${rerun.body.data.execution_id}/cancel`)).status).toBe(200);

    const again = await app.admin.post(`${E}/${run}/replay`, { from_node_id: 'wait' });
    expect(again.status, again.text).toBe(202);
    const replayId = again.body.data.execution_id as number;
    // The event the first run took is not taken again: the replayed wait waits for a new one.
    await waiting(replayId);
    expect((await send(name, 'r-1', { amount: 11 })).body.data.delivered).toEqual([replayId]);
    expect(nodeOf(await finished(replayId), 'after').output).toEqual({ paid: 11 });
  });
});

describe('metrics', () => {
  it('count the runs waiting for an event', async () => {
    const name = eventName('gauge');
    const run = await start(await waitingWorkflow(app.admin, { event: name }), { order_id: 'g' });
    await waiting(run);
    const text = (await fetch(`${app.url}/metrics`).then((r) => r.text())) as string;
    const value = Number(/^svc_workflow_waiting_runs (\d+)/m.exec(text)?.[1]);
    expect(value).toBeGreaterThanOrEqual(1);
    await send(name, 'g');
    await finished(run);
    const after = (await fetch(`${app.url}/metrics`).then((r) => r.text())) as string;
    expect(after).toMatch(/svc_workflow_waits_total\{outcome="received"\} \d+/);
    expect(after).toMatch(/svc_workflow_events_total\{source="api",delivered="yes"\} \d+/);
  });
});

describe("Temporal's stack trace query on a waiting run (the Temporal UI's Stack Trace tab)", () => {
  it('answers, without stacks: workflow code does not record where each of its promises was made', async () => {
    const { name, run } = await runWaiting('payment.received', 'order-stack');
    const temporal = app.stack.services.temporal;
    const handle = temporal.client.workflow.getHandle(temporal.executionWorkflowId(run));
    expect(await handle.query('__stack_trace')).toBe('');
    const enhanced = await handle.query<{ sdk: { name: string }; stacks: unknown[] }>('__enhanced_stack_trace');
    expect(enhanced.sdk.name).toBe('typescript');
    expect(enhanced.stacks).toEqual([]);
    // The run goes on as before.
    expect((await send(name, 'order-stack', { amount: 1 })).body.data.delivered).toEqual([run]);
    expect((await finished(run)).status).toBe('success');
  });
});
