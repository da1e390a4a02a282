import { defaultPayloadConverter, type Payload } from '@temporalio/common';
import { describe, expect, it } from 'vitest';
import { NODE_FINISHED_MEMO, NODE_HISTORY_MEMO, NODE_STARTED_MEMO, childWorkflowId } from '../../workflows/defs.js';
import type proto from '@temporalio/proto';
import * as steps from './reset-point.js';
import type { NodeEventScan, NodeEvents } from './reset-point.js';

// Events written by hand carry plain numbers where Temporal's carry Longs; the steps read both with Number().
type HistoryEvent = proto.temporal.api.history.v1.IHistoryEvent;
const noteReset = (out: NodeEvents, event: object) => steps.noteReset(out, event as HistoryEvent);
const noteMemos = (out: NodeEvents, event: object, decode: (payload: Payload) => Promise<unknown>) => steps.noteMemos(out, event as HistoryEvent, decode);
const noteServerEvent = (scan: NodeEventScan, event: object) => steps.noteServerEvent(scan, event as HistoryEvent);

/**
 * The steps of reading a run by node, one history event at a time, on events written by hand:
 * each kind of event and what it says about a node. (reset-point.test.ts reads whole recorded runs.)
 */
const empty = (): NodeEvents => ({ started: new Map(), finished: new Map(), remote: new Set(), exact: false });
const scanOf = (workflowId = 'wf-1'): NodeEventScan => ({ out: empty(), scheduled: new Map(), childPrefix: childWorkflowId(workflowId, '') });
const decode = async (payload: Payload) => defaultPayloadConverter.fromPayload(payload);
const memoEvent = (eventId: number, task: number, fields: Record<string, unknown>) => ({
  eventId,
  workflowPropertiesModifiedEventAttributes: {
    workflowTaskCompletedEventId: task,
    upsertedMemo: { fields: Object.fromEntries(Object.entries(fields).map(([k, v]) => [k, defaultPayloadConverter.toPayload(v)])) },
  },
});

describe('noteReset', () => {
  it('notes the failed first task of a reset run: the run it came from, why, and the last event kept', () => {
    const out = empty();
    const event = { eventId: 17, workflowTaskFailedEventAttributes: { cause: 20, baseRunId: 'base', failure: { message: 'replay from node b' } } };
    expect(noteReset(out, event)).toBe(true);
    expect(out.reset).toEqual({ baseRunId: 'base', reason: 'replay from node b', lastKeptEventId: 16 });
  });

  it('ignores a workflow task that failed for another cause, and any other event', () => {
    const out = empty();
    expect(noteReset(out, { eventId: 9, workflowTaskFailedEventAttributes: { cause: 1 } })).toBe(false);
    expect(noteReset(out, { eventId: 10 })).toBe(false);
    expect(out.reset).toBeUndefined();
  });
});

describe('noteMemos', () => {
  it('takes a node’s first start memo, and its finish with the task that saw it', async () => {
    const out = empty();
    await noteMemos(out, memoEvent(5, 4, { [NODE_STARTED_MEMO]: 'a' }), decode);
    await noteMemos(out, memoEvent(12, 11, { [NODE_STARTED_MEMO]: 'a' }), decode);
    expect(out.started.get('a')).toBe(4);
    expect(out.exact).toBe(false);
    await noteMemos(out, memoEvent(20, 19, { [NODE_FINISHED_MEMO]: { node: 'a', local: true } }), decode);
    expect(out.finished.get('a')).toEqual({ task: 19, local: true });
    expect(out.exact).toBe(true);
  });

  it('keeps the first task that saw a node finish, and an end event already known', async () => {
    const out = empty();
    out.finished.set('a', { event: 8 });
    await noteMemos(out, memoEvent(10, 9, { [NODE_FINISHED_MEMO]: { node: 'a', local: false } }), decode);
    await noteMemos(out, memoEvent(14, 13, { [NODE_FINISHED_MEMO]: { node: 'a', local: false } }), decode);
    expect(out.finished.get('a')).toEqual({ event: 8, task: 9, local: false });
  });

  it('reads a lean run from its start memo; other property changes say nothing', async () => {
    const lean = empty();
    await noteMemos(lean, memoEvent(5, 4, { [NODE_STARTED_MEMO]: 'a', [NODE_HISTORY_MEMO]: 2 }), decode);
    expect(lean.exact).toBe(true);
    const other = empty();
    await noteMemos(other, memoEvent(5, 4, { unrelated: 1 }), decode);
    await noteMemos(other, { eventId: 6 }, decode);
    expect(other).toEqual(empty());
  });
});

describe('noteServerEvent', () => {
  it('a node activity starts in the task that scheduled it and ends with its first end event', () => {
    const scan = scanOf();
    noteServerEvent(scan, { eventId: 12, activityTaskScheduledEventAttributes: { activityId: 'node:fetch', workflowTaskCompletedEventId: 11 } });
    expect(scan.out.started.get('fetch')).toBe(11);
    expect(scan.out.remote.has('fetch')).toBe(true);
    noteServerEvent(scan, { eventId: 14, activityTaskFailedEventAttributes: { scheduledEventId: 12 } });
    noteServerEvent(scan, { eventId: 18, activityTaskCompletedEventAttributes: { scheduledEventId: 12 } });
    expect(scan.out.finished.get('fetch')).toEqual({ event: 14 });
  });

  it('a start memo of the same task comes first and stays; a finish memo is kept beside the end event', () => {
    const scan = scanOf();
    scan.out.started.set('fetch', 7);
    scan.out.finished.set('fetch', { task: 15, local: false });
    noteServerEvent(scan, { eventId: 12, activityTaskScheduledEventAttributes: { activityId: 'node:fetch', workflowTaskCompletedEventId: 11 } });
    noteServerEvent(scan, { eventId: 13, activityTaskTimedOutEventAttributes: { scheduledEventId: 12 } });
    expect(scan.out.started.get('fetch')).toBe(7);
    expect(scan.out.finished.get('fetch')).toEqual({ task: 15, local: false, event: 13 });
  });

  it('an activity that is no node’s (the bookkeeping) marks nothing', () => {
    const scan = scanOf();
    noteServerEvent(scan, { eventId: 5, activityTaskScheduledEventAttributes: { activityId: '1', workflowTaskCompletedEventId: 4 } });
    noteServerEvent(scan, { eventId: 6, activityTaskCompletedEventAttributes: { scheduledEventId: 5 } });
    expect(scan.out).toEqual(empty());
    expect(scan.scheduled.get(5)).toBe('1');
  });

  it('a child run of this run is a node Temporal tracks, ended by its close; other children are not', () => {
    const scan = scanOf('wf-1');
    const own = childWorkflowId('wf-1', 'sub');
    noteServerEvent(scan, { eventId: 79, startChildWorkflowExecutionInitiatedEventAttributes: { workflowId: own } });
    noteServerEvent(scan, { eventId: 80, startChildWorkflowExecutionInitiatedEventAttributes: { workflowId: 'elsewhere' } });
    expect([...scan.out.remote]).toEqual(['sub']);
    noteServerEvent(scan, { eventId: 93, childWorkflowExecutionTerminatedEventAttributes: { workflowExecution: { workflowId: own } } });
    noteServerEvent(scan, { eventId: 95, childWorkflowExecutionCompletedEventAttributes: { workflowExecution: { workflowId: 'elsewhere' } } });
    expect(scan.out.finished.get('sub')).toEqual({ event: 93 });
    expect(scan.out.finished.size).toBe(1);
  });
});
