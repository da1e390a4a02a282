// for_each: a body run per item, `concurrency` at a time, every item listed by index, nested loops
// running every inner item for every outer item, failures stopping the loop or recorded and
// passed over, and what is refused (a list that is no list, too long a list, a body that cannot
// say which node gives the result).
import { createServer, type Server } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from './helpers/app.js';
import { TARGET_HOST, eventually, startHttpTarget, type HttpTarget } from './helpers/http-target.js';

let app: TestApp;
let target: HttpTarget;
let connectionId: number;
const refusing = new Set<string>();
const imported: { batch: number; rows: { id: number }[] }[] = [];
let gate!: { url: string; held: number; most: number; seen: string[]; release: () => void; server: Server };
let gateConnection!: number;
const W = '/api/workflow/v1/workflows';
const E = '/api/workflow/v1/executions';

beforeAll(async () => {
  // A small history budget, so that a loop of a few hundred items continues as new.
  app = await startTestApp({ worker: true, env: { SVC_FOR_EACH_MAX_ITEMS: '500', SVC_FOR_EACH_HISTORY_EVENTS: '500' } });
  target = await startHttpTarget((req) => {
    if (req.url.startsWith('/fail/')) return { status: 422, body: { error: 'refused', path: req.url } };
    // Refused until the test lets them through (a target that was down).
    if (refusing.has(req.url)) return { status: 422, body: { error: 'not yet', path: req.url } };
    // The worked examples of docs/workflows.md: an export of 1,000 rows, an import API, 50 leads.
    if (req.url.startsWith('/export')) return { body: { rows: Array.from({ length: 1000 }, (_, i) => ({ id: i })) } };
    if (req.url.startsWith('/import')) {
      const sent = JSON.parse(req.body) as { batch: number; rows: { id: number }[] };
      imported.push(sent);
      return refusing.has(`batch:${sent.batch}`) ? { status: 503, body: { error: 'busy' } } : { body: { imported: sent.rows.length } };
    }
    if (req.url.startsWith('/leads')) return { body: { leads: Array.from({ length: 50 }, (_, i) => ({ name: `Lead ${i}`, email: `lead${i}@example.com` })) } };
    if (req.url.startsWith('/slow/')) return { delayMs: 300 };
    return undefined;
  });
  connectionId = (
    await app.admin.post('/api/workflow/v1/connections', { type: 'http_bearer', label: 'target', cred: 'tok-for-each-tests', extra: { base_url: target.url } })
  ).body.data.id;
  gate = await startGate();
  gateConnection = (
    await app.admin.post('/api/workflow/v1/connections', { type: 'http_bearer', label: 'gate', cred: 'tok-for-each-tests', extra: { base_url: gate.url } })
  ).body.data.id;
});
afterAll(async () => {
  await app?.close();
  await target?.close();
  gate?.server.closeAllConnections();
  gate?.server.close();
});

/** A target that holds every request until `release()`, counting how many it holds at once. */
async function startGate(): Promise<typeof gate> {
  const waiting: (() => void)[] = [];
  let open = false;
  const state: typeof gate = {
    url: '',
    held: 0,
    most: 0,
    seen: [],
    release: () => {
      open = true;
      for (const go of waiting.splice(0)) go();
    },
    server: createServer((req, res) => {
      state.seen.push(req.url ?? '');
      state.held++;
      state.most = Math.max(state.most, state.held);
      const answer = () => {
        state.held--;
        res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ path: req.url }));
      };
      if (open) setImmediate(answer);
      else waiting.push(answer);
    }),
  };
  await new Promise<void>((resolve) => state.server.listen(0, TARGET_HOST, resolve));
  state.url = `http://${TARGET_HOST}:${(state.server.address() as { port: number }).port}`;
  return state;
}

async function create(def: Record<string, unknown>) {
  const res = await app.admin.post(W, { title: `loop ${Math.random()}`, trigger: { type: 'manual' }, edges: [], ...def });
  expect(res.status, res.text).toBe(201);
  return res.body.data;
}

async function run(workflowId: number, payload: unknown = {}) {
  const started = await app.admin.post(`${W}/${workflowId}/run`, { payload });
  expect(started.status, started.text).toBe(202);
  const id = started.body.data.execution_id as number;
  return eventually(
    async () => {
      const view = (await app.admin.get(`${E}/${id}`)).body.data;
      return view.status === 'running' ? undefined : view;
    },
    120_000,
    `execution ${id} to end`,
  );
}

async function items(executionId: number, nodeId: string, query = '') {
  const res = await app.admin.get(`${E}/${executionId}/nodes/${nodeId}/items${query}`);
  expect(res.status, res.text).toBe(200);
  return res.body.data;
}

const entry = (view: { timeline: { node_id: string }[] }, id: string) => view.timeline.find((t) => t.node_id === id) as Record<string, any>;

describe('for_each with an inline body', () => {
  it('runs the body per item with item, index, trigger and the outer nodes, and gives results by index', async () => {
    const wf = await create({
      nodes: [
        { id: 'prefix', type: 'transform', config: { value: { text: 'n-' } } },
        {
          id: 'each',
          type: 'for_each',
          config: {
            items: '{{ trigger.numbers }}',
            concurrency: 3,
            body: {
              nodes: [
                { id: 'double', type: 'transform', config: { value: { twice: '{{ item * 2 }}', at: '{{ index }}' } } },
                {
                  id: 'label',
                  type: 'transform',
                  config: { value: '{{ nodes.prefix.text & $string(nodes.double.twice) & "/" & trigger.tag & "#" & $string(index) }}' },
                },
              ],
              edges: [{ from: 'double', to: 'label' }],
            },
          },
        },
        { id: 'after', type: 'transform', config: { value: { count: '{{ nodes.each.total }}', last: '{{ nodes.each.results[-1] }}' } } },
      ],
      edges: [
        { from: 'prefix', to: 'each' },
        { from: 'each', to: 'after' },
      ],
    });
    const view = await run(wf.id, { numbers: [5, 6, 7, 8, 9], tag: 't' });
    expect(view.status, JSON.stringify(view.error)).toBe('success');
    expect(entry(view, 'each').output).toEqual({
      total: 5,
      succeeded: 5,
      failed: 0,
      results: ['n-10/t#0', 'n-12/t#1', 'n-14/t#2', 'n-16/t#3', 'n-18/t#4'],
    });
    expect(entry(view, 'each').items).toMatchObject({ total: 5, succeeded: 5, pending: 0 });
    expect(view.output).toEqual({ count: 5, last: 'n-18/t#4' });
    // The body's nodes have no timeline entries of their own: the items are the record.
    expect(view.timeline.map((t: { node_id: string }) => t.node_id)).toEqual(['prefix', 'each', 'after']);
    const page = await items(view.id, 'each', '?per_page=2&page=2');
    expect(page).toMatchObject({ total: 5, page: 2, per_page: 2 });
    expect(
      page.items.map((i: { index: number; input: number; output: string; status: string; reused: boolean; scope: number[] }) => [
        i.index,
        i.input,
        i.output,
        i.status,
        i.reused,
        i.scope,
      ]),
    ).toEqual([
      [2, 7, 'n-14/t#2', 'success', false, []],
      [3, 8, 'n-16/t#3', 'success', false, []],
    ]);
    expect(page.items[0].attempts).toBe(1);
    expect(page.items[0].duration_ms).toBeGreaterThanOrEqual(0);
  }, 120_000);
});

describe('for_each concurrency and progress', () => {
  it('keeps at most `concurrency` items in flight, and its entry shows the counts as they move', async () => {
    const wf = await create({
      nodes: [
        {
          id: 'calls',
          type: 'for_each',
          config: {
            items: '{{ [1..12] }}',
            concurrency: 4,
            body: { nodes: [{ id: 'get', type: 'http_request', connection_id: gateConnection, config: { method: 'GET', path: '/item/{{ item }}' } }] },
          },
        },
      ],
    });
    const started = await app.admin.post(`${W}/${wf.id}/run`, { payload: {} });
    const id = started.body.data.execution_id;
    // The target holds every call: four arrive, and no fifth while they are held.
    await eventually(async () => gate.held === 4, 60_000, 'four items in flight');
    const running = (await app.admin.get(`${E}/${id}`)).body.data;
    expect(running.status).toBe('running');
    expect(entry(running, 'calls')).toMatchObject({ status: 'running', items: { total: 12, pending: 12, succeeded: 0 } });
    expect(gate.seen.length).toBe(4);
    gate.release();
    const view = await eventually(async () => {
      const v = (await app.admin.get(`${E}/${id}`)).body.data;
      return v.status === 'running' ? undefined : v;
    }, 120_000);
    expect(view.status).toBe('success');
    expect(gate.most).toBe(4);
    expect(entry(view, 'calls').output.results.map((r: { body: { path: string } }) => r.body.path)).toEqual(
      Array.from({ length: 12 }, (_, i) => `/item/${i + 1}`),
    );
    expect(entry(view, 'calls').items).toMatchObject({ total: 12, succeeded: 12, pending: 0 });
  }, 180_000);
});

describe('for_each failures', () => {
  const failing = (onItemError: 'fail' | 'continue') => ({
    id: 'each',
    type: 'for_each',
    config: {
      items: '{{ trigger.paths }}',
      concurrency: 1,
      on_item_error: onItemError,
      body: {
        nodes: [
          {
            id: 'call',
            type: 'http_request',
            connection_id: connectionId,
            config: { method: 'POST', path: '{{ item }}' },
            retry: { max_attempts: 2, initial_interval_ms: 10 },
          },
        ],
      },
    },
  });

  it('on_item_error fail: no item starts after the failure, the node fails with item_failed, the rest are skipped', async () => {
    const wf = await create({ nodes: [failing('fail'), { id: 'next', type: 'transform', config: { value: 1 } }], edges: [{ from: 'each', to: 'next' }] });
    const view = await run(wf.id, { paths: ['/ok/f1', '/ok/f2', '/fail/f3', '/ok/f4', '/ok/f5'] });
    expect(view.status).toBe('failed');
    expect(view.error).toMatchObject({ code: 'item_failed', node_id: 'each' });
    expect(view.error.message).toContain('Item 2 failed at node call (http_error');
    expect(entry(view, 'each')).toMatchObject({ status: 'failed', error: { code: 'item_failed' } });
    expect(entry(view, 'next').status).toBe('skipped');
    expect(target.count('/ok/f4')).toBe(0);
    const listed = await items(view.id, 'each');
    expect(listed.items.map((i: { status: string }) => i.status)).toEqual(['success', 'success', 'failed', 'skipped', 'skipped']);
    // 422 is final: one attempt, its error on the item with the node that failed.
    expect(listed.items[2]).toMatchObject({ attempts: 1, output: null, error: { code: 'http_error', node_id: 'call' } });
    expect((await items(view.id, 'each', '?status=skipped')).total).toBe(2);
  }, 120_000);

  it('on_item_error continue: the others go on, a failed item is null in results, and the run ends partial', async () => {
    const wf = await create({ nodes: [failing('continue')] });
    const view = await run(wf.id, { paths: ['/ok/c1', '/fail/c2', '/ok/c3'] });
    expect(view.status).toBe('partial');
    const output = entry(view, 'each').output;
    expect(output).toMatchObject({ total: 3, succeeded: 2, failed: 1 });
    expect(output.results[1]).toBeNull();
    expect(output.results[2].body.path).toBe('/ok/c3');
    expect((await items(view.id, 'each', '?status=failed')).items.map((i: { index: number }) => i.index)).toEqual([1]);
  }, 120_000);

  it('refuses items that are not a list with items_not_array, and a list over SVC_FOR_EACH_MAX_ITEMS with too_many_items', async () => {
    const body = { nodes: [{ id: 'x', type: 'transform', config: { value: '{{ item }}' } }] };
    const notList = await create({ nodes: [{ id: 'each', type: 'for_each', config: { items: '{{ trigger.what }}', body } }] });
    const view = await run(notList.id, { what: { a: 1 } });
    expect(view.status).toBe('failed');
    expect(view.error).toMatchObject({ code: 'items_not_array', node_id: 'each' });
    expect(view.error.message).toContain('an object');
    expect(entry(view, 'each')).toMatchObject({ status: 'failed', error: { code: 'items_not_array' } });
    const tooMany = await create({
      nodes: [{ id: 'each2', type: 'for_each', config: { items: '{{ [1..501] }}', body: { nodes: [{ id: 'y', type: 'transform', config: { value: 1 } }] } } }],
    });
    const long = await run(tooMany.id);
    expect(long.error).toMatchObject({ code: 'too_many_items', node_id: 'each2' });
    expect(long.error.message).toContain('SVC_FOR_EACH_MAX_ITEMS');
    expect((await items(long.id, 'each2')).total).toBe(0);
  }, 120_000);

  it('an empty list succeeds at once with no items', async () => {
    const wf = await create({
      nodes: [{ id: 'none', type: 'for_each', config: { items: [], body: { nodes: [{ id: 'z', type: 'transform', config: { value: 1 } }] } } }],
    });
    const view = await run(wf.id);
    expect(view.status).toBe('success');
    expect(entry(view, 'none').output).toEqual({ total: 0, succeeded: 0, failed: 0, results: [] });
  }, 60_000);
});

describe('nested loops', () => {
  it('run every inner item for every outer item; inner items are listed by the outer index (scope)', async () => {
    const wf = await create({
      nodes: [
        {
          id: 'rows',
          type: 'for_each',
          config: {
            items: '{{ trigger.rows }}',
            concurrency: 2,
            body: {
              nodes: [
                { id: 'row', type: 'transform', config: { value: { name: '{{ item.name }}', at: '{{ index }}' } } },
                {
                  id: 'cells',
                  type: 'for_each',
                  config: {
                    items: '{{ nodes.row.name = "b" ? [] : [1, 2, 3] }}',
                    concurrency: 3,
                    body: {
                      nodes: [{ id: 'cell', type: 'transform', config: { value: '{{ nodes.row.name & $string(item) & "@" & $string(nodes.row.at) }}' } }],
                    },
                  },
                },
                { id: 'joined', type: 'transform', config: { value: '{{ $join(nodes.cells.results, ",") }}' } },
              ],
              edges: [
                { from: 'row', to: 'cells' },
                { from: 'cells', to: 'joined' },
              ],
            },
          },
        },
      ],
    });
    const view = await run(wf.id, { rows: [{ name: 'a' }, { name: 'b' }, { name: 'c' }, { name: 'd' }] });
    expect(view.status, JSON.stringify(view.error)).toBe('success');
    expect(entry(view, 'rows').output.results).toEqual(['a1@0,a2@0,a3@0', '', 'c1@2,c2@2,c3@2', 'd1@3,d2@3,d3@3']);
    const inner = await items(view.id, 'cells');
    expect(inner.total).toBe(9);
    expect(inner.items.map((i: { scope: number[]; index: number; output: string }) => [i.scope, i.index, i.output])[3]).toEqual([[2], 0, 'c1@2']);
    const third = await items(view.id, 'cells', '?scope=3');
    expect(third.items.map((i: { output: string }) => i.output)).toEqual(['d1@3', 'd2@3', 'd3@3']);
    // Unknown nodes and nodes that are no loop are not found; a malformed scope is a 400.
    expect((await app.admin.get(`${E}/${view.id}/nodes/cell/items`)).status).toBe(404);
    expect((await app.admin.get(`${E}/${view.id}/nodes/ghost/items`)).status).toBe(404);
    expect((await app.admin.get(`${E}/${view.id}/nodes/cells/items?scope=a`)).status).toBe(400);
    expect((await app.admin.get(`${E}/${view.id}/nodes/cells/items?per_page=201`)).status).toBe(400);
  }, 120_000);
});

describe('who sees a loop’s items', () => {
  it('someone the workflow is merely shared with sees the items’ shape, not their data', async () => {
    const editor = await app.createUser('editor');
    const wf = await create({
      shared_with: [editor.id],
      nodes: [
        {
          id: 'each',
          type: 'for_each',
          config: { items: [{ secret: 's-1' }, { secret: 's-2' }], body: { nodes: [{ id: 'x', type: 'transform', config: { value: '{{ item.secret }}' } }] } },
        },
      ],
    });
    const view = await run(wf.id);
    const own = await items(view.id, 'each');
    expect(own).toMatchObject({ redacted: false, total: 2 });
    expect(own.items[0].input).toEqual({ secret: 's-1' });
    const shared = await editor.client.get(`${E}/${view.id}/nodes/each/items`);
    expect(shared.status).toBe(200);
    expect(shared.body.data).toMatchObject({ redacted: true, total: 2 });
    expect(shared.body.data.items.map((i: { input: unknown; output: unknown; status: string }) => [i.input, i.output, i.status])).toEqual([
      [null, null, 'success'],
      [null, null, 'success'],
    ]);
  }, 60_000);
});

describe('a workflow as the body', () => {
  it('runs it per item with payload {item, index}; its output is the item result', async () => {
    const child = await create({ nodes: [{ id: 'shout', type: 'transform', config: { value: '{{ $uppercase(trigger.item) & $string(trigger.index) }}' } }] });
    const wf = await create({ nodes: [{ id: 'each', type: 'for_each', config: { items: ['x', 'y', 'z'], workflow_id: child.id, concurrency: 2 } }] });
    const view = await run(wf.id);
    expect(view.status, JSON.stringify(view.error)).toBe('success');
    expect(entry(view, 'each').output).toEqual({ total: 3, succeeded: 3, failed: 0, results: ['X0', 'Y1', 'Z2'] });
    const children = (await app.admin.get(`${E}?workflow_id=${child.id}`)).body.data;
    expect(children.total).toBe(3);
    expect(children.items.every((e: { trigger: string }) => e.trigger === 'child')).toBe(true);
  }, 120_000);

  it('fails before any item runs when the workflow is not visible to the run’s people', async () => {
    const editor = await app.createUser('editor');
    const hidden = await create({ nodes: [{ id: 'h', type: 'transform', config: { value: 1 } }] });
    const res = await editor.client.post(W, {
      title: 'Loop over hidden',
      trigger: { type: 'manual' },
      nodes: [{ id: 'each', type: 'for_each', config: { items: [1], workflow_id: hidden.id } }],
    });
    expect(res.status, res.text).toBe(201);
    const started = await editor.client.post(`${W}/${res.body.data.id}/run?wait=true`, { payload: {} });
    expect(started.body.data.status).toBe('failed');
    const view = (await editor.client.get(`${E}/${started.body.data.execution_id}`)).body.data;
    expect(view.error).toMatchObject({ code: 'not_found', node_id: 'each' });
  }, 120_000);
});

describe('saving a loop', () => {
  const save = (nodes: unknown[], edges: unknown[] = []) => app.admin.post(W, { title: 'bad loop', trigger: { type: 'manual' }, nodes, edges });
  const fields = (res: { body: { data: { errors: { field: string; message: string }[] } } }) => res.body.data.errors.map((e) => e.field);

  it('lists every problem of a body as of a graph, ids unique across the definition', async () => {
    const res = await save([
      { id: 'a', type: 'transform', config: { value: 1 } },
      {
        id: 'each',
        type: 'for_each',
        config: {
          items: '{{ trigger.x }}',
          concurrency: 101,
          body: {
            nodes: [
              { id: 'a', type: 'transform', config: { value: 1 } },
              { id: 'b', type: 'nope' },
              { id: 'c', type: 'http_request', config: { method: 'GET', path: '/' } },
              { id: 'd', type: 'transform', config: { value: '{{ ( }}' } },
            ],
            edges: [{ from: 'a', to: 'ghost' }],
          },
        },
      },
    ]);
    expect(res.status).toBe(400);
    expect(fields(res)).toEqual(
      expect.arrayContaining([
        'nodes.1.config.concurrency',
        'nodes.1.config.body.nodes.0.id',
        'nodes.1.config.body.nodes.1.type',
        'nodes.1.config.body.nodes.2.connection_id',
        'nodes.1.config.body.nodes.3.config.value',
        'nodes.1.config.body.edges.0.to',
      ]),
    );
  });

  it('needs either a body or a workflow_id, and output_node when the body has several sinks', async () => {
    const neither = await save([{ id: 'each', type: 'for_each', config: { items: [] } }]);
    expect(neither.status).toBe(400);
    expect(fields(neither)).toContain('nodes.0.config.body');
    const sinks = await save([
      {
        id: 'each',
        type: 'for_each',
        config: {
          items: [],
          body: {
            nodes: [
              { id: 'p', type: 'transform', config: { value: 1 } },
              { id: 'q', type: 'transform', config: { value: 2 } },
            ],
          },
        },
      },
    ]);
    expect(sinks.status).toBe(400);
    expect(sinks.body.data.errors).toContainEqual({ field: 'nodes.0.config.body.output_node', message: expect.stringContaining('several sink nodes (p, q)') });
  });

  it('checks the connections a body names against the people saving it', async () => {
    const editor = await app.createUser('editor');
    const res = await editor.client.post(W, {
      title: 'Loop with a foreign connection',
      trigger: { type: 'manual' },
      nodes: [
        {
          id: 'each',
          type: 'for_each',
          config: { items: [1], body: { nodes: [{ id: 'call', type: 'http_request', connection_id: connectionId, config: { method: 'GET', path: '/' } }] } },
        },
      ],
    });
    expect(res.status).toBe(400);
    expect(fields(res)).toEqual(['nodes.0.config.body.nodes.0.connection_id']);
  });
});

describe('large values in a loop', () => {
  it('passes large items, body outputs, item results and outer outputs by reference, never through history', async () => {
    const big = (tag: string) => `${tag}:${'x'.repeat(20_000)}`;
    const wf = await create({
      nodes: [
        { id: 'outer', type: 'transform', config: { value: { blob: '{{ $pad("o", 30000, "o") }}' } } },
        {
          id: 'each',
          type: 'for_each',
          config: {
            items: '{{ trigger.items }}',
            concurrency: 5,
            body: {
              nodes: [
                // A call makes the body one that runs node by node (a body of pure nodes only runs in batches).
                { id: 'ping', type: 'http_request', connection_id: connectionId, config: { method: 'GET', path: '/ping' } },
                { id: 'grow', type: 'transform', config: { value: { text: '{{ item.text & $substring(nodes.outer.blob, 0, 3) }}' } } },
                {
                  id: 'measure',
                  type: 'transform',
                  config: { value: { len: '{{ $length(nodes.grow.text) }}', head: '{{ $substring(nodes.grow.text, 0, 4) }}', big: '{{ nodes.grow.text }}' } },
                },
              ],
              edges: [
                { from: 'ping', to: 'grow' },
                { from: 'grow', to: 'measure' },
              ],
            },
          },
        },
      ],
      edges: [{ from: 'outer', to: 'each' }],
    });
    const payloadItems = Array.from({ length: 6 }, (_, i) => ({ text: big(`i${i}`) }));
    const view = await run(wf.id, { items: payloadItems });
    expect(view.status, JSON.stringify(view.error)).toBe('success');
    const results = entry(view, 'each').output.results;
    expect(results.map((r: { len: number; head: string }) => [r.len, r.head])).toEqual(payloadItems.map((p, i) => [p.text.length + 3, `i${i}:x`]));
    expect(results[5].big.endsWith('ooo')).toBe(true);
    // Each body output over the inline size was kept with its item, not in history.
    const [kept] = await app.sql<{ n: number }>(`select count(*)::int as n from execution_items where execution_id = $1 and refs ? 'measure'`, [view.id]);
    expect(kept!.n).toBe(6);
    const handle = app.stack.services.temporal.client.workflow.getHandle(`${view.temporal.workflow_id}/each`);
    const history = JSON.stringify((await handle.fetchHistory()).events);
    expect(history.length).toBeLessThan(200_000);
  }, 120_000);
});

describe('a run cancelled during a loop', () => {
  it('ends cancelled, with the loop cancelled and its items that never ran marked cancelled', async () => {
    const holding = await startGate();
    const conn = (
      await app.admin.post('/api/workflow/v1/connections', { type: 'http_bearer', label: 'hold', cred: 'tok-for-each-tests', extra: { base_url: holding.url } })
    ).body.data.id;
    try {
      const wf = await create({
        nodes: [
          {
            id: 'each',
            type: 'for_each',
            config: {
              items: '{{ [1..10] }}',
              concurrency: 2,
              body: { nodes: [{ id: 'get', type: 'http_request', connection_id: conn, config: { method: 'GET', path: '/c/{{ item }}' } }] },
            },
          },
        ],
      });
      const id = (await app.admin.post(`${W}/${wf.id}/run`, { payload: {} })).body.data.execution_id;
      await eventually(async () => holding.held === 2, 60_000, 'two items in flight');
      const running = (await app.admin.get(`${E}/${id}`)).body.data;
      await app.stack.services.temporal.client.workflow.getHandle(running.temporal.workflow_id).cancel();
      const view = await eventually(async () => {
        const v = (await app.admin.get(`${E}/${id}`)).body.data;
        return v.status === 'running' ? undefined : v;
      }, 60_000);
      expect(view.status).toBe('cancelled');
      expect(entry(view, 'each').status).toBe('cancelled');
      const listed = await eventually(async () => {
        const page = await items(id, 'each');
        return page.items.every((i: { status: string }) => i.status === 'cancelled') ? page : undefined;
      }, 30_000);
      expect(listed.total).toBe(10);
      expect(holding.seen.length).toBe(2);
    } finally {
      holding.release();
      holding.server.closeAllConnections();
      holding.server.close();
    }
  }, 120_000);
});

describe('a replay of the failed items only', () => {
  it('runs only the items that did not succeed, reuses the others and the upstream nodes, and goes on downstream with the merged results', async () => {
    const wf = await create({
      nodes: [
        { id: 'fetch', type: 'http_request', connection_id: connectionId, config: { method: 'GET', path: '/leads' } },
        {
          id: 'each',
          type: 'for_each',
          config: {
            items: '{{ [1..8] }}',
            concurrency: 1,
            body: {
              nodes: [
                {
                  id: 'send',
                  type: 'http_request',
                  connection_id: connectionId,
                  config: { method: 'POST', path: '/send/{{ item }}' },
                  retry: { max_attempts: 1 },
                },
                { id: 'sent', type: 'transform', config: { value: '{{ nodes.send.body.path }}' } },
              ],
              edges: [{ from: 'send', to: 'sent' }],
            },
          },
        },
        { id: 'report', type: 'transform', config: { value: { sent: '{{ nodes.each.succeeded }}', last: '{{ nodes.each.results[7] }}' } } },
      ],
      edges: [
        { from: 'fetch', to: 'each' },
        { from: 'each', to: 'report' },
      ],
    });
    refusing.add('/send/4');
    const first = await run(wf.id);
    expect(first.status).toBe('failed');
    expect(first.error).toMatchObject({ code: 'item_failed', node_id: 'each' });
    expect((await items(first.id, 'each')).items.map((i: { status: string }) => i.status)).toEqual([
      'success',
      'success',
      'success',
      'failed',
      'skipped',
      'skipped',
      'skipped',
      'skipped',
    ]);

    // What it would do, then doing it, once the target takes item 4.
    const plan = await app.admin.post(`${E}/${first.id}/replay`, { from_node_id: 'each', only_failed_items: true, dry_run: true });
    expect(plan.status, plan.text).toBe(200);
    expect(plan.body.data).toMatchObject({ mode: 'rerun', run: ['each', 'report'], reused: ['fetch'], items: { reused: 3, run: 5 } });
    refusing.delete('/send/4');
    const replayed = await app.admin.post(`${E}/${first.id}/replay`, { from_node_id: 'each', only_failed_items: true });
    expect(replayed.status, replayed.text).toBe(202);
    const view = await eventually(async () => {
      const v = (await app.admin.get(`${E}/${replayed.body.data.execution_id}`)).body.data;
      return v.status === 'running' ? undefined : v;
    }, 120_000);
    expect(view.status, JSON.stringify(view.error)).toBe('success');
    expect(view.replay_of).toBe(first.id);
    expect(view.output).toEqual({ sent: 8, last: '/send/8' });
    expect(entry(view, 'fetch').reused).toBe(true);
    expect(entry(view, 'each').output.results).toEqual(Array.from({ length: 8 }, (_, i) => `/send/${i + 1}`));
    const listed = (await items(view.id, 'each')).items;
    expect(listed.map((i: { reused: boolean }) => i.reused)).toEqual([true, true, true, false, false, false, false, false]);
    // Nothing sent twice but item 4, which failed the first time; the upstream fetch ran once.
    for (let i = 1; i <= 8; i++) expect(target.count(`/send/${i}`), `item ${i}`).toBe(i === 4 ? 2 : 1);
    expect(target.count('/leads')).toBe(1);

    // A replay from a node after the loop reuses the loop: its items are listed with it, reused.
    const after = await app.admin.post(`${E}/${view.id}/replay`, { from_node_id: 'report' });
    const afterView = await eventually(async () => {
      const v = (await app.admin.get(`${E}/${after.body.data.execution_id}`)).body.data;
      return v.status === 'running' ? undefined : v;
    }, 120_000);
    expect(afterView.status).toBe('success');
    expect(entry(afterView, 'each').reused).toBe(true);
    const carried = await items(afterView.id, 'each');
    expect(carried.total).toBe(8);
    expect(carried.items.every((i: { reused: boolean; status: string }) => i.reused && i.status === 'success')).toBe(true);
  }, 180_000);

  it('reaches into nested loops: an outer item that failed runs again, and its inner loop reuses the inner items that succeeded', async () => {
    const wf = await create({
      nodes: [
        {
          id: 'outer',
          type: 'for_each',
          config: {
            items: ['a', 'b'],
            on_item_error: 'continue',
            body: {
              nodes: [
                { id: 'name', type: 'transform', config: { value: '{{ item }}' } },
                {
                  id: 'inner',
                  type: 'for_each',
                  config: {
                    items: [1, 2, 3],
                    concurrency: 1,
                    body: {
                      nodes: [
                        {
                          id: 'put',
                          type: 'http_request',
                          connection_id: connectionId,
                          config: { method: 'PUT', path: '/n/{{ nodes.name }}{{ item }}' },
                          retry: { max_attempts: 1 },
                        },
                      ],
                    },
                  },
                },
              ],
              edges: [{ from: 'name', to: 'inner' }],
            },
          },
        },
      ],
    });
    refusing.add('/n/b3');
    const first = await run(wf.id);
    expect(first.status).toBe('partial');
    expect(entry(first, 'outer').output).toMatchObject({ succeeded: 1, failed: 1 });
    refusing.delete('/n/b3');
    const replayed = await app.admin.post(`${E}/${first.id}/replay`, { from_node_id: 'outer', only_failed_items: true });
    const view = await eventually(async () => {
      const v = (await app.admin.get(`${E}/${replayed.body.data.execution_id}`)).body.data;
      return v.status === 'running' ? undefined : v;
    }, 120_000);
    expect(view.status, JSON.stringify(view.error)).toBe('success');
    expect((await items(view.id, 'outer')).items.map((i: { reused: boolean }) => i.reused)).toEqual([true, false]);
    const inner = await items(view.id, 'inner', '?scope=1');
    expect(inner.items.map((i: { reused: boolean; status: string }) => [i.reused, i.status])).toEqual([
      [true, 'success'],
      [true, 'success'],
      [false, 'success'],
    ]);
    expect(['/n/a1', '/n/a2', '/n/a3', '/n/b1', '/n/b2', '/n/b3'].map((p) => target.count(p))).toEqual([1, 1, 1, 1, 1, 2]);
  }, 180_000);

  it('is refused without a for_each node to replay from', async () => {
    const wf = await create({ nodes: [{ id: 'plain', type: 'transform', config: { value: 1 } }] });
    const done = await run(wf.id);
    const noNode = await app.admin.post(`${E}/${done.id}/replay`, { only_failed_items: true });
    expect(noNode.status).toBe(400);
    expect(noNode.body.error).toBe('invalid_request');
    const notLoop = await app.admin.post(`${E}/${done.id}/replay`, { from_node_id: 'plain', only_failed_items: true });
    expect(notLoop.status).toBe(400);
    expect(notLoop.body.message).toContain('transform node');
  }, 60_000);
});

describe('a loop longer than one history', () => {
  it('continues as new within SVC_FOR_EACH_HISTORY_EVENTS, losing no item and running none twice', async () => {
    const wf = await create({
      nodes: [
        {
          id: 'many',
          type: 'for_each',
          config: {
            items: '{{ [0..149] }}',
            concurrency: 7,
            body: {
              nodes: [
                { id: 'a', type: 'http_request', connection_id: connectionId, config: { method: 'GET', path: '/n/{{ item + 1 }}' } },
                { id: 'b', type: 'transform', config: { value: '{{ $number($substringAfter(nodes.a.body.path, "/n/")) * 10 }}' } },
              ],
              edges: [{ from: 'a', to: 'b' }],
            },
          },
        },
      ],
    });
    const view = await run(wf.id);
    expect(view.status, JSON.stringify(view.error)).toBe('success');
    expect(entry(view, 'many').output.results).toEqual(Array.from({ length: 150 }, (_, i) => (i + 1) * 10));
    for (let i = 1; i <= 150; i++) expect(target.count(`/n/${i}`)).toBe(1);
    const client = app.stack.services.temporal.client;
    const first = (await client.workflow.getHandle(view.temporal.workflow_id, view.temporal.run_id).fetchHistory()).events!.find(
      (e) => e.childWorkflowExecutionStartedEventAttributes,
    )!.childWorkflowExecutionStartedEventAttributes!.workflowExecution!;
    const lengths: number[] = [];
    for (let runId: string | undefined = first.runId!; runId;) {
      const events: { workflowExecutionContinuedAsNewEventAttributes?: { newExecutionRunId?: string | null } | null }[] =
        (await client.workflow.getHandle(first.workflowId!, runId).fetchHistory()).events ?? [];
      lengths.push(events.length);
      runId = events.at(-1)?.workflowExecutionContinuedAsNewEventAttributes?.newExecutionRunId ?? undefined;
    }
    expect(lengths.length, JSON.stringify(lengths)).toBeGreaterThan(1);
    for (const length of lengths) expect(length).toBeLessThanOrEqual(500);
  }, 180_000);
});

describe('a body of pure nodes', () => {
  it('runs in batches with the graph’s rules: branches, a failure taking its error edge, a failure failing its item', async () => {
    const wf = await create({
      nodes: [
        {
          id: 'each',
          type: 'for_each',
          config: {
            items: '{{ [1..6] }}',
            concurrency: 4,
            on_item_error: 'continue',
            body: {
              nodes: [
                { id: 'check', type: 'condition', config: { expression: '{{ item % 3 = 0 }}' } },
                { id: 'boom', type: 'fail', on_error: 'branch', config: { message: 'divisible', code: 'divisible' } },
                { id: 'rescue', type: 'transform', config: { value: '{{ "rescued: " & nodes.boom.error.message }}' } },
                { id: 'plain', type: 'transform', config: { value: '{{ item = 5 ? $error("five") : item }}' } },
                { id: 'out', type: 'transform', config: { value: '{{ $exists(nodes.rescue) ? nodes.rescue : nodes.plain }}' } },
              ],
              edges: [
                { from: 'check', to: 'boom', branch: 'true' },
                { from: 'boom', to: 'rescue', branch: 'error' },
                { from: 'check', to: 'plain', branch: 'false' },
                { from: 'rescue', to: 'out' },
                { from: 'plain', to: 'out' },
              ],
            },
          },
        },
      ],
    });
    const view = await run(wf.id);
    expect(view.status, JSON.stringify(view.error)).toBe('partial');
    expect(entry(view, 'each').output).toEqual({ total: 6, succeeded: 5, failed: 1, results: [1, 2, 'rescued: divisible', 4, null, 'rescued: divisible'] });
    const failed = (await items(view.id, 'each', '?status=failed')).items;
    expect(failed).toHaveLength(1);
    expect(failed[0]).toMatchObject({ index: 4, error: { code: 'expression_error', node_id: 'plain' } });
  }, 60_000);
});

describe('the worked examples of docs/workflows.md', () => {
  it('1,000 items in batches of 50, at most 5 calls in flight, retrying just the batch that failed', async () => {
    const wf = await create({
      nodes: [
        { id: 'load', type: 'http_request', connection_id: connectionId, config: { method: 'GET', path: '/export?limit=1000' } },
        {
          id: 'batches',
          type: 'for_each',
          config: {
            items: '{{ $map([0..$ceil($count(nodes.load.body.rows) / 50) - 1], function($i) { [nodes.load.body.rows[[$i * 50 .. $i * 50 + 49]]] }) }}',
            concurrency: 5,
            on_item_error: 'continue',
            body: {
              nodes: [
                {
                  id: 'import',
                  type: 'http_request',
                  connection_id: connectionId,
                  retry: { max_attempts: 3, initial_interval_ms: 10 },
                  config: { method: 'POST', path: '/import', body: { batch: '{{ index }}', rows: '{{ item }}' } },
                },
              ],
            },
          },
        },
        {
          id: 'report',
          type: 'transform',
          config: { value: { imported: '{{ nodes.batches.succeeded * 50 }}', failed_batches: '{{ nodes.batches.failed }}' } },
        },
      ],
      edges: [
        { from: 'load', to: 'batches' },
        { from: 'batches', to: 'report' },
      ],
    });
    refusing.add('batch:13');
    const first = await run(wf.id);
    expect(first.status).toBe('partial');
    expect(first.output).toEqual({ imported: 950, failed_batches: 1 });
    const failed = (await items(first.id, 'batches', '?status=failed')).items;
    expect(failed.map((i: { index: number; attempts: number; error: { code: string } }) => [i.index, i.attempts, i.error.code])).toEqual([
      [13, 3, 'http_error'],
    ]);
    // Every row was sent in a batch of 50, batch 13 three times.
    expect(imported.filter((b) => b.batch === 13)).toHaveLength(3);
    expect(new Set(imported.flatMap((b) => b.rows.map((r) => r.id))).size).toBe(1000);

    const plan = await app.admin.post(`${E}/${first.id}/replay`, { from_node_id: 'batches', only_failed_items: true, dry_run: true });
    expect(plan.body.data).toMatchObject({ run: ['batches', 'report'], reused: ['load'], items: { reused: 19, run: 1 } });
    refusing.delete('batch:13');
    const sentBefore = imported.length;
    const replayed = await app.admin.post(`${E}/${first.id}/replay`, { from_node_id: 'batches', only_failed_items: true });
    const view = await eventually(async () => {
      const v = (await app.admin.get(`${E}/${replayed.body.data.execution_id}`)).body.data;
      return v.status === 'running' ? undefined : v;
    }, 120_000);
    expect(view.status).toBe('success');
    expect(view.output).toEqual({ imported: 1000, failed_batches: 0 });
    expect(imported.slice(sentBefore).map((b) => b.batch)).toEqual([13]);
  }, 180_000);

  it('fetch 50 leads and create a record per new one', async () => {
    const entity = await app.admin.post('/api/management/v1/entities', {
      slug: 'lead',
      name: 'Lead',
      schema: { fields: { name: { type: 'string', required: true }, email: { type: 'string', required: true } } },
    });
    expect(entity.status, entity.text).toBe(201);
    for (const i of [3, 7, 11]) {
      expect((await app.admin.post('/api/management/v1/records/lead', { name: `Lead ${i}`, email: `lead${i}@example.com` })).status).toBe(201);
    }
    const wf = await create({
      nodes: [
        { id: 'fetch', type: 'http_request', connection_id: connectionId, config: { method: 'GET', path: '/leads?limit=50' } },
        {
          id: 'each',
          type: 'for_each',
          config: {
            items: '{{ nodes.fetch.body.leads }}',
            concurrency: 5,
            body: {
              nodes: [
                { id: 'known', type: 'record_query', config: { entity: 'lead', eql: 'email = :email', params: { email: '{{ item.email }}' }, per_page: 1 } },
                { id: 'is_new', type: 'condition', config: { expression: '{{ nodes.known.total = 0 }}' } },
                { id: 'create', type: 'record_create', config: { entity: 'lead', fields: { name: '{{ item.name }}', email: '{{ item.email }}' } } },
              ],
              edges: [
                { from: 'known', to: 'is_new' },
                { from: 'is_new', to: 'create', branch: 'true' },
              ],
            },
          },
        },
      ],
      edges: [{ from: 'fetch', to: 'each' }],
    });
    const view = await run(wf.id);
    expect(view.status, JSON.stringify(view.error)).toBe('success');
    const output = entry(view, 'each').output;
    expect(output).toMatchObject({ total: 50, succeeded: 50, failed: 0 });
    expect(
      output.results.filter((r: unknown) => r === null),
      JSON.stringify(output.results.slice(0, 4)),
    ).toHaveLength(3);
    expect(output.results[0]).toMatchObject({ email: 'lead0@example.com' });
    const records = (await app.admin.get('/api/management/v1/records/lead?per_page=100')).body.data;
    expect(records.total).toBe(50);
  }, 180_000);
});
