import { afterAll, beforeAll, expect, it } from 'vitest';
import { startTestApp, type TestApp } from './helpers/app.js';

let app: TestApp;
beforeAll(async () => {
  app = await startTestApp({ worker: true });
});
afterAll(async () => app?.close());

it('runs a branching graph end to end', async () => {
  const created = await app.admin.post('/api/workflow/v1/workflows', {
    title: 'Smoke',
    trigger: { type: 'manual' },
    nodes: [
      { id: 'start', type: 'transform', config: { value: { n: '{{ trigger.n * 2 }}' } } },
      { id: 'big', type: 'condition', config: { expression: '{{ nodes.start.n > 10 }}' } },
      { id: 'yes', type: 'transform', config: { value: 'big {{ nodes.start.n }}' } },
      { id: 'no', type: 'transform', config: { value: 'small' } },
    ],
    edges: [
      { from: 'start', to: 'big' },
      { from: 'big', to: 'yes', branch: 'true' },
      { from: 'big', to: 'no', branch: 'false' },
    ],
  });
  expect(created.status, created.text).toBe(201);
  const run = await app.admin.post(`/api/workflow/v1/workflows/${created.body.data.id}/run?wait=true`, { payload: { n: 7 } });
  expect(run.status, run.text).toBe(200);
  expect(run.body.data).toMatchObject({ status: 'success', output: 'big 14' });
  const view = await app.admin.get(`/api/workflow/v1/executions/${run.body.data.execution_id}`);
  expect(view.status, view.text).toBe(200);
  const byId = Object.fromEntries(view.body.data.timeline.map((t: any) => [t.node_id, t]));
  expect(byId.yes.status).toBe('success');
  expect(byId.no.status).toBe('skipped');
});
