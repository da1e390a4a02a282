import proto from '@temporalio/proto';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { startTestApp, type TestApp } from './helpers/app.js';
import { closedHistory } from './helpers/history.js';
import { eventually, startHttpTarget, type HttpTarget } from './helpers/http-target.js';

let app: TestApp;
let target: HttpTarget;
let connectionId: number;
const W = '/api/workflow/v1/workflows';
const E = '/api/workflow/v1/executions';
let flakyCalls = 0;
/** Calls to /hold are answered once this settles. */
let held: Promise<unknown> | undefined;

beforeAll(async () => {
  app = await startTestApp({ worker: true });
  target = await startHttpTarget((req) => {
    if (req.url.startsWith('/flaky')) return ++flakyCalls <= 2 ? { status: 500, body: { error: 'try again' } } : { body: { ok: true, calls: flakyCalls } };
    if (req.url.startsWith('/hold')) return { until: held, body: { held: true } };
    if (req.url.startsWith('/missing')) return { status: 404, body: { error: 'no such thing' } };
    if (req.url.startsWith('/login'))
      return { headers: { 'set-cookie': ['sid=abc; Path=/; HttpOnly', 'csrf=xyz; Expires=Wed, 21 Oct 2037 07:28:00 GMT'] }, body: { ok: true } };
    if (req.url.startsWith('/echo')) return { body: { echoed: req.body ? JSON.parse(req.body) : null, auth: req.headers.authorization } };
    return undefined;
  });
  const conn = await app.admin.post('/api/workflow/v1/connections', {
    type: 'http_bearer',
    label: 'target',
    cred: 'tok-secret-1234',
    extra: { base_url: target.url },
  });
  connectionId = conn.body.data.id;
});
afterAll(async () => {
  await app?.close();
  await target?.close();
});

async function create(def: Record<string, unknown>) {
  const res = await app.admin.post(W, { title: `wf ${Math.random()}`, trigger: { type: 'manual' }, edges: [], ...def });
  expect(res.status, res.text).toBe(201);
  return res.body.data.id as number;
}

async function runAndWait(workflowId: number, payload: unknown = {}) {
  const res = await app.admin.post(`${W}/${workflowId}/run?wait=true&timeout_ms=90000`, { payload });
  expect(res.status, res.text).toBe(200);
  return view(res.body.data.execution_id);
}

async function view(executionId: number) {
  const res = await app.admin.get(`${E}/${executionId}`);
  expect(res.status, res.text).toBe(200);
  return res.body.data;
}

/** The activity types of the local activities a history recorded (core's markers carry them as JSON). */
const localActivities = (events: proto.temporal.api.history.v1.IHistoryEvent[]) =>
  events.flatMap((e) => {
    const data = e.markerRecordedEventAttributes?.details?.data?.payloads?.[0]?.data;
    return e.markerRecordedEventAttributes?.markerName === 'core_local_activity' && data
      ? [JSON.parse(Buffer.from(data).toString()).activity_type as string]
      : [];
  });

const nodeOf = (execution: { timeline: { node_id: string }[] }, id: string) => execution.timeline.find((t) => t.node_id === id) as any;

describe('runs', () => {
  it('answers 202 with an execution id that can be polled', async () => {
    const id = await create({ nodes: [{ id: 'a', type: 'transform', config: { value: '{{ trigger.v }}' } }] });
    const res = await app.admin.post(`${W}/${id}/run`, { payload: { v: 5 } });
    expect(res.status).toBe(202);
    const done = await eventually(async () => {
      const v = await view(res.body.data.execution_id);
      return v.status === 'success' ? v : undefined;
    });
    expect(done).toMatchObject({ workflow_id: id, trigger: 'manual', trigger_payload: { v: 5 }, output: 5, error: null });
    expect(done.temporal.ui_url).toContain(`/workflows/${app.stack.services.temporal.executionWorkflowId(res.body.data.execution_id)}`);
    expect(done.duration_ms).toBeGreaterThanOrEqual(0);
    expect(nodeOf(done, 'a')).toMatchObject({ status: 'success', attempts: 1, input: { value: 5 }, output: 5, error: null });
  });

  it('runs parallel branches and joins, with the http_request node using the connection', async () => {
    const id = await create({
      nodes: [
        { id: 'start', type: 'transform', config: { value: { n: 1 } } },
        { id: 'left', type: 'http_request', connection_id: connectionId, config: { method: 'POST', path: '/echo', body: { side: 'left' } } },
        { id: 'right', type: 'transform', config: { value: 'right' } },
        {
          id: 'join',
          type: 'transform',
          config: { value: { l: '{{ nodes.left.body.echoed.side }}', r: '{{ nodes.right }}', auth: '{{ nodes.left.body.auth }}' } },
        },
      ],
      edges: [
        { from: 'start', to: 'left' },
        { from: 'start', to: 'right' },
        { from: 'left', to: 'join' },
        { from: 'right', to: 'join' },
      ],
    });
    const execution = await runAndWait(id);
    expect(execution.status).toBe('success');
    // The credential is applied on the wire; echoed back, it is redacted from the node's output.
    expect(target.requests.find((r) => r.url === '/echo')?.headers.authorization).toBe('Bearer tok-secret-1234');
    expect(execution.output).toEqual({ l: 'left', r: 'right', auth: 'Bearer [redacted]' });
    // Nor is it shown in the node's recorded input.
    expect(JSON.stringify(nodeOf(execution, 'left').input)).not.toContain('tok-secret');
  });

  it("gives an http_request node's output every cookie the answer sets, for the next node to send", async () => {
    const id = await create({
      nodes: [
        { id: 'login', type: 'http_request', connection_id: connectionId, config: { method: 'POST', path: '/login' } },
        {
          id: 'next',
          type: 'http_request',
          connection_id: connectionId,
          config: { method: 'POST', path: '/echo', body: { cookies: '{{ nodes.login.headers.`set-cookie` }}' } },
        },
      ],
      edges: [{ from: 'login', to: 'next' }],
    });
    const execution = await runAndWait(id);
    expect(execution.status, JSON.stringify(execution.error)).toBe('success');
    const cookies = ['sid=abc; Path=/; HttpOnly', 'csrf=xyz; Expires=Wed, 21 Oct 2037 07:28:00 GMT'];
    expect(nodeOf(execution, 'login').output.headers['set-cookie']).toEqual(cookies);
    expect(execution.output.body.echoed).toEqual({ cookies });
  });

  it('ends partial when a node fails with on_error continue and the rest runs', async () => {
    const id = await create({
      nodes: [
        { id: 'a', type: 'transform', config: { value: 1 } },
        { id: 'bad', type: 'fail', on_error: 'continue', config: { message: 'expected failure', code: 'custom_code' } },
        { id: 'after', type: 'transform', config: { value: '{{ nodes.bad.error.code }}' } },
        { id: 'other', type: 'transform', config: { value: 'other' } },
      ],
      edges: [
        { from: 'a', to: 'bad' },
        { from: 'bad', to: 'after' },
        { from: 'a', to: 'other' },
      ],
    });
    const execution = await runAndWait(id);
    expect(execution.status).toBe('partial');
    expect(nodeOf(execution, 'bad')).toMatchObject({ status: 'failed', error: { code: 'custom_code', message: 'expected failure' } });
    expect(nodeOf(execution, 'after')).toMatchObject({ status: 'success', output: 'custom_code' });
    expect(nodeOf(execution, 'other').status).toBe('success');
  });

  it('a last node that ends the record writes the whole outcome: the branch not taken skipped, the failure handled, its output the last', async () => {
    const id = await create({
      nodes: [
        { id: 'bad', type: 'fail', on_error: 'continue', config: { message: 'handled', code: 'custom_code' } },
        { id: 'check', type: 'condition', config: { expression: 'true' } },
        { id: 'no', type: 'transform', config: { value: 'not taken' } },
        { id: 'last', type: 'http_request', connection_id: connectionId, config: { method: 'POST', path: '/echo', body: { last: true } } },
      ],
      edges: [
        { from: 'bad', to: 'check' },
        { from: 'check', to: 'no', branch: 'false' },
        { from: 'check', to: 'last', branch: 'true' },
      ],
    });
    const execution = await runAndWait(id);
    expect(execution).toMatchObject({ status: 'partial', output: { status: 200, body: { echoed: { last: true } } }, error: null });
    expect(execution.finished_at).not.toBeNull();
    expect(execution.timeline.map((t: { node_id: string; status: string }) => [t.node_id, t.status])).toEqual([
      ['bad', 'failed'],
      ['check', 'success'],
      ['last', 'success'],
      ['no', 'skipped'],
    ]);
    expect(nodeOf(execution, 'bad')).toMatchObject({ output: { error: { code: 'custom_code', message: 'handled' } } });
    // No step of the run's own ended it: the last node's activity wrote the outcome with its entry.
    const history = await closedHistory(app.stack.services.temporal.client.workflow.getHandle(execution.temporal.workflow_id));
    expect(localActivities(history.events ?? [])).toEqual(['runNode', 'runNode', 'runNode']);
  });

  it('ends failed when a node fails; later nodes are recorded as skipped', async () => {
    const id = await create({
      nodes: [
        { id: 'call', type: 'http_request', connection_id: connectionId, config: { method: 'GET', path: '/missing' } },
        { id: 'never', type: 'transform', config: { value: 1 } },
      ],
      edges: [{ from: 'call', to: 'never' }],
    });
    const execution = await runAndWait(id);
    expect(execution.status).toBe('failed');
    expect(execution.error).toMatchObject({ code: 'http_error', node_id: 'call' });
    expect(nodeOf(execution, 'call')).toMatchObject({ status: 'failed', attempts: 1 }); // a 404 is not retried
    expect(nodeOf(execution, 'never').status).toBe('skipped');
  });

  it('retries a node on 5xx and records the attempts', async () => {
    flakyCalls = 0;
    const id = await create({
      nodes: [
        {
          id: 'flaky',
          type: 'http_request',
          connection_id: connectionId,
          retry: { max_attempts: 4, initial_interval_ms: 50 },
          config: { method: 'GET', path: '/flaky' },
        },
      ],
    });
    const execution = await runAndWait(id);
    expect(execution.status).toBe('success');
    expect(nodeOf(execution, 'flaky')).toMatchObject({ status: 'success', attempts: 3, output: { status: 200, body: { ok: true, calls: 3 } } });
  });

  it('fails a node whose expression is broken at run time, without retrying', async () => {
    const id = await create({ nodes: [{ id: 'x', type: 'transform', config: { value: '{{ $number("abc") + $notAFunction() }}' } }] });
    const execution = await runAndWait(id);
    expect(execution.status).toBe('failed');
    expect(nodeOf(execution, 'x')).toMatchObject({ status: 'failed', attempts: 1, error: { code: 'expression_error' } });
  });

  it('refuses an output over the size limit with output_too_large', async () => {
    const id = await create({ nodes: [{ id: 'big', type: 'transform', config: { value: "{{ $pad('', 600000, 'x') }}" } }] });
    const execution = await runAndWait(id);
    expect(nodeOf(execution, 'big')).toMatchObject({ status: 'failed', error: { code: 'output_too_large' } });
    expect(nodeOf(execution, 'big').error.message).toContain('SVC_NODE_OUTPUT_LIMIT');
  });

  it('takes the switch branch matching the value, else default', async () => {
    const id = await create({
      nodes: [
        { id: 'route', type: 'switch', config: { value: '{{ trigger.kind }}', cases: ['lead', 'customer'] } },
        { id: 'lead', type: 'transform', config: { value: 'L' } },
        { id: 'customer', type: 'transform', config: { value: 'C' } },
        { id: 'fallback', type: 'transform', config: { value: 'D' } },
      ],
      edges: [
        { from: 'route', to: 'lead', branch: 'lead' },
        { from: 'route', to: 'customer', branch: 'customer' },
        { from: 'route', to: 'fallback', branch: 'default' },
      ],
    });
    const customer = await runAndWait(id, { kind: 'customer' });
    expect(customer.output).toBe('C');
    expect(nodeOf(customer, 'lead').status).toBe('skipped');
    expect((await runAndWait(id, { kind: 'martian' })).output).toBe('D');
  });

  it('runs another workflow as a child with run_workflow', async () => {
    const child = await create({ nodes: [{ id: 'double', type: 'transform', config: { value: '{{ trigger.n * 2 }}' } }] });
    const parent = await create({ nodes: [{ id: 'call', type: 'run_workflow', config: { workflow_id: child, payload: { n: '{{ trigger.n }}' } } }] });
    const execution = await runAndWait(parent, { n: 21 });
    expect(execution.status).toBe('success');
    expect(nodeOf(execution, 'call').output).toMatchObject({ status: 'success', output: 42 });
    const childRun = await view(nodeOf(execution, 'call').output.execution_id);
    expect(childRun).toMatchObject({ workflow_id: child, trigger: 'child', status: 'success' });
  });

  it('waits on a delay node as a durable timer', async () => {
    const id = await create({ nodes: [{ id: 'pause', type: 'delay', config: { duration_ms: 300 } }] });
    const execution = await runAndWait(id);
    expect(nodeOf(execution, 'pause')).toMatchObject({ status: 'success', output: { waited_ms: 300 } });
    expect(nodeOf(execution, 'pause').duration_ms).toBeGreaterThanOrEqual(250);
  });
});

describe("a run's first call, claimed by the API that started the run on its own worker", () => {
  const echo = () => ({ id: 'get', type: 'http_request', connection_id: connectionId, config: { method: 'GET', path: '/echo' } });
  /** Records the claims the API made and those the node activities took (the API and the worker share this process). */
  function watchClaims() {
    const claims = app.stack.services.earlyClaims;
    const reserve = claims.reserve.bind(claims);
    const take = claims.take.bind(claims);
    const seen = { made: [] as string[], taken: [] as string[] };
    claims.reserve = (workflowId, nodeId) => {
      const fill = reserve(workflowId, nodeId);
      return (made) => (made && seen.made.push(nodeId), fill(made));
    };
    claims.take = (workflowId, runId, nodeId) => {
      const early = take(workflowId, runId, nodeId);
      if (early) seen.taken.push(nodeId);
      return early;
    };
    // The attempts the API ran ahead of the calls' activities and the activities took, from here on.
    const runs = app.stack.services.earlyRuns;
    const before = { ...runs.counts };
    const ahead = () => ({ taken: runs.counts.taken - before.taken, differed: runs.counts.differed - before.differed });
    // An attempt made ahead ends the run's record, which answers the caller, before the node's
    // activity begins and takes its outcome: the activity's take is waited for.
    const aheadTaken = (taken: number) => vi.waitFor(() => expect(ahead()).toEqual({ taken, differed: 0 }), { timeout: 15_000 });
    return { seen, ahead, aheadTaken, restore: () => ((claims.reserve = reserve), (claims.take = take)) };
  }

  it('counts the call once, and each retry of it once more', async () => {
    const watch = watchClaims();
    try {
      const once = await runAndWait(await create({ nodes: [echo()] }));
      expect(once.status).toBe('success');
      // The connection the early claim read made the call (its credential redacted from the output).
      expect(nodeOf(once, 'get')).toMatchObject({ status: 'success', attempts: 1, output: { status: 200, body: { auth: 'Bearer [redacted]' } } });
      expect(target.requests.at(-1)?.headers.authorization).toBe('Bearer tok-secret-1234');
      expect(watch.seen).toEqual({ made: ['get'], taken: ['get'] });
      // The call itself was made ahead of its activity, which answered that attempt's outcome.
      await watch.aheadTaken(1);

      flakyCalls = 0;
      const flaky = {
        id: 'flaky',
        type: 'http_request',
        connection_id: connectionId,
        retry: { max_attempts: 4, initial_interval_ms: 50 },
        config: { method: 'GET', path: '/flaky' },
      };
      const retried = await runAndWait(await create({ nodes: [flaky] }));
      expect(nodeOf(retried, 'flaky')).toMatchObject({ status: 'success', attempts: 3 });
      expect(watch.seen).toEqual({ made: ['get', 'flaky'], taken: ['get', 'flaky'] });
      // The first attempt, made ahead, failed: the activity threw its failure and Temporal's retries made the other two.
      expect(flakyCalls).toBe(3);
      await watch.aheadTaken(2);
      expect(app.stack.services.earlyClaims.size).toBe(0);
      await vi.waitFor(() => expect(app.stack.services.earlyRuns.size).toBe(0), { timeout: 15_000 });
    } finally {
      watch.restore();
    }
  });

  it('is made for every run of a burst whose calls all hang at once', async () => {
    // A run's first task comes back with its start only when the worker has a task slot free; a
    // run whose call hangs holds its slot. With too few slots the later starts of a burst would
    // go through the task queue (and wait there for a poller) instead.
    const burst = 120;
    let release = () => {};
    held = new Promise<void>((resolve) => (release = resolve));
    const watch = watchClaims();
    try {
      const id = await create({ nodes: [{ id: 'hold', type: 'http_request', connection_id: connectionId, config: { method: 'GET', path: '/hold' } }] });
      const started = await Promise.all(Array.from({ length: burst }, (_, n) => app.admin.post(`${W}/${id}/run`, { payload: { n } })));
      expect(started.map((r) => r.status)).toEqual(Array(burst).fill(202));
      // Every run is still waiting on its call here: each start came back to this worker.
      expect(watch.seen.made).toHaveLength(burst);
      release();
      for (const res of started) {
        const done = await eventually(async () => {
          const v = await view(res.body.data.execution_id);
          return v.status !== 'running' && v;
        });
        expect(nodeOf(done, 'hold')).toMatchObject({ status: 'success', attempts: 1, output: { body: { held: true } } });
      }
      expect(watch.seen.taken).toHaveLength(burst);
      await watch.aheadTaken(burst);
      expect(target.count('/hold')).toBe(burst);
    } finally {
      release();
      held = undefined;
      watch.restore();
    }
  });

  it('is left to the node when the graph does not start with one short call', async () => {
    const watch = watchClaims();
    try {
      const execution = await runAndWait(
        await create({
          nodes: [{ id: 'shape', type: 'transform', config: { value: 1 } }, echo()],
          edges: [{ from: 'shape', to: 'get' }],
        }),
      );
      expect(execution.status).toBe('success');
      expect(nodeOf(execution, 'get')).toMatchObject({ status: 'success', attempts: 1 });
      expect(watch.seen).toEqual({ made: [], taken: [] });
      expect(watch.ahead()).toEqual({ taken: 0, differed: 0 });
    } finally {
      watch.restore();
    }
  });

  it('is run ahead with the input the run gives it: its expressions, its bounds, and the outcome when it ends the run', async () => {
    const watch = watchClaims();
    try {
      const calls = target.count('/echo');
      // The call's body reads the payload; the run goes on after it.
      const post = { id: 'post', type: 'http_request', connection_id: connectionId, config: { method: 'POST', path: '/echo', body: { n: '{{ trigger.n }}' } } };
      const then = await runAndWait(
        await create({
          nodes: [post, { id: 'shape', type: 'transform', config: { value: '{{ nodes.post.body.echoed.n + 1 }}' } }],
          edges: [{ from: 'post', to: 'shape' }],
        }),
        { n: 41 },
      );
      expect(then.status).toBe('success');
      expect(nodeOf(then, 'post')).toMatchObject({ status: 'success', attempts: 1, output: { body: { echoed: { n: 41 } } } });
      expect(nodeOf(then, 'shape').output).toBe(42);
      // A payload larger than the run's history carries inline: the call reads it from the record.
      const big = 'x'.repeat(40_000);
      const alone = await runAndWait(await create({ nodes: [{ ...post, config: { ...post.config, body: { big: '{{ trigger.big }}' } } }] }), { big });
      expect(alone).toMatchObject({ status: 'success', output: { body: { echoed: { big } } } });
      expect(nodeOf(alone, 'post')).toMatchObject({ status: 'success', attempts: 1 });
      expect(target.count('/echo')).toBe(calls + 2);
      await watch.aheadTaken(2);
    } finally {
      watch.restore();
    }
  });

  it('made ahead and still going, is cancelled with its run', async () => {
    let release = () => {};
    held = new Promise<void>((resolve) => (release = resolve));
    const watch = watchClaims();
    try {
      const calls = target.count('/hold');
      const id = await create({ nodes: [{ id: 'hold', type: 'http_request', connection_id: connectionId, config: { method: 'GET', path: '/hold' } }] });
      const started = (await app.admin.post(`${W}/${id}/run`, { payload: {} })).body.data.execution_id;
      await eventually(async () => target.count('/hold') === calls + 1, 10_000, 'the call to reach the target');
      // A call still going names its run in the record (what a retry, a reset and the view read).
      const handle = app.stack.services.temporal.client.workflow.getHandle(app.stack.services.temporal.executionWorkflowId(started));
      const { runId } = await handle.describe();
      await vi.waitFor(
        async () => expect(await app.sql('select temporal_run_id from executions where id = $1', [started])).toEqual([{ temporal_run_id: runId }]),
        {
          timeout: 15_000,
        },
      );
      await handle.cancel();
      const done = await eventually(async () => {
        const v = await view(started);
        return v.status === 'cancelled' && nodeOf(v, 'hold')?.status !== 'running' ? v : undefined;
      });
      expect(nodeOf(done, 'hold')).toMatchObject({ status: 'cancelled', attempts: 1 });
      await watch.aheadTaken(1);
      // The target answering after the cancel changes nothing.
      release();
      await new Promise((resolve) => setTimeout(resolve, 300));
      expect(await view(started)).toMatchObject({ status: 'cancelled' });
      expect(nodeOf(await view(started), 'hold').status).toBe('cancelled');
      expect(target.count('/hold')).toBe(calls + 1);
    } finally {
      release();
      held = undefined;
      watch.restore();
    }
  });

  /** Makes the eager client's next start answer as `answer` says, with Temporal's own answer. */
  function nextStart(answer: (start: () => Promise<{ eagerlyStarted: boolean }>) => Promise<unknown>) {
    const workflow = app.stack.services.temporal.eagerClient!.workflow;
    const start = workflow.start.bind(workflow);
    workflow.start = ((...args: Parameters<typeof start>) => {
      workflow.start = start;
      return answer(() => start(...args));
    }) as typeof start;
    return () => void (workflow.start = start);
  }
  const recordOf = async (executionId: number) =>
    (
      await app.sql<{ status: string; temporal_run_id: string | null; error: { code: string } | null }>(
        'select status, temporal_run_id, error from executions where id = $1',
        [executionId],
      )
    )[0]!;

  it('counted while Temporal answers the start, is taken back when Temporal refuses it', async () => {
    const restore = nextStart(() => Promise.reject(Object.assign(new Error('no route to the frontend'), { code: 14 })));
    const watch = watchClaims();
    try {
      const calls = target.count('/echo');
      const id = await create({ nodes: [echo()] });
      const refused = await app.admin.post(`${W}/${id}/run`, { payload: {} });
      expect(refused.status).toBeGreaterThanOrEqual(500);
      const [row] = await app.sql<{ id: string }>('select id from executions where workflow_id = $1', [id]);
      const executionId = Number(row!.id);
      expect(await recordOf(executionId)).toMatchObject({ status: 'failed', temporal_run_id: null, error: { code: 'start_failed' } });
      // The attempt the API counted for the call is taken back (no call was made), and the people
      // the claim fixed with it: a start sent again fixes them with its run's first claim.
      await vi.waitFor(async () => expect(await app.sql('select node_id from execution_nodes where execution_id = $1', [executionId])).toEqual([]), {
        timeout: 15_000,
      });
      expect(await app.sql('select acting_user_ids from executions where id = $1', [executionId])).toEqual([{ acting_user_ids: null }]);
      expect(target.count('/echo')).toBe(calls);
      expect(watch.ahead()).toEqual({ taken: 0, differed: 0 });
    } finally {
      restore();
      watch.restore();
    }
  });

  it('counted while Temporal answers the start, is the attempt of a first task that went to the task queue', async () => {
    // As when no workflow-task slot was free: the first task is not handed back with the start.
    const restore = nextStart(async (start) => {
      const handle = await start();
      return new Proxy(handle, { get: (t, p) => (p === 'eagerlyStarted' ? false : Reflect.get(t, p)) });
    });
    const watch = watchClaims();
    try {
      const calls = target.count('/echo');
      const execution = await runAndWait(await create({ nodes: [echo()] }));
      expect(execution.status).toBe('success');
      expect(nodeOf(execution, 'get')).toMatchObject({ status: 'success', attempts: 1 });
      expect(target.count('/echo')).toBe(calls + 1);
      // The node's activity made the call, with the attempt the API counted.
      expect(watch.seen).toEqual({ made: ['get'], taken: ['get'] });
      expect(watch.ahead()).toEqual({ taken: 0, differed: 0 });
    } finally {
      restore();
      watch.restore();
    }
  });

  it("learns its run's id from the call's outcome: with the run's end, or beside the entry when the run goes on", async () => {
    const temporal = app.stack.services.temporal;
    const runIdOf = async (executionId: number) => (await temporal.client.workflow.getHandle(temporal.executionWorkflowId(executionId)).describe()).runId;
    const one = await runAndWait(await create({ nodes: [echo()] }));
    expect(await recordOf(one.id)).toMatchObject({ status: 'success', temporal_run_id: await runIdOf(one.id) });

    const id = await create({ nodes: [echo(), { id: 'pause', type: 'delay', config: { duration_ms: 3000 } }], edges: [{ from: 'get', to: 'pause' }] });
    const started = (await app.admin.post(`${W}/${id}/run`, { payload: {} })).body.data.execution_id;
    const during = await eventually(async () => {
      const v = await view(started);
      return nodeOf(v, 'get')?.status === 'success' && v;
    });
    expect(during.status).toBe('running');
    await vi.waitFor(async () => expect((await recordOf(started)).temporal_run_id).toBe(await runIdOf(started)), { timeout: 15_000 });
    expect((await recordOf(started)).status).toBe('running');
  });

  it('is made again by the node when the API could not make it', async () => {
    const mirror = app.stack.services.executionMirror;
    const claim = mirror.claim.bind(mirror);
    let claims = 0;
    mirror.claim = ((...args: Parameters<typeof claim>) =>
      ++claims === 1 ? Promise.reject(new Error('the database went away')) : claim(...args)) as typeof claim;
    const watch = watchClaims();
    try {
      const execution = await runAndWait(await create({ nodes: [echo()] }));
      expect(execution.status).toBe('success');
      expect(nodeOf(execution, 'get')).toMatchObject({ status: 'success', attempts: 1 });
      expect(target.requests.at(-1)?.headers.authorization).toBe('Bearer tok-secret-1234');
      // The API's claim failed; the node's activity took it, then claimed itself, once.
      expect(watch.seen).toEqual({ made: ['get'], taken: ['get'] });
      expect(claims).toBe(2);
    } finally {
      watch.restore();
      mirror.claim = claim;
    }
  });
});

describe('timeline writes that come late', () => {
  it('a node that ended is not set running again by a late write of the same attempt; a later attempt may', async () => {
    // A worker whose workflow task timed out while its "running" write waited (on a restarting
    // database, say) sends that write after the task ran again elsewhere and the node ended.
    const id = await create({ nodes: [{ id: 'only', type: 'transform', config: { value: 1 } }] });
    const done = await runAndWait(id);
    expect(nodeOf(done, 'only')).toMatchObject({ status: 'success', attempts: 1 });
    const mirror = app.stack.services.executionMirror;
    const node = { id: 'only', type: 'transform' };
    await mirror.writeNode(done.id, node, { status: 'running', started_at: new Date(), attempts: 1 });
    expect(nodeOf(await view(done.id), 'only')).toMatchObject({ status: 'success', attempts: 1, output: 1 });

    // An activity's attempt that failed, then its retry: the retry shows as running.
    const retried = { id: 'retried', type: 'http_request' };
    await mirror.writeNode(done.id, retried, {
      status: 'failed',
      started_at: new Date(),
      finished_at: new Date(),
      attempts: 1,
      error: { code: 'http_error', message: 'HTTP 502' },
    });
    await mirror.writeNode(done.id, retried, { status: 'running', started_at: new Date(), attempts: 1 });
    expect(nodeOf(await view(done.id), 'retried')).toMatchObject({ status: 'failed', attempts: 1 });
    await mirror.writeNode(done.id, retried, { status: 'running', started_at: new Date(), attempts: 2 });
    expect(nodeOf(await view(done.id), 'retried')).toMatchObject({ status: 'running', attempts: 2 });
  });
});

describe('the history a run leaves in Temporal', () => {
  const eventTypes = async (done: { temporal: { workflow_id: string; run_id: string } }) => {
    const handle = app.stack.services.temporal.client.workflow.getHandle(done.temporal.workflow_id, done.temporal.run_id);
    await handle.result();
    const { EventType } = proto.temporal.api.enums.v1;
    return ((await handle.fetchHistory()).events ?? []).map((e) => EventType[e.eventType!].replace(/^EVENT_TYPE_/, ''));
  };

  it("a one-node HTTP run with a long timeout: the bare activity workflow's 11 events and the patch's two", async () => {
    const id = await create({
      nodes: [{ id: 'fetch', type: 'http_request', connection_id: connectionId, config: { method: 'GET', path: '/echo' }, timeout_ms: 60_000 }],
    });
    const done = await runAndWait(id);
    expect(done.status).toBe('success');
    // The API prepared its first step (taken behind the prepared-first-step patch: its marker and
    // Temporal's change-version search attribute); the node's activity ended its record.
    expect(await eventTypes(done)).toEqual([
      'WORKFLOW_EXECUTION_STARTED',
      'WORKFLOW_TASK_SCHEDULED',
      'WORKFLOW_TASK_STARTED',
      'WORKFLOW_TASK_COMPLETED',
      'MARKER_RECORDED',
      'UPSERT_WORKFLOW_SEARCH_ATTRIBUTES',
      'ACTIVITY_TASK_SCHEDULED',
      'ACTIVITY_TASK_STARTED',
      'ACTIVITY_TASK_COMPLETED',
      'WORKFLOW_TASK_SCHEDULED',
      'WORKFLOW_TASK_STARTED',
      'WORKFLOW_TASK_COMPLETED',
      'WORKFLOW_EXECUTION_COMPLETED',
    ]);
    // A replay from that node still finds where it started.
    const replay = await app.admin.post(`${E}/${done.id}/replay`, { from_node_id: 'fetch' });
    expect(replay.status, replay.text).toBe(202);
  });

  it('a one-node HTTP run with a short call: one workflow task, the call as a local activity and one memo marking it', async () => {
    const id = await create({ nodes: [{ id: 'fetch', type: 'http_request', connection_id: connectionId, config: { method: 'GET', path: '/echo' } }] });
    const done = await runAndWait(id);
    expect(done.status).toBe('success');
    expect(done.timeline).toMatchObject([{ node_id: 'fetch', status: 'success', attempts: 1 }]);
    expect(await eventTypes(done)).toEqual([
      'WORKFLOW_EXECUTION_STARTED',
      'WORKFLOW_TASK_SCHEDULED',
      'WORKFLOW_TASK_STARTED',
      'WORKFLOW_TASK_COMPLETED',
      'MARKER_RECORDED',
      'UPSERT_WORKFLOW_SEARCH_ATTRIBUTES',
      'MARKER_RECORDED',
      'WORKFLOW_PROPERTIES_MODIFIED',
      'WORKFLOW_EXECUTION_COMPLETED',
    ]);
    // The memo is a reset point: a replay from the node resets to the task that ran it.
    const replay = await app.admin.post(`${E}/${done.id}/replay`, { from_node_id: 'fetch' });
    expect(replay.status, replay.text).toBe(202);
    expect(replay.body.data.mode).toBe('reset');
  });

  it("answers a wait for a run's result from the record its last node ended, with Temporal's result held back", async () => {
    const { services } = app.stack;
    const lastNode = (node: Record<string, unknown>) =>
      create({
        nodes: [
          { id: 'pause', type: 'delay', config: { duration_ms: 500 } },
          { id: 'last', ...node },
        ],
        edges: [{ from: 'pause', to: 'last' }],
      });
    const ok = await lastNode({ type: 'http_request', connection_id: connectionId, config: { method: 'POST', path: '/echo', body: { n: '{{ trigger.n }}' } } });
    const failing = await lastNode({ type: 'http_request', connection_id: connectionId, config: { method: 'GET', path: '/missing' } });
    const start = async (workflowId: number) => (await app.admin.post(`${W}/${workflowId}/run`, { payload: { n: 7 } })).body.data.execution_id as number;
    // An output too large for a notification: the announcement names the record, which is read.
    const large = await lastNode({
      type: 'http_request',
      connection_id: connectionId,
      config: { method: 'POST', path: '/echo', body: { n: '{{ trigger.n }}', pad: 'x'.repeat(9_000) } },
    });
    const fast = await create({ nodes: [{ id: 'call', type: 'http_request', connection_id: connectionId, config: { method: 'GET', path: '/echo' } }] });
    const pure = await create({ nodes: [{ id: 'double', type: 'transform', config: { value: { doubled: '{{ trigger.n * 2 }}' } } }] });
    const held = vi.spyOn(services.temporal.client, 'withAbortSignal').mockImplementation(() => new Promise<never>(() => undefined));
    const reads = vi.spyOn(services.executionMirror, 'get');
    const readsOf = (id: number) => reads.mock.calls.filter(([executionId]) => executionId === id).length;
    try {
      const started = await start(ok);
      const answered = await services.executions.waitForResult(services.temporal.executionWorkflowId(started), 60_000, started);
      // A small output comes with the announcement: the record is not read again.
      expect(readsOf(started)).toBe(0);
      const record = await view(started);
      expect(record.status).toBe('success');
      expect(record.output).toMatchObject({ status: 200, body: { echoed: { n: 7 } } });
      expect(answered).toEqual({ executionId: started, status: 'success', lastOutput: record.output });
      // A short run is answered without asking Temporal at all, whichever of its steps ended the
      // record: its last node (a call), or its finishing step (its last node pure, run in the workflow).
      for (const workflowId of [fast, pure]) {
        const asked = held.mock.calls.length;
        const res = await app.admin.post(`${W}/${workflowId}/run?wait=true&timeout_ms=20000`, { payload: { n: 7 } });
        expect(res.status, res.text).toBe(200);
        expect(held.mock.calls.length).toBe(asked);
        const record = await view(res.body.data.execution_id);
        expect(record.status).toBe('success');
        expect(res.body.data).toMatchObject({ status: 'success', output: record.output });
      }
      const big = await start(large);
      const bigAnswer = await services.executions.waitForResult(services.temporal.executionWorkflowId(big), 60_000, big);
      expect(readsOf(big)).toBe(1);
      const bigRecord = await view(big);
      expect(bigRecord.output).toMatchObject({ body: { echoed: { n: 7, pad: 'x'.repeat(9_000) } } });
      expect(bigAnswer).toEqual({ executionId: big, status: 'success', lastOutput: bigRecord.output });
      // A failed run's outcome (its error) is Temporal's to answer: heard ended, Temporal is asked then.
      const failed = await start(failing);
      const asked = held.mock.calls.length;
      expect(await services.executions.waitForResult(services.temporal.executionWorkflowId(failed), 3_000, failed)).toBeUndefined();
      expect(held.mock.calls.length).toBe(asked + 1);
      expect((await view(failed)).status).toBe('failed');
    } finally {
      held.mockRestore();
      reads.mockRestore();
    }
    // Temporal's result, once let through, says the same.
    const again = await start(ok);
    expect(await services.executions.waitForResult(services.temporal.executionWorkflowId(again), 60_000)).toMatchObject({
      status: 'success',
      lastOutput: { body: { echoed: { n: 7 } } },
    });
  });
});

describe('ended from Temporal', () => {
  const longRun = () =>
    create({
      nodes: [
        { id: 'wait', type: 'delay', config: { duration_ms: 60_000 } },
        { id: 'after', type: 'transform', config: { value: 1 } },
      ],
      edges: [{ from: 'wait', to: 'after' }],
    });

  it('a cancel (as from the Temporal Web UI) ends the execution cancelled', async () => {
    const id = await longRun();
    const started = (await app.admin.post(`${W}/${id}/run`, { payload: {} })).body.data.execution_id;
    await eventually(async () => nodeOf(await view(started), 'wait')?.status === 'running', 10_000, 'delay to start');
    await app.stack.services.temporal.client.workflow.getHandle(app.stack.services.temporal.executionWorkflowId(started)).cancel();
    const done = await eventually(async () => {
      const v = await view(started);
      return v.status === 'cancelled' ? v : undefined;
    });
    expect(nodeOf(done, 'after').status).toBe('skipped');
  });

  it('a terminated run is reconciled to failed', async () => {
    const id = await longRun();
    const started = (await app.admin.post(`${W}/${id}/run`, { payload: {} })).body.data.execution_id;
    await eventually(async () => nodeOf(await view(started), 'wait'), 10_000, 'delay to start');
    await app.stack.services.temporal.client.workflow.getHandle(app.stack.services.temporal.executionWorkflowId(started)).terminate('operator stopped it');
    const done = await eventually(async () => {
      const v = await view(started);
      return v.status === 'failed' ? v : undefined;
    });
    expect(done.error).toMatchObject({ code: 'terminated' });
  });
});

describe('replay', () => {
  it('from a middle node resets the run: upstream nodes do not run again', async () => {
    const before = { one: target.count('/one'), two: target.count('/two') };
    // Calls with a long timeout run as regular activities, each in a workflow task of its own (a
    // chain of short calls is replayed as a new run: replay-from-node.test.ts).
    const id = await create({
      nodes: [
        { id: 'one', type: 'http_request', connection_id: connectionId, config: { method: 'GET', path: '/one' }, timeout_ms: 60_000 },
        { id: 'two', type: 'http_request', connection_id: connectionId, config: { method: 'GET', path: '/two' }, timeout_ms: 60_000 },
        { id: 'out', type: 'transform', config: { value: '{{ nodes.two.body.path }}' } },
      ],
      edges: [
        { from: 'one', to: 'two' },
        { from: 'two', to: 'out' },
      ],
    });
    const original = await runAndWait(id, { tag: 'first' });
    expect(original.status).toBe('success');
    expect(target.count('/one') - before.one).toBe(1);

    const replay = await app.admin.post(`${E}/${original.id}/replay`, { from_node_id: 'two' });
    expect(replay.status, replay.text).toBe(202);
    expect(replay.body.data.mode).toBe('reset');
    const newId = replay.body.data.execution_id;
    expect(newId).not.toBe(original.id);
    const done = await eventually(async () => {
      const v = await view(newId);
      return v.status !== 'running' ? v : undefined;
    }, 30_000);
    expect(done).toMatchObject({ status: 'success', replay_of: original.id, output: '/two', trigger_payload: { tag: 'first' } });
    expect(target.count('/one') - before.one).toBe(1); // not run again
    expect(target.count('/two') - before.two).toBe(2);
    expect(nodeOf(done, 'one')).toMatchObject({ status: 'success', reused: true });
    expect(nodeOf(done, 'two')).toMatchObject({ status: 'success', reused: false });
    // The original keeps its own record.
    expect((await view(original.id)).status).toBe('success');
  });

  it('with a payload starts a new run; with both, upstream outputs are reused', async () => {
    const before = target.count('/one');
    const id = await create({
      nodes: [
        { id: 'one', type: 'http_request', connection_id: connectionId, config: { method: 'GET', path: '/one' } },
        { id: 'out', type: 'transform', config: { value: { from_one: '{{ nodes.one.status }}', payload: '{{ trigger.v }}' } } },
      ],
      edges: [{ from: 'one', to: 'out' }],
    });
    const original = await runAndWait(id, { v: 'old' });
    const rerun = await app.admin.post(`${E}/${original.id}/replay`, { with_payload: { v: 'new' } });
    expect(rerun.status).toBe(202);
    const rerunDone = await eventually(async () => {
      const v = await view(rerun.body.data.execution_id);
      return v.status !== 'running' ? v : undefined;
    });
    expect(rerunDone).toMatchObject({ output: { from_one: 200, payload: 'new' }, replay_of: original.id });
    expect(target.count('/one') - before).toBe(2);

    const both = await app.admin.post(`${E}/${original.id}/replay`, { with_payload: { v: 'both' }, from_node_id: 'out' });
    const bothDone = await eventually(async () => {
      const v = await view(both.body.data.execution_id);
      return v.status !== 'running' ? v : undefined;
    });
    expect(bothDone.output).toEqual({ from_one: 200, payload: 'both' });
    expect(target.count('/one') - before).toBe(2); // reused, not called
    expect(nodeOf(bothDone, 'one').reused).toBe(true);
  });

  it('answers bad replays with 4xx', async () => {
    const id = await create({ nodes: [{ id: 'a', type: 'transform', config: { value: 1 } }] });
    const original = await runAndWait(id);
    expect((await app.admin.post(`${E}/${original.id}/replay`, { from_node_id: 'nope' })).status).toBe(400);
    expect((await app.admin.post(`${E}/999999/replay`, {})).status).toBe(404);
    expect((await app.admin.post(`${E}/${original.id}/replay`, { from_node_id: 5 })).status).toBe(400);
  });
});

describe('listing executions', () => {
  it('filters by workflow, status and time, and bounds per_page', async () => {
    const id = await create({ nodes: [{ id: 'a', type: 'transform', config: { value: 1 } }] });
    const since = new Date(Date.now() - 1000).toISOString();
    await runAndWait(id);
    await runAndWait(id);
    const list = await app.admin.get(`${E}?workflow_id=${id}`);
    expect(list.body.data.total).toBe(2);
    expect(list.body.data.items[0]).toMatchObject({ workflow_id: id, status: 'success' });
    expect((await app.admin.get(`${E}?workflow_id=${id}&status=failed`)).body.data.total).toBe(0);
    expect((await app.admin.get(`${E}?workflow_id=${id}&since=${encodeURIComponent(since)}`)).body.data.total).toBe(2);
    expect((await app.admin.get(`${E}?workflow_id=${id}&until=${encodeURIComponent(since)}`)).body.data.total).toBe(0);
    expect((await app.admin.get(`${E}?per_page=101`)).status).toBe(400);
    expect((await app.admin.get(`${E}?since=yesterday`)).status).toBe(400);
    expect((await app.admin.get(`${E}?status=exploded`)).status).toBe(400);
    const other = await app.createUser('editor');
    expect((await other.client.get(`${E}?workflow_id=${id}`)).body.data.total).toBe(0);
    expect((await other.client.get(`${E}/${list.body.data.items[0].id}`)).status).toBe(404);
  });
});

describe('replay when Temporal no longer has the run', () => {
  it('a replay from a node of a run whose history is gone is a new run reusing the recorded outputs, never a 500', async () => {
    const id = await create({
      nodes: [
        { id: 'a', type: 'transform', config: { value: 1 } },
        { id: 'b', type: 'transform', config: { value: 2 } },
      ],
      edges: [{ from: 'a', to: 'b' }],
    });
    const executionId = (await runAndWait(id)).id as number;
    // As if the namespace's retention had removed the run's history.
    await app.sql('update executions set temporal_run_id = gen_random_uuid() where id = $1', [executionId]);
    const res = await app.admin.post(`${E}/${executionId}/replay`, { from_node_id: 'b' });
    expect(res.status, res.text).toBe(202);
    expect(res.body.data.mode).toBe('rerun');
    const done = await eventually(async () => {
      const v = await view(res.body.data.execution_id);
      return v.status !== 'running' ? v : undefined;
    });
    expect(done).toMatchObject({ status: 'success', output: 2 });
    expect(nodeOf(done, 'a')).toMatchObject({ reused: true });
    const fresh = await app.admin.post(`${E}/${executionId}/replay`, { with_payload: { again: true } });
    expect(fresh.status, fresh.text).toBe(202);
  });
});
