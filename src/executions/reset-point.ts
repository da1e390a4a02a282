import { isGrpcCancelledError, isGrpcDeadlineError } from '@temporalio/client';
import type { Payload } from '@temporalio/common';
import proto from '@temporalio/proto';
import { NODE_FINISHED_MEMO, NODE_HISTORY_MEMO, NODE_STARTED_MEMO, childWorkflowId, nodeActivityId, type NodeFinishedMemo } from '../../workflows/defs.js';
import type { TemporalHandle } from '../temporal/connection.js';

/**
 * Reading a run's history by node. A node that runs as a regular activity is marked by its own
 * events: ActivityTaskScheduled (activity id `node:<id>`) names the workflow task that started it,
 * its completion, failure, time-out or cancel its end. The graph workflow upserts memo
 * `{node: id}` in the workflow task that starts any other node (a timer, a local activity, a child
 * run), and `{finished: {node, local}}` in the task that sees it finish; runs begun before lean
 * histories (see LEAN_HISTORY) upsert both for every node, the finished one since the
 * `node-finished-memo` patch. With Temporal's child-workflow events these say which nodes a reset
 * keeps and which it runs again.
 *
 * Those events are written when the workflow task that issued them completes. A run's last task
 * runs its last nodes' local activities and then finishExecution, which makes the execution record
 * final, and Temporal writes the task (its WorkflowTaskCompleted, every marker and memo in it, the
 * close event) only once all of them have returned and the worker's answer reached it: for that
 * moment, longer on a busy worker or Temporal server, the record says the run ended while its history still ends at WorkflowTaskStarted,
 * without the start of any node that started in that task. A reset point is therefore only read
 * from a run Temporal has closed.
 */

type HistoryEvent = proto.temporal.api.history.v1.IHistoryEvent;

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
  /**
   * Every node that finished is marked so (runs started after the `node-finished-memo` patch, and
   * lean runs): a node without an end did not finish.
   */
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

/** What a scan of one run's history carries from event to event. */
export interface NodeEventScan {
  out: NodeEvents;
  /** Scheduled event id -> its activity id, to tell which node an activity's end belongs to. */
  scheduled: Map<number, string>;
  /** The workflow id this run's child runs start with (`childWorkflowId(workflowId, '')`). */
  childPrefix: string;
}

/** Scans a run's history; with `untilReset`, stops at the event a reset run begins with. */
export async function readNodeEvents(handle: TemporalHandle, workflowId: string, runId: string, options: { untilReset?: boolean } = {}): Promise<NodeEvents> {
  const scan: NodeEventScan = {
    out: { started: new Map(), finished: new Map(), remote: new Set(), exact: false },
    scheduled: new Map(),
    childPrefix: childWorkflowId(workflowId, ''),
  };
  for await (const event of events(handle, workflowId, runId)) {
    if (noteReset(scan.out, event) && options.untilReset) break;
    await noteMemos(scan.out, event, (payload) => handle.decode(payload));
    noteServerEvent(scan, event);
  }
  return scan.out;
}

/** Notes the event a reset run begins with (its first workflow task, failed for the reset); whether it is one. */
export function noteReset(out: NodeEvents, event: HistoryEvent): boolean {
  const failed = event.workflowTaskFailedEventAttributes;
  if (!failed || Number(failed.cause) !== RESET_WORKFLOW_CAUSE) return false;
  out.reset = { baseRunId: failed.baseRunId ?? '', reason: failed.failure?.message ?? '', lastKeptEventId: Number(event.eventId) - 1 };
  return true;
}

/** Notes the node memos the graph workflow upserted: a node's start, its finish, a lean run. */
export async function noteMemos(out: NodeEvents, event: HistoryEvent, decode: (payload: Payload) => Promise<unknown>): Promise<void> {
  const memo = event.workflowPropertiesModifiedEventAttributes;
  if (!memo?.upsertedMemo?.fields) return;
  const task = Number(memo.workflowTaskCompletedEventId);
  const { [NODE_STARTED_MEMO]: node, [NODE_FINISHED_MEMO]: finished, [NODE_HISTORY_MEMO]: lean } = memo.upsertedMemo.fields;
  if (lean) out.exact = true;
  if (node) {
    const nodeId = (await decode(node)) as string;
    if (!out.started.has(nodeId)) out.started.set(nodeId, task);
  }
  if (finished) {
    const value = (await decode(finished)) as NodeFinishedMemo;
    out.exact = true;
    const known = out.finished.get(value.node);
    out.finished.set(value.node, { ...known, task: known?.task ?? task, local: value.local });
  }
}

/** Notes the events Temporal writes for nodes it tracks itself: activities of nodes, child runs. */
export function noteServerEvent(scan: NodeEventScan, event: HistoryEvent): void {
  const { out, scheduled, childPrefix } = scan;
  const id = Number(event.eventId);
  const schedule = event.activityTaskScheduledEventAttributes;
  const activityId = schedule?.activityId;
  if (activityId) {
    scheduled.set(id, activityId);
    if (activityId.startsWith('node:')) {
      const node = activityId.slice(5);
      out.remote.add(node);
      // In a lean run this is the node's only start mark; in others a memo of the same task came first.
      if (!out.started.has(node)) out.started.set(node, Number(schedule.workflowTaskCompletedEventId));
    }
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
    if (node !== undefined && nodeActivityId(node) === scheduled.get(Number(ended.scheduledEventId))) noteEnd(out, node, id);
  }
  const child =
    event.childWorkflowExecutionCompletedEventAttributes ??
    event.childWorkflowExecutionFailedEventAttributes ??
    event.childWorkflowExecutionCanceledEventAttributes ??
    event.childWorkflowExecutionTimedOutEventAttributes ??
    event.childWorkflowExecutionTerminatedEventAttributes;
  const childId = child?.workflowExecution?.workflowId;
  if (childId?.startsWith(childPrefix)) noteEnd(out, childId.slice(childPrefix.length), id);
}

/** A server event that ended a node; the first one counts. */
function noteEnd(out: NodeEvents, node: string, eventId: number): void {
  out.finished.set(node, { ...out.finished.get(node), event: out.finished.get(node)?.event ?? eventId });
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

/** How long a reset point waits for Temporal to close the run (see RunStillOpen). */
export const CLOSE_WAIT_MS = 15_000;

/**
 * The run is still open in Temporal: its last workflow task has not completed (the worker is
 * still in it, or died in it and Temporal has not handed it to another yet), so its history does
 * not yet hold what that task did.
 */
export class RunStillOpen extends Error {
  constructor(
    readonly workflowId: string,
    readonly runId: string,
  ) {
    super(`Temporal has not closed run ${runId} of ${workflowId} yet`);
    this.name = 'RunStillOpen';
  }
}

/**
 * Waits until Temporal has closed a run (its close event is in the history), up to `timeoutMs`;
 * false when it is still open then. A long poll: it answers as soon as the run closes.
 *
 * The server keeps the call's deadline too and may end the poll itself a little before it (the
 * stream is reset, and the call fails as cancelled rather than past its deadline); this reader
 * never cancels the call, so a cancelled poll is the wait running out, or is asked again while
 * time is left.
 */
export async function untilClosed(handle: TemporalHandle, workflowId: string, runId: string, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  let nextPageToken: Uint8Array | undefined;
  for (;;) {
    const left = deadline - Date.now();
    if (left <= 0) return false;
    try {
      const page = await handle.connection.withDeadline(deadline, () =>
        handle.client.workflowService.getWorkflowExecutionHistory({
          namespace: handle.namespace,
          execution: { workflowId, runId },
          waitNewEvent: true,
          historyEventFilterType: proto.temporal.api.enums.v1.HistoryEventFilterType.HISTORY_EVENT_FILTER_TYPE_CLOSE_EVENT,
          skipArchival: true,
          ...(nextPageToken?.length ? { nextPageToken } : {}),
        }),
      );
      if (page.history?.events?.length) return true;
      // The server's long poll ended with the run still open: ask again until the deadline.
      nextPageToken = page.nextPageToken ?? undefined;
    } catch (err) {
      if (isGrpcDeadlineError(err)) return false;
      if (!isGrpcCancelledError(err)) throw err;
      await new Promise((resolve) => setTimeout(resolve, Math.min(POLL_AGAIN_MS, Math.max(0, deadline - Date.now()))));
    }
  }
}

/** Pause before asking again after the server ended a close poll early. */
const POLL_AGAIN_MS = 100;

/**
 * Finds where to reset a run so that `nodeId` runs again and nothing finished before it does;
 * undefined when the node never started. Waits for Temporal to close the run first (up to
 * `closeWaitMs`, else RunStillOpen): until then a node started in the run's last workflow task
 * has no start in the history, and a reset would terminate the run rather than replay it.
 */
export async function findResetPoint(
  handle: TemporalHandle,
  workflowId: string,
  runId: string,
  nodeId: string,
  { closeWaitMs = CLOSE_WAIT_MS }: { closeWaitMs?: number } = {},
): Promise<ResetPoint | undefined> {
  if (!(await untilClosed(handle, workflowId, runId, closeWaitMs))) throw new RunStillOpen(workflowId, runId);
  const events = await readNodeEvents(handle, workflowId, runId);
  const point = events.started.get(nodeId);
  if (point === undefined) return undefined;
  return { eventId: point, completedNodes: nodesFinishedBefore(events, point, nodeId) };
}
