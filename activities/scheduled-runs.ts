import { ApplicationFailure } from '@temporalio/activity';
import type { Config } from '../src/config.js';
import type { ExecutionMirror, NewRecord } from '../src/executions/execution.mirror.js';
import type { NodeError } from '../workflows/defs.js';
import { patiently } from './patiently.js';

/** What admitting a schedule's run uses. */
export interface ScheduledRunPorts {
  config: Pick<Config, 'SVC_SCHEDULE_MAX_RUNNING_PER_USER'>;
  executionMirror: Pick<ExecutionMirror, 'insertScheduled' | 'scheduledRefusal'>;
}

/** The run ends here: its record already says why. Not retried. */
const refused = (error: NodeError) => ApplicationFailure.nonRetryable(error.message, error.code);

/**
 * The record of a run a schedule started, or its refusal when the workflow's owner already has
 * SVC_SCHEDULE_MAX_RUNNING_PER_USER such runs in progress: a schedule firing faster than its runs
 * end (`@every 1s` with `allow_all`, or many schedules of one user) cannot pile runs up. The
 * refused run's record is written `failed` (`schedule_run_limit`) and its first step fails, so
 * the run ends at once and the record and Temporal agree.
 */
export async function admitScheduledRun(ports: ScheduledRunPorts, record: NewRecord & { temporalWorkflowId: string; runId: string }): Promise<void> {
  const refusal = await patiently(() => ports.executionMirror.insertScheduled(record, ports.config.SVC_SCHEDULE_MAX_RUNNING_PER_USER));
  if (refusal) throw refused(refusal);
}

/** A retried first step of a schedule's run finds the refusal the first attempt stored, and keeps it. */
export async function keepScheduledRefusal(ports: ScheduledRunPorts, runId: string): Promise<void> {
  const refusal = await patiently(() => ports.executionMirror.scheduledRefusal(runId));
  if (refusal) throw refused(refusal);
}
