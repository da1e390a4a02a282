import { connectionUseSql, type ConnectionUse } from '../connections/connection.service.js';
import type { Queryable, Sql } from '../db/sql.js';
import type { GraphNode, NodeError } from '../../workflows/defs.js';
import { currentTraceId } from '../platform/tracing.js';
import { CODE } from '../../workflows/error-codes.js';
import { errorWorkflowPayload, type ErrorRun } from './error-workflow.js';
import { holdsRunRights, withheldError } from './run-data-access.js';
import type { Role } from '../auth/capabilities.js';
import { NOTIFY_PAYLOAD_BYTES } from '../platform/announcements.js';
import { RUN_CLOSED_CHANNEL } from './run-closed.js';

/**
 * The execution mirror: the queryable copy of every run's history in PostgreSQL (`executions` and
 * `execution_nodes`). This module is the only one that reads or writes those tables; the API (which
 * prepares records, reads them and reconciles them with Temporal) and the worker's activities
 * (which claim records and write the timeline) both go through it.
 *
 * The rule between its two writers: the API writes a record before it asks Temporal for a run
 * (a start or a reset), without a run id; the run's first activity claims the record of its
 * Temporal workflow id that has no run id yet and sets it. A run nobody prepared a record for
 * (a schedule, a record event, a parent run, an operator's reset) gets one from its activities.
 */

export type ExecutionStatus = 'running' | 'success' | 'failed' | 'partial' | 'cancelled';

export interface ExecutionRow {
  id: string;
  workflow_id: number;
  workflow_version: number;
  status: ExecutionStatus;
  trigger: string;
  trigger_payload: unknown;
  started_at: Date | string;
  finished_at: Date | string | null;
  error: unknown;
  last_output: unknown;
  replay_of: string | null;
  replay_reason: string | null;
  temporal_workflow_id: string;
  temporal_run_id: string | null;
  /** The OpenTelemetry trace of the run, when tracing is on. */
  trace_id: string | null;
  /** A run of an error workflow: the failed execution it handles. */
  triggered_by_execution_id: string | null;
}

export interface TimelineRow {
  node_id: string;
  node_type: string;
  status: string;
  started_at: Date | string | null;
  finished_at: Date | string | null;
  duration_ms: number | null;
  attempts: number;
  input: unknown;
  output: unknown;
  error: { code: string; message: string; data?: unknown } | null;
  reused: boolean;
  /** How long the last attempt took (`duration_ms` runs from the first attempt's start). */
  last_attempt_ms: number | null;
}

/** What the worker needs of a run's record. */
export interface ExecutionRef {
  id: number;
  workflowId: number;
  ownerId: number;
  /**
   * Whose rights the run carries, together: the workflow's owner, the author of the version that
   * runs, whoever started it by hand, and for a run_workflow child its parent run's people.
   */
  actingUserIds: number[];
  /** 0 for a run nobody called; a run_workflow child is one deeper than its parent. */
  depth: number;
  /** The run at the top of its tree of run_workflow children (itself when it has no parent). */
  rootId: number;
  /** How the run was started (manual, webhook, schedule, record, replay, child). */
  trigger: string;
  /** This claim was the record's first: the run begins now (it is counted as started once). */
  firstClaim: boolean;
}

/**
 * The people a run acts for, as SQL over the record `e` (its workflow `w` and version `v`, its
 * parent `p`): the owner, the version's author, whoever started it, the parent's people.
 */
const ACTING_USERS = `array(select distinct u from unnest(array[w.owner_id, v.created_by, e.triggered_by] || coalesce(p.acting_user_ids, '{}')) u
   where u is not null order by u)`;

/** A row of the executions list: the record and its workflow's owner (who may see its data). */
export type ListedExecutionRow = ExecutionRow & { workflow_owner_id: number; acting_user_ids: number[] | null };

/** A page of executions as the list endpoint asks for it. */
export interface ListExecutions {
  workflow_id?: number;
  status?: ExecutionStatus;
  since?: Date;
  until?: Date;
  page: number;
  per_page: number;
}

export interface ListFilter extends ListExecutions {
  /** SQL condition on the workflow (alias `w`) restricting to what the caller may see, and its values. */
  visible: [string, unknown[]];
}

export interface NewRecord {
  workflowId: number;
  version: number;
  trigger: string;
  payload: unknown;
  replayOf?: number;
  replayReason?: string;
  triggeredBy?: number;
  /** A run_workflow child: the execution of the run that called it. */
  parentExecutionId?: number;
}

/** Entry fields a node activity writes. */
export type NodeEntry = Partial<Record<'status' | 'started_at' | 'finished_at' | 'duration_ms' | 'attempts' | 'input' | 'output' | 'error', unknown>>;

/** A record a launch could not confirm (its start or reset failed, or its answer was lost). */
export const UNCONFIRMED_CODES = ['start_failed', 'reset_failed'] as const;

/**
 * A node's timeline entry, inserted or updated (see ExecutionMirror.writeNode). The entry keeps
 * the first attempt's start; an ended node's `duration_ms` runs from it to the last attempt's end
 * (retries and their waits included), and `last_attempt_ms` is the duration the write reports.
 */
const NODE_COLUMNS = [
  'node_type',
  'status',
  'started_at',
  'finished_at',
  'duration_ms',
  'attempts',
  'input',
  'output',
  'error',
  'reused',
  'last_attempt_ms',
] as const;
const WRITE_NODE = `insert into execution_nodes (execution_id, node_id, ${NODE_COLUMNS.join(', ')}) values (?, ?, ${NODE_COLUMNS.map(() => '?').join(', ')})
       on conflict (execution_id, node_id) do update set status = excluded.status,
         started_at = coalesce(execution_nodes.started_at, excluded.started_at), finished_at = excluded.finished_at,
         duration_ms = case when excluded.finished_at is null then excluded.duration_ms
           else greatest(0, round(extract(epoch from excluded.finished_at - coalesce(execution_nodes.started_at, excluded.started_at, excluded.finished_at)) * 1000))::int end,
         last_attempt_ms = excluded.last_attempt_ms,
         attempts = greatest(execution_nodes.attempts, excluded.attempts),
         input = coalesce(excluded.input, execution_nodes.input), output = excluded.output, error = excluded.error, reused = false
       -- A node the run's cancel ended stays ended. A node a replay carried over (reused) is only
       -- re-recorded by the replay run's bookkeeping (a delay's end, a child's result): it keeps
       -- its original entry. An ended node goes back to running only for a later attempt: a
       -- "running" write of the same attempt comes late, from a worker that lost its workflow task
       -- while that write waited (the task ran again elsewhere and the node ended there).
       where execution_nodes.status <> 'cancelled'
         and not (execution_nodes.reused and execution_nodes.status = excluded.status and excluded.status in ('success', 'failed'))
         and not (excluded.status = 'running' and not execution_nodes.reused
                  and execution_nodes.status in ('success', 'failed', 'skipped') and excluded.attempts <= execution_nodes.attempts)`;

const json = (value: unknown) => (value === undefined ? null : JSON.stringify(value));

/** A run's record as its claim found it: with a node's attempt when the claim counted one, and the node's connection when it read one (null: there is none). */
export type Claim = ExecutionRef & { attempts?: number; connection?: ConnectionUse | null };

/** The attempt of `node` a claim counts (ExecutionMirror.claim), reading the node's connection when it has one. */
export const claimedAttempt = (node: GraphNode, startedAt: Date) => ({
  node,
  startedAt,
  ...(node.connection_id !== undefined ? { connectionId: node.connection_id } : {}),
});

/**
 * WRITE_NODE's values after the execution and node ids. An entry is always for at least one
 * attempt (the column is required even when the write only updates an existing entry:
 * PostgreSQL checks the proposed row before it sees the conflict).
 */
const nodeValues = (node: Pick<GraphNode, 'type'>, entry: NodeEntry) => [
  node.type,
  ...(['status', 'started_at', 'finished_at', 'duration_ms'] as const).map((f) => entry[f] ?? null),
  entry.attempts ?? 1,
  json(entry.input),
  json(entry.output),
  json(entry.error),
  false,
  entry.duration_ms ?? null,
];

interface RefRow {
  id: string;
  workflow_id: number;
  owner_id: number;
  acting_user_ids: number[] | null;
  depth: number;
  root_execution_id: string | null;
  trigger: string;
  first_claim: boolean;
}

const refOf = (row: RefRow): ExecutionRef => ({
  id: Number(row.id),
  workflowId: row.workflow_id,
  ownerId: row.owner_id,
  actingUserIds: row.acting_user_ids ?? [row.owner_id],
  depth: row.depth,
  rootId: Number(row.root_execution_id ?? row.id),
  trigger: row.trigger,
  firstClaim: row.first_claim,
});

export class ExecutionMirror {
  constructor(
    private readonly sql: Sql,
    /** Temporal workflow ids of executions: this prefix and the execution id. */
    private readonly workflowIdPrefix: string,
  ) {}

  // ---- the API's side -----------------------------------------------------------------------

  /** A record for a run about to be started; its Temporal workflow id is set from its id, in one statement. */
  async prepareStart(q: Queryable, record: NewRecord): Promise<{ id: number; temporalWorkflowId: string }> {
    return this.insertPrepared(q, record, null);
  }

  /** A record for the run a reset of `temporalWorkflowId` is about to create. */
  async prepareReset(q: Queryable, record: NewRecord & { temporalWorkflowId: string }): Promise<number> {
    return (await this.insertPrepared(q, record, record.temporalWorkflowId)).id;
  }

  /** A prepared record: a reset's carries the replayed run's workflow id, a start's one derived from its own id. */
  private async insertPrepared(q: Queryable, record: NewRecord, temporalWorkflowId: string | null): Promise<{ id: number; temporalWorkflowId: string }> {
    // A replay keeps the place of the run it replays in a tree of child runs (and so its people).
    const [row] = await q.query<{ id: string; temporal_workflow_id: string }>(
      `insert into executions (id, workflow_id, workflow_version, status, trigger, trigger_payload, replay_of, replay_reason, temporal_workflow_id, triggered_by,
                               parent_execution_id, root_execution_id, depth, trace_id)
       select n.id, ?, ?, 'running', ?, ?, ?, ?, coalesce(?, ? || n.id), ?, r.parent_execution_id, r.root_execution_id, coalesce(r.depth, 0), ?
         from (select nextval('executions_id_seq') as id) n left join executions r on r.id = ?
       returning id, temporal_workflow_id`,
      [
        record.workflowId,
        record.version,
        record.trigger,
        json(record.payload ?? null),
        record.replayOf ?? null,
        record.replayReason ?? null,
        temporalWorkflowId,
        this.workflowIdPrefix,
        record.triggeredBy ?? null,
        currentTraceId() ?? null,
        record.replayOf ?? null,
      ],
      { prepared: true },
    );
    return { id: Number(row!.id), temporalWorkflowId: row!.temporal_workflow_id };
  }

  /** The execution of a Temporal workflow id still running (a reset replay in flight), if any. */
  async runningOf(q: Queryable, temporalWorkflowId: string): Promise<number | undefined> {
    const [row] = await q.query<{ id: string }>(`select id from executions where temporal_workflow_id = ? and status = 'running' order by id desc limit 1`, [
      temporalWorkflowId,
    ]);
    return row ? Number(row.id) : undefined;
  }

  /** Executions of a workflow still running. */
  async runningOfWorkflow(workflowId: number): Promise<number[]> {
    return (await this.sql.query<{ id: string }>(`select id from executions where workflow_id = ? and status = 'running'`, [workflowId])).map((r) =>
      Number(r.id),
    );
  }

  async setRunId(id: number, runId: string): Promise<void> {
    await this.sql.query('update executions set temporal_run_id = coalesce(temporal_run_id, ?) where id = ?', [runId, id]);
  }

  /**
   * Takes back an attempt a claim counted for a call that will not be made (see
   * ExecutionService.firstCallClaim: the start was refused): the entry goes when it is still that
   * one attempt, not begun again since. An attempt counted since (the start was in fact accepted,
   * and the run's activity claimed) is left, and the entry then counts one more than was made.
   */
  async uncount(executionId: number, nodeId: string): Promise<void> {
    // The people the claim fixed go with it while no run has claimed the record: the run's own
    // first claim fixes them (and counts the run started) if the start was in fact accepted.
    await this.sql.query(
      `with gone as (delete from execution_nodes where execution_id = ? and node_id = ? and attempts = 1 and status = 'running' and finished_at is null)
       update executions set acting_user_ids = null where id = ? and temporal_run_id is null`,
      [executionId, nodeId, executionId],
    );
  }

  /** The launch failed: only a record no run has claimed is marked (a run that did start writes its real outcome). */
  async markUnconfirmed(id: number, code: (typeof UNCONFIRMED_CODES)[number], message: string): Promise<void> {
    await this.sql.query(`update executions set status = 'failed', finished_at = now(), error = ? where id = ? and temporal_run_id is null`, [
      json({ code, message }),
      id,
    ]);
  }

  /** A record marked unconfirmed by an earlier attempt is running after all. */
  async markConfirmed(id: number): Promise<void> {
    await this.sql.query(
      `update executions set status = 'running', finished_at = null, error = null
        where id = ? and status = 'failed' and error->>'code' = any(?) and temporal_run_id is null`,
      [id, [...UNCONFIRMED_CODES]],
    );
  }

  async get(id: number, q: Queryable = this.sql): Promise<ExecutionRow | undefined> {
    const [row] = await q.query<ExecutionRow>('select * from executions where id = ?', [id]);
    return row;
  }

  async timeline(id: number): Promise<TimelineRow[]> {
    return this.sql.query<TimelineRow>('select * from execution_nodes where execution_id = ? order by position', [id]);
  }

  async list(filter: ListFilter): Promise<{ rows: ListedExecutionRow[]; total: number }> {
    const where = [filter.visible[0]];
    const args: unknown[] = [...filter.visible[1]];
    for (const [condition, value] of [
      ['e.workflow_id = ?', filter.workflow_id],
      ['e.status = ?', filter.status],
      ['e.started_at >= ?', filter.since],
      ['e.started_at <= ?', filter.until],
    ] as const) {
      if (value === undefined) continue;
      where.push(condition);
      args.push(value);
    }
    const clause = where.join(' and ');
    const [{ total }] = (await this.sql.query<{ total: string }>(
      `select count(*) as total from executions e join workflows w on w.id = e.workflow_id where ${clause}`,
      args,
    )) as [{ total: string }];
    const rows = await this.sql.query<ListedExecutionRow>(
      `select e.*, w.owner_id as workflow_owner_id from executions e join workflows w on w.id = e.workflow_id where ${clause} order by e.started_at desc, e.id desc limit ? offset ?`,
      [...args, filter.per_page, (filter.page - 1) * filter.per_page],
    );
    return { rows, total: Number(total) };
  }

  /**
   * The people of a run and of each run it carries data from (see src/executions/run-data-access.ts),
   * newest first: a replay carries its replayed run's data when it is a reset (its Temporal
   * workflow id is the replayed run's), reuses recorded outputs, or reuses the payload. Before a
   * run is claimed its people are those it will act for.
   */
  async runPeople(executionId: number, q: Queryable = this.sql): Promise<{ ownerId: number; actingUserIds: number[] }[]> {
    const rows = await q.query<{ owner_id: number; people: number[] }>(
      `with recursive chain as (
         select e.id, e.replay_of, e.trigger_payload, e.temporal_workflow_id, 0 as depth from executions e where e.id = ?
         union all
         select r.id, r.replay_of, r.trigger_payload, r.temporal_workflow_id, c.depth + 1
           from chain c join executions r on r.id = c.replay_of
          where c.depth < 1000
            and (c.temporal_workflow_id <> (? || c.id)
                 or exists (select 1 from execution_nodes n where n.execution_id = c.id and n.reused)
                 or c.trigger_payload is not distinct from r.trigger_payload))
       select w.owner_id, coalesce(e.acting_user_ids, ${ACTING_USERS}) as people
         from chain c join executions e on e.id = c.id join workflows w on w.id = e.workflow_id
         left join workflow_versions v on v.workflow_id = w.id and v.version = e.workflow_version
         left join executions p on p.id = e.parent_execution_id
        order by c.depth`,
      [executionId, this.workflowIdPrefix],
    );
    return rows.map((r) => ({ ownerId: r.owner_id, actingUserIds: r.people ?? [] }));
  }

  /** Carries the timeline entries of nodes that will not run again into a replay, marked reused. */
  async copyTimeline(from: number, to: number, nodeIds: string[], q: Queryable = this.sql): Promise<void> {
    if (!nodeIds.length) return;
    await q.query(
      `insert into execution_nodes (execution_id, node_id, node_type, status, started_at, finished_at, duration_ms, attempts, input, output, error, reused, last_attempt_ms)
       select ?, node_id, node_type, status, started_at, finished_at, duration_ms, attempts, input, output, error, true, last_attempt_ms
         from execution_nodes where execution_id = ? and node_id = any(?) order by position
       on conflict do nothing`,
      [to, from, nodeIds],
    );
  }

  /**
   * Closes a record Temporal says has ended (terminated, timed out...): no node stays running. A
   * run that ends `failed` so queues its workflow's error workflow in the same transaction
   * (`errorRun`), unless `queueErrorRun` is false (a run an operator's reset replaced).
   */
  async closeEnded(
    id: number,
    status: ExecutionStatus,
    closedAt: Date,
    error: NodeError,
    q?: Queryable,
    queueErrorRun = true,
  ): Promise<(ExecutionRow & { errorRun?: ErrorRun }) | undefined> {
    const close = async (tx: Queryable) => {
      const [updated] = await tx.query<ExecutionRow>(
        `update executions set status = ?, finished_at = coalesce(finished_at, ?), error = coalesce(error, ?) where id = ? and status = 'running' returning *`,
        [status, closedAt, json(error), id],
      );
      if (!updated) return undefined;
      await tx.query(
        `update execution_nodes set status = 'failed', finished_at = coalesce(finished_at, now()), error = coalesce(error, ?) where execution_id = ? and status = 'running'`,
        [json(error), id],
      );
      const errorRun = status === 'failed' && queueErrorRun ? await this.queueErrorRun(tx, id) : undefined;
      return { ...updated, ...(errorRun ? { errorRun } : {}) };
    };
    return q ? close(q) : this.sql.transaction(close);
  }

  /**
   * Writes the record of the error workflow's run for a failed execution, when its workflow names
   * one that its owner may still see and that is not archived, and the failed run is not itself
   * in an error handler's tree (a handler's failure starts nothing: no loops). Answers what to
   * start, or undefined. At most one per failed execution (a unique index).
   */
  private async queueErrorRun(tx: Queryable, failedId: number): Promise<ErrorRun | undefined> {
    const [failed] = await tx.query<{
      id: string;
      workflow_id: number;
      slug: string;
      status: string;
      error: unknown;
      started_at: Date;
      finished_at: Date | null;
      handler_id: number;
      handler_version: number;
      chooser_id: number | null;
      chooser_role: Role | null;
    }>(
      `select e.id, e.workflow_id, w.slug, e.status, e.error, e.started_at, e.finished_at, h.id as handler_id, h.version as handler_version,
              c.id as chooser_id, c.role as chooser_role
         from executions e
         join workflows w on w.id = e.workflow_id
         join users o on o.id = w.owner_id
         left join users c on c.id = w.error_workflow_chosen_by
         join workflows h on h.id = w.error_workflow_id and h.status <> 'archived'
              and (o.role = 'administrator' or h.owner_id = w.owner_id or w.owner_id = any(h.shared_with))
         left join executions r on r.id = e.root_execution_id
        where e.id = ? and e.trigger <> 'error' and coalesce(r.trigger, '') <> 'error'`,
      [failedId],
    );
    if (!failed) return undefined;
    // The failure's message and data are the failed run's data: the handler is given them only
    // when whoever chose it as the error workflow, or every person it acts for (its owner, the
    // author of its version), holds that run's rights. Otherwise it gets the code and the node.
    const handlerPeople = await tx.query<{ id: number; role: Role }>(
      `select u.id, u.role from workflows h join users u on u.id = h.owner_id where h.id = ?
        union select u.id, u.role from workflow_versions v join users u on u.id = v.created_by where v.workflow_id = ? and v.version = ?`,
      [failed.handler_id, failed.handler_id, failed.handler_version],
    );
    const failedPeople = await this.runPeople(failedId, tx);
    const chooser = failed.chooser_id !== null && failed.chooser_role !== null ? { id: failed.chooser_id, role: failed.chooser_role } : undefined;
    const entitled = (chooser !== undefined && holdsRunRights(chooser, failedPeople)) || handlerPeople.every((person) => holdsRunRights(person, failedPeople));
    const payload = errorWorkflowPayload(entitled ? failed : { ...failed, error: withheldError(failed.error as { code: string; message: string } | null) });
    const [row] = await tx.query<{ id: string; temporal_workflow_id: string }>(
      `insert into executions (id, workflow_id, workflow_version, status, trigger, trigger_payload, temporal_workflow_id, triggered_by_execution_id, trace_id)
       select n.id, ?, ?, 'running', 'error', ?, ? || n.id, ?, ? from (select nextval('executions_id_seq') as id) n
       on conflict do nothing returning id, temporal_workflow_id`,
      [failed.handler_id, failed.handler_version, json(payload), this.workflowIdPrefix, failedId, currentTraceId() ?? null],
    );
    if (!row) return undefined;
    return {
      executionId: Number(row.id),
      temporalWorkflowId: row.temporal_workflow_id,
      workflowId: failed.handler_id,
      version: failed.handler_version,
      payload,
    };
  }

  /** The execution of the error workflow a failed execution started, if any. */
  async errorRunOf(id: number): Promise<number | null> {
    const [row] = await this.sql.query<{ id: string }>(`select id from executions where triggered_by_execution_id = ? and trigger = 'error'`, [id]);
    return row ? Number(row.id) : null;
  }

  /**
   * Closes a prepared record whose run was never started; an attempt the API counted while it
   * was starting the run (see claim) goes with it: no call was made.
   */
  async closeUnstarted(id: number, error: NodeError): Promise<ExecutionRow | undefined> {
    const [updated] = await this.sql.query<ExecutionRow>(
      `with closed as (update executions set status = 'failed', finished_at = now(), error = ? where id = ? and status = 'running' and temporal_run_id is null returning *),
            counted as (delete from execution_nodes n using closed where n.execution_id = closed.id and n.status = 'running' and n.finished_at is null)
       select * from closed`,
      [json(error), id],
    );
    return updated;
  }

  /**
   * Records marked running for longer than `olderThanMs`, with ids above `afterId` (the worker's
   * sweep pages through them, so long runs at the front never starve the ones behind).
   */
  async runningOlderThan(olderThanMs: number, afterId = 0, limit = 200): Promise<ExecutionRow[]> {
    return this.sql.query<ExecutionRow>(
      `select * from executions where status = 'running' and started_at < now() - (? * interval '1 millisecond') and id > ? order by id limit ?`,
      [olderThanMs, afterId, limit],
    );
  }

  /** Whether a record is a start's (its Temporal workflow id derives from its id), not a reset's. */
  isStartRecord(row: Pick<ExecutionRow, 'id' | 'temporal_workflow_id'>): boolean {
    return row.temporal_workflow_id === `${this.workflowIdPrefix}${row.id}`;
  }

  // ---- the worker's side --------------------------------------------------------------------

  /**
   * The record of a run, claiming the one the API prepared (start or reset) when Temporal had not
   * yet given it a run id; an exact match wins over an unclaimed one. A start the API could not
   * confirm (it marked the record start_failed) did happen after all: the claim sets it running.
   * The claim waits for a lock the API holds on the record (marking it unconfirmed or confirmed
   * while the run already began): skipping it would leave the record unclaimed and make the run
   * a second record of its own. With `attempt`, the same statement begins that node's attempt as
   * beginAttempt does (a run's first node, a short call: one round trip instead of two) and the
   * answer carries its number (`attempts`, unset when the entry may not change); with its
   * `connectionId`, it also reads that connection for the people the run acts for, as
   * ConnectionService.resolve would next (`connection`, null when there is none). It reads it as
   * the statement found it when it began: a claim that waited for the API's lock on the record
   * uses a connection deleted or unshared in those milliseconds for this one call, as a read just
   * before the change would have.
   *
   * With `runId` null, the claim of an API that is starting the run and counts its first call's
   * attempt while Temporal answers the start (ExecutionService.firstCallClaim): it takes only a
   * running record no run has claimed (never one a refused start marked unconfirmed) and binds
   * none; the run's id is written with the call's outcome (setRunId, or `runId` of the RunOutcome
   * that ends the record), or by the first claim that names the run.
   */
  async claim(
    temporalWorkflowId: string,
    runId: string | null,
    attempt?: { node: Pick<GraphNode, 'id' | 'type'>; startedAt: Date; connectionId?: number },
  ): Promise<Claim | undefined> {
    // Only a record no run has claimed yet can be unconfirmed (a finished run may carry these codes
    // from a `fail` node); an unconfirmed reset is claimable for ten minutes, so a reset Temporal
    // in fact refused cannot be taken, long after, by a later reset of the same workflow id.
    const unconfirmed = `e.temporal_run_id is null and e.status = 'failed' and e.error->>'code' in (${UNCONFIRMED_CODES.map((c) => `'${c}'`).join(', ')})`;
    // The people the run acts for are fixed when it is first claimed (see ACTING_USERS).
    // The node's connection, read for the people the run acts for (null: there is none).
    const connectionId = attempt?.connectionId;
    const [row] = await this.sql.query<RefRow & { attempts?: number | null; connection?: ConnectionUse | null }>(
      `with target as (
         select id, acting_user_ids is null as first_claim from executions
          where temporal_workflow_id = ? and (temporal_run_id = ? or temporal_run_id is null)
            and not (temporal_run_id is null and status = 'failed' and error->>'code' = 'reset_failed' and started_at < now() - interval '10 minutes')
            ${runId === null ? "and status = 'running'" : ''}
          order by (temporal_run_id is not null) desc, id desc limit 1 for no key update),
       claimed as (
         update executions e set temporal_run_id = ?,
           status = case when ${unconfirmed} then 'running' else e.status end,
           finished_at = case when ${unconfirmed} then null else e.finished_at end,
           error = case when ${unconfirmed} then null else e.error end,
           trace_id = coalesce(e.trace_id, ?),
           acting_user_ids = coalesce(e.acting_user_ids, (select ${ACTING_USERS} from workflows w
               left join workflow_versions v on v.workflow_id = w.id and v.version = e.workflow_version
               left join executions p on p.id = e.parent_execution_id where w.id = e.workflow_id))
           from target where e.id = target.id returning e.id, e.workflow_id, e.acting_user_ids, e.depth, e.root_execution_id, e.trigger, target.first_claim)
       ${attempt ? `, counted as (${beginAttemptFrom("select claimed.id, ?, ?, 'running', ?::timestamptz, 1, false from claimed")})` : ''}
       select cl.*, w.owner_id ${attempt ? ', (select attempts from counted) as attempts' : ''}
         ${connectionId !== undefined ? `, (select row_to_json(k) from (${connectionUseSql('coalesce(cl.acting_user_ids, array[w.owner_id])')}) k) as connection` : ''}
         from claimed cl join workflows w on w.id = cl.workflow_id`,
      [
        temporalWorkflowId,
        runId,
        runId,
        currentTraceId() ?? null,
        ...(attempt ? [attempt.node.id, attempt.node.type, attempt.startedAt] : []),
        ...(connectionId !== undefined ? [connectionId] : []),
      ],
      { prepared: true },
    );
    if (!row) return undefined;
    return {
      ...refOf(row),
      ...(row.attempts !== undefined && row.attempts !== null ? { attempts: row.attempts } : {}),
      ...(connectionId !== undefined ? { connection: row.connection ?? null } : {}),
    };
  }

  /**
   * Counts a child run against the budget of its tree (the run at the top, `rootId`): true when
   * it fits within `budget`, or was counted already (an activity retried, a reset run starting it
   * again). Serialised per tree by a lock on the root record.
   */
  async claimChildRun(rootId: number, childTemporalWorkflowId: string, budget: number): Promise<boolean> {
    return this.sql.transaction(async (tx) => {
      await tx.query('select 1 from executions where id = ? for no key update', [rootId]);
      const [known] = await tx.query('select 1 from execution_child_runs where root_execution_id = ? and temporal_workflow_id = ?', [
        rootId,
        childTemporalWorkflowId,
      ]);
      if (known) return true;
      const [{ n }] = (await tx.query<{ n: number }>('select count(*)::int as n from execution_child_runs where root_execution_id = ?', [rootId])) as [
        { n: number },
      ];
      if (n >= budget) return false;
      await tx.query('insert into execution_child_runs (root_execution_id, temporal_workflow_id) values (?, ?)', [rootId, childTemporalWorkflowId]);
      return true;
    });
  }

  /**
   * Counts child runs against the budget of their tree at once (a loop's items each start one): true
   * when all of them fit, or were counted already (a retried step). All or none are counted.
   */
  async claimChildRuns(rootId: number, childTemporalWorkflowIds: string[], budget: number): Promise<boolean> {
    if (!childTemporalWorkflowIds.length) return true;
    return this.sql.transaction(async (tx) => {
      await tx.query('select 1 from executions where id = ? for no key update', [rootId]);
      const [{ n, known }] = (await tx.query<{ n: number; known: number }>(
        `select count(*)::int as n, count(*) filter (where temporal_workflow_id = any(?))::int as known from execution_child_runs where root_execution_id = ?`,
        [childTemporalWorkflowIds, rootId],
      )) as [{ n: number; known: number }];
      if (n - known + childTemporalWorkflowIds.length > budget) return false;
      await tx.query(`insert into execution_child_runs (root_execution_id, temporal_workflow_id) select ?, unnest(?::varchar[]) on conflict do nothing`, [
        rootId,
        childTemporalWorkflowIds,
      ]);
      return true;
    });
  }

  /** What the worker needs of a run's record, by its id (a loop's items workflow runs for the execution of its parent run). */
  async refOf(executionId: number): Promise<ExecutionRef | undefined> {
    const [row] = await this.sql.query<RefRow>(
      `select e.id, e.workflow_id, e.acting_user_ids, e.depth, e.root_execution_id, e.trigger, false as first_claim, w.owner_id
         from executions e join workflows w on w.id = e.workflow_id where e.id = ?`,
      [executionId],
    );
    return row ? refOf(row) : undefined;
  }

  /**
   * A record for a run nobody prepared one for (a schedule, a record event, a parent run). A child
   * run takes its place in its parent's tree: one deeper, the same root, the parent's people too.
   */
  async insertStarted(record: NewRecord & { temporalWorkflowId: string; runId: string }, q: Queryable = this.sql): Promise<void> {
    await q.query(
      `insert into executions (workflow_id, workflow_version, status, trigger, trigger_payload, temporal_workflow_id, temporal_run_id,
                               parent_execution_id, root_execution_id, depth)
       select ?, ?, 'running', ?, ?, ?, ?, p.id, coalesce(p.root_execution_id, p.id), coalesce(p.depth + 1, 0)
         from (select 1) one left join executions p on p.id = ?
       on conflict do nothing`,
      [
        record.workflowId,
        record.version,
        record.trigger,
        json(record.payload ?? null),
        record.temporalWorkflowId,
        record.runId,
        record.parentExecutionId ?? null,
      ],
    );
  }

  /**
   * The record of a run a schedule started, unless the owner of its workflow already has `limit`
   * runs started by schedules in progress: then the record is made ended at once (`failed`,
   * `schedule_run_limit`) and the refusal is answered. Counting and inserting hold a lock per
   * owner, so runs starting at the same moment cannot both take the last place.
   */
  async insertScheduled(record: NewRecord & { temporalWorkflowId: string; runId: string }, limit: number): Promise<NodeError | undefined> {
    return this.sql.transaction(async (tx) => {
      const [workflow] = await tx.query<{ owner_id: number }>('select owner_id from workflows where id = ?', [record.workflowId]);
      if (workflow) await tx.query('select pg_advisory_xact_lock(hashtext(?))', [`scheduled-runs:${workflow.owner_id}`]);
      const [{ n }] = (await tx.query<{ n: number }>(
        `select count(*)::int as n from executions e join workflows w on w.id = e.workflow_id
          where e.status = 'running' and e.trigger = 'schedule' and w.owner_id = ? and e.temporal_run_id is distinct from ?`,
        [workflow?.owner_id ?? null, record.runId],
      )) as [{ n: number }];
      await this.insertStarted(record, tx);
      if (n < limit) return undefined;
      const error: NodeError = {
        code: CODE.schedule_run_limit,
        message: `The owner of this workflow has ${n} runs started by schedules in progress, the most allowed (SVC_SCHEDULE_MAX_RUNNING_PER_USER); this one was not run`,
      };
      await tx.query(`update executions set status = 'failed', finished_at = now(), error = ? where temporal_run_id = ? and status = 'running'`, [
        json(error),
        record.runId,
      ]);
      return error;
    });
  }

  /** The refusal a schedule's run got from insertScheduled, if it got one (a retried first step asks). */
  async scheduledRefusal(runId: string): Promise<NodeError | undefined> {
    const [row] = await this.sql.query<{ error: NodeError }>(`select error from executions where temporal_run_id = ? and error->>'code' = ?`, [
      runId,
      CODE.schedule_run_limit,
    ]);
    return row?.error;
  }

  /**
   * A record for a run an operator created with a reset in the Temporal Web UI or CLI: linked to
   * the record of the run it came from, carrying the timeline of the nodes that finished before
   * the reset point; the run it replaced, when the reset ended it, is closed as terminated.
   * False when the run it came from has no record.
   */
  async adoptReset(temporalWorkflowId: string, runId: string, base: { runId: string; reason: string; keptNodes: string[] }): Promise<boolean> {
    return this.sql.transaction(async (tx) => {
      const [from] = await tx.query<{ id: string; status: string }>(
        'select id, status from executions where temporal_workflow_id = ? and temporal_run_id = ?',
        [temporalWorkflowId, base.runId],
      );
      if (!from) return false;
      const reason = base.reason || 'no reason given';
      const [created] = await tx.query<{ id: string }>(
        `insert into executions (workflow_id, workflow_version, status, trigger, trigger_payload, replay_of, replay_reason, temporal_workflow_id, temporal_run_id,
                                 acting_user_ids, parent_execution_id, root_execution_id, depth)
         select workflow_id, workflow_version, 'running', 'replay', trigger_payload, id, ?, temporal_workflow_id, ?,
                acting_user_ids, parent_execution_id, root_execution_id, depth from executions where id = ?
         on conflict do nothing returning id`,
        [`reset in Temporal: ${reason}`, runId, from.id],
      );
      if (!created) return true; // a concurrent activity of the same run adopted it
      await this.copyTimeline(Number(from.id), Number(created.id), base.keptNodes, tx);
      if (from.status === 'running') {
        // It goes on as the new execution: not a failure for the workflow's error workflow.
        const error = { code: CODE.terminated, message: `The run was reset in Temporal (${reason}); it continues as execution ${created.id}` };
        await this.closeEnded(Number(from.id), 'failed', new Date(), error, tx, false);
      }
      return true;
    });
  }

  /**
   * Values a run keeps out of Temporal's history, for the activity that needs them: the outputs of
   * timeline entries (`[execution, node]` pairs) and, when asked, the trigger payload of `executionId`.
   * An entry that is missing reads as undefined (the caller refuses it).
   */
  async readValues(
    executionId: number,
    outputs: { execution: number; node: string }[],
    trigger: boolean,
  ): Promise<{ outputs: Map<string, unknown>; trigger: unknown }> {
    const found = new Map<string, unknown>();
    if (outputs.length) {
      const rows = await this.sql.query<{ execution_id: string; node_id: string; output: unknown }>(
        `select n.execution_id, n.node_id, n.output from execution_nodes n
           join unnest(?::bigint[], ?::varchar[]) as want(execution_id, node_id) using (execution_id, node_id)`,
        [outputs.map((o) => o.execution), outputs.map((o) => o.node)],
      );
      for (const r of rows) found.set(`${r.execution_id}:${r.node_id}`, r.output);
    }
    let payload: unknown;
    if (trigger) {
      const [row] = await this.sql.query<{ trigger_payload: unknown }>('select trigger_payload from executions where id = ?', [executionId]);
      payload = row?.trigger_payload;
    }
    return { outputs: found, trigger: payload };
  }

  /** The `payload` of a node's evaluated input (a run_workflow node's payload for its child). */
  async nodeInputPayload(executionId: number, nodeId: string): Promise<unknown> {
    const [row] = await this.sql.query<{ payload: unknown }>(`select input->'payload' as payload from execution_nodes where execution_id = ? and node_id = ?`, [
      executionId,
      nodeId,
    ]);
    return row?.payload;
  }

  /**
   * One more attempt of a node that runs inside the run's workflow task (a short call run as a
   * local activity) begins: its entry shows it running and counts the attempt before the call is
   * made. Such a call is performed again, from attempt 1, when the task is lost (its worker died)
   * before it completed; counted here, every performance is in `attempts` all the same. Answers
   * the attempt's number, or undefined when the entry may not change (a cancel ended it, a
   * replay carried it over).
   */
  async beginAttempt(executionId: number, node: Pick<GraphNode, 'id' | 'type'>, startedAt: Date): Promise<number | undefined> {
    const [row] = await this.sql.query<{ attempts: number }>(BEGIN_ATTEMPT, [executionId, node.id, node.type, startedAt], { prepared: true });
    return row?.attempts;
  }

  /** Writes a node's timeline entry (first write inserts, later ones update). */
  async writeNode(executionId: number, node: Pick<GraphNode, 'id' | 'type'>, entry: NodeEntry): Promise<void> {
    await this.sql.query(WRITE_NODE, [executionId, node.id, ...nodeValues(node, entry)], { prepared: true });
  }

  /**
   * The run's outcome, with the nodes it never reached (`skipped`: an untaken branch, or the run
   * stopped early), the ones a cancel interrupted (`cancelled`) and the failures it handled
   * (`handled`, with the output each became), in one transaction: a reader never sees the run
   * ended without its whole timeline. A `failed` outcome queues the workflow's error workflow in
   * the same transaction (`errorRun`). Answers how long it ran when this call ended it (a retried
   * call answers nothing).
   */
  async finish(executionId: number, result: RunOutcome): Promise<{ seconds: number; errorRun?: ErrorRun } | undefined> {
    // The outcome alone (nothing to mark, no error run to queue) is one statement.
    if (!marksOf(result) && result.status !== 'failed') return this.endRecord(this.sql, executionId, result);
    return this.sql.transaction(async (tx) => {
      await markCancelled(tx, executionId, result.cancelled ?? []);
      await markSkipped(tx, executionId, result.skipped ?? []);
      await markHandled(tx, executionId, result.handled ?? []);
      const ended = await this.endRecord(tx, executionId, result);
      if (!ended) return undefined;
      const errorRun = result.status === 'failed' ? await this.queueErrorRun(tx, executionId) : undefined;
      return { ...ended, ...(errorRun ? { errorRun } : {}) };
    });
  }

  /**
   * A node that ended the run (the last to run, which succeeded): its timeline entry and the run's
   * outcome, whose last output is the node's, written at once, so a reader never sees the one
   * without the other. One statement unless nodes are to be marked skipped or handled. Answers
   * how long the run ran when this call ended it.
   */
  async finishWithNode(
    executionId: number,
    node: Pick<GraphNode, 'id' | 'type'>,
    entry: NodeEntry,
    result: Pick<RunOutcome, 'status' | 'skipped' | 'handled' | 'runId'> & { lastOutput: unknown },
  ): Promise<{ seconds: number } | undefined> {
    if (marksOf(result) || result.status === 'failed') {
      return this.sql.transaction(async (tx) => {
        await tx.query(WRITE_NODE, [executionId, node.id, ...nodeValues(node, entry)]);
        await markSkipped(tx, executionId, result.skipped ?? []);
        await markHandled(tx, executionId, result.handled ?? []);
        return this.endRecord(tx, executionId, result);
      });
    }
    // A data-modifying WITH runs once whether or not it is read: the entry and the record change together.
    const [row] = await this.sql.query<{ was: string; seconds: number }>(
      FINISH_WITH_NODE,
      [executionId, node.id, ...nodeValues(node, entry), ...endRecordValues(executionId, result), RUN_CLOSED_CHANNEL],
      { prepared: true },
    );
    if (!row || row.was !== 'running') return undefined;
    return { seconds: row.seconds };
  }

  /** The record's outcome, announced (delivered at commit); undefined when it had ended already (a retried call). */
  private async endRecord(q: Queryable, executionId: number, result: RunOutcome): Promise<{ seconds: number } | undefined> {
    const [row] = await q.query<{ was: string; seconds: number }>(END_AND_ANNOUNCE, [...endRecordValues(executionId, result), RUN_CLOSED_CHANNEL], {
      prepared: true,
    });
    if (!row || row.was !== 'running') return undefined;
    return { seconds: row.seconds };
  }
}

/**
 * Tells an API waiting for this run's result that its record is ended (runClosedAnnouncements),
 * whichever of the run's own steps ended it (its last node, or its finishing step): it answers a
 * success from the record rather than waiting for Temporal to close the workflow, and asks
 * Temporal for any other outcome only then. The payload carries what the answer needs, `{"id",
 * "status", "output"}`, when that fits in a notification (at most NOTIFY_PAYLOAD_BYTES);
 * otherwise the execution id alone, and the waiting API reads the record. `row` names the ended
 * record's columns (a statement that ends the record reads them from what its UPDATE returned:
 * the table still shows them as they were); its one parameter is the channel.
 */
const announceClosed = (row: string) =>
  `pg_notify(?, (select case when octet_length(p.text) <= ${NOTIFY_PAYLOAD_BYTES} then p.text else ${row}.id::text end
     from (select json_build_object('id', ${row}.id, 'status', ${row}.status, 'output', ${row}.last_output)::text as text) p))`;

/**
 * Ends the record (END_RECORD, after the data-modifying WITH entries `before`, each ending in a
 * comma) and announces it in the same statement when this statement ended it. Its parameters:
 * those of `before`, END_RECORD's, then the channel.
 */
const endAndAnnounce = (before = '') => `with ${before}ended as (${END_RECORD}, e.id, e.status, e.last_output)
   select ended.was, ended.seconds from ended left join lateral (select ${announceClosed('ended')} where ended.was = 'running') announced on true`;

/** How a run ended, as its finish writes it to the record. */
export interface RunOutcome {
  status: string;
  /** The run that ended it: written to a record no claim bound to its run (see claim). */
  runId?: string;
  error?: unknown;
  lastOutput?: unknown;
  /** The last output is the output of this node's entry (too large to pass through history). */
  lastOutputRef?: { node: string; execution?: number };
  skipped?: { id: string; type: string }[];
  cancelled?: { id: string; type: string; startedAt: number }[];
  handled?: { id: string; type: string; output: unknown }[];
}

/** Whether an outcome has nodes to mark besides the record. */
const marksOf = (result: Pick<RunOutcome, 'skipped' | 'cancelled' | 'handled'>) =>
  Boolean(result.skipped?.length || result.cancelled?.length || result.handled?.length);

/** The record's outcome; its last output inline, or the output of the entry it names. */
/** One more attempt of a node run inside the workflow task (beginAttempt), its entry's values from `source`. */
const beginAttemptFrom = (source: string) => `insert into execution_nodes (execution_id, node_id, node_type, status, started_at, attempts, reused) ${source}
       on conflict (execution_id, node_id) do update set status = 'running', attempts = execution_nodes.attempts + 1,
         finished_at = null, duration_ms = null, last_attempt_ms = null, output = null, error = null
       where execution_nodes.status <> 'cancelled' and not execution_nodes.reused
       returning attempts`;
/** Its parameters: the execution id, the node's id and type, the attempt's start. */
const BEGIN_ATTEMPT = beginAttemptFrom(`values (?, ?, ?, 'running', ?, 1, false)`);

const END_RECORD = `update executions e set status = ?, finished_at = coalesce(e.finished_at, now()), error = ?,
                temporal_run_id = coalesce(e.temporal_run_id, ?::varchar),
                last_output = coalesce(?::jsonb, (select output from execution_nodes where execution_id = ? and node_id = ?))
           from (select status as was from executions where id = ? for no key update) before
          where e.id = ? returning before.was, extract(epoch from e.finished_at - e.started_at)::float8 as seconds`;
/** The record ended and announced (endRecord): END_RECORD's parameters, then the channel. */
const END_AND_ANNOUNCE = endAndAnnounce();
/**
 * A node's entry written and the record ended by one statement (finishWithNode): WRITE_NODE's
 * parameters, END_RECORD's, then the channel. WRITE_NODE's comments are left out: their
 * apostrophes would read as quotes around the placeholders after them.
 */
const FINISH_WITH_NODE = endAndAnnounce(`entry as (${WRITE_NODE.replace(/--.*$/gm, '')} returning 1), `);

const endRecordValues = (executionId: number, result: Pick<RunOutcome, 'status' | 'error' | 'lastOutput' | 'lastOutputRef' | 'runId'>) => [
  result.status,
  result.error ? JSON.stringify(result.error) : null,
  result.runId ?? null,
  result.lastOutput === undefined ? null : JSON.stringify(result.lastOutput),
  result.lastOutputRef?.execution ?? executionId,
  result.lastOutputRef?.node ?? null,
  executionId,
  executionId,
];

/**
 * Failures the run handled (on_error continue or branch): the entry shows the output `{error}` the
 * failure became, which a replay reuses. An entry the node's own activity did not end (a time-out
 * stopped it) is ended here.
 */
async function markHandled(tx: Queryable, executionId: number, handled: { id: string; type: string; output: unknown }[]): Promise<void> {
  for (const { id, type, output } of handled) {
    const error = (output as { error?: unknown } | null)?.error ?? null;
    await tx.query(
      `insert into execution_nodes (execution_id, node_id, node_type, status, finished_at, attempts, output, error) values (?, ?, ?, 'failed', now(), 1, ?, ?)
       on conflict (execution_id, node_id) do update set status = 'failed', output = excluded.output,
         error = coalesce(execution_nodes.error, excluded.error), finished_at = coalesce(execution_nodes.finished_at, excluded.finished_at)
       where execution_nodes.status in ('running', 'failed')`,
      [executionId, id, type, json(output), json(error)],
    );
  }
}

/** Nodes the run never reached: `skipped`, unless an entry exists already. */
async function markSkipped(tx: Queryable, executionId: number, nodes: { id: string; type: string }[]): Promise<void> {
  if (!nodes.length) return;
  await tx.query(
    `insert into execution_nodes (execution_id, node_id, node_type, status)
     select ?, id, type, 'skipped' from unnest(?::varchar[], ?::varchar[]) with ordinality as n(id, type, position) order by position
     on conflict do nothing`,
    [executionId, nodes.map((n) => n.id), nodes.map((n) => n.type)],
  );
}

/** Nodes a cancel of the run interrupted: `cancelled`, with their finish time. */
async function markCancelled(tx: Queryable, executionId: number, nodes: { id: string; type: string; startedAt: number }[]): Promise<void> {
  const error = json({ code: CODE.cancelled, message: 'The run was cancelled while this node was in flight' });
  for (const node of nodes) {
    await tx.query(
      `insert into execution_nodes (execution_id, node_id, node_type, status, started_at, finished_at, duration_ms, attempts, error)
       values (?, ?, ?, 'cancelled', ?, now(), ?, 1, ?)
       on conflict (execution_id, node_id) do update set status = 'cancelled', finished_at = now(),
         duration_ms = greatest(0, (extract(epoch from now() - coalesce(execution_nodes.started_at, excluded.started_at)) * 1000)::int),
         error = excluded.error
       where execution_nodes.status in ('running', 'cancelled')`,
      [executionId, node.id, node.type, new Date(node.startedAt), Math.max(0, Date.now() - node.startedAt), error],
    );
  }
}
