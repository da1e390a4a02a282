import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Worker, bundleWorkflowCode } from '@temporalio/worker';
import { afterAll, beforeAll, expect, inject, it } from 'vitest';
import { NODE_FINISHED_MEMO, NODE_FINISHED_MEMO_PATCH } from '../workflows/defs.js';
import { startWorker, type RunningWorker } from '../src/temporal/worker.js';
import { startTestApp, type TestApp } from './helpers/app.js';
import { eventually } from './helpers/http-target.js';

/**
 * A run started on the old workflow code finishes on the new: the `node-finished-memo` change is
 * behind patched(), so the new code replays the old part of the history as the old code wrote it
 * and only adds the new commands from where it takes over.
 */
let app: TestApp;
let oldBundle: string;
const workers: RunningWorker[] = [];

beforeAll(async () => {
  app = await startTestApp();
  const dir = await mkdtemp(join(tmpdir(), 'svc-old-workflows-'));
  oldBundle = join(dir, 'bundle.js');
  const { code } = await bundleWorkflowCode({
    workflowsPath: fileURLToPath(new URL('./fixtures/workflows-2026-11-23/index.ts', import.meta.url)),
    logger: { trace() {}, debug() {}, info() {}, warn() {}, error() {}, log() {} },
  });
  await writeFile(oldBundle, code);
});
afterAll(async () => {
  for (const worker of workers) await worker.shutdown();
  await app?.close();
});

it('a run started on the old code finishes on the new, with the new behaviour from the switch on', async () => {
  const created = await app.admin.post('/api/workflow/v1/workflows', {
    title: 'upgrade',
    trigger: { type: 'manual' },
    nodes: [
      { id: 'before', type: 'transform', config: { value: 1 } },
      { id: 'pause', type: 'delay', config: { duration_ms: 10_000 } },
      { id: 'after', type: 'transform', config: { value: '{{ nodes.before + 1 }}' } },
    ],
    edges: [
      { from: 'before', to: 'pause' },
      { from: 'pause', to: 'after' },
    ],
  });
  expect(created.status, created.text).toBe(201);
  const old = await startWorker(app.stack.services, inject('temporalAddress'), { bundlePath: oldBundle });
  workers.push(old);
  const started = await app.admin.post(`/api/workflow/v1/workflows/${created.body.data.id}/run`, { payload: {} });
  const executionId = started.body.data.execution_id as number;
  await eventually(
    async () => (await app.sql(`select 1 from execution_nodes where execution_id = $1 and node_id = 'pause' and status = 'running'`, [executionId])).length > 0,
  );
  // The deployment: the old worker stops while the run waits, the new one takes over.
  await old.shutdown();
  workers.push(await startWorker(app.stack.services, inject('temporalAddress'), { bundlePath: inject('workflowBundle') }));

  const done = await eventually(
    async () => {
      const view = (await app.admin.get(`/api/workflow/v1/executions/${executionId}`)).body.data;
      return view.status !== 'running' ? view : undefined;
    },
    90_000,
    'the run to finish on the new worker',
  );
  expect(done).toMatchObject({ status: 'success', output: 2 });
  expect(done.timeline.map((t: any) => [t.node_id, t.status])).toEqual([
    ['before', 'success'],
    ['pause', 'success'],
    ['after', 'success'],
  ]);

  const handle = app.stack.services.temporal.client.workflow.getHandle(app.stack.services.temporal.executionWorkflowId(executionId));
  // The record is final before Temporal has written the run's last workflow task (where `pause`
  // and `after` are marked finished): read the history once the run has closed.
  await handle.result();
  const history = await handle.fetchHistory();
  const finishedMemos: string[] = [];
  let patchMarkers = 0;
  for (const event of history.events ?? []) {
    const memo = event.workflowPropertiesModifiedEventAttributes?.upsertedMemo?.fields?.[NODE_FINISHED_MEMO];
    if (memo) finishedMemos.push(((await app.stack.services.temporal.decode(memo)) as { node: string }).node);
    const marker = event.markerRecordedEventAttributes;
    if (marker?.markerName === 'core_patch') {
      const id = await app.stack.services.temporal.decode(marker.details!['patch-data']!.payloads![0]!);
      if ((id as { id?: string }).id === NODE_FINISHED_MEMO_PATCH) patchMarkers++;
    }
  }
  // `before` finished on the old code (no memo); the new code marked what finished after the switch.
  expect(finishedMemos).toEqual(['pause', 'after']);
  expect(patchMarkers).toBe(1);
  // And the whole mixed history replays on the new code.
  await Worker.runReplayHistory(
    { workflowBundle: { codePath: inject('workflowBundle') }, dataConverter: { payloadCodecs: [app.stack.services.temporal.codec] } },
    history,
    handle.workflowId,
  );
});
