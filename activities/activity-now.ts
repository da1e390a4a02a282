import { AsyncLocalStorage } from 'node:async_hooks';
import { Context, type Info } from '@temporalio/activity';

/**
 * What a node's attempt reads of the activity it runs in: Temporal's context, or the one the
 * attempt of a run's first call is given when the API runs it ahead of its local activity (see
 * src/executions/early-runs.ts).
 */
export interface ActivityNow {
  info: Pick<Info, 'isLocal' | 'attempt' | 'workflowExecution' | 'startToCloseTimeoutMs' | 'currentAttemptScheduledTimestampMs'>;
  cancellationSignal: AbortSignal;
  heartbeat(details?: unknown): void;
}

const ahead = new AsyncLocalStorage<ActivityNow>();

/** The activity the calling code runs in: an attempt run ahead of its activity, else Temporal's. */
export const activityNow = (): ActivityNow => ahead.getStore() ?? Context.current();

/** Runs `fn` as the first attempt of a run's local activity that has not started yet. */
export function runAhead<T>(run: { workflowId: string; runId: string }, timeoutMs: number, signal: AbortSignal, fn: () => Promise<T>): Promise<T> {
  const now: ActivityNow = {
    info: {
      isLocal: true,
      attempt: 1,
      workflowExecution: { workflowId: run.workflowId, runId: run.runId },
      startToCloseTimeoutMs: timeoutMs,
      currentAttemptScheduledTimestampMs: Date.now(),
    },
    // Cancelled with the activity that takes it (whose timeout is the node's); the call itself is
    // bounded by the node's timeout too, should no activity take it.
    cancellationSignal: signal,
    // A local activity does not heartbeat.
    heartbeat: () => undefined,
  };
  return ahead.run(now, fn);
}
