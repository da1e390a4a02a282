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
        { id: 'find', type: 'record_query', config: { entity: 'lead', eql: "name = '{{ trigger.name }}'", per_page: 5 } },
      ],
      edges: [{ from: 'make', to: 'find' }],
    });
    const run = await app.admin.post(`${W}/${workflow.body.data.id}/run?wait=true&timeout_ms=90000`, { payload: { name: 'Grace', score: 12 } });
    expect(run.body.data.status).toBe('success');
    expect(run.body.data.output).toMatchObject({ total: 1, items: [{ name: 'Grace', score: 12 }] });
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
