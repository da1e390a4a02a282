import { readFileSync } from 'node:fs';
import { defaultPayloadConverter } from '@temporalio/common';
import { historyFromJSON } from '@temporalio/common/lib/proto-utils.js';
import { describe, expect, it } from 'vitest';
import type { TemporalHandle } from '../temporal/connection.js';
import { finishedBefore, nodesFinishedBefore, readNodeEvents, untilClosed } from './reset-point.js';

/**
 * Where a replay resets a run, read from the histories recorded in test/histories/ (decrypted, so
 * no key is needed): what the service would read from Temporal, without a Temporal server.
 * `2026-11-23` was recorded before the `node-finished-memo` patch (no finished-memos);
 * `2026-11-23-all-paths` after it.
 */
const histories = new URL('../../test/histories/', import.meta.url);

/** Serves one recorded history as Temporal's GetWorkflowExecutionHistory would, in one page. */
function recorded(set: string, file: string): TemporalHandle {
  const { events } = historyFromJSON(JSON.parse(readFileSync(new URL(`${set}/${file}`, histories), 'utf8')));
  return {
    namespace: 'default',
    client: { workflowService: { getWorkflowExecutionHistory: async () => ({ history: { events } }) } },
    decode: async (payload: never) => defaultPayloadConverter.fromPayload(payload),
  } as unknown as TemporalHandle;
}

const workflowIds = (set: string) => JSON.parse(readFileSync(new URL(`${set}/workflow-ids.json`, histories), 'utf8')) as Record<string, string>;
const cache = new Map<string, ReturnType<typeof readNodeEvents>>();
/** A recorded run read by node, once per history and options (decoding a history is the slow part). */
function read(set: string, file: string, options: { untilReset?: boolean } = {}) {
  const key = `${set}/${file}/${options.untilReset ?? false}`;
  // The workflow id tells the run's own child workflows (run_workflow nodes) from others.
  if (!cache.has(key)) cache.set(key, readNodeEvents(recorded(set, file), workflowIds(set)[file]!, 'run', options));
  return cache.get(key)!;
}

describe('reading a run by node', () => {
  it('finds each node’s first task, how it ended, and which nodes Temporal tracks itself', async () => {
    const events = await read('2026-11-23-all-paths', 'graph-every-node-local.01.runGraph.json');
    expect(events.exact).toBe(true);
    // Pure nodes ran as local activities inside task 22, beside the start of the delay `pause`.
    expect(['shape', 'big', 'route', 'pause'].map((n) => events.started.get(n))).toEqual([22, 22, 22, 22]);
    expect(events.finished.get('shape')).toEqual({ task: 22, local: true });
    // The timer fired from outside the task that saw it.
    expect(events.finished.get('pause')).toEqual({ task: 39, local: false });
    // An activity ends with its completion event; a child (run_workflow `sub`) with its close.
    expect(events.finished.get('fetch')).toEqual({ event: 9, task: 12, local: false });
    expect(events.finished.get('sub')).toEqual({ event: 78, task: 81, local: false });
    expect([...events.remote].sort()).toEqual(['ask', 'fetch', 'find', 'lead', 'mark', 'save', 'sub']);
    expect(events.reset).toBeUndefined();
  });

  it('reads a run made by a reset: the run it came from, why, and the last event it kept', async () => {
    const events = await read('2026-11-23-all-paths', 'graph-failed-and-reset.02.runGraph.json');
    expect(events.reset).toEqual({ baseRunId: expect.any(String), reason: 'replay of execution 3 from node call', lastKeptEventId: 16 });
    expect(events.started.get('call')).toBe(20);
    // Up to the reset, only what the reset kept: `call` had not started yet.
    const kept = await read('2026-11-23-all-paths', 'graph-failed-and-reset.02.runGraph.json', { untilReset: true });
    expect([...kept.started.keys()]).toEqual(['first', 'pause']);
    expect(kept.reset?.lastKeptEventId).toBe(16);
  });

  it('a node started in a task the worker completed early (a task heartbeat while a local activity ran) resets to that task', async () => {
    const events = await read('2026-11-23-last-task', 'graph-last-task-heartbeat.01.runGraph.json');
    // The heartbeat completed the task at event 12 with b's start and end; finishExecution's
    // result came in the next task.
    expect(events.started.get('b')).toBe(12);
    expect(events.started.get('check')).toBe(12);
    expect(nodesFinishedBefore(events, 12, 'b')).toEqual(['hold']);
  });

  it('while the last task is still open, the history holds no start of the nodes started in it', async () => {
    const events = await read('2026-11-23-last-task', 'graph-last-task-open.01.runGraph.json');
    expect([...events.started.keys()]).toEqual(['hold']);
  });
});

describe('which nodes a reset keeps', () => {
  it('keeps a local activity finished in an earlier task, never one that ran in the task reset to', async () => {
    const events = await read('2026-11-23-all-paths', 'graph-every-node-local.01.runGraph.json');
    // Resetting to task 22 runs it again, with the local activities in it.
    expect(finishedBefore(events, 'shape', 22)).toBe(false);
    expect(finishedBefore(events, 'shape', 39)).toBe(true);
    // A timer that fired before the task that saw it is kept by a reset to that very task.
    expect(finishedBefore(events, 'pause', 39)).toBe(true);
    expect(finishedBefore(events, 'pause', 22)).toBe(false);
    expect(nodesFinishedBefore(events, 39, 'save')).toEqual(['fetch', 'lead', 'shape', 'big', 'route', 'pause']);
  });

  it('keeps an activity or a child only once its end event lies before the point', async () => {
    const events = await read('2026-11-23-all-paths', 'graph-every-node-regular.01.runGraph.json');
    // `sub` (a child workflow) started at 79 and closed at event 93.
    expect(finishedBefore(events, 'sub', 96)).toBe(true);
    expect(finishedBefore(events, 'sub', 93)).toBe(false);
    expect(finishedBefore(events, 'sub', 79)).toBe(false);
    expect(nodesFinishedBefore(events, 96, 'ask')).toEqual(['fetch', 'lead', 'shape', 'big', 'route', 'pause', 'save', 'mark', 'find', 'sub']);
  });

  it('a node never started, or started at or after the point, is not kept', async () => {
    const events = await read('2026-11-23-all-paths', 'graph-failed-and-reset.01.runGraph.json');
    expect(finishedBefore(events, 'never', 100)).toBe(false);
    expect(finishedBefore(events, 'call', 17)).toBe(false);
    // The point itself is left out: it is the node the replay starts from.
    expect(nodesFinishedBefore(events, 17, 'call')).toEqual(['first', 'pause']);
  });

  it('an activity cancelled in flight has no end event and is never kept', async () => {
    const events = await read('2026-11-23-all-paths', 'graph-cancelled-in-activity.01.runGraph.json');
    expect(events.remote.has('call')).toBe(true);
    expect(finishedBefore(events, 'call', 1000)).toBe(false);
  });

  it('in a run from before the finished-memos, a timer or local activity started before the point counts as done; activities still need their end', async () => {
    const events = await read('2026-11-23', 'graph-every-node-local.01.runGraph.json');
    expect(events.exact).toBe(false);
    expect(events.finished.has('shape')).toBe(false);
    // As the service decided then: started in task 19, so done at any later point.
    expect(finishedBefore(events, 'shape', 32)).toBe(true);
    expect(finishedBefore(events, 'pause', 32)).toBe(true);
    // `lead` (an activity) started at 12 and completed at event 16.
    expect(finishedBefore(events, 'lead', 14)).toBe(false);
    expect(finishedBefore(events, 'lead', 19)).toBe(true);
    const cancelled = await read('2026-11-23', 'graph-cancelled-in-activity.01.runGraph.json');
    expect(finishedBefore(cancelled, 'call', 1000)).toBe(false);
  });
});

describe('lean runs (no memos for regular activities)', () => {
  it('a regular activity is marked by its own events, other nodes by memos', async () => {
    const events = await read('2026-11-23-lean', 'graph-every-node-regular.01.runGraph.json');
    // No memo names `lead`: its ActivityTaskScheduled event (12) belongs to the task completed at 11.
    expect(events.started.get('lead')).toBe(11);
    expect(events.finished.get('lead')).toEqual({ event: 14 });
    // The delay still has its memos: a timer's events do not name the node.
    expect(events.started.get('pause')).toBe(35);
    expect(events.finished.get('pause')).toEqual({ task: 42, local: false });
    expect(events.exact).toBe(true);
    // Resetting to the task that started `save` keeps everything before it, the delay included.
    expect(nodesFinishedBefore(events, 42, 'save')).toEqual(['fetch', 'lead', 'shape', 'big', 'route', 'pause']);
    // The node that failed has its end too: a reset after it keeps it as it ended.
    expect(events.finished.get('oops')).toEqual({ event: 89 });
  });

  it('a node started but not finished at the point is run again', async () => {
    const events = await read('2026-11-23-lean', 'graph-every-node-regular.01.runGraph.json');
    // At the task that started `mark` (50), `save` had ended (47); at `save`'s own task it had not.
    expect(nodesFinishedBefore(events, 50, 'mark')).toContain('save');
    expect(nodesFinishedBefore(events, 42)).not.toContain('save');
  });
});

/** A gRPC failure as the client reports it: a code, details and metadata. */
const grpcFailure = (code: number, details: string) => Object.assign(new Error(`${code} ${details}`), { code, details, metadata: {} });

/** A handle whose close poll answers with `answers` in turn (an Error is thrown), counting the calls. */
function polled(answers: (Error | { history: { events: unknown[] } })[]) {
  const calls = { count: 0 };
  const handle = {
    namespace: 'default',
    connection: { withDeadline: (_deadline: number, fn: () => Promise<unknown>) => fn() },
    client: {
      workflowService: {
        getWorkflowExecutionHistory: async () => {
          const answer = answers[Math.min(calls.count++, answers.length - 1)]!;
          if (answer instanceof Error) throw answer;
          return answer;
        },
      },
    },
  } as unknown as TemporalHandle;
  return { handle, calls };
}

describe('waiting for a run to close', () => {
  const CANCELLED = 1;
  const DEADLINE_EXCEEDED = 4;
  const closed = { history: { events: [{ eventId: 9 }] } };

  it('a poll the server ends early (the stream reset as cancelled) is asked again, not taken for an error', async () => {
    const { handle, calls } = polled([grpcFailure(CANCELLED, 'Call cancelled'), closed]);
    expect(await untilClosed(handle, 'wf', 'run', 5_000)).toBe(true);
    expect(calls.count).toBe(2);
  });

  it('still open when the wait runs out, whether the last poll ended past its deadline or cancelled', async () => {
    expect(await untilClosed(polled([grpcFailure(DEADLINE_EXCEEDED, 'Deadline exceeded')]).handle, 'wf', 'run', 5_000)).toBe(false);
    const started = Date.now();
    expect(await untilClosed(polled([grpcFailure(CANCELLED, 'Call cancelled')]).handle, 'wf', 'run', 300)).toBe(false);
    expect(Date.now() - started).toBeGreaterThanOrEqual(250);
  });

  it("any other failure is the caller's to see", async () => {
    await expect(untilClosed(polled([grpcFailure(14, 'Connection dropped')]).handle, 'wf', 'run', 5_000)).rejects.toThrow('Connection dropped');
  });
});
