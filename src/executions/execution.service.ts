import { WorkflowExecutionAlreadyStartedError, WorkflowNotFoundError } from '@temporalio/client';
import Long from 'long';
import { toDate, toIso, type Queryable, type Sql } from '../db/sql.js';
import {
  FIRST_STEP_ASKS,
  PREPARED_FIRST_STEP,
  RUN_GRAPH_WORKFLOW,
  firstCallOf,
  type RunGraphInput,
  type RunGraphResult,
  type RunNodeInput,
  type RunNodeOutput,
} from '../../workflows/defs.js';
import { firstStepAnswer, type FirstStepSettings } from './first-step.js';
import type { Announcements } from '../platform/announcements.js';
import type { ClosedRecord } from './run-closed.js';
import type { Principal } from '../auth/auth.service.js';
import { AppError, conflict, invalidRequest, notFound } from '../platform/errors.js';
import { temporalFailure, type TemporalHandle } from '../temporal/connection.js';
import { workflowVisibility, type WorkflowRow, type WorkflowService } from '../workflow-definitions/workflow.service.js';
import type { Idempotency } from './idempotency.js';
import { findIdempotencyKey, forgetIdempotencyKey, lockIdempotencyKey, purgeIdempotencyKeys, rememberIdempotencyKey } from './idempotency.store.js';
import type { Metrics } from '../platform/metrics.js';
import { findResetPoint, type ResetPoint } from './reset-point.js';
import { resetPointFailure, splitSeed, type ReplayMode } from './replay.js';
import { planReplay, resetKeepsPlan, type ReplayPlan } from './replay-plan.js';
import type { ErrorRun, ErrorWorkflows } from './error-workflow.js';
import { claimedAttempt, type Claim, type ExecutionMirror, type ExecutionRow, type ListExecutions, type TimelineRow } from './execution.mirror.js';
import type { EarlyClaims } from './early-claims.js';
import type { EarlyRuns } from './early-runs.js';
import { firstCallInput } from '../../workflows/first-call.js';
import { itemView, type ExecutionItems, type ItemCounts, type ItemStatus } from './execution-items.store.js';
import { everyNode } from '../workflow-definitions/graph-validator.js';
import { CODE } from '../../workflows/error-codes.js';
import type { Graph } from '../../workflows/defs.js';
import { holdsRunRights, withheldError } from './run-data-access.js';

/** What Temporal is asked to do for a prepared record; kept with an Idempotency-Key to send again. */
type Launch = { kind: 'start'; input: RunGraphInput } | { kind: 'reset'; runId: string; eventId: number; reason: string };

export interface Started {
  executionId: number;
  temporalWorkflowId: string;
  /** The call repeated an Idempotency-Key: this is the first call's execution. */
  replayed: boolean;
}

/** What a replay request asks for. */
export interface ReplayRequest {
  from_node_id?: string | undefined;
  with_payload?: unknown;
  /** With `from_node_id` naming a for_each node: its items that succeeded keep their results, only the others run again. */
  only_failed_items?: boolean | undefined;
}

/** How a replay from a node is made: a Temporal reset to the point the node started, or a new run seeded with the plan. */
type ReplayLaunch = { kind: 'reset'; point: ResetPoint } | { kind: 'rerun' };

/** A replay worked out and not started: the execution, its workflow, the payload, and for a replay from a node its plan and launch. */
interface PreparedReplay {
  original: ExecutionRow;
  workflow: WorkflowRow;
  graph: Graph;
  payload: unknown;
  from?: { plan: ReplayPlan; launch: ReplayLaunch; onlyFailedItems: boolean };
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

/** The for_each nodes among `ids`, and those nested in their bodies: the loops whose items a replay reusing `ids` carries over. */
function loopsIn(graph: Graph, ids: readonly string[]): string[] {
  const reused = new Set(ids);
  return [...everyNode(graph.nodes.filter((n) => reused.has(n.id)))].filter(([n]) => n.type === 'for_each').map(([n]) => n.id);
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
/** How long an error workflow's prepared run may wait for the start its failed run's worker sends, before the sweep sends it. */
const ERROR_RUN_GRACE_MS = 10_000;

/**
 * How long a wait for a run's result listens for the run's own announcement of its end before it
 * also asks Temporal (a run still going, an announcement missed). A missed announcement of a run
 * that ended sooner delays its answer by at most this.
 */
const RESULT_POLL_AFTER_MS = 500;
/**
 * Why a finished wait stops what it still listens to: a reason given, so that aborting does not
 * build a DOMException with its stack trace on every request that waits for a result.
 */
const WAIT_OVER = new Error('The wait for the run has ended');

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
    private readonly metrics?: Pick<Metrics, 'replays' | 'runsStarted'>,
    /** Starts the runs of error workflows that failed runs queued. */
    private readonly errorWorkflows?: Pick<ErrorWorkflows, 'launch'>,
    /** SVC_HISTORY_INLINE_BYTES: a payload or reused output larger than this goes to the run by reference. */
    private readonly inlineBytes = 16 * 1024,
    /** The settings the runs' first steps answer from: with them, a start carries its run's first step (see prepareFirstStep). */
    private readonly firstStep?: FirstStepSettings,
    /** The items of for_each loops, for their listing and the counters of a loop's timeline entry. */
    private readonly items?: ExecutionItems,
    /** Hears that a run's last node ended its record: a wait for its result answers from the record then. */
    private readonly runClosed?: Pick<Announcements<ClosedRecord | undefined>, 'heard'>,
    /** Where claims made ahead of runs' first calls wait for this process's worker (see firstCallClaim). */
    private readonly earlyClaims?: Pick<EarlyClaims<Claim>, 'reserve'>,
    /** Where the first attempts of runs' first calls, run ahead of their activities, wait for this process's worker. */
    private readonly earlyRuns?: Pick<EarlyRuns<RunNodeInput, RunNodeOutput>, 'reserve' | 'serving'>,
  ) {}

  /**
   * The run's first step, answered here: the API has just written the run's record and holds the
   * graph of the version it runs, so the run need not ask an activity for them (its first
   * activity claims the record instead). Only for the workflow's current version (the row's
   * graph is that version's) and a graph small enough to travel in the run's input.
   */
  private prepareFirstStep(workflow: WorkflowRow, executionId: number, version: number): Pick<RunGraphInput, 'firstStep'> {
    if (!this.firstStep || version !== workflow.version) return {};
    const graph = { nodes: workflow.nodes, edges: workflow.edges };
    if (Buffer.byteLength(JSON.stringify(graph)) > this.inlineBytes) return {};
    return { firstStep: { asked: PREPARED_FIRST_STEP, answer: firstStepAnswer(this.firstStep, { executionId, version, graph }, FIRST_STEP_ASKS) } };
  }

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
      error: (r.error as { code: string; message: string } | null) ?? null,
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
    /** A replay: why, and the timeline entries of the replayed execution to carry over, written with the record. */
    replay?: { reason: string; reuse?: { from: number; nodeIds: string[]; loops?: string[] } },
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
    const reuse = replay?.reuse;
    const prepared = await this.prepare(
      workflow.id,
      idempotency,
      async (tx) => {
        const row = await this.mirror.prepareStart(tx, {
          workflowId: workflow.id,
          version,
          trigger: input.trigger,
          payload: input.payload,
          ...(input.replayOf ? { replayOf: input.replayOf, replayReason: replay?.reason ?? `replay of execution ${input.replayOf}` } : {}),
          ...(triggeredBy !== undefined ? { triggeredBy } : {}),
        });
        if (reuse) await this.mirror.copyTimeline(reuse.from, row.id, reuse.nodeIds, tx);
        if (reuse?.loops?.length) await this.items?.copy(reuse.from, row.id, reuse.loops, tx);
        return { ...row, launch: { kind: 'start', input: { ...runInput, ...this.prepareFirstStep(workflow, row.id, version) } } };
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
          // A reset sent again is a reset like any other: not while another replay of the run runs
          // (whatever a replay asked with this key would be made as now: the key answers for its first).
          if (unconfirmed && found.request.kind === 'reset') await this.refuseConcurrentReset(tx, found.temporal_workflow_id);
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
        const eager = this.temporal.eagerClient;
        const claimFirstCall = eager && !resent ? this.firstCallClaim(temporalWorkflowId, executionId, launch.input) : undefined;
        let handle: { eagerlyStarted: boolean; firstExecutionRunId: string } | undefined;
        try {
          handle = await (eager ?? this.temporal.client).workflow.start(RUN_GRAPH_WORKFLOW, {
            workflowId: temporalWorkflowId,
            taskQueue: this.temporal.taskQueue,
            workflowIdReusePolicy: 'REJECT_DUPLICATE',
            args: [launch.input],
            ...(eager ? { requestEagerStart: true } : {}),
          });
        } catch (err) {
          // Sent again after an unconfirmed first attempt that Temporal had in fact accepted.
          if (!(err instanceof WorkflowExecutionAlreadyStartedError)) throw err;
        } finally {
          claimFirstCall?.(handle);
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

  /**
   * For a new run whose first workflow task starts a short call, a start through the eager client:
   * the claim of its record, with that call's first attempt counted and its connection read, made
   * while Temporal answers the start (the statement's round trip is then not on the way to the
   * call), and a place for it reserved (see EarlyClaims). Answers the function to call with
   * Temporal's answer: the place is filled with that claim, for the call's activity in this
   * process's worker to take instead of making the same statement then; and, when the run's first
   * task came back to this worker with the start and the worker runs attempts ahead (see
   * EarlyRuns), the call's first attempt itself is made, with the input the run's first task gives
   * it. A first task that went to the task queue instead (no workflow-task slot was free) finds
   * the claim if this process's worker takes it; a worker of another process counts an attempt of
   * its own, and the entry then counts one more than was made. When the start was refused, the
   * attempt counted is taken back. The claim binds no run: the record learns its run's id with the
   * call's outcome or 50 ms into a call still going (bindRunLater in activities/graph.activities.ts),
   * at once when the first task went to the task queue. Not for a replay: its reused nodes do not run.
   */
  private firstCallClaim(
    temporalWorkflowId: string,
    executionId: number,
    input: RunGraphInput,
  ): ((started: { eagerlyStarted: boolean; firstExecutionRunId: string } | undefined) => void) | undefined {
    const prepared = input.firstStep?.asked === PREPARED_FIRST_STEP ? input.firstStep.answer : undefined;
    if (!this.earlyClaims || !prepared || input.replayOf !== undefined || input.seed || input.seedRefs || input.seedErrors || input.startAt) return undefined;
    const node = firstCallOf(prepared);
    if (!node) return undefined;
    const fill = this.earlyClaims.reserve(temporalWorkflowId, node.id);
    // The call itself too, when this process's worker runs attempts ahead (see EarlyRuns).
    const aheadInput = this.earlyRuns?.serving ? firstCallInput(input, prepared) : undefined;
    const fillAhead = aheadInput && this.earlyRuns!.reserve(temporalWorkflowId, node.id);
    const claim = this.mirror.claim(temporalWorkflowId, null, claimedAttempt(node, new Date()));
    claim.catch(() => undefined);
    return (started) => {
      if (!started) {
        fill();
        fillAhead?.();
        // Not taken back (PostgreSQL away): the entry counts one attempt more than was made, never fewer.
        claim.then((claimed) => (claimed?.attempts === 1 ? this.mirror.uncount(executionId, node.id) : undefined)).catch(() => undefined);
        return;
      }
      // The run is counted started where its record is first claimed: here, for a claim the API makes.
      claim.then((claimed) => claimed?.firstClaim && this.metrics?.runsStarted.inc({ trigger: claimed.trigger })).catch(() => undefined);
      const runId = started.firstExecutionRunId;
      fill({ runId, claim });
      // The attempt takes the claim just made, as the activity would have.
      if (started.eagerlyStarted) return fillAhead?.({ runId, input: aheadInput! });
      fillAhead?.();
      // A first task in the task queue may wait there a while: the record names its run at once.
      claim.then((claimed) => (claimed ? this.mirror.setRunId(executionId, runId) : undefined)).catch(() => undefined);
    };
  }

  /**
   * Waits up to `timeoutMs` for a run's result; undefined when it is still running. With the
   * `executionId` of a run just started, a success the run's own step wrote to its record (its
   * last node, in one statement with the node's own entry, or its finishing step) is answered from
   * that record as soon as it is written, which holds the outcome Temporal's result would carry:
   * the caller does not wait for the workflow task to complete and the result's long poll to
   * return. Any other outcome, a notification missed, or a wait without `executionId` (a run that
   * may have ended before the wait began) is answered by Temporal's result.
   */
  async waitForResult(temporalWorkflowId: string, timeoutMs: number, executionId?: number): Promise<RunGraphResult | undefined> {
    const handle = this.temporal.client.workflow.getHandle(temporalWorkflowId);
    const done = new AbortController();
    const timers: NodeJS.Timeout[] = [];
    const timeout = new Promise<undefined>((resolve) => timers.push(setTimeout(() => resolve(undefined), timeoutMs)));
    // Temporal's result is asked for only when needed: when the run's record is heard ended other
    // than in success, or when nothing is heard within RESULT_POLL_AFTER_MS (a long run, an
    // announcement missed). A short run that succeeds is answered without a call to Temporal.
    let askTemporal!: () => void;
    const asked = new Promise<void>((resolve) => (askTemporal = resolve));
    const fromTemporal = asked.then(() => this.temporal.client.withAbortSignal(done.signal, () => handle.result() as Promise<RunGraphResult>));
    const racers: Promise<RunGraphResult | undefined>[] = [fromTemporal, timeout];
    if (executionId !== undefined && this.runClosed) {
      racers.push(this.closedResult(executionId, done.signal, askTemporal));
      timers.push(setTimeout(askTemporal, RESULT_POLL_AFTER_MS));
    } else askTemporal();
    try {
      const result = await Promise.race(racers).catch(() => undefined);
      // An output too large for Temporal's history is read from the record the run wrote it to.
      if (result?.lastOutputRef) return { ...result, lastOutput: (await this.mirror.get(result.executionId))?.last_output ?? null };
      return result;
    } finally {
      for (const timer of timers) clearTimeout(timer);
      done.abort(WAIT_OVER);
    }
  }

  /**
   * The result of a run whose record is heard ended in success (or partly so): from the
   * announcement when it carried the record's status and output, else read from the record.
   * Any other outcome is Temporal's to answer: `askTemporal`, and pending here.
   */
  private async closedResult(executionId: number, signal: AbortSignal, askTemporal: () => void): Promise<RunGraphResult> {
    const announced = await this.runClosed!.heard(String(executionId), signal);
    const row = announced ?? (await this.mirror.get(executionId).then((r) => r && { status: r.status, output: r.last_output ?? null }));
    if (!row || (row.status !== 'success' && row.status !== 'partial')) {
      askTemporal();
      return new Promise<never>(() => undefined);
    }
    return { executionId, status: row.status, lastOutput: row.output };
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
    const items = await Promise.all(
      rows.map(async (r) => {
        const summary = this.summary(r);
        // Without an error there is nothing to withhold, and nothing to ask.
        if (!r.error) return summary;
        // An error's message and data are the run's data: the rule of the execution view. A claimed
        // run of its own (not a replay carrying another's data) is told from the row; a replay, or
        // a run whose people are not fixed yet (not claimed, or never started), is asked as the
        // execution view asks.
        const shown =
          r.acting_user_ids !== null && r.replay_of === null
            ? holdsRunRights(principal, [{ ownerId: r.workflow_owner_id, actingUserIds: r.acting_user_ids }])
            : await this.mayViewRunData(principal, Number(r.id));
        return shown ? summary : { ...summary, error: withheldError(summary.error) };
      }),
    );
    return { items, total, page: query.page, per_page: query.per_page };
  }

  /**
   * Whether `viewer` may see the data of an execution (its trigger payload, its nodes' inputs,
   * outputs and error messages, its output and error message): the rule of
   * src/executions/run-data-access.ts. Whoever else may see the execution sees its shape only.
   * Every place that serves a run's data asks this.
   */
  async mayViewRunData(viewer: Principal, executionId: number): Promise<boolean> {
    return viewer.role === 'administrator' || holdsRunRights(viewer, await this.mirror.runPeople(executionId));
  }

  async view(principal: Principal, executionId: number) {
    let row = await this.visible(principal, executionId);
    if (row.status === 'running') row = await this.reconcile(row);
    const [timeline, shown] = await Promise.all([this.mirror.timeline(executionId), this.mayViewRunData(principal, executionId)]);
    const withheld = <T>(value: T) => (shown ? value : null);
    const nodeError = (error: TimelineRow['error']) => (shown ? error : withheldError(error)) ?? null;
    // A loop's entry shows its items' counts as they move (the items workflow records them in batches).
    const itemCounts = this.items && timeline.some((t) => t.node_type === 'for_each') ? await this.items.countsByNode(executionId) : undefined;
    return {
      llm_usage: llmUsage(timeline),
      ...this.summary(row),
      redacted: !shown,
      trigger_payload: withheld(row.trigger_payload),
      error: (shown ? row.error : withheldError(row.error as TimelineRow['error'])) ?? null,
      output: withheld(row.last_output ?? null),
      trace_id: row.trace_id ?? null,
      error_workflow_execution_id: row.status === 'failed' ? await this.mirror.errorRunOf(executionId) : null,
      triggered_by_execution_id: row.triggered_by_execution_id === null ? null : Number(row.triggered_by_execution_id),
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
        input: withheld(t.input ?? null),
        output: withheld(t.output ?? null),
        error: nodeError(t.error),
        reused: t.reused,
        last_attempt_ms: t.last_attempt_ms ?? null,
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
    // Items are the run's data, shown on the execution view's terms: to the run's people, the shape to others.
    const [{ rows, total }, shown] = await Promise.all([this.items.listPage(executionId, nodeId, query), this.mayViewRunData(principal, executionId)]);
    const items = rows.map(itemView).map((i) => (shown ? i : { ...i, input: null, output: null, error: withheldError(i.error) }));
    return { items, total, page: query.page, per_page: query.per_page, redacted: !shown };
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
    return this.closeFromTemporal(row, description);
  }

  /** Closes a record whose Temporal run has closed without reporting (terminated, timed out...); a failure starts its error workflow. */
  private async closeFromTemporal(row: ExecutionRow, description: { status: { name: string }; closeTime?: Date | undefined }): Promise<ExecutionRow> {
    const status = CLOSED_STATUSES[description.status.name as keyof typeof CLOSED_STATUSES];
    if (!status) return row;
    const closed = await this.mirror.closeEnded(Number(row.id), status, description.closeTime ?? new Date(), closedError(description.status.name));
    if (closed?.errorRun) await this.launchErrorRun(closed.errorRun);
    return closed ?? row;
  }

  private async launchErrorRun(run: ErrorRun): Promise<void> {
    await this.errorWorkflows?.launch(run);
  }

  /**
   * A record without a Temporal run id is one the API prepared and then started, or was about to:
   * the run's first activity claims it. When the API died (or lost PostgreSQL) between writing the
   * record and starting the run, nothing ever will; after a minute without a Temporal workflow of
   * that id the record is closed as `start_failed`, so no execution stays "running" forever.
   */
  private async reconcileUnstarted(row: ExecutionRow): Promise<ExecutionRow> {
    if (row.trigger === 'error' && this.mirror.isStartRecord(row)) return this.relaunchErrorRun(row);
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
    return this.closeFromTemporal(row, description);
  }

  /**
   * An error workflow's run the failure queued and no run has claimed: its start is sent again
   * (the worker that recorded the failure died before sending it, or Temporal was away); a start
   * that did happen is answered "already started". It is never closed as unstarted: the failure
   * it handles is recorded, so its handler must run.
   */
  private async relaunchErrorRun(row: ExecutionRow): Promise<ExecutionRow> {
    if (Date.now() - toDate(row.started_at).getTime() < ERROR_RUN_GRACE_MS) return row;
    let description;
    try {
      description = await this.temporal.client.workflow.getHandle(row.temporal_workflow_id).describe();
    } catch (err) {
      if (!(err instanceof WorkflowNotFoundError)) return row; // Temporal unreachable: ask again later
      await this.launchErrorRun({
        executionId: Number(row.id),
        temporalWorkflowId: row.temporal_workflow_id,
        workflowId: row.workflow_id,
        version: row.workflow_version,
        payload: row.trigger_payload as ErrorRun['payload'],
      });
      return row;
    }
    return this.closeFromTemporal(row, description);
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
   * Cancels a running execution, waits included: Temporal cancels its workflow, whose cancellation
   * path ends the node in flight (a wait stops waiting, a pending approval ends `cancelled`, an
   * activity or child run is cancelled) and records the run as `cancelled`, as a cancel from the
   * Temporal Web UI does. Idempotent: a cancelled execution answers as it is; one that ended
   * otherwise is refused (409 `execution_finished`). Waits up to `waitMs` for the run to end and
   * answers the status it has then (`running` while it is still stopping).
   */
  async cancel(principal: Principal, executionId: number, waitMs = 10_000): Promise<{ execution_id: number; status: 'running' | 'cancelled' }> {
    let row = await this.visible(principal, executionId);
    if (row.status === 'running') row = await this.reconcile(row);
    if (row.status !== 'running' && row.status !== 'cancelled') {
      throw conflict('execution_finished', `Execution ${executionId} already ended (${row.status}); only a running execution can be cancelled`, {
        status: row.status,
      });
    }
    if (row.status === 'running') {
      const handle = this.temporal.client.workflow.getHandle(row.temporal_workflow_id, row.temporal_run_id ?? undefined);
      try {
        await handle.cancel();
      } catch (err) {
        // Closed meanwhile: the record learns how from Temporal below.
        if (!(err instanceof WorkflowNotFoundError)) throw err;
      }
      let timer: NodeJS.Timeout | undefined;
      const waited = new Promise<void>((resolve) => (timer = setTimeout(resolve, waitMs)));
      await Promise.race([
        handle.result().then(
          () => undefined,
          () => undefined,
        ),
        waited,
      ]).finally(() => clearTimeout(timer));
      row = (await this.mirror.get(executionId)) ?? row;
      if (row.status === 'running') row = await this.reconcile(row);
      // It ended on its own just before the cancel reached it.
      if (row.status !== 'running' && row.status !== 'cancelled') {
        throw conflict('execution_finished', `Execution ${executionId} ended (${row.status}) before the cancel reached it`, { status: row.status });
      }
    }
    return { execution_id: executionId, status: row.status as 'running' | 'cancelled' };
  }

  /**
   * Replays an execution as a new one. Without `from_node_id`, the whole run again (with
   * `with_payload`, with that trigger payload). With it, the node and every node downstream of it
   * run again and every other node keeps its recorded outcome (see replay-plan.ts): by a Temporal
   * reset to the point the node started when that keeps exactly those nodes, else by a new run
   * seeded with them (also whenever `with_payload` is given). Resets of one Temporal workflow id
   * do not overlap: while a reset replay of it runs, another is refused with 409
   * `replay_in_progress` naming it (a reset would terminate the running one).
   */
  async replay(principal: Principal, executionId: number, body: ReplayRequest, idempotency?: Idempotency): Promise<Started & { mode: 'reset' | 'rerun' }> {
    const prepared = await this.prepareReplay(principal, executionId, body);
    const started = await this.startReplay(prepared, principal, idempotency);
    const mode = this.mirror.isStartRecord({ id: String(started.executionId), temporal_workflow_id: started.temporalWorkflowId }) ? 'rerun' : 'reset';
    if (!started.replayed) {
      const counted: ReplayMode = !prepared.from ? 'rerun' : mode === 'reset' ? 'reset' : 'rerun_seeded';
      this.metrics?.replays.inc({ mode: counted });
    }
    return { ...started, mode };
  }

  /** What a replay would do, starting nothing: how it would be made, and which nodes it would run, reuse and leave skipped. */
  async replayDryRun(principal: Principal, executionId: number, body: ReplayRequest) {
    const { graph, from } = await this.prepareReplay(principal, executionId, body);
    if (!from) {
      const was = new Map((await this.mirror.timeline(executionId)).map((t) => [t.node_id, t.status]));
      const nodes = graph.nodes.map((n) => ({ node_id: n.id, action: 'run' as const, was: was.get(n.id) ?? 'not_run' }));
      return { mode: 'rerun' as const, from_node_id: null, run: nodes.map((n) => n.node_id), reused: [], skipped: [], nodes };
    }
    const { plan, launch } = from;
    const items = from.onlyFailedItems && this.items ? { items: await this.items.replayCounts(executionId, plan.fromNodeId) } : {};
    return { mode: launch.kind, from_node_id: plan.fromNodeId, run: plan.run, reused: plan.reused, skipped: plan.skipped, nodes: plan.nodes, ...items };
  }

  private async prepareReplay(principal: Principal, executionId: number, body: ReplayRequest): Promise<PreparedReplay> {
    const original = await this.visible(principal, executionId);
    if (original.status === 'running') throw conflict('execution_running', 'The execution is still running; wait for it or cancel it first');
    const workflow = await this.workflows.get(principal, original.workflow_id);
    if (workflow.status === 'archived') throw conflict('workflow_archived', 'The workflow is archived; restore it to replay its executions');
    const { graph } = await this.workflows.loadVersion(original.workflow_id, original.workflow_version);
    const payload = body.with_payload !== undefined ? body.with_payload : original.trigger_payload;
    const fromNode = body.from_node_id;
    const onlyFailedItems = body.only_failed_items === true;
    if (fromNode === undefined) {
      if (onlyFailedItems)
        throw invalidRequest('only_failed_items needs from_node_id: the for_each node whose failed items run again', { field: 'only_failed_items' });
      return { original, workflow, graph, payload };
    }
    const node = graph.nodes.find((n) => n.id === fromNode);
    if (!node) throw invalidRequest(`Node ${fromNode} is not in version ${original.workflow_version} of the workflow`, { field: 'from_node_id' });
    if (onlyFailedItems && node.type !== 'for_each') {
      throw invalidRequest(`Node ${fromNode} is a ${node.type} node; only_failed_items replays the items of a for_each node`, { field: 'only_failed_items' });
    }
    const plan = planReplay(graph, await this.mirror.timeline(Number(original.id)), fromNode, original.id);
    // A reset replays the recorded trigger payload: a new payload is always a new run. A loop's
    // successful items are handed to a new run (a reset would run them all again).
    const point = body.with_payload === undefined && !onlyFailedItems ? await this.resetPoint(original, fromNode) : undefined;
    const launch: ReplayLaunch = point && resetKeepsPlan(plan, point.completedNodes) ? { kind: 'reset', point } : { kind: 'rerun' };
    return { original, workflow, graph, payload, from: { plan, launch, onlyFailedItems } };
  }

  /** Where a reset would go back to for `fromNode`, or undefined when Temporal cannot reset there (no run, no history, no start of it). */
  private async resetPoint(original: ExecutionRow, fromNode: string): Promise<ResetPoint | undefined> {
    if (!original.temporal_run_id) return undefined;
    // The record is final a moment before Temporal closes the run (longer under load): the reset
    // point is read once Temporal has, so a node started in the run's last task has one too.
    try {
      return await findResetPoint(this.temporal, original.temporal_workflow_id, original.temporal_run_id, fromNode);
    } catch (err) {
      const failure = resetPointFailure(err, original.id);
      if (failure === undefined) return undefined;
      throw failure;
    }
  }

  private async startReplay(prepared: PreparedReplay, principal: Principal, idempotency?: Idempotency): Promise<Started> {
    const { original, workflow, payload, from } = prepared;
    const base = { payload, trigger: 'replay' as const, replayOf: Number(original.id), version: original.workflow_version };
    const newPayload = payload !== original.trigger_payload ? ' with a new payload' : '';
    if (!from) return this.start(workflow, base, principal.id, idempotency, { reason: `replay of execution ${original.id}${newPayload}` });
    const { plan, launch } = from;
    if (launch.kind === 'reset') return this.resetFrom(principal, original, prepared.graph, plan.fromNodeId, launch.point, idempotency);
    const items = from.onlyFailedItems ? ' and the items of its loop that succeeded' : '';
    const reason = `replay of execution ${original.id} from node ${plan.fromNodeId}${newPayload}: a new run reusing ${plan.reused.length} node${plan.reused.length === 1 ? '' : 's'}${items}`;
    return this.start(
      workflow,
      {
        ...base,
        ...splitSeed(plan.seed, this.inlineBytes),
        ...(plan.seedErrors.length ? { seedErrors: plan.seedErrors } : {}),
        startAt: plan.fromNodeId,
        ...(from.onlyFailedItems ? { itemsFrom: { execution: Number(original.id), node: plan.fromNodeId } } : {}),
      },
      principal.id,
      idempotency,
      { reason, reuse: { from: Number(original.id), nodeIds: plan.reused, loops: loopsIn(prepared.graph, plan.reused) } },
    );
  }

  /** A replay from `fromNode` by a Temporal reset of the original run to `point`, where that node started. */
  private async resetFrom(
    principal: Principal,
    original: ExecutionRow,
    graph: Graph,
    fromNode: string,
    point: ResetPoint,
    idempotency?: Idempotency,
  ): Promise<Started> {
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
        await this.items?.copy(Number(original.id), id, loopsIn(graph, point.completedNodes), tx);
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
