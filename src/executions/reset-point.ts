import type { temporal } from '@temporalio/proto';
import { NODE_FINISHED_MEMO, NODE_STARTED_MEMO, nodeActivityId, type NodeFinishedMemo } from '../../workflows/defs.js';
import type { TemporalHandle } from '../temporal/connection.js';

/**
 * Reading a run's history by node. The graph workflow upserts memo `{node: id}` in the workflow
 * task that starts a node, and (since the `node-finished-memo` patch) `{finished: {node, local}}`
 * in the task that sees it finish; with Temporal's own activity and child-workflow events these
 * say which nodes a reset keeps and which it runs again.
 */

type HistoryEvent = temporal.api.history.v1.IHistoryEvent;

export interface ResetPoint {
  /** WorkflowTaskCompleted event to reset to: the task that started the node. */
  eventId: number;
  /** Nodes finished before that point: they are kept in the reset run and not run again. */
  completedNodes: string[];
}

export interface NodeEvents {
  /** Node -> the WorkflowTaskCompleted event of the task that started it (first start). */
  started: Map<string, number>;
  /**
   * Node -> when it finished: `event`, the id of a server event that ended it (an activity's
   * completion, failure, time-out or cancel; a child's close), or `task`, the WorkflowTaskCompleted
   * event of the task that saw it finish (from the memo), with `local` when it ran inside that
   * task (a local activity, whose result is part of the task's own commands).
   */
  finished: Map<string, { event?: number; task?: number; local?: boolean }>;
  /** Nodes Temporal tracks itself (activities, children): their end is a server event. */
  remote: Set<string>;
  /** The history carries finished-memos (runs started after the patch). */
  exact: boolean;
  /** For a run created by a reset: the run it came from, the reason, the last event it kept. */
  reset?: { baseRunId: string; reason: string; lastKeptEventId: number };
}

const RESET_WORKFLOW_CAUSE = 20; // WORKFLOW_TASK_FAILED_CAUSE_RESET_WORKFLOW

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

/** Scans a run's history; with `untilReset`, stops at the event a reset run begins with. */
export async function readNodeEvents(handle: TemporalHandle, workflowId: string, runId: string, options: { untilReset?: boolean } = {}): Promise<NodeEvents> {
  const out: NodeEvents = { started: new Map(), finished: new Map(), remote: new Set(), exact: false };
  const scheduled = new Map<number, string>();
  const childPrefix = `${workflowId}-`;
  for await (const event of events(handle, workflowId, runId)) {
    const id = Number(event.eventId);
    const failed = event.workflowTaskFailedEventAttributes;
    if (failed && Number(failed.cause) === RESET_WORKFLOW_CAUSE) {
      out.reset = { baseRunId: failed.baseRunId ?? '', reason: failed.failure?.message ?? '', lastKeptEventId: id - 1 };
      if (options.untilReset) break;
    }
    const memo = event.workflowPropertiesModifiedEventAttributes;
    if (memo?.upsertedMemo?.fields) {
      const task = Number(memo.workflowTaskCompletedEventId);
      const { [NODE_STARTED_MEMO]: node, [NODE_FINISHED_MEMO]: finished } = memo.upsertedMemo.fields;
      if (node) {
        const nodeId = (await handle.decode(node)) as string;
        if (!out.started.has(nodeId)) out.started.set(nodeId, task);
      }
      if (finished) {
        const value = (await handle.decode(finished)) as NodeFinishedMemo;
        out.exact = true;
        const known = out.finished.get(value.node);
        out.finished.set(value.node, { ...known, task: known?.task ?? task, local: value.local });
      }
    }
    const activityId = event.activityTaskScheduledEventAttributes?.activityId;
    if (activityId) {
      scheduled.set(id, activityId);
      if (activityId.startsWith('node:')) out.remote.add(activityId.slice(5));
    }
    const childStarted = event.startChildWorkflowExecutionInitiatedEventAttributes?.workflowId;
    if (childStarted?.startsWith(childPrefix)) out.remote.add(childStarted.slice(childPrefix.length));
    const ended =
      event.activityTaskCompletedEventAttributes ??
      event.activityTaskFailedEventAttributes ??
      event.activityTaskTimedOutEventAttributes ??
      event.activityTaskCanceledEventAttributes;
    if (ended) {
      const node = scheduled.get(Number(ended.scheduledEventId))?.replace(/^node:/, '');
      if (node !== undefined && nodeActivityId(node) === scheduled.get(Number(ended.scheduledEventId))) {
        out.finished.set(node, { ...out.finished.get(node), event: out.finished.get(node)?.event ?? id });
      }
    }
    const child =
      event.childWorkflowExecutionCompletedEventAttributes ??
      event.childWorkflowExecutionFailedEventAttributes ??
      event.childWorkflowExecutionCanceledEventAttributes ??
      event.childWorkflowExecutionTimedOutEventAttributes ??
      event.childWorkflowExecutionTerminatedEventAttributes;
    const childId = child?.workflowExecution?.workflowId;
    if (childId?.startsWith(childPrefix)) {
      const node = childId.slice(childPrefix.length);
      out.finished.set(node, { ...out.finished.get(node), event: out.finished.get(node)?.event ?? id });
    }
  }
  return out;
}

/**
 * Whether `node` had finished for good at reset point `point` (a WorkflowTaskCompleted event id):
 * the reset keeps every event before the point and runs that task again.
 * - ended by a server event (activity, child) before the point: done;
 * - seen finishing by a task before the point: done; by the point's own task: done only when the
 *   finish came from outside the task (a timer fired, an activity completed), not when it ran
 *   inside it (a local activity, whose result the reset drops);
 * - a run without finished-memos (started before the patch): a timer or local activity that
 *   started before the point counts as done, as it did then; activities and children still need
 *   their end event.
 */
export function finishedBefore(events: NodeEvents, node: string, point: number): boolean {
  const started = events.started.get(node);
  if (started === undefined || started >= point) return false;
  const finished = events.finished.get(node);
  if (finished?.event !== undefined && finished.event < point) return true;
  if (finished?.task !== undefined) return finished.local ? finished.task < point : finished.task <= point;
  if (finished?.event !== undefined || events.remote.has(node)) return false;
  return !events.exact;
}

/** Nodes done before `point`, other than `except`. */
export const nodesFinishedBefore = (events: NodeEvents, point: number, except?: string) =>
  [...events.started.keys()].filter((node) => node !== except && finishedBefore(events, node, point));

/** Finds where to reset a run so that `nodeId` runs again and nothing finished before it does. */
export async function findResetPoint(handle: TemporalHandle, workflowId: string, runId: string, nodeId: string): Promise<ResetPoint | undefined> {
  const events = await readNodeEvents(handle, workflowId, runId);
  const point = events.started.get(nodeId);
  if (point === undefined) return undefined;
  return { eventId: point, completedNodes: nodesFinishedBefore(events, point, nodeId) };
}
