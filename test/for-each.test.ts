// for_each: a body run per item, `concurrency` at a time, every item listed by index, nested loops
// running every inner item for every outer item, failures stopping the loop or recorded and
// passed over, and what is refused (a list that is no list, too long a list, a body that cannot
// say which node gives the result).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from './helpers/app.js';
import { eventually, startHttpTarget, type HttpTarget } from './helpers/http-target.js';

let app: TestApp;
let target: HttpTarget;
let connectionId: number;
const W = '/api/workflow/v1/workflows';
const E = '/api/workflow/v1/executions';

beforeAll(async () => {
  app = await startTestApp({ worker: true, env: { SVC_FOR_EACH_MAX_ITEMS: '500' } });
  target = await startHttpTarget((req) => {
    if (req.url.startsWith('/fail/')) return { status: 422, body: { error: 'refused', path: req.url } };
    if (req.url.startsWith('/slow/')) return { delayMs: 300 };
    return undefined;
  });
  connectionId = (await app.admin.post('/api/workflow/v1/connections', { type: 'http_bearer', label: 'target', cred: 'x', extra: { base_url: target.url } }))
    .body.data.id;
});
afterAll(async () => {
  await app?.close();
  await target?.close();
});

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
