import { WorkflowExecutionAlreadyStartedError, WorkflowNotFoundError } from '@temporalio/client';
import Long from 'long';
import { toDate, toIso, type Queryable, type Sql } from '../db/sql.js';
import { RUN_GRAPH_WORKFLOW, type RunGraphInput, type RunGraphResult } from '../../workflows/defs.js';
import { ancestors } from '../../workflows/graph.js';
import type { Principal } from '../auth/auth.service.js';
import { AppError, conflict, invalidRequest, notFound } from '../platform/errors.js';
import { temporalFailure, type TemporalHandle } from '../temporal/connection.js';
import { workflowVisibility, type WorkflowRow, type WorkflowService } from '../workflow-definitions/workflow.service.js';
import type { Idempotency } from './idempotency.js';
import { findIdempotencyKey, forgetIdempotencyKey, lockIdempotencyKey, purgeIdempotencyKeys, rememberIdempotencyKey } from './idempotency.store.js';
import type { Metrics } from '../platform/metrics.js';
import { findResetPoint } from './reset-point.js';
import { replayMode, replaySeed, resetPointFailure, splitSeed } from './replay.js';
import type { ExecutionMirror, ExecutionRow, ListExecutions, TimelineRow } from './execution.mirror.js';
import { itemView, type ExecutionItems, type ItemCounts, type ItemStatus } from './execution-items.store.js';
import { everyNode } from '../workflow-definitions/graph-validator.js';
import { CODE } from '../../workflows/error-codes.js';

/** What Temporal is asked to do for a prepared record; kept with an Idempotency-Key to send again. */
type Launch = { kind: 'start'; input: RunGraphInput } | { kind: 'reset'; runId: string; eventId: number; reason: string };

export interface Started {
  executionId: number;
  temporalWorkflowId: string;
  /** The call repeated an Idempotency-Key: this is the first call's execution. */
  replayed: boolean;
}

const iso = toIso;
const durationOf = (r: { started_at: Date | string; finished_at: Date | string | null }) =>
  r.finished_at ? toDate(r.finished_at).getTime() - toDate(r.started_at).getTime() : null;

/**
 * Tokens and cost of the model calls of a run (its `llm_prompt` nodes' `usage`); null when none
 * called a model. Nodes carried over from a replayed run count: their output is part of this one.
 */
function llmUsage(timeline: TimelineRow[]) {
  const calls = timeline.filter((t) => t.node_type === 'llm_prompt' && t.status === 'success');
  if (!calls.length) return null;
  const total = { calls: calls.length, tokens_in: 0, tokens_out: 0, cost_usd: 0, price_known: true };
  for (const t of calls) {
    const usage = (t.output as { usage?: { tokens_in?: number; tokens_out?: number; cost_usd?: number; price_known?: boolean } } | null)?.usage;
    total.tokens_in += usage?.tokens_in ?? 0;
    total.tokens_out += usage?.tokens_out ?? 0;
    total.cost_usd += usage?.cost_usd ?? 0;
    // Runs recorded before costs were kept have no price information.
    if (usage?.price_known !== true) total.price_known = false;
  }
  return { ...total, cost_usd: Math.round(total.cost_usd * 1e6) / 1e6 };
}

/** A loop's counts as its timeline entry shows them (all zero before its items are listed). */
function countsView(counts: ItemCounts | undefined) {
  return counts ?? { total: 0, pending: 0, succeeded: 0, failed: 0, skipped: 0, cancelled: 0 };
}

/** How a Temporal run that ended without reaching its own last activity leaves its record. */
const CLOSED_STATUSES = { TERMINATED: 'failed', TIMED_OUT: 'failed', CANCELLED: 'cancelled', FAILED: 'failed' } as const;
const closedError = (name: string) => ({ code: name.toLowerCase(), message: `The Temporal run was ${name.toLowerCase().replace('_', ' ')}` });

/** How long a prepared execution record may wait for its Temporal run before it is closed. */
const UNSTARTED_GRACE_MS = 60_000;

/**
 * Starting runs and reading the queryable mirror of their history. Each run is one Temporal
 * workflow whose id is derived from the execution id; the mirror is written by the activities.
 */
export class ExecutionService {
  /** Where the worker's sweep goes on from. */
  private sweptUpTo = 0;

  constructor(
    private readonly sql: Sql,
    private readonly mirror: ExecutionMirror,
    private readonly temporal: TemporalHandle,
    private readonly workflows: WorkflowService,
    /** SVC_IDEMPOTENCY_TTL_HOURS */
    private readonly idempotencyTtlHours = 24,
    private readonly metrics?: Pick<Metrics, 'replays'>,
    /** SVC_HISTORY_INLINE_BYTES: a reused output larger than this goes to the run by reference. */
    private readonly inlineBytes = 16 * 1024,
    /** The items of for_each loops, for their listing and the counters of a loop's timeline entry. */
    private readonly items?: ExecutionItems,
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
      replay_reason: r.replay_reason,
    };
  }

  /**
   * Creates the execution record (with its Idempotency-Key, when the call has one), then starts
   * its Temporal workflow. A key already used answers with its execution (`replayed`), starting
   * nothing new; when that execution's start was never confirmed (or not yet: no run has claimed
   * it), the start is sent again under the same Temporal workflow id, so Temporal itself keeps it
   * to one run.
   */
  async start(
    workflow: WorkflowRow,
    input: Omit<RunGraphInput, 'workflowId' | 'version'> & { version?: number },
    triggeredBy?: number,
    idempotency?: Idempotency,
    /** Timeline entries of an earlier execution to carry over, written with the record. */
    reuse?: { from: number; nodeIds: string[] },
  ): Promise<Started> {
    if (workflow.status === 'archived') throw conflict('workflow_archived', 'The workflow is archived; restore it to run it');
    const version = input.version ?? workflow.version;
    // A payload too large for Temporal's history stays in the record alone; the run reads it from there.
    const stored = Buffer.byteLength(JSON.stringify(input.payload ?? null)) > this.inlineBytes;
    const runInput = {
      ...input,
      workflowId: workflow.id,
      version,
      ...(stored ? { payload: null, payloadInRecord: true as const } : {}),
    } satisfies RunGraphInput;
    const prepared = await this.prepare(
      workflow.id,
      idempotency,
      async (tx) => {
        const replayReason = input.replayOf
          ? `replay of execution ${input.replayOf}${input.startAt ? ` from node ${input.startAt} with a new payload` : ''}`
          : undefined;
        const row = await this.mirror.prepareStart(tx, {
          workflowId: workflow.id,
          version,
          trigger: input.trigger,
          payload: input.payload,
          ...(input.replayOf ? { replayOf: input.replayOf, replayReason: replayReason! } : {}),
          ...(triggeredBy !== undefined ? { triggeredBy } : {}),
        });
        if (reuse) await this.mirror.copyTimeline(reuse.from, row.id, reuse.nodeIds, tx);
        return { ...row, launch: { kind: 'start', input: runInput } };
      },
      undefined,
      reuse !== undefined,
    );
    if (prepared.replayed && !prepared.unconfirmed) return prepared;
    await this.launch(prepared.executionId, prepared.temporalWorkflowId, prepared.launch, prepared.unconfirmed);
    return prepared;
  }

  /**
   * Writes an execution record in one transaction with its Idempotency-Key, or finds the record
   * the key already names. Calls with one key are serialised by an advisory lock on the key, so
   * two simultaneous retries get one record.
   */
  private async prepare(
    workflowId: number,
    idempotency: Idempotency | undefined,
    insert: (tx: Queryable) => Promise<{ id: number; temporalWorkflowId: string; launch: Launch }>,
    before?: (tx: Queryable) => Promise<void>,
    /** The insert writes more than the record: it needs a transaction even without a key. */
    atomic = false,
  ): Promise<Started & { launch: Launch; unconfirmed: boolean }> {
    // A plain start is one statement; only a key, a check or a larger write needs a transaction.
    if (!idempotency && !before && !atomic) {
      const row = await insert(this.sql);
      return { executionId: row.id, temporalWorkflowId: row.temporalWorkflowId, replayed: false, launch: row.launch, unconfirmed: false };
    }
    return this.sql.transaction(async (tx) => {
      if (idempotency) {
        await lockIdempotencyKey(tx, workflowId, idempotency.key);
        const key = await findIdempotencyKey<Launch>(tx, workflowId, idempotency.key, this.idempotencyTtlHours);
        const found = key && { ...(await this.mirror.get(Number(key.execution_id), tx))!, fingerprint: key.fingerprint, request: key.request };
        if (found) {
          if (found.fingerprint !== idempotency.fingerprint) {
            throw new AppError('idempotency_key_reused', 'This Idempotency-Key was already used for a different request', {
              execution_id: Number(found.id),
            });
          }
          const code = (found.error as { code?: string } | null)?.code;
          const unconfirmed = found.temporal_run_id === null && found.status === 'failed' && (code === 'start_failed' || code === 'reset_failed');
          // A reset sent again is a reset like any other: not while another replay of the run runs.
          if (unconfirmed && found.request.kind === 'reset') await before?.(tx);
          // A start no run has claimed yet may never have reached Temporal: the first call's API
          // process died between writing the record and starting the run (its client retries on
          // another API). The start is sent again; under the same workflow id Temporal keeps it to
          // one run, and a start that did happen answers "already started".
          const unclaimedStart = found.temporal_run_id === null && found.status === 'running' && found.request.kind === 'start';
          return {
            executionId: Number(found.id),
            temporalWorkflowId: found.temporal_workflow_id,
            replayed: true,
            launch: found.request,
            unconfirmed: unconfirmed || unclaimedStart,
          };
        }
        await forgetIdempotencyKey(tx, workflowId, idempotency.key);
      }
      await before?.(tx);
      const row = await insert(tx);
      if (idempotency) {
        await rememberIdempotencyKey(tx, { workflowId, key: idempotency.key, fingerprint: idempotency.fingerprint, executionId: row.id, request: row.launch });
      }
      return { executionId: row.id, temporalWorkflowId: row.temporalWorkflowId, replayed: false, launch: row.launch, unconfirmed: false };
    });
  }

  /**
   * Asks Temporal to run a prepared record: a start under the record's workflow id, or a reset.
   * Both are safe to send again: a second start of the same workflow id is refused by Temporal
   * (REJECT_DUPLICATE), a second reset with the same request id is answered with the first run.
   */
  private async launch(
    executionId: number,
    temporalWorkflowId: string,
    launch: Launch,
    /** The record was marked unconfirmed by an earlier attempt: once Temporal has the run, it is running again. */
    resent: boolean,
  ): Promise<void> {
    try {
      if (launch.kind === 'start') {
        try {
          const eager = this.temporal.eagerClient;
          await (eager ?? this.temporal.client).workflow.start(RUN_GRAPH_WORKFLOW, {
            workflowId: temporalWorkflowId,
            taskQueue: this.temporal.taskQueue,
            workflowIdReusePolicy: 'REJECT_DUPLICATE',
            args: [launch.input],
            ...(eager ? { requestEagerStart: true } : {}),
          });
        } catch (err) {
          // Sent again after an unconfirmed first attempt that Temporal had in fact accepted.
          if (!(err instanceof WorkflowExecutionAlreadyStartedError)) throw err;
        }
      } else {
        const { runId } = (await this.temporal.client.workflowService.resetWorkflowExecution({
          namespace: this.temporal.namespace,
          workflowExecution: { workflowId: temporalWorkflowId, runId: launch.runId },
          reason: launch.reason,
          workflowTaskFinishEventId: Long.fromNumber(launch.eventId),
          requestId: `replay-${executionId}`,
        })) as { runId: string };
        await this.mirror.setRunId(executionId, runId);
      }
    } catch (err) {
      // Only a record no run has claimed is marked: a run that did start claims it and writes its
      // real outcome, which must not be overwritten.
      const code = launch.kind === 'start' ? CODE.start_failed : CODE.reset_failed;
      const failure = temporalFailure(err);
      const why = failure && failure.kind !== 'unavailable' ? `Temporal refused it${failure.detail ? ` (${failure.detail})` : ''}` : 'Temporal is unavailable';
      const message = `The ${launch.kind === 'start' ? 'run could not be started' : 'reset could not be made'}: ${why}`;
      await this.mirror.markUnconfirmed(executionId, code, message);
      throw err;
    }
    // Only an attempt that failed marks a record unconfirmed, and it does so before it answers:
    // a record written by this call needs no write more.
    if (resent) await this.mirror.markConfirmed(executionId);
  }

  /** Waits up to `timeoutMs` for a run's result; undefined when it is still running. */
  async waitForResult(temporalWorkflowId: string, timeoutMs: number): Promise<RunGraphResult | undefined> {
    const handle = this.temporal.client.workflow.getHandle(temporalWorkflowId);
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<undefined>((resolve) => (timer = setTimeout(() => resolve(undefined), timeoutMs)));
    try {
      const result = await Promise.race([handle.result() as Promise<RunGraphResult>, timeout]).catch(() => undefined);
      // An output too large for Temporal's history is read from the record the run wrote it to.
      if (result?.lastOutputRef) return { ...result, lastOutput: (await this.mirror.get(result.executionId))?.last_output ?? null };
      return result;
    } finally {
      clearTimeout(timer);
    }
  }

  private async visible(principal: Principal, executionId: number): Promise<ExecutionRow> {
    const row = await this.mirror.get(executionId);
    if (!row) throw notFound('Execution');
    await this.workflows.get(principal, row.workflow_id).catch((err) => {
      throw err instanceof AppError && err.status === 404 ? notFound('Execution') : err;
    });
    return row;
  }

  async list(principal: Principal, query: ListExecutions) {
    const { rows, total } = await this.mirror.list({ ...query, visible: workflowVisibility(principal) });
    return { items: rows.map((r) => this.summary(r)), total, page: query.page, per_page: query.per_page };
  }

  async view(principal: Principal, executionId: number) {
    let row = await this.visible(principal, executionId);
    if (row.status === 'running') row = await this.reconcile(row);
    const timeline = await this.mirror.timeline(executionId);
    // A loop's entry shows its items' counts as they move (the items workflow records them in batches).
    const itemCounts = this.items && timeline.some((t) => t.node_type === 'for_each') ? await this.items.countsByNode(executionId) : undefined;
    return {
      llm_usage: llmUsage(timeline),
      ...this.summary(row),
      trigger_payload: row.trigger_payload,
      error: row.error ?? null,
      output: row.last_output ?? null,
      trace_id: row.trace_id ?? null,
      temporal: {
        workflow_id: row.temporal_workflow_id,
        run_id: row.temporal_run_id,
        // Before the run has reported its run id, the UI's workflow page opens the latest run.
        ui_url: `${this.temporal.uiUrl}/namespaces/${encodeURIComponent(this.temporal.namespace)}/workflows/${encodeURIComponent(row.temporal_workflow_id)}${row.temporal_run_id ? `/${encodeURIComponent(row.temporal_run_id)}/history` : ''}`,
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
        ...(t.node_type === 'for_each' ? { items: countsView(itemCounts?.get(t.node_id)) } : {}),
      })),
    };
  }

  /**
   * A page of a for_each node's items, by index, for whoever may see the execution. Items of a loop
   * inside a body belong to outer items: `scope` (their indexes, outermost first) picks one outer
   * item's; without it every item is listed, by scope then index. 404 when the node is not a
   * for_each node of the version that ran.
   */
  async listItems(principal: Principal, executionId: number, nodeId: string, query: { scope?: number[]; status?: ItemStatus; page: number; per_page: number }) {
    const row = await this.visible(principal, executionId);
    const { graph } = await this.workflows.loadVersion(row.workflow_id, row.workflow_version);
    const loop = [...everyNode(graph.nodes)].find(([n]) => n.id === nodeId)?.[0];
    if (!loop || loop.type !== 'for_each' || !this.items) throw notFound('for_each node');
    const { rows, total } = await this.items.listPage(executionId, nodeId, query);
    return { items: rows.map(itemView), total, page: query.page, per_page: query.per_page };
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
    const status = CLOSED_STATUSES[description.status.name as keyof typeof CLOSED_STATUSES];
    if (!status) return row;
    return (await this.mirror.closeEnded(Number(row.id), status, description.closeTime ?? new Date(), closedError(description.status.name))) ?? row;
  }

  /**
   * A record without a Temporal run id is one the API prepared and then started, or was about to:
   * the run's first activity claims it. When the API died (or lost PostgreSQL) between writing the
   * record and starting the run, nothing ever will; after a minute without a Temporal workflow of
   * that id the record is closed as `start_failed`, so no execution stays "running" forever.
   */
  private async reconcileUnstarted(row: ExecutionRow): Promise<ExecutionRow> {
    if (Date.now() - toDate(row.started_at).getTime() < UNSTARTED_GRACE_MS) return row;
    const id = Number(row.id);
    if (!this.mirror.isStartRecord(row)) {
      // A reset replay's record: its Temporal workflow id is the replayed run's, which exists
      // whatever became of the reset, so Temporal cannot say. Marked unconfirmed, it can be sent
      // again with its Idempotency-Key; a reset that did happen claims it back when its run begins.
      await this.mirror.markUnconfirmed(id, 'reset_failed', 'The reset was never confirmed (the service stopped or lost a dependency while sending it)');
      return (await this.mirror.get(id)) ?? row;
    }
    let description;
    try {
      description = await this.temporal.client.workflow.getHandle(row.temporal_workflow_id).describe();
    } catch (err) {
      if (!(err instanceof WorkflowNotFoundError)) return row; // Temporal unreachable: ask again later
      const error = { code: CODE.start_failed, message: 'The run was never started (the service stopped or lost a dependency while starting it)' };
      return (await this.mirror.closeUnstarted(id, error)) ?? row;
    }
    // Started, and not yet claimed by its first activity: still running, or ended before that
    // activity ever ran (cancelled or terminated while no worker was there, say).
    const status = CLOSED_STATUSES[description.status.name as keyof typeof CLOSED_STATUSES];
    if (!status) return row;
    return (await this.mirror.closeEnded(id, status, description.closeTime ?? new Date(), closedError(description.status.name))) ?? row;
  }

  /** Reconciles every run still marked running for longer than `olderThanMs` (the worker's sweeper). */
  async sweep(olderThanMs: number): Promise<number> {
    const rows = await this.mirror.runningOlderThan(olderThanMs, this.sweptUpTo);
    // The next sweep goes on after this page; a short page means the end, so it starts over.
    this.sweptUpTo = rows.length < 200 ? 0 : Number(rows.at(-1)!.id);
    let changed = 0;
    for (const row of rows) if ((await this.reconcile(row)).status !== 'running') changed++;
    await purgeIdempotencyKeys(this.sql, this.idempotencyTtlHours);
    return changed;
  }

  /**
   * Replays an execution as a new one. `from_node_id` alone resets the Temporal run to just before
   * that node (earlier nodes are not run again); `with_payload` starts a fresh run with a new
   * trigger payload; both together start a fresh run that reuses the recorded outputs of the
   * nodes upstream of `from_node_id`. Resets of one Temporal workflow id do not overlap: while a
   * reset replay of it runs, another is refused with 409 `replay_in_progress` naming it (a reset
   * would terminate the running one).
   */
  async replay(
    principal: Principal,
    executionId: number,
    body: { from_node_id?: string; with_payload?: unknown },
    idempotency?: Idempotency,
  ): Promise<Started> {
    const started = await this.startReplay(principal, executionId, body, idempotency);
    if (!started.replayed) {
      this.metrics?.replays.inc({ mode: replayMode(body) });
    }
    return started;
  }

  private async startReplay(
    principal: Principal,
    executionId: number,
    body: { from_node_id?: string; with_payload?: unknown },
    idempotency?: Idempotency,
  ): Promise<Started> {
    const original = await this.visible(principal, executionId);
    if (original.status === 'running') throw conflict('execution_running', 'The execution is still running; wait for it or cancel it first');
    const workflow = await this.workflows.get(principal, original.workflow_id);
    if (workflow.status === 'archived') throw conflict('workflow_archived', 'The workflow is archived; restore it to replay its executions');
    const { graph } = await this.workflows.loadVersion(original.workflow_id, original.workflow_version);
    const payload = body.with_payload !== undefined ? body.with_payload : original.trigger_payload;
    if (body.from_node_id === undefined) {
      return this.start(workflow, { payload, trigger: 'replay', replayOf: Number(original.id), version: original.workflow_version }, principal.id, idempotency);
    }
    const fromNode = body.from_node_id;
    if (!graph.nodes.some((n) => n.id === fromNode))
      throw invalidRequest(`Node ${fromNode} is not in version ${original.workflow_version} of the workflow`, { field: 'from_node_id' });
    if (body.with_payload === undefined) return this.resetFrom(principal, original, fromNode, idempotency);
    // A rerun from the node, seeded with the outputs its upstream nodes recorded.
    const seed = replaySeed(await this.mirror.timeline(Number(original.id)), ancestors(graph, fromNode), original.id);
    return this.start(
      workflow,
      {
        payload,
        trigger: 'replay',
        replayOf: Number(original.id),
        version: original.workflow_version,
        ...splitSeed(seed, this.inlineBytes),
        startAt: fromNode,
      },
      principal.id,
      idempotency,
      { from: Number(original.id), nodeIds: Object.keys(seed) },
    );
  }

  /** A replay from `fromNode` by a Temporal reset of the original run to the point that node started. */
  private async resetFrom(principal: Principal, original: ExecutionRow, fromNode: string, idempotency?: Idempotency): Promise<Started> {
    if (!original.temporal_run_id) throw conflict('node_not_run', 'The execution has no Temporal run to reset');
    // The record is final a moment before Temporal closes the run (longer under load): the reset
    // point is read once Temporal has, so a node started in the run's last task has one too.
    const point = await findResetPoint(this.temporal, original.temporal_workflow_id, original.temporal_run_id, fromNode).catch((err: unknown) => {
      throw resetPointFailure(err, original.id);
    });
    if (!point) throw conflict('node_not_run', `Node ${fromNode} did not start in execution ${original.id}; nothing to reset to`);
    const reason = `replay of execution ${original.id} from node ${fromNode}`;
    const prepared = await this.prepare(
      original.workflow_id,
      idempotency,
      async (tx) => {
        const id = await this.mirror.prepareReset(tx, {
          workflowId: original.workflow_id,
          version: original.workflow_version,
          trigger: 'replay',
          payload: original.trigger_payload,
          replayOf: Number(original.id),
          replayReason: reason,
          temporalWorkflowId: original.temporal_workflow_id,
          triggeredBy: principal.id,
        });
        await this.mirror.copyTimeline(Number(original.id), id, point.completedNodes, tx);
        const launch: Launch = { kind: 'reset', runId: original.temporal_run_id!, eventId: point.eventId, reason };
        return { id, temporalWorkflowId: original.temporal_workflow_id, launch };
      },
      (tx) => this.refuseConcurrentReset(tx, original.temporal_workflow_id),
    );
    if (prepared.replayed && !prepared.unconfirmed) return prepared;
    await this.launch(prepared.executionId, prepared.temporalWorkflowId, prepared.launch, prepared.unconfirmed);
    return prepared;
  }

  /**
   * One reset at a time per Temporal workflow id: the lock orders simultaneous requests, the
   * check refuses the later ones while the earlier replay runs.
   */
  private async refuseConcurrentReset(tx: Queryable, temporalWorkflowId: string): Promise<void> {
    await tx.query('select pg_advisory_xact_lock(hashtext(?))', [`reset:${temporalWorkflowId}`]);
    const running = await this.mirror.runningOf(tx, temporalWorkflowId);
    if (running !== undefined) {
      throw conflict('replay_in_progress', `Execution ${running} is a replay of this run that is still running; wait for it or cancel it first`, {
        execution_id: running,
      });
    }
  }
}
