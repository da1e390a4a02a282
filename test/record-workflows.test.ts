import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from './helpers/app.js';
import { eventually } from './helpers/http-target.js';

let app: TestApp;
const W = '/api/workflow/v1/workflows';
const R = '/api/management/v1/records';

beforeAll(async () => {
  app = await startTestApp({ worker: true });
  const entity = await app.admin.post('/api/management/v1/entities', {
    slug: 'lead',
    name: 'Lead',
    schema: { fields: { name: { type: 'string', required: true }, score: { type: 'integer' }, stage: { type: 'enum', values: ['new', 'hot'] } } },
  });
  expect(entity.status, entity.text).toBe(201);
});
afterAll(async () => app?.close());

describe('record trigger', () => {
  it('starts a run for each committed create and update of the entity, with the record as payload', async () => {
    const workflow = await app.admin.post(W, {
      title: 'Score leads',
      status: 'active',
      trigger: { type: 'record', config: { entity: 'lead', events: ['created'] } },
      nodes: [
        { id: 'hot', type: 'condition', config: { expression: '{{ trigger.record.score > 50 }}' } },
        { id: 'mark', type: 'record_update', config: { entity: 'lead', uuid: '{{ trigger.record.uuid }}', fields: { stage: 'hot' } } },
      ],
      edges: [{ from: 'hot', to: 'mark', branch: 'true' }],
    });
    expect(workflow.status, workflow.text).toBe(201);
    const created = await app.admin.post(R + '/lead', { name: 'Ada', score: 90 });
    expect(created.status, created.text).toBe(201);
    const uuid = created.body.data.uuid;
    const run = await eventually(
      async () => {
        const list = (await app.admin.get(`/api/workflow/v1/executions?workflow_id=${workflow.body.data.id}&status=success`)).body.data;
        return list.total ? list.items[0] : undefined;
      },
      60_000,
      'the record-triggered run',
    );
    expect(run.trigger).toBe('record');
    const view = (await app.admin.get(`/api/workflow/v1/executions/${run.id}`)).body.data;
    expect(view.trigger_payload).toMatchObject({ entity: 'lead', action: 'created', record: { uuid, name: 'Ada', score: 90 } });
    expect((await app.admin.get(`${R}/lead/${uuid}`)).body.data.stage).toBe('hot');
    // Updates are not among this workflow's events: the update its own node made started nothing.
    expect((await app.admin.get(`/api/workflow/v1/executions?workflow_id=${workflow.body.data.id}`)).body.data.total).toBe(1);
  });

  it('refuses a record trigger or node config of the wrong shape', async () => {
    const trigger = await app.admin.post(W, {
      title: 'Bad trigger',
      trigger: { type: 'record', config: { entity: 'lead', events: ['exploded'] } },
      nodes: [{ id: 'q', type: 'record_query', config: { entity: 'lead' } }],
    });
    expect(trigger.status).toBe(400);
    expect(trigger.body.data.errors.map((e: { field: string }) => e.field)).toEqual(['trigger.config.events.0']);
    const node = await app.admin.post(W, {
      title: 'Bad node',
      trigger: { type: 'record', config: { entity: 'lead' } },
      nodes: [{ id: 'q', type: 'record_query', config: { entity: 'lead', per_page: 500 } }],
    });
    expect(node.status).toBe(400);
    expect(node.body.data.errors.map((e: { field: string }) => e.field)).toEqual(['nodes.0.config.per_page']);
  });
});

describe('record nodes', () => {
  it("create and query records with the owner's capabilities", async () => {
    const workflow = await app.admin.post(W, {
      title: 'Create and count',
      trigger: { type: 'manual' },
      nodes: [
        { id: 'make', type: 'record_create', config: { entity: 'lead', fields: { name: '{{ trigger.name }}', score: '{{ trigger.score }}' } } },
        { id: 'find', type: 'record_query', config: { entity: 'lead', eql: 'name = :name', params: { name: '{{ trigger.name }}' }, per_page: 5 } },
      ],
      edges: [{ from: 'make', to: 'find' }],
    });
    const run = await app.admin.post(`${W}/${workflow.body.data.id}/run?wait=true&timeout_ms=90000`, { payload: { name: 'Grace', score: 12 } });
    expect(run.body.data.status).toBe('success');
    expect(run.body.data.output).toMatchObject({ total: 1, items: [{ name: 'Grace', score: 12 }] });
  });

  it('binds record_query params as values: a webhook caller cannot widen the filter', async () => {
    // Orders of two customers; a webhook marks one order paid, found by its order_id.
    const entity = await app.admin.post('/api/management/v1/entities', {
      slug: 'shop_order',
      name: 'Order',
      schema: { fields: { order_id: { type: 'string', required: true }, status: { type: 'enum', values: ['pending', 'paid'] } } },
    });
    expect(entity.status, entity.text).toBe(201);
    for (const id of ['A-1', 'B-2', 'C-3']) expect((await app.admin.post(`${R}/shop_order`, { order_id: id, status: 'pending' })).status).toBe(201);
    const pay = (config: Record<string, unknown>) => ({
      title: `Pay ${JSON.stringify(config).slice(0, 40)}`,
      status: 'active',
      trigger: { type: 'webhook', config: { respond: 'last_node' } },
      nodes: [
        { id: 'find', type: 'record_query', config: { entity: 'shop_order', per_page: 10, ...config } },
        { id: 'found', type: 'transform', config: { value: { ids: '{{ [nodes.find.items.order_id] }}', total: '{{ nodes.find.total }}' } } },
      ],
      edges: [{ from: 'find', to: 'found' }],
    });
    const hook = async (workflow: { slug: string; webhook: { secret: string } }, orderId: string) => {
      const res = await app.anonymous.post(
        `/api/workflow/v1/hooks/${workflow.slug}`,
        { order_id: orderId },
        { headers: { 'x-webhook-secret': workflow.webhook.secret } },
      );
      expect(res.status, res.text).toBe(200);
      return res.body.data.output as { ids: string[]; total: number };
    };
    const hostile = "zzz' or status = 'pending";
    const bound = await app.admin.post(W, pay({ eql: 'order_id = :order_id', params: { order_id: '{{ trigger.order_id }}' } }));
    expect(bound.status, bound.text).toBe(201);
    expect(await hook(bound.body.data, 'B-2')).toEqual({ ids: ['B-2'], total: 1 });
    expect(await hook(bound.body.data, hostile)).toEqual({ ids: [], total: 0 });
    // What params prevent: the same filter spliced together from the payload matches every pending order.
    const spliced = await app.admin.post(W, pay({ eql: "order_id = '{{ trigger.order_id }}'" }));
    expect((await hook(spliced.body.data, hostile)).total).toBe(3);
  });

  it('refuses a record_query whose params and eql do not match when the workflow is saved, and at run time', async () => {
    const save = (config: Record<string, unknown>) =>
      app.admin.post(W, { title: 'Params', trigger: { type: 'manual' }, nodes: [{ id: 'q', type: 'record_query', config: { entity: 'lead', ...config } }] });
    for (const [config, field, message] of [
      [{ eql: 'name = :name' }, 'nodes.0.config.params', /no value for the parameter :name/],
      [{ eql: 'name = :name', params: { name: 'x', nmae: 'y' } }, 'nodes.0.config.params.nmae', /not used by the expression/],
      [{ params: { name: 'x' } }, 'nodes.0.config.params.name', /there is no eql/],
      [{ eql: ':name = 1', params: { name: 'x' } }, 'nodes.0.config.eql', /stands where a field name goes/],
      [{ eql: 'name = :name', params: { 'bad-name': 1, name: 'x' } }, 'nodes.0.config.params.bad-name', /parameter name/],
    ] as const) {
      const res = await save(config);
      expect(res.status, JSON.stringify(config)).toBe(400);
      const problem = res.body.data.errors.find((e: { field: string }) => e.field === field);
      expect(problem?.message, `${JSON.stringify(config)}: ${res.text}`).toMatch(message);
    }
    // A filter built by an expression is checked when the node runs: invalid_eql, not retried.
    const late = await save({ eql: '{{ trigger.filter }}', params: { name: '{{ trigger.name }}' } });
    expect(late.status, late.text).toBe(201);
    const run = await app.admin.post(`${W}/${late.body.data.id}/run?wait=true&timeout_ms=90000`, { payload: { filter: 'score = :name', name: 'x' } });
    expect(run.body.data.status).toBe('failed');
    const view = (await app.admin.get(`/api/workflow/v1/executions/${run.body.data.execution_id}`)).body.data;
    expect(view.timeline[0]).toMatchObject({
      status: 'failed',
      attempts: 1,
      error: { code: 'invalid_eql', message: expect.stringContaining('score takes an integer') },
    });
  });

  it('fails the node without retrying when the record is invalid', async () => {
    const workflow = await app.admin.post(W, {
      title: 'Invalid record',
      trigger: { type: 'manual' },
      nodes: [{ id: 'make', type: 'record_create', config: { entity: 'lead', fields: { score: 'lots' } } }],
    });
    const run = await app.admin.post(`${W}/${workflow.body.data.id}/run?wait=true&timeout_ms=90000`, { payload: {} });
    expect(run.body.data.status).toBe('failed');
    const view = (await app.admin.get(`/api/workflow/v1/executions/${run.body.data.execution_id}`)).body.data;
    expect(view.timeline[0]).toMatchObject({ status: 'failed', attempts: 1, error: { code: 'validation_failed' } });
  });
});
