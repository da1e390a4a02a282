import { ScheduleNotFoundError, type ScheduleOptions } from '@temporalio/client';
import { validationFailed } from '../platform/errors.js';
import { RUN_GRAPH_WORKFLOW, type RunGraphInput } from '../../workflows/defs.js';
import type { TemporalHandle } from '../temporal/connection.js';
import type { WorkflowRow } from './workflow.schemas.js';

const overlapOf = {
  skip: 'SKIP',
  buffer_one: 'BUFFER_ONE',
  buffer_all: 'BUFFER_ALL',
  cancel_other: 'CANCEL_OTHER',
  terminate_other: 'TERMINATE_OTHER',
  allow_all: 'ALLOW_ALL',
} as const;

const GRPC_INVALID_ARGUMENT = 3;

/** Temporal's refusal of a schedule's spec (INVALID_ARGUMENT; the client raises it as a TypeError) as a 400. */
function refusal(err: unknown): Error | undefined {
  const cause = (err as { cause?: { code?: unknown } } | undefined)?.cause;
  const invalid = err instanceof TypeError || (err as { code?: unknown })?.code === GRPC_INVALID_ARGUMENT || cause?.code === GRPC_INVALID_ARGUMENT;
  if (!invalid) return undefined;
  const message = (err as Error).message;
  const field = /time ?zone/i.test(message) ? 'trigger.config.timezone' : 'trigger.config.cron';
  return validationFailed([{ field, message: `Temporal refuses this schedule: ${message}` }]);
}

/**
 * The Temporal Schedule behind a `schedule` trigger: it exists while the workflow is active,
 * is paused on deactivate/archive and deleted on purge. Each action starts a run of the
 * workflow's current version; the run creates its own execution record.
 */
export class WorkflowSchedules {
  constructor(private readonly temporal: TemporalHandle) {}

  private options(row: Pick<WorkflowRow, 'id' | 'trigger'>): ScheduleOptions {
    if (row.trigger.type !== 'schedule') throw new Error('not a schedule trigger');
    const config = row.trigger.config;
    const input: RunGraphInput = { workflowId: row.id, payload: { scheduled: true }, trigger: 'schedule' };
    return {
      scheduleId: this.temporal.scheduleId(row.id),
      spec: { cronExpressions: [config.cron], ...(config.timezone ? { timezone: config.timezone } : {}) },
      action: {
        type: 'startWorkflow',
        workflowType: RUN_GRAPH_WORKFLOW,
        workflowId: `${this.temporal.scheduleId(row.id)}-run`,
        taskQueue: this.temporal.taskQueue,
        args: [input],
      },
      policies: { overlap: overlapOf[config.overlap] },
      memo: { workflow_id: row.id },
    };
  }

  /**
   * Creates or updates the schedule of an active schedule-triggered workflow; removes a stale one.
   * A schedule Temporal refuses (what the definition's validation let through) is a 400 naming
   * the field, never a 500; the caller saves nothing then.
   */
  async sync(row: Pick<WorkflowRow, 'id' | 'trigger'>): Promise<void> {
    try {
      await this.apply(row);
    } catch (err) {
      throw refusal(err) ?? err;
    }
  }

  private async apply(row: Pick<WorkflowRow, 'id' | 'trigger'>): Promise<void> {
    const handle = this.temporal.client.schedule.getHandle(this.temporal.scheduleId(row.id));
    if (row.trigger.type !== 'schedule') {
      await handle.delete().catch((err) => {
        if (!(err instanceof ScheduleNotFoundError)) throw err;
      });
      return;
    }
    const options = this.options(row);
    try {
      // One update carries the unpause too: a separate unpause may be applied before it.
      await handle.update((previous) => ({
        ...previous,
        spec: options.spec,
        action: options.action,
        policies: { ...previous.policies, ...options.policies },
        state: { ...previous.state, paused: false, note: 'workflow active' },
      }));
    } catch (err) {
      if (!(err instanceof ScheduleNotFoundError)) throw err;
      await this.temporal.client.schedule.create(options);
    }
  }

  async pause(row: WorkflowRow): Promise<void> {
    if (row.trigger.type !== 'schedule') return;
    await this.temporal.client.schedule
      .getHandle(this.temporal.scheduleId(row.id))
      .pause(`workflow ${row.status === 'archived' ? 'archived' : 'deactivated'}`)
      .catch((err) => {
        if (!(err instanceof ScheduleNotFoundError)) throw err;
      });
  }

  async remove(row: WorkflowRow): Promise<void> {
    await this.temporal.client.schedule
      .getHandle(this.temporal.scheduleId(row.id))
      .delete()
      .catch((err) => {
        if (!(err instanceof ScheduleNotFoundError)) throw err;
      });
  }
}
