import { WorkflowExecutionAlreadyStartedError } from '@temporalio/client';
import { RUN_GRAPH_WORKFLOW, type RunGraphInput } from '../../workflows/defs.js';
import { toIso } from '../db/sql.js';
import type { Logger } from '../platform/logger.js';
import type { TemporalHandle } from '../temporal/connection.js';

/**
 * Error workflows: a workflow may name another (`error_workflow_id`) to run when one of its runs
 * ends `failed` (a node failure, a time-out, a limit, a run terminated or timed out in Temporal).
 *
 * Durable in two steps. The execution record of the handler's run is written in the same
 * transaction that records the failure (ExecutionMirror.finish and closeEnded), so a failure is
 * never recorded without its handler; then its Temporal run is started under the workflow id the
 * record derives from its id. A start that never happened (the worker died between the two, or
 * Temporal was away) is sent again by the worker's sweep, and Temporal keeps a start sent twice
 * to one run (REJECT_DUPLICATE).
 *
 * No loops: a run started as an error handler (trigger `error`), and every run of its tree of
 * `run_workflow` children, never starts an error workflow. The handler runs with the rights of
 * its own workflow's people (its owner and the author of its current version), not the failed
 * run's. The failure's message and data are the failed run's data: the handler is given them when
 * whoever chose it as the error workflow, or every person it acts for, holds the failed run's
 * rights (src/executions/run-data-access.ts); otherwise its payload's `error` keeps the code and
 * node and says the message is withheld.
 */

/** The handler's run a failure queued: its prepared record and what its run starts with. */
export interface ErrorRun {
  executionId: number;
  temporalWorkflowId: string;
  workflowId: number;
  version: number;
  payload: ErrorWorkflowPayload;
}

/** The trigger payload of an error workflow's run. */
export interface ErrorWorkflowPayload {
  execution_id: number;
  workflow_id: number;
  workflow_slug: string;
  status: string;
  failed_node_id: string | null;
  error: unknown;
  started_at: string | null;
  ended_at: string | null;
}

/** The payload of the handler of a failed execution, from its record as the failure left it. */
export function errorWorkflowPayload(failed: {
  id: string | number;
  workflow_id: number;
  slug: string;
  status: string;
  error: unknown;
  started_at: Date | string;
  finished_at: Date | string | null;
}): ErrorWorkflowPayload {
  const nodeId = (failed.error as { node_id?: unknown } | null)?.node_id;
  return {
    execution_id: Number(failed.id),
    workflow_id: failed.workflow_id,
    workflow_slug: failed.slug,
    status: failed.status,
    failed_node_id: typeof nodeId === 'string' ? nodeId : null,
    error: failed.error ?? null,
    started_at: toIso(failed.started_at),
    ended_at: toIso(failed.finished_at),
  };
}

/** Starts the Temporal runs of queued error workflow executions. */
export class ErrorWorkflows {
  constructor(
    private readonly temporal: TemporalHandle,
    private readonly logger: Logger,
  ) {}

  /**
   * Starts the handler's run; one that already started counts as started. Never throws: a start
   * that failed is sent again by the worker's sweep (ExecutionService.reconcile). True when
   * Temporal has the run.
   */
  async launch(run: ErrorRun): Promise<boolean> {
    try {
      await this.temporal.client.workflow.start(RUN_GRAPH_WORKFLOW, {
        workflowId: run.temporalWorkflowId,
        taskQueue: this.temporal.taskQueue,
        workflowIdReusePolicy: 'REJECT_DUPLICATE',
        args: [{ workflowId: run.workflowId, version: run.version, payload: run.payload, trigger: 'error' } satisfies RunGraphInput],
      });
      return true;
    } catch (err) {
      if (err instanceof WorkflowExecutionAlreadyStartedError) return true;
      this.logger.warn({ err, execution: run.executionId }, 'error workflow run not started yet; the sweep sends it again');
      return false;
    }
  }
}
