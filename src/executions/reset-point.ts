import type { temporal } from '@temporalio/proto';
import { nodeActivityId } from '../../workflows/defs.js';
import type { TemporalHandle } from '../temporal/connection.js';

export interface ResetPoint {
  /** WorkflowTaskCompleted event to reset to: the task that started the node. */
  eventId: number;
  /** Nodes finished before that point: they are kept in the reset run and not run again. */
  completedNodes: string[];
}

type HistoryEvent = temporal.api.history.v1.IHistoryEvent;

async function* events(handle: TemporalHandle, workflowId: string, runId: string): AsyncGenerator<HistoryEvent> {
  let nextPageToken: Uint8Array | undefined;
  do {
    const page = await handle.client.workflowService.getWorkflowExecutionHistory({
      namespace: handle.namespace,
      execution: { workflowId, runId },
      maximumPageSize: 1000,
      ...(nextPageToken?.length ? { nextPageToken } : {}),
    });
    yield* page.history?.events ?? [];
    nextPageToken = page.nextPageToken ?? undefined;
  } while (nextPageToken?.length);
}

/**
 * Finds where to reset a run so that `nodeId` runs again and nothing before it does. The
 * workflow upserts memo `{node: id}` in the same workflow task that starts a node, for every
 * kind of node (activity, local activity, timer, child), so that task is the reset point.
 */
export async function findResetPoint(handle: TemporalHandle, workflowId: string, runId: string, nodeId: string): Promise<ResetPoint | undefined> {
  const startedIn = new Map<string, number>();
  const scheduled = new Map<number, string>();
  const finishedAt = new Map<string, number>();
  let point: number | undefined;
  for await (const event of events(handle, workflowId, runId)) {
    const id = Number(event.eventId);
    const memo = event.workflowPropertiesModifiedEventAttributes;
    if (memo?.upsertedMemo?.fields?.node) {
      const node = (await handle.decode(memo.upsertedMemo.fields.node)) as string;
      const task = Number(memo.workflowTaskCompletedEventId);
      if (!startedIn.has(node)) startedIn.set(node, task);
      if (node === nodeId && point === undefined) point = task;
    }
    const activityId = event.activityTaskScheduledEventAttributes?.activityId;
    if (activityId) scheduled.set(id, activityId);
    const completed = event.activityTaskCompletedEventAttributes ?? event.activityTaskFailedEventAttributes;
    if (completed) {
      const activity = scheduled.get(Number(completed.scheduledEventId));
      if (activity) finishedAt.set(activity, id);
    }
  }
  if (point === undefined) return undefined;
  const completedNodes = [...startedIn]
    .filter(([node, task]) => {
      if (task >= point! || node === nodeId) return false;
      const activityId = nodeActivityId(node);
      const isActivity = [...scheduled.values()].includes(activityId);
      return !isActivity || (finishedAt.get(activityId) ?? Infinity) < point!;
    })
    .map(([node]) => node);
  return { eventId: point, completedNodes };
}
