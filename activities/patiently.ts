import { activityNow } from './activity-now.js';
import { waitOutDatabase } from '../src/db/availability.js';

/** What of an activity's info decides how long it may wait. */
export interface AttemptTiming {
  startToCloseTimeoutMs?: number;
  currentAttemptScheduledTimestampMs: number;
}

/**
 * Until when an attempt may wait for the database: two seconds before its start-to-close timeout
 * ends (thirty seconds from `now` without one), so it fails on its own before Temporal times it out.
 */
export function waitDeadline(timing: AttemptTiming, now: number): number {
  const { startToCloseTimeoutMs, currentAttemptScheduledTimestampMs } = timing;
  return (startToCloseTimeoutMs ? currentAttemptScheduledTimestampMs + startToCloseTimeoutMs : now + 30_000) - 2_000;
}

/**
 * Runs the current activity's own read or write, waiting out a PostgreSQL outage for as long as
 * the activity may run (heartbeating meanwhile, unless it is a local activity), so a database
 * restart neither fails a node nor runs its side effect again. Only for idempotent work: reads,
 * claims, upserts, updates to a final state.
 */
export function patiently<T>(fn: () => Promise<T>): Promise<T> {
  const activity = activityNow();
  const deadline = waitDeadline(activity.info, Date.now());
  return waitOutDatabase(fn, deadline, activity.info.isLocal ? undefined : () => activity.heartbeat());
}
