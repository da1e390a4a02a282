// A loop over 10,000 items completes, and no Temporal run that makes it up passes Temporal's
// warning mark of 10,240 history events or its limit of 2,000 pending activities or children:
// the items run in a child workflow of the run (which continues as new before its history grows
// that long: for-each.test.ts shows it under a small budget). Lean on purpose (a transform body,
// run in batches, the most items in flight): it is the suite's longest loop.
import proto from '@temporalio/proto';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { startTestApp, type TestApp } from './helpers/app.js';
import { eventually } from './helpers/http-target.js';

const { EventType } = proto.temporal.api.enums.v1;
type HistoryEvent = proto.temporal.api.history.v1.IHistoryEvent;

let app: TestApp;

beforeAll(async () => {
  app = await startTestApp({ worker: true });
});
afterAll(async () => app?.close());

/** The most activities and children pending at once in a history. */
function mostPending(events: HistoryEvent[]): { activities: number; children: number } {
  let activities = 0;
  let children = 0;
  const most = { activities: 0, children: 0 };
  for (const e of events) {
    const t = e.eventType;
    if (t === EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED) activities++;
    if (
      t === EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED ||
      t === EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED ||
      t === EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT ||
      t === EventType.EVENT_TYPE_ACTIVITY_TASK_CANCELED
    )
      activities--;
    if (t === EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED) children++;
    if (
      t === EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_COMPLETED ||
      t === EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_FAILED ||
      t === EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_CANCELED ||
      t === EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_TIMED_OUT ||
      t === EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_TERMINATED ||
      t === EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_FAILED
    )
      children--;
    most.activities = Math.max(most.activities, activities);
    most.children = Math.max(most.children, children);
  }
  return most;
}

/** Every Temporal run of a workflow id from `runId` on, following continue-as-new, with its history. */
async function chainOf(workflowId: string, runId: string): Promise<{ runId: string; events: HistoryEvent[] }[]> {
  const runs: { runId: string; events: HistoryEvent[] }[] = [];
  let next: string | undefined = runId;
  while (next) {
    const events: HistoryEvent[] = (await app.stack.services.temporal.client.workflow.getHandle(workflowId, next).fetchHistory()).events ?? [];
    runs.push({ runId: next, events });
    next = events.at(-1)?.workflowExecutionContinuedAsNewEventAttributes?.newExecutionRunId ?? undefined;
  }
  return runs;
}

it('runs 10,000 items; every run that makes up the loop stays under 10,240 history events and 2,000 pending activities or children', async () => {
  const created = await app.admin.post('/api/workflow/v1/workflows', {
    title: 'Ten thousand',
    trigger: { type: 'manual' },
    nodes: [
      {
        id: 'each',
        type: 'for_each',
        config: { items: '{{ [0..9999] }}', concurrency: 100, body: { nodes: [{ id: 'double', type: 'transform', config: { value: '{{ item * 2 }}' } }] } },
      },
    ],
  });
  expect(created.status, created.text).toBe(201);
  const started = await app.admin.post(`/api/workflow/v1/workflows/${created.body.data.id}/run`, { payload: {} });
  const id = started.body.data.execution_id;
  const view = await eventually(
    async () => {
      const v = (await app.admin.get(`/api/workflow/v1/executions/${id}`)).body.data;
      return v.status === 'running' ? undefined : v;
    },
    600_000,
    'the loop to end',
  );
  expect(view.status, JSON.stringify(view.error)).toBe('success');
  const each = view.timeline[0];
  expect(each.items).toMatchObject({ total: 10_000, succeeded: 10_000, failed: 0, pending: 0 });
  expect(each.output.total).toBe(10_000);
  expect(each.output.results).toHaveLength(10_000);
  expect(each.output.results[9999]).toBe(19_998);
  expect((await app.sql(`select count(*)::int as n from execution_items where execution_id = $1 and status = 'success'`, [id]))[0]).toEqual({ n: 10_000 });

  // Every Temporal run of the loop: the graph run, and its items workflow's chain of runs.
  const graph = await chainOf(view.temporal.workflow_id, view.temporal.run_id);
  const child = graph[0]!.events.find((e) => e.childWorkflowExecutionStartedEventAttributes)?.childWorkflowExecutionStartedEventAttributes?.workflowExecution;
  const items = await chainOf(child!.workflowId!, child!.runId!);
  for (const run of [...graph, ...items]) {
    expect(run.events.length, run.runId).toBeLessThanOrEqual(10_240);
    const pending = mostPending(run.events);
    expect(pending.activities, run.runId).toBeLessThanOrEqual(2_000);
    expect(pending.children, run.runId).toBeLessThanOrEqual(2_000);
  }
}, 660_000);
