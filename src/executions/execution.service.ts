import { WorkflowNotFoundError } from '@temporalio/client';
import Long from 'long';
import { toDate, toIso, type Sql } from '../db/sql.js';
import { RUN_GRAPH_WORKFLOW, type RunGraphInput, type RunGraphResult } from '../../workflows/defs.js';
import { ancestors } from '../../workflows/graph.js';
import type { Principal } from '../auth/auth.service.js';
import { AppError, conflict, invalidRequest, notFound } from '../platform/errors.js';
import type { TemporalHandle } from '../temporal/connection.js';
import type { WorkflowRow, WorkflowService } from '../workflows/workflow.service.js';
import { findResetPoint } from './reset-point.js';

export interface ExecutionRow {
  id: string;
  workflow_id: number;
  workflow_version: number;
  status: 'running' | 'success' | 'failed' | 'partial' | 'cancelled';
  trigger: string;
  trigger_payload: unknown;
  started_at: Date | string;
  finished_at: Date | string | null;
  error: unknown;
  last_output: unknown;
  replay_of: string | null;
  temporal_workflow_id: string;
  temporal_run_id: string | null;
}

interface TimelineRow {
  node_id: string;
  node_type: string;
  status: string;
  started_at: Date | string | null;
  finished_at: Date | string | null;
  duration_ms: number | null;
  attempts: number;
  input: unknown;
  output: unknown;
  error: { code: string; message: string } | null;
  reused: boolean;
}

export interface ListExecutions {
  workflow_id?: number;
  status?: ExecutionRow['status'];
  since?: Date;
  until?: Date;
  page: number;
  per_page: number;
}

const iso = toIso;
const durationOf = (r: { started_at: Date | string; finished_at: Date | string | null }) =>
  r.finished_at ? toDate(r.finished_at).getTime() - toDate(r.started_at).getTime() : null;

/** How long a prepared execution record may wait for its Temporal run before it is closed. */
const UNSTARTED_GRACE_MS = 60_000;

/**
 * Starting runs and reading the queryable mirror of their history. Each run is one Temporal
 * workflow whose id is derived from the execution id; the mirror is written by the activities.
 */
export class ExecutionService {
  constructor(
    private readonly sql: Sql,
    private readonly temporal: TemporalHandle,
    private readonly workflows: WorkflowService,
  ) {}


  private summary(r: ExecutionRow) {
    return {
      id: Number(r.id),
      workflow_id: r.workflow_id,
      workflow_version: r.workflow_version,
      status: r.status,
      trigger: r.trigger,
      started_at: iso(r.started_at)!,
      finished_at: iso(r.finished_at),
      duration_ms: durationOf(r),
      replay_of: r.replay_of === null ? null : Number(r.replay_of),
    };
  }

  /** Creates the execution record, then starts its Temporal workflow. */
  async start(workflow: WorkflowRow, input: Omit<RunGraphInput, 'workflowId' | 'version'> & { version?: number }, triggeredBy?: number): Promise<{ executionId: number; temporalWorkflowId: string }> {
    if (workflow.status === 'archived') throw conflict('workflow_archived', 'The workflow is archived; restore it to run it');
    const version = input.version ?? workflow.version;
    // The Temporal workflow id derives from the execution id: both are set in one statement.
    const [row] = await this.sql.query<{ id: string; temporal_workflow_id: string }>(
      `insert into executions (id, workflow_id, workflow_version, status, trigger, trigger_payload, replay_of, temporal_workflow_id, triggered_by)
       select n.id, ?, ?, 'running', ?, ?, ?, ? || n.id, ? from (select nextval('executions_id_seq') as id) n
       returning id, temporal_workflow_id`,
      [workflow.id, version, input.trigger, JSON.stringify(input.payload ?? null), input.replayOf ?? null, this.temporal.executionWorkflowPrefix, triggeredBy ?? null],
    );
    const executionId = Number(row!.id);
    const temporalWorkflowId = row!.temporal_workflow_id;
    try {
      // The run id is recorded by the run's first activity (it claims this record).
      await this.temporal.client.workflow.start(RUN_GRAPH_WORKFLOW, {
        workflowId: temporalWorkflowId,
        taskQueue: this.temporal.taskQueue,
        args: [{ ...input, workflowId: workflow.id, version } satisfies RunGraphInput],
      });
    } catch (err) {
      await this.sql.query(`update executions set status = 'failed', finished_at = now(), error = ? where id = ?`, [
        JSON.stringify({ code: 'start_failed', message: 'The run could not be started: Temporal is unavailable' }),
        executionId,
      ]);
      throw err;
    }
    return { executionId, temporalWorkflowId };
  }

  /** Waits up to `timeoutMs` for a run's result; undefined when it is still running. */
  async waitForResult(temporalWorkflowId: string, timeoutMs: number): Promise<RunGraphResult | undefined> {
    const handle = this.temporal.client.workflow.getHandle(temporalWorkflowId);
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<undefined>((resolve) => (timer = setTimeout(() => resolve(undefined), timeoutMs)));
    try {
      return await Promise.race([handle.result() as Promise<RunGraphResult>, timeout]).catch(() => undefined);
    } finally {
      clearTimeout(timer);
    }
  }

  private async visible(principal: Principal, executionId: number): Promise<ExecutionRow> {
    const rows = await this.sql.query<ExecutionRow>('select * from executions where id = ?', [executionId]);
    const row = rows[0];
    if (!row) throw notFound('Execution');
    await this.workflows.get(principal, row.workflow_id).catch((err) => {
      throw err instanceof AppError && err.status === 404 ? notFound('Execution') : err;
    });
    return row;
  }

  async list(principal: Principal, query: ListExecutions) {
    const where = ['true'];
    const args: unknown[] = [];
    if (principal.role !== 'administrator') {
      where.push('(w.owner_id = ? or ? = any(w.shared_with))');
      args.push(principal.id, principal.id);
    }
    if (query.workflow_id !== undefined) {
      where.push('e.workflow_id = ?');
      args.push(query.workflow_id);
    }
    if (query.status) {
      where.push('e.status = ?');
      args.push(query.status);
    }
    if (query.since) {
      where.push('e.started_at >= ?');
      args.push(query.since);
    }
    if (query.until) {
      where.push('e.started_at <= ?');
      args.push(query.until);
    }
    const clause = where.join(' and ');
    const [{ total }] = (await this.sql.query<{ total: string }>(`select count(*) as total from executions e join workflows w on w.id = e.workflow_id where ${clause}`, args)) as [{ total: string }];
    const rows = await this.sql.query<ExecutionRow>(
      `select e.* from executions e join workflows w on w.id = e.workflow_id where ${clause} order by e.started_at desc, e.id desc limit ? offset ?`,
      [...args, query.per_page, (query.page - 1) * query.per_page],
    );
    return { items: rows.map((r) => this.summary(r)), total: Number(total), page: query.page, per_page: query.per_page };
  }

  async view(principal: Principal, executionId: number) {
    let row = await this.visible(principal, executionId);
    if (row.status === 'running') row = await this.reconcile(row);
    const timeline = await this.sql.query<TimelineRow>('select * from execution_nodes where execution_id = ? order by position', [executionId]);
    return {
      ...this.summary(row),
      trigger_payload: row.trigger_payload,
      error: row.error ?? null,
      output: row.last_output ?? null,
      temporal: {
        workflow_id: row.temporal_workflow_id,
        run_id: row.temporal_run_id,
        ui_url: `${this.temporal.uiUrl}/namespaces/${encodeURIComponent(this.temporal.namespace)}/workflows/${encodeURIComponent(row.temporal_workflow_id)}${row.temporal_run_id ? `/${row.temporal_run_id}` : ''}/history`,
      },
      timeline: timeline.map((t) => ({
        node_id: t.node_id,
        node_type: t.node_type,
        status: t.status,
        started_at: iso(t.started_at),
        finished_at: iso(t.finished_at),
        duration_ms: t.duration_ms,
        attempts: t.attempts,
        input: t.input ?? null,
        output: t.output ?? null,
        error: t.error ?? null,
        reused: t.reused,
      })),
    };
  }

  /**
   * A run terminated from outside (Temporal Web UI, CLI, timeout) never reaches its own final
   * activity; the mirror learns its end from Temporal when read or swept.
   */
  async reconcile(row: ExecutionRow): Promise<ExecutionRow> {
    if (!row.temporal_run_id) return this.reconcileUnstarted(row);
    let description;
    try {
      description = await this.temporal.client.workflow.getHandle(row.temporal_workflow_id, row.temporal_run_id).describe();
    } catch (err) {
      if (err instanceof WorkflowNotFoundError) return row;
      return row; // Temporal unreachable: show what the mirror has
    }
    const closed = { TERMINATED: 'failed', TIMED_OUT: 'failed', CANCELLED: 'cancelled', FAILED: 'failed' } as const;
    const status = closed[description.status.name as keyof typeof closed];
    if (!status) return row;
    const error = { code: description.status.name.toLowerCase(), message: `The Temporal run was ${description.status.name.toLowerCase().replace('_', ' ')}` };
    const [updated] = await this.sql.query<ExecutionRow>(
      `update executions set status = ?, finished_at = coalesce(finished_at, ?), error = coalesce(error, ?)
        where id = ? and status = 'running' returning *`,
      [status, description.closeTime ?? new Date(), JSON.stringify(error), row.id],
    );
    if (updated) {
      await this.sql.query(
        `update execution_nodes set status = 'failed', finished_at = coalesce(finished_at, now()), error = coalesce(error, ?) where execution_id = ? and status = 'running'`,
        [JSON.stringify(error), row.id],
      );
    }
    return updated ?? row;
  }

  /**
   * A record without a Temporal run id is one the API prepared and then started, or was about to:
   * the run's first activity claims it. When the API died (or lost PostgreSQL) between writing the
   * record and starting the run, nothing ever will; after a minute without a Temporal workflow of
   * that id the record is closed as `start_failed`, so no execution stays "running" forever.
   */
  private async reconcileUnstarted(row: ExecutionRow): Promise<ExecutionRow> {
    if (Date.now() - toDate(row.started_at).getTime() < UNSTARTED_GRACE_MS) return row;
    try {
      await this.temporal.client.workflow.getHandle(row.temporal_workflow_id).describe();
      return row; // started; its first activity has yet to claim the record
    } catch (err) {
      if (!(err instanceof WorkflowNotFoundError)) return row; // Temporal unreachable: ask again later
    }
    const error = { code: 'start_failed', message: 'The run was never started (the service stopped or lost a dependency while starting it)' };
    const [updated] = await this.sql.query<ExecutionRow>(
      `update executions set status = 'failed', finished_at = now(), error = ? where id = ? and status = 'running' and temporal_run_id is null returning *`,
      [JSON.stringify(error), row.id],
    );
    return updated ?? row;
  }

  /** Reconciles every run still marked running for longer than `olderThanMs` (the worker's sweeper). */
  async sweep(olderThanMs: number): Promise<number> {
    const rows = await this.sql.query<ExecutionRow>(
      `select * from executions where status = 'running' and started_at < now() - (? * interval '1 millisecond') order by id limit 200`,
      [olderThanMs],
    );
    let changed = 0;
    for (const row of rows) if ((await this.reconcile(row)).status !== 'running') changed++;
    return changed;
  }

  /**
   * Replays an execution as a new one. `from_node_id` alone resets the Temporal run to just before
   * that node (earlier nodes are not run again); `with_payload` starts a fresh run with a new
   * trigger payload; both together start a fresh run that reuses the recorded outputs of the
   * nodes upstream of `from_node_id`.
   */
  async replay(principal: Principal, executionId: number, body: { from_node_id?: string; with_payload?: unknown }): Promise<{ executionId: number }> {
    const original = await this.visible(principal, executionId);
    if (original.status === 'running') throw conflict('execution_running', 'The execution is still running; wait for it or cancel it first');
    const workflow = await this.workflows.get(principal, original.workflow_id);
    const { graph } = await this.workflows.loadVersion(original.workflow_id, original.workflow_version);
    const payload = body.with_payload !== undefined ? body.with_payload : original.trigger_payload;
    if (body.from_node_id === undefined) {
      return this.start(workflow, { payload, trigger: 'replay', replayOf: Number(original.id), version: original.workflow_version }, principal.id);
    }
    const fromNode = body.from_node_id;
    if (!graph.nodes.some((n) => n.id === fromNode)) throw invalidRequest(`Node ${fromNode} is not in version ${original.workflow_version} of the workflow`, { field: 'from_node_id' });
    const timeline = await this.sql.query<TimelineRow>('select * from execution_nodes where execution_id = ?', [original.id]);
    const upstream = ancestors(graph, fromNode);
    if (body.with_payload !== undefined) {
      const seed: Record<string, unknown> = {};
      for (const t of timeline) if (upstream.has(t.node_id) && t.status === 'success') seed[t.node_id] = t.output;
      for (const id of upstream) {
        if (!(id in seed) && !timeline.some((t) => t.node_id === id && t.status === 'skipped')) {
          throw conflict('node_not_run', `Upstream node ${id} has no recorded output in execution ${original.id}`);
        }
      }
      const started = await this.start(workflow, { payload, trigger: 'replay', replayOf: Number(original.id), version: original.workflow_version, seed, startAt: fromNode }, principal.id);
      await this.copyTimeline(Number(original.id), started.executionId, Object.keys(seed));
      return started;
    }
    if (!original.temporal_run_id) throw conflict('node_not_run', 'The execution has no Temporal run to reset');
    const point = await findResetPoint(this.temporal, original.temporal_workflow_id, original.temporal_run_id, fromNode);
    if (!point) throw conflict('node_not_run', `Node ${fromNode} did not start in execution ${original.id}; nothing to reset to`);
    const [row] = await this.sql.query<{ id: string }>(
      `insert into executions (workflow_id, workflow_version, status, trigger, trigger_payload, replay_of, temporal_workflow_id, triggered_by)
       values (?, ?, 'running', 'replay', ?, ?, ?, ?) returning id`,
      [original.workflow_id, original.workflow_version, JSON.stringify(original.trigger_payload ?? null), original.id, original.temporal_workflow_id, principal.id],
    );
    const newId = Number(row!.id);
    await this.copyTimeline(Number(original.id), newId, point.completedNodes);
    try {
      const { runId } = (await this.temporal.client.workflowService.resetWorkflowExecution({
        namespace: this.temporal.namespace,
        workflowExecution: { workflowId: original.temporal_workflow_id, runId: original.temporal_run_id },
        reason: `replay of execution ${original.id} from node ${fromNode}`,
        workflowTaskFinishEventId: Long.fromNumber(point.eventId),
        requestId: `replay-${newId}`,
      })) as { runId: string };
      await this.sql.query('update executions set temporal_run_id = coalesce(temporal_run_id, ?) where id = ?', [runId, newId]);
    } catch (err) {
      await this.sql.query(`update executions set status = 'failed', finished_at = now(), error = ? where id = ?`, [
        JSON.stringify({ code: 'reset_failed', message: 'Temporal refused the reset' }),
        newId,
      ]);
      throw err;
    }
    return { executionId: newId };
  }

  /** Carries the timeline entries of nodes that will not run again into the replay, marked reused. */
  private async copyTimeline(from: number, to: number, nodeIds: string[]) {
    if (!nodeIds.length) return;
    await this.sql.query(
      `insert into execution_nodes (execution_id, node_id, node_type, status, started_at, finished_at, duration_ms, attempts, input, output, error, reused)
       select ?, node_id, node_type, status, started_at, finished_at, duration_ms, attempts, input, output, error, true
         from execution_nodes where execution_id = ? and node_id = any(?) order by position
       on conflict do nothing`,
      [to, from, nodeIds],
    );
  }
}
