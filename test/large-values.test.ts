// Large payloads and node outputs never make a workflow task too large for Temporal (gRPC's 4 MiB a
// message): they stay in PostgreSQL and travel by reference. Each shape here left its run stuck
// for ever before, Temporal retrying a task it could not accept (and in the second shape the
// execution record said `success` while Temporal still ran the workflow).
import proto from '@temporalio/proto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from './helpers/app.js';
import { eventually, startHttpTarget, type HttpTarget } from './helpers/http-target.js';

const { HistoryEvent } = proto.temporal.api.history.v1;
const { EventType } = proto.temporal.api.enums.v1;

let app: TestApp;
let target: HttpTarget;
const W = '/api/workflow/v1/workflows';
const E = '/api/workflow/v1/executions';

beforeAll(async () => {
  // The join reads 6 MB of outputs: on a loaded machine that may take more than the default second.
  app = await startTestApp({ worker: true, env: { SVC_EXPRESSION_TIMEOUT_MS: '10000' } });
  const entity = await app.admin.post('/api/management/v1/entities', {
    slug: 'purchase',
    name: 'Purchase',
    schema: { fields: { ref: { type: 'string', required: true } } },
  });
  expect(entity.status, entity.text).toBe(201);
  expect((await app.admin.post('/api/management/v1/records/purchase', { ref: 'o-1' })).status).toBe(201);
  target = await startHttpTarget(() => ({ status: 402, body: { error: 'card declined', text: 'd'.repeat(100_000) } }));
});
afterAll(async () => {
  await app?.close();
  await target?.close();
});

async function create(def: Record<string, unknown>) {
  const res = await app.admin.post(W, { title: `large ${Math.random()}`, trigger: { type: 'manual' }, edges: [], ...def });
  expect(res.status, res.text).toBe(201);
  return res.body.data;
}

/** Waits until the execution has ended in the record and in Temporal; answers both. */
async function ended(executionId: number) {
  return eventually(async () => {
    const view = (await app.admin.get(`${E}/${executionId}`)).body.data;
    if (view.status === 'running') return undefined;
    const handle = app.stack.services.temporal.client.workflow.getHandle(view.temporal.workflow_id, view.temporal.run_id);
    const description = await handle.describe();
    if (description.status.name === 'RUNNING') return undefined;
    return { view, temporalStatus: description.status.name, history: (await handle.fetchHistory()).events ?? [] };
  }, 90_000);
}

/**
 * The bytes of history each workflow task's completion added (its commands' events: activities
 * scheduled, markers of local activities with their results, the run's completion): what the
 * worker sent Temporal in one message.
 */
function largestTaskCompletion(events: proto.temporal.api.history.v1.IHistoryEvent[]): number {
  let largest = 0;
  let current = -1;
  for (const event of events) {
    const type = event.eventType;
    if (type === EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED) current = 0;
    else if (type === EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED || type === EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED) current = -1;
    else if (current >= 0) {
      current += HistoryEvent.encode(event).finish().length;
      largest = Math.max(largest, current);
    }
  }
  return largest;
}

const blob = (bytes: number) => 'x'.repeat(bytes);

describe('values too large for a workflow task', () => {
  it('runs twelve parallel transforms of 500 KB each, and a join reads them all', async () => {
    const branches = Array.from({ length: 12 }, (_, i) => `t${i}`);
    const workflow = await create({
      nodes: [
        // Each makes 500 KB from a 500 KB payload cheaply (a busy machine must not hit the expressions' time limit).
        ...branches.map((id) => ({ id, type: 'transform', config: { value: `{{ trigger.blob & '${id.slice(1)}' }}` } })),
        { id: 'join', type: 'transform', config: { value: `{{ ${branches.map((id) => `$length(nodes.${id})`).join(' + ')} }}` } },
      ],
      edges: branches.map((id) => ({ from: id, to: 'join' })),
    });
    const started = await app.admin.post(`${W}/${workflow.id}/run`, { payload: { blob: blob(500_000) } });
    expect(started.status).toBe(202);
    const { view, temporalStatus, history } = await ended(started.body.data.execution_id);
    expect(
      view.status,
      JSON.stringify([view.error, view.timeline.map((t: { node_id: string; status: string; error: unknown }) => [t.node_id, t.status, t.error])]).slice(
        0,
        1500,
      ),
    ).toBe('success');
    expect(temporalStatus).toBe('COMPLETED');
    expect(view.output).toBe(branches.reduce((sum, id) => sum + 500_000 + id.slice(1).length, 0));
    expect(view.timeline.find((t: { node_id: string }) => t.node_id === 't3').output).toHaveLength(500_001);
    expect(largestTaskCompletion(history)).toBeLessThan(2 * 1024 * 1024);
  });

  it('runs six parallel record queries started by a webhook with a 900 KB payload', async () => {
    const queries = Array.from({ length: 6 }, (_, i) => `q${i}`);
    const workflow = await create({
      trigger: { type: 'webhook', config: { respond: 'execution' } },
      status: 'active',
      nodes: [
        ...queries.map((id) => ({ id, type: 'record_query', config: { entity: 'purchase', eql: "ref = '{{ trigger.ref }}'" } })),
        {
          id: 'size',
          type: 'transform',
          config: { value: { total: `{{ ${queries.map((id) => `nodes.${id}.total`).join(' + ')} }}`, blob: '{{ $length(trigger.blob) }}' } },
        },
      ],
      edges: queries.map((id) => ({ from: id, to: 'size' })),
    });
    const hook = await app.anonymous.post(
      `/api/workflow/v1/hooks/${workflow.slug}`,
      { ref: 'o-1', blob: blob(900_000) },
      { headers: { 'x-webhook-secret': workflow.webhook.secret } },
    );
    expect(hook.status, hook.text).toBe(202);
    const { view, temporalStatus, history } = await ended(hook.body.data.execution_id);
    expect(
      view.status,
      JSON.stringify([view.error, view.timeline.map((t: { node_id: string; status: string; error: unknown }) => [t.node_id, t.status, t.error])]).slice(
        0,
        1500,
      ),
    ).toBe('success');
    expect(temporalStatus).toBe('COMPLETED');
    expect(view.output).toEqual({ total: 6, blob: 900_000 });
    expect(largestTaskCompletion(history)).toBeLessThan(2 * 1024 * 1024);
  });

  it('answers a large last output to run?wait=true, and passes large payloads and outputs to and from a child run', async () => {
    const child = await create({
      nodes: [{ id: 'echo', type: 'transform', config: { value: { got: '{{ $length(trigger.blob) }}', again: '{{ trigger.blob }}' } } }],
    });
    const parent = await create({
      nodes: [
        { id: 'make', type: 'transform', config: { value: '{{ trigger.blob }}' } },
        { id: 'call', type: 'run_workflow', config: { workflow_id: child.id, payload: { blob: '{{ nodes.make }}' } } },
        {
          id: 'last',
          type: 'transform',
          config: { value: { child_got: '{{ nodes.call.output.got }}', back: '{{ $length(nodes.call.output.again) }}', big: '{{ nodes.make }}' } },
        },
      ],
      edges: [
        { from: 'make', to: 'call' },
        { from: 'call', to: 'last' },
      ],
    });
    const res = await app.admin.post(`${W}/${parent.id}/run?wait=true&timeout_ms=90000`, { payload: { blob: blob(300_000) } });
    expect(res.status, res.text).toBe(200);
    expect(res.body.data.status).toBe('success');
    expect(res.body.data.output).toMatchObject({ child_got: 300_000, back: 300_000 });
    expect(res.body.data.output.big).toHaveLength(300_000);
    const { history } = await ended(res.body.data.execution_id);
    expect(largestTaskCompletion(history)).toBeLessThan(256 * 1024);
  });

  it('hands a failure with a large body to its error branch whole', async () => {
    const connection = await app.admin.post('/api/workflow/v1/connections', {
      type: 'http_bearer',
      label: 'pay',
      cred: 'tok-pay-0001',
      extra: { base_url: target.url },
    });
    const workflow = await create({
      nodes: [
        { id: 'pay', type: 'http_request', connection_id: connection.body.data.id, on_error: 'branch', config: { method: 'POST', path: '/pay' } },
        {
          id: 'why',
          type: 'transform',
          config: { value: { status: '{{ nodes.pay.error.data.status }}', text: '{{ $length(nodes.pay.error.data.body.text) }}' } },
        },
      ],
      edges: [{ from: 'pay', to: 'why', branch: 'error' }],
    });
    const res = await app.admin.post(`${W}/${workflow.id}/run?wait=true&timeout_ms=90000`, { payload: {} });
    expect(res.body.data).toMatchObject({ status: 'success', output: { status: 402, text: 100_000 } });
    const { history } = await ended(res.body.data.execution_id);
    expect(largestTaskCompletion(history)).toBeLessThan(64 * 1024);
  });

  it('replays from a node with a new payload, reusing an upstream output too large for the run input', async () => {
    const workflow = await create({
      nodes: [
        { id: 'big', type: 'transform', config: { value: { text: '{{ trigger.blob }}' } } },
        { id: 'go', type: 'transform', config: { value: '{{ $length(nodes.big.text) & "/" & trigger.tag }}' } },
      ],
      edges: [{ from: 'big', to: 'go' }],
    });
    const first = await app.admin.post(`${W}/${workflow.id}/run?wait=true&timeout_ms=90000`, { payload: { tag: 'one', blob: blob(200_000) } });
    expect(first.body.data.output).toBe('200000/one');
    const replay = await app.admin.post(`${E}/${first.body.data.execution_id}/replay`, { from_node_id: 'go', with_payload: { tag: 'two', blob: 'short' } });
    expect(replay.status, replay.text).toBe(202);
    const { view } = await ended(replay.body.data.execution_id);
    expect(
      view.status,
      JSON.stringify([view.error, view.timeline.map((t: { node_id: string; status: string; error: unknown }) => [t.node_id, t.status, t.error])]).slice(
        0,
        1500,
      ),
    ).toBe('success');
    expect(view.output).toBe('200000/two');
    expect(view.timeline.find((t: { node_id: string }) => t.node_id === 'big')).toMatchObject({ reused: true });
  });
});
