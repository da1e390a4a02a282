import type { ServerResponse } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from './helpers/app.js';
import { eventually, fixedServers } from './helpers/http-target.js';

/**
 * A replay from a node runs that node and its descendants and reuses every other node's outcome:
 * a side effect on another branch is not sent again. A dry run says so before anything starts.
 */
let app: TestApp;
let connectionId: number;
const servers = fixedServers();
const calls = new Map<string, number>();
const count = (path: string) => calls.get(path) ?? 0;
/** `/right` answers once `/charge` has been asked: the right branch ends after the charge started. */
let chargeAsked!: () => void;
const charged = new Promise<void>((resolve) => (chargeAsked = resolve));
const W = '/api/workflow/v1/workflows';
const E = '/api/workflow/v1/executions';

function answer(res: ServerResponse, status: number, body: unknown) {
  res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
}

beforeAll(async () => {
  app = await startTestApp({ worker: true });
  const url = await servers.start((req, res) => {
    const path = (req.url ?? '/').split('?')[0]!;
    const n = (calls.get(path) ?? 0) + 1;
    calls.set(path, n);
    req.resume();
    if (path === '/charge') {
      chargeAsked();
      return answer(res, n === 1 ? 402 : 200, n === 1 ? { error: 'card declined' } : { charged: true });
    }
    if (path === '/right') return void charged.then(() => answer(res, 200, { audited: true }));
    if (path === '/pay') return answer(res, 402, { error: 'card declined' });
    if (path === '/close') return answer(res, n === 1 ? 400 : 200, { closed: n > 1 });
    return answer(res, 200, { path });
  });
  connectionId = (await app.admin.post('/api/workflow/v1/connections', { type: 'http_bearer', label: 'replay', cred: 'tok-replay', extra: { base_url: url } }))
    .body.data.id;
});
afterAll(async () => {
  await app?.close();
  await servers.closeAll();
});

const http = (id: string, method: string, path: string, extra: Record<string, unknown> = {}) => ({
  id,
  type: 'http_request',
  connection_id: connectionId,
  config: { method, path },
  retry: { max_attempts: 1 },
  ...extra,
});

async function create(def: Record<string, unknown>) {
  const res = await app.admin.post(W, { title: `replay ${Math.random()}`, trigger: { type: 'manual' }, edges: [], ...def });
  expect(res.status, res.text).toBe(201);
  return res.body.data.id as number;
}

async function run(workflowId: number) {
  const res = await app.admin.post(`${W}/${workflowId}/run?wait=true&timeout_ms=90000`, { payload: { order: 7 } });
  expect(res.status, res.text).toBe(200);
  return res.body.data.execution_id as number;
}

const settled = (executionId: number) =>
  eventually(
    async () => {
      const v = (await app.admin.get(`${E}/${executionId}`)).body.data;
      return v.status !== 'running' ? v : undefined;
    },
    90_000,
    `execution ${executionId} to end`,
  );

const entry = (execution: { timeline: { node_id: string }[] }, id: string) => execution.timeline.find((t) => t.node_id === id) as any;

describe('replay from a node on one branch', () => {
  let workflowId: number;
  let original: number;

  beforeAll(async () => {
    workflowId = await create({
      nodes: [
        { id: 'start', type: 'transform', config: { value: '{{ trigger.order }}' } },
        http('left', 'GET', '/left'),
        http('charge', 'POST', '/charge'),
        { id: 'receipt', type: 'transform', config: { value: '{{ nodes.charge.body }}' } },
        http('right', 'POST', '/right'),
      ],
      edges: [
        { from: 'start', to: 'left' },
        { from: 'left', to: 'charge' },
        { from: 'charge', to: 'receipt' },
        { from: 'start', to: 'right' },
      ],
    });
    original = await run(workflowId);
    expect((await settled(original)).status).toBe('failed');
    expect([count('/left'), count('/charge'), count('/right')]).toEqual([1, 1, 1]);
  });

  it('dry run: says the node and its descendants run, the other branch is reused, and starts nothing', async () => {
    const executions = (await app.sql<{ n: number }>('select count(*)::int as n from executions'))[0]!.n;
    const res = await app.admin.post(`${E}/${original}/replay`, { from_node_id: 'charge', dry_run: true });
    expect(res.status, res.text).toBe(200);
    expect(res.body.data).toMatchObject({ mode: 'rerun', from_node_id: 'charge', run: ['charge', 'receipt'], reused: ['start', 'left', 'right'], skipped: [] });
    expect(res.body.data.nodes).toContainEqual({ node_id: 'charge', action: 'run', was: 'failed' });
    expect(res.body.data.nodes).toContainEqual({ node_id: 'right', action: 'reuse', was: 'success' });
    expect((await app.sql<{ n: number }>('select count(*)::int as n from executions'))[0]!.n).toBe(executions);
  });

  it('does not call the other branch’s target again; its nodes show reused', async () => {
    const res = await app.admin.post(`${E}/${original}/replay`, { from_node_id: 'charge' });
    expect(res.status, res.text).toBe(202);
    // The right branch ended after the charge started: a reset to the charge would send it again.
    expect(res.body.data.mode).toBe('rerun');
    const replay = await settled(res.body.data.execution_id);
    expect(replay).toMatchObject({ status: 'success', replay_of: original, output: { charged: true }, trigger_payload: { order: 7 } });
    expect([count('/left'), count('/charge'), count('/right')]).toEqual([1, 2, 1]);
    for (const id of ['start', 'left', 'right']) expect(entry(replay, id), id).toMatchObject({ status: 'success', reused: true });
    for (const id of ['charge', 'receipt']) expect(entry(replay, id), id).toMatchObject({ status: 'success', reused: false });
    expect(replay.replay_reason).toBe(`replay of execution ${original} from node charge: a new run reusing 3 nodes`);
  });

  it('refuses a node that did not run, and a node not in the workflow', async () => {
    const linear = await create({
      nodes: [http('first', 'POST', '/pay'), { id: 'then', type: 'transform', config: { value: 1 } }],
      edges: [{ from: 'first', to: 'then' }],
    });
    const failed = await run(linear);
    const res = await app.admin.post(`${E}/${failed}/replay`, { from_node_id: 'then', dry_run: true });
    expect(res.status).toBe(409);
    expect(res.body).toMatchObject({ error: 'node_not_run' });
    expect((await app.admin.post(`${E}/${failed}/replay`, { from_node_id: 'ghost' })).status).toBe(400);
  });
});

describe('replay keeps the outcomes of reused branching nodes', () => {
  it('a reused failure keeps its error branch: the payment is not sent again, the branch it skipped stays skipped', async () => {
    const id = await create({
      nodes: [
        http('pay', 'POST', '/pay', { on_error: 'branch' }),
        http('ship', 'POST', '/ship'),
        { id: 'notify', type: 'transform', config: { value: { reason: '{{ nodes.pay.error.data.body.error }}' } } },
        http('close', 'POST', '/close'),
      ],
      edges: [
        { from: 'pay', to: 'ship' },
        { from: 'pay', to: 'notify', branch: 'error' },
        { from: 'notify', to: 'close' },
      ],
    });
    const failed = await run(id);
    expect((await settled(failed)).status).toBe('failed');
    const before = { pay: count('/pay'), ship: count('/ship') };
    const plan = await app.admin.post(`${E}/${failed}/replay`, { from_node_id: 'close', dry_run: true });
    expect(plan.body.data).toMatchObject({ run: ['close'], reused: ['pay', 'notify'], skipped: ['ship'] });
    const res = await app.admin.post(`${E}/${failed}/replay`, { from_node_id: 'close' });
    expect(res.status, res.text).toBe(202);
    const replay = await settled(res.body.data.execution_id);
    expect(replay.status).toBe('success');
    expect({ pay: count('/pay'), ship: count('/ship') }).toEqual(before);
    expect(entry(replay, 'pay')).toMatchObject({ status: 'failed', reused: true, output: { error: { code: 'http_error' } } });
    expect(entry(replay, 'ship')).toMatchObject({ status: 'skipped' });
    expect(entry(replay, 'close')).toMatchObject({ status: 'success', reused: false });
  });

  it('a reused condition keeps its branch', async () => {
    const id = await create({
      nodes: [
        { id: 'check', type: 'condition', config: { expression: '{{ trigger.order > 10 }}' } },
        http('big', 'POST', '/big'),
        { id: 'small', type: 'transform', config: { value: 'small' } },
        { id: 'after', type: 'fail', config: { message: 'stop' } },
      ],
      edges: [
        { from: 'check', to: 'big', branch: 'true' },
        { from: 'check', to: 'small', branch: 'false' },
        { from: 'small', to: 'after' },
      ],
    });
    const failed = await run(id);
    const plan = await app.admin.post(`${E}/${failed}/replay`, { from_node_id: 'after', dry_run: true });
    expect(plan.body.data).toMatchObject({ run: ['after'], reused: ['check', 'small'], skipped: ['big'] });
  });
});

describe('a replay that a reset makes exactly', () => {
  it('resets a chain: what finished before the node is kept, nothing else ran', async () => {
    // Calls with a long timeout run as regular activities: each starts in a workflow task of its own.
    const long = { timeout_ms: 60_000 };
    const id = await create({
      nodes: [
        http('one', 'GET', '/one', long),
        http('two', 'GET', '/two', long),
        { id: 'out', type: 'transform', config: { value: '{{ nodes.two.body.path }}' } },
      ],
      edges: [
        { from: 'one', to: 'two' },
        { from: 'two', to: 'out' },
      ],
    });
    const original = await run(id);
    const plan = await app.admin.post(`${E}/${original}/replay`, { from_node_id: 'two', dry_run: true });
    expect(plan.body.data).toMatchObject({ mode: 'reset', run: ['two', 'out'], reused: ['one'] });
    const res = await app.admin.post(`${E}/${original}/replay`, { from_node_id: 'two' });
    expect(res.body.data.mode).toBe('reset');
    const replay = await settled(res.body.data.execution_id);
    expect(replay).toMatchObject({ status: 'success', output: '/two' });
    expect([count('/one'), count('/two')]).toEqual([1, 2]);
  });

  it('replays a chain of short calls from its second: the first is reused, not called again', async () => {
    // `one` runs as a local activity; `two` starts in the task that saw it end, which a reset
    // would run again with `one` in it: the replay is a new run that reuses `one` instead.
    const id = await create({
      nodes: [
        http('one', 'GET', '/short-one'),
        http('two', 'GET', '/short-two'),
        { id: 'out', type: 'transform', config: { value: '{{ nodes.two.body.path }}' } },
      ],
      edges: [
        { from: 'one', to: 'two' },
        { from: 'two', to: 'out' },
      ],
    });
    const original = await run(id);
    const plan = await app.admin.post(`${E}/${original}/replay`, { from_node_id: 'two', dry_run: true });
    expect(plan.body.data).toMatchObject({ mode: 'rerun', run: ['two', 'out'], reused: ['one'] });
    const res = await app.admin.post(`${E}/${original}/replay`, { from_node_id: 'two' });
    const replay = await settled(res.body.data.execution_id);
    expect(replay).toMatchObject({ status: 'success', output: '/short-two' });
    expect(replay.timeline.map((t: { node_id: string; reused: boolean }) => [t.node_id, t.reused])).toEqual([
      ['one', true],
      ['two', false],
      ['out', false],
    ]);
    expect([count('/short-one'), count('/short-two')]).toEqual([1, 2]);
  });

  it('resets to a short call that began a workflow task of its own: the call runs again, what finished before it is kept', async () => {
    // `two` (regular) ends in a task of its own, in which `three` starts as a local activity.
    const id = await create({
      nodes: [http('one', 'GET', '/own-one'), http('two', 'GET', '/own-two'), http('three', 'GET', '/own-three')],
      edges: [
        { from: 'one', to: 'two' },
        { from: 'two', to: 'three' },
      ],
    });
    const original = await run(id);
    const plan = await app.admin.post(`${E}/${original}/replay`, { from_node_id: 'three', dry_run: true });
    expect(plan.body.data).toMatchObject({ mode: 'reset', run: ['three'], reused: ['one', 'two'] });
    const res = await app.admin.post(`${E}/${original}/replay`, { from_node_id: 'three' });
    const replay = await settled(res.body.data.execution_id);
    expect(replay).toMatchObject({ status: 'success' });
    expect([count('/own-one'), count('/own-two'), count('/own-three')]).toEqual([1, 1, 2]);
  });
});
