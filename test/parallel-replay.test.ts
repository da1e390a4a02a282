// A run replays from its own history whatever order its parallel local nodes finished in. A
// worker replays a run after a restart, or once the run left its cache (a long delay does that):
// before local results went through the run's gate, a timer, an activity or a child started while
// other local nodes still ran was issued in another order on replay, a nondeterminism error that
// left the run stuck.
import { Worker } from '@temporalio/worker';
import { afterAll, beforeAll, expect, inject, it } from 'vitest';
import { startTestApp, type TestApp } from './helpers/app.js';
import { closedHistory } from './helpers/history.js';

let app: TestApp;
beforeAll(async () => {
  app = await startTestApp({ worker: true });
});
afterAll(async () => app?.close());

async function runThenReplay(nodes: unknown[], edges: unknown[]): Promise<void> {
  const created = await app.admin.post('/api/workflow/v1/workflows', { title: `parallel ${Math.random()}`, trigger: { type: 'manual' }, nodes, edges });
  expect(created.status, created.text).toBe(201);
  const run = await app.admin.post(`/api/workflow/v1/workflows/${created.body.data.id}/run?wait=true&timeout_ms=90000`, { payload: {} });
  expect(run.body.data.status, run.text).toBe('success');
  const view = (await app.admin.get(`/api/workflow/v1/executions/${run.body.data.execution_id}`)).body.data;
  const handle = app.stack.services.temporal.client.workflow.getHandle(view.temporal.workflow_id, view.temporal.run_id);
  await Worker.runReplayHistory(
    { workflowBundle: { codePath: inject('workflowBundle') }, dataConverter: { payloadCodecs: [app.stack.services.temporal.codec] } },
    await closedHistory(handle),
    view.temporal.workflow_id,
  );
}

// Local nodes of different weights, so they finish in another order than they started.
const weighted = (ids: string[]) =>
  ids.map((id, i) => ({ id, type: 'transform', config: { value: `{{ $sum([1..${Math.round(((ids.length - i) / ids.length) * 90000)}]) }}` } }));

for (const round of [1, 2, 3]) {
  it(`replays parallel local nodes beside timers, one started after a local node ended (round ${round})`, async () => {
    const wide = Array.from({ length: 6 }, (_, i) => `w${i}`);
    await runThenReplay(
      [
        { id: 'make', type: 'transform', config: { value: 1 } },
        ...weighted(wide),
        { id: 'd', type: 'delay', config: { duration_ms: 100 } },
        { id: 'd2', type: 'delay', config: { duration_ms: 100 } },
      ],
      [...wide.map((w) => ({ from: 'make', to: w })), { from: 'make', to: 'd' }, { from: 'w5', to: 'd2' }],
    );
  });

  it(`replays a child run started while forty local nodes still run (round ${round})`, async () => {
    const child = await app.admin.post('/api/workflow/v1/workflows', {
      title: `child ${Math.random()}`,
      trigger: { type: 'manual' },
      nodes: [{ id: 'x', type: 'transform', config: { value: 1 } }],
    });
    const wide = Array.from({ length: 40 }, (_, i) => `w${i}`);
    await runThenReplay(
      [
        { id: 'make', type: 'transform', config: { value: 1 } },
        ...weighted(wide),
        { id: 'call', type: 'run_workflow', config: { workflow_id: child.body.data.id, payload: {} } },
        { id: 'last', type: 'transform', config: { value: 2 } },
      ],
      [...wide.map((w) => ({ from: 'make', to: w })), { from: 'w39', to: 'call' }, ...wide.map((w) => ({ from: w, to: 'last' })), { from: 'call', to: 'last' }],
    );
  });
}
