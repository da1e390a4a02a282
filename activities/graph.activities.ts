import { ApplicationFailure, CancelledFailure, Context } from '@temporalio/activity';
import {
  LEAN_HISTORY,
  childWorkflowId,
  type BeganExecution,
  type Graph,
  type GraphNode,
  type NodeError,
  type NodeErrorCode,
  type RunGraphInput,
  type RunNodeInput,
  type RunNodeOutput,
} from '../workflows/defs.js';
import { nodeRetry, CODE } from '../workflows/error-codes.js';
import { ExpressionError, type ExpressionContext } from '../src/nodes/expressions.js';
import { ExpressionLimitError, type ExpressionSandbox } from '../src/nodes/expression-sandbox.js';
import { nodeTypes, nodeRunModes } from '../src/nodes/index.js';
import { AppError } from '../src/platform/errors.js';
import { waitOutDatabase } from '../src/db/availability.js';
import type { ExecutionRef, NodeEntry } from '../src/executions/execution.mirror.js';
import { nodesFinishedBefore, readNodeEvents } from '../src/executions/reset-point.js';
import type { ActingUsers } from '../src/auth/acting.js';
import type { Principal } from '../src/auth/auth.service.js';
import { countModelUse, type Metrics } from '../src/platform/metrics.js';
import type { Config } from '../src/config.js';
import type { ConnectionService } from '../src/connections/connection.service.js';
import type { ExecutionMirror } from '../src/executions/execution.mirror.js';
import type { NodeRunContext } from '../src/nodes/node-type.js';
import type { TemporalHandle } from '../src/temporal/connection.js';
import type { WorkflowService } from '../src/workflow-definitions/workflow.service.js';

/**
 * Turns anything a node threw into the failure Temporal records, classified by the catalogue of
 * error codes (`retried`): a refusal (bad input, a 4xx of the service's own features) is final;
 * an outage (`service_unavailable`, `internal_error`) and anything unexpected (`node_failed`) are
 * retried under the node's retry policy. An `AppError` carries no verdict of its own, so a code
 * whose failures say it themselves (`per_failure`) is retried, and a code the catalogue gives no
 * `retried` is final.
 */
export function toFailure(err: unknown): Error {
  if (err instanceof CancelledFailure) return err;
  if (err instanceof ApplicationFailure) {
    const refusal = nodeRetry(err.type ?? '') === false;
    return refusal && !err.nonRetryable
      ? ApplicationFailure.create({ message: err.message, type: err.type ?? undefined, nonRetryable: true, details: err.details as unknown[] })
      : err;
  }
  if (err instanceof ExpressionError) return ApplicationFailure.nonRetryable(err.message, CODE.expression_error);
  if (err instanceof ExpressionLimitError) return ApplicationFailure.nonRetryable(err.message, CODE.expression_limit);
  if (err instanceof AppError) {
    const retried = nodeRetry(err.code);
    const retryable = retried === true || retried === 'per_failure';
    return retryable ? ApplicationFailure.retryable(err.message, err.code) : ApplicationFailure.nonRetryable(err.message, err.code);
  }
  return ApplicationFailure.retryable(err instanceof Error ? err.message : String(err), CODE.node_failed satisfies NodeErrorCode);
}

/** How long a node runs before the timeline shows it as running (it is written when it ends anyway). */
const RUNNING_AFTER_MS = 50;

const errorOf = (failure: Error): NodeError => ({
  code: failure instanceof ApplicationFailure ? (failure.type ?? CODE.node_failed) : failure instanceof CancelledFailure ? CODE.cancelled : CODE.node_failed,
  message: failure.message,
});

/**
 * Activities of the graph interpreter. They own the execution mirror in PostgreSQL: each node
 * activity writes its own timeline entry, so the mirror is whole even when a worker dies.
 * Executions are found by the Temporal run id, which also covers runs created by a reset.
 */
export interface GraphActivityPorts {
  config: Pick<
    Config,
    'SVC_NODE_OUTPUT_LIMIT' | 'SVC_LOCAL_PURE_NODES' | 'SVC_AGENT_PRICES' | 'SVC_RUN_WORKFLOW_MAX_DEPTH' | 'SVC_RUN_WORKFLOW_MAX_CHILD_RUNS'
  >;
  executionMirror: ExecutionMirror;
  workflows: Pick<WorkflowService, 'loadVersion' | 'visibleToAll'>;
  connections: Pick<ConnectionService, 'resolve'>;
  /** The rights of the people a run acts for. */
  acting: Pick<ActingUsers, 'principal'>;
  records: NodeRunContext<unknown>['records'];
  /** For a run an operator reset: its history says where it came from. */
  temporal: TemporalHandle;
  /** Where `{{ }}` expressions are evaluated, bounded in time and memory, off the event loop. */
  expressions: Pick<ExpressionSandbox, 'resolve'>;
  metrics: Pick<Metrics, 'runsStarted' | 'runsFinished' | 'runDuration' | 'nodeDuration' | 'nodeAttempts' | 'modelTokens' | 'modelCost'>;
}

export function graphActivities(services: GraphActivityPorts) {
  const cache = new Map<string, ExecutionRef>();
  const outputLimit = services.config.SVC_NODE_OUTPUT_LIMIT;

  /**
   * The activity's own reads and writes (the execution mirror, the graph, the connection, the
   * owner) wait out a PostgreSQL outage for as long as the activity may run, so a database restart
   * neither fails a node nor runs its side effect again. All of them are idempotent: reads,
   * claims, upserts, updates to a final state.
   */
  function patiently<T>(fn: () => Promise<T>): Promise<T> {
    const activity = Context.current();
    const { startToCloseTimeoutMs, currentAttemptScheduledTimestampMs, isLocal } = activity.info;
    const deadline = (startToCloseTimeoutMs ? currentAttemptScheduledTimestampMs + startToCloseTimeoutMs : Date.now() + 30_000) - 2_000;
    return waitOutDatabase(fn, deadline, isLocal ? undefined : () => activity.heartbeat());
  }
  const mirror = services.executionMirror;

  async function findExecution(temporalWorkflowId: string, runId: string): Promise<ExecutionRef | undefined> {
    const cached = cache.get(runId);
    if (cached) return cached;
    const ref = await patiently(() => mirror.claim(temporalWorkflowId, runId));
    if (!ref) return undefined;
    if (ref.firstClaim) services.metrics.runsStarted.inc({ trigger: ref.trigger });
    // Only runs in flight need their record; a small cache keeps the worker's heap flat.
    if (cache.size > 1_000) cache.clear();
    cache.set(runId, ref);
    return ref;
  }

  /**
   * A run nobody prepared a record for, created by a reset in the Temporal Web UI or CLI: its
   * history says which run it came from and why, and the mirror makes it an execution of its own.
   */
  async function adoptResetRun(temporalWorkflowId: string, runId: string): Promise<boolean> {
    const events = await readNodeEvents(services.temporal, temporalWorkflowId, runId, { untilReset: true });
    if (!events.reset) return false;
    const { baseRunId, reason, lastKeptEventId } = events.reset;
    // The reset run holds the base run's events up to the point; what the base run recorded about
    // the point's own task (a timer that fired into it, say) is only in the base run.
    const keptNodes = nodesFinishedBefore(await readNodeEvents(services.temporal, temporalWorkflowId, baseRunId), lastKeptEventId + 1);
    return patiently(() => mirror.adoptReset(temporalWorkflowId, runId, { runId: baseRunId, reason, keptNodes }));
  }

  /** The record of a run: the one the API prepared, or one made for a reset run or a started one. */
  async function executionOf(temporalWorkflowId: string, runId: string): Promise<ExecutionRef | undefined> {
    const ref = await findExecution(temporalWorkflowId, runId);
    if (ref || !(await adoptResetRun(temporalWorkflowId, runId))) return ref;
    return findExecution(temporalWorkflowId, runId);
  }

  /** A stored version of a workflow never changes: runs of it read it from here after the first. */
  const versions = new Map<string, { version: number; graph: Graph }>();
  async function definitionOf(workflowId: number, version: number | undefined): Promise<{ version: number; graph: Graph }> {
    const cached = version === undefined ? undefined : versions.get(`${workflowId}:${version}`);
    if (cached) return cached;
    const loaded = await patiently(() => services.workflows.loadVersion(workflowId, version));
    if (versions.size >= 500) versions.delete(versions.keys().next().value!);
    const definition = { version: loaded.version, graph: loaded.graph };
    versions.set(`${workflowId}:${loaded.version}`, definition);
    return definition;
  }

  /** The Temporal run an activity belongs to (always set for workflow activities). */
  const runOf = () => Context.current().info.workflowExecution!;

  async function currentExecution(runId: string): Promise<ExecutionRef> {
    const { workflowId } = runOf();
    const ref = await executionOf(workflowId, runId);
    if (!ref) throw ApplicationFailure.retryable(`No execution record for run ${runId} yet`, CODE.execution_not_ready);
    return ref;
  }

  /** The joint principal of a run's people; refused when one of them no longer exists. */
  async function actorOf(ref: ExecutionRef): Promise<Principal> {
    const principal = await patiently(() => services.acting.principal(ref.actingUserIds, ref.ownerId));
    if (!principal) throw ApplicationFailure.nonRetryable('A person this run acts for no longer exists', CODE.forbidden);
    return principal;
  }

  /** One attempt of a node, in the metrics. */
  const countAttempt = (type: string, outcome: string, code: string | undefined, ms: number) => {
    services.metrics.nodeDuration.observe({ type, outcome }, ms / 1000);
    services.metrics.nodeAttempts.inc({ type, outcome, code: outcome === 'success' ? '' : (code ?? CODE.node_failed) });
  };

  const writeNode = (executionId: number, node: Pick<GraphNode, 'id' | 'type'>, entry: NodeEntry) =>
    patiently(() => mirror.writeNode(executionId, node, entry));

  const control = {
    /** First step of every run: claims or creates the execution record and loads the graph. */
    async beginExecution(
      input: RunGraphInput,
      runId: string,
      /** What the calling workflow code can read; earlier code asks for nothing (see LEAN_HISTORY). */
      understands: { history?: number } = {},
    ): Promise<BeganExecution> {
      const { workflowId: temporalWorkflowId } = runOf();
      // The record is claimed first: a run that then fails (its definition unreadable through a
      // long database outage) is one the mirror can close, knowing its run id.
      let ref = await executionOf(temporalWorkflowId, runId);
      const definition = await definitionOf(input.workflowId, input.version);
      if (!ref) {
        // Started by a schedule, a record event or a parent run: nobody prepared a record.
        await patiently(() =>
          mirror.insertStarted({
            workflowId: input.workflowId,
            version: definition.version,
            trigger: input.trigger,
            payload: input.payload,
            temporalWorkflowId,
            runId,
            ...(input.parentExecutionId !== undefined ? { parentExecutionId: input.parentExecutionId } : {}),
          }),
        );
        ref = await findExecution(temporalWorkflowId, runId);
        if (!ref) throw ApplicationFailure.retryable('execution record not visible yet', CODE.execution_not_ready);
      }
      return {
        executionId: ref.id,
        version: definition.version,
        graph: definition.graph,
        runModes: nodeRunModes(services.config.SVC_LOCAL_PURE_NODES),
        // Still answered for workers on earlier workflow code (a rolling deployment), which read
        // these: they must run every node the way runModes says.
        localPureNodes: services.config.SVC_LOCAL_PURE_NODES,
        pureTypes: [...nodeTypes.values()].filter((n) => n.pure).map((n) => n.type),
        ...(understands.history === LEAN_HISTORY ? { history: LEAN_HISTORY } : {}),
      };
    },

    /** Last step of every run: the outcome, the skipped nodes and the ones a cancel interrupted. */
    async finishExecution(
      runId: string,
      result: {
        status: string;
        skipped: { id: string; type: string }[];
        error?: NodeError & { node_id?: string };
        lastOutput?: unknown;
        cancelled?: { id: string; type: string; startedAt: number }[];
      },
    ): Promise<{ executionId: number }> {
      const ref = await currentExecution(runId);
      const ended = await patiently(() => mirror.finish(ref.id, result));
      if (ended) {
        services.metrics.runsFinished.inc({ status: result.status });
        services.metrics.runDuration.observe({ status: result.status }, ended.seconds);
      }
      await patiently(() => mirror.markCancelled(ref.id, result.cancelled ?? []));
      await patiently(() => mirror.markSkipped(ref.id, result.skipped));
      return { executionId: ref.id };
    },

    async recordNodeStart(node: GraphNode, runId: string) {
      const ref = await currentExecution(runId);
      await writeNode(ref.id, node, { status: 'running', started_at: new Date(), attempts: 1, input: node.config });
    },

    async recordNodeEnd(node: GraphNode, runId: string, end: { status: 'success' | 'failed'; output?: unknown; error?: NodeError; startedAt: number }) {
      const ref = await currentExecution(runId);
      const finished = new Date();
      countAttempt(node.type, end.status, end.error?.code, finished.getTime() - end.startedAt);
      await writeNode(ref.id, node, {
        status: end.status,
        started_at: new Date(end.startedAt),
        finished_at: finished,
        duration_ms: finished.getTime() - end.startedAt,
        attempts: 1,
        input: node.config,
        output: end.output,
        error: end.error,
      });
    },

    /**
     * Resolves a run_workflow node's payload and checks the child may run: the target must be
     * visible to every person this run acts for (the child then acts for them too), the child
     * must not nest deeper than SVC_RUN_WORKFLOW_MAX_DEPTH, and the tree of runs this one belongs
     * to must not have started SVC_RUN_WORKFLOW_MAX_CHILD_RUNS children already.
     */
    async prepareChildRun(node: GraphNode, context: RunNodeInput['context'], runId: string) {
      const ref = await currentExecution(runId);
      await writeNode(ref.id, node, { status: 'running', started_at: new Date(), attempts: 1, input: node.config });
      try {
        const config = (await services.expressions.resolve(node.config, { ...context, execution: { id: ref.id, workflow_id: ref.workflowId } })) as {
          workflow_id: number;
          payload?: unknown;
        };
        const targetId = Number(config.workflow_id);
        const { config: limits } = services;
        if (ref.depth + 1 > limits.SVC_RUN_WORKFLOW_MAX_DEPTH) {
          throw ApplicationFailure.nonRetryable(
            `The child run would nest deeper than ${limits.SVC_RUN_WORKFLOW_MAX_DEPTH} levels (SVC_RUN_WORKFLOW_MAX_DEPTH)`,
            CODE.child_run_limit,
          );
        }
        const visible = await patiently(() => services.workflows.visibleToAll(targetId, ref.actingUserIds));
        const target = visible
          ? await patiently(() => services.workflows.loadVersion(targetId)).catch((err: unknown) => {
              if (err instanceof AppError && err.status === 404) return undefined;
              throw err;
            })
          : undefined;
        if (!target || target.status === 'archived') {
          throw ApplicationFailure.nonRetryable(
            `Workflow ${config.workflow_id} does not exist, is archived, or is not visible to this run's people`,
            CODE.not_found,
          );
        }
        const childId = childWorkflowId(runOf().workflowId, node.id);
        if (!(await patiently(() => services.executionMirror.claimChildRun(ref.rootId, childId, limits.SVC_RUN_WORKFLOW_MAX_CHILD_RUNS)))) {
          throw ApplicationFailure.nonRetryable(
            `The runs of this tree have started ${limits.SVC_RUN_WORKFLOW_MAX_CHILD_RUNS} child runs already (SVC_RUN_WORKFLOW_MAX_CHILD_RUNS)`,
            CODE.child_run_limit,
          );
        }
        return { workflowId: targetId, payload: config.payload ?? null, parentExecutionId: ref.id };
      } catch (err) {
        const failure = toFailure(err);
        await writeNode(ref.id, node, { status: 'failed', finished_at: new Date(), error: errorOf(failure) });
        throw failure;
      }
    },
  };

  const nodes = {
    /** Runs one node: evaluates its expressions, runs the type's implementation, records the result. */
    async runNode({ node, context }: RunNodeInput): Promise<RunNodeOutput> {
      const activity = Context.current();
      const beat = activity.info.isLocal ? undefined : setInterval(() => activity.heartbeat(), 1000);
      const started = Date.now();
      const attempts = activity.info.attempt;
      let input: unknown;
      let ref: ExecutionRef;
      /** The type of the node's connection, once resolved (the provider of an llm_prompt's usage). */
      let connectionType: string | undefined;
      try {
        ref = await currentExecution(runOf().runId);
      } catch (err) {
        if (beat) clearInterval(beat);
        throw err;
      }
      // A node is written when it ends; one still going after RUNNING_AFTER_MS shows as running
      // meanwhile (most nodes end sooner, and a write less is a step faster). The attempt count
      // is in both writes, so a side effect is never performed more often than recorded.
      let shownRunning: Promise<unknown> | undefined;
      const showRunning = activity.info.isLocal
        ? undefined
        : setTimeout(() => {
            shownRunning = writeNode(ref.id, node, { status: 'running', started_at: new Date(started), attempts });
            shownRunning.catch(() => undefined);
          }, RUNNING_AFTER_MS);
      const settle = async () => {
        clearTimeout(showRunning);
        await shownRunning?.catch(() => undefined);
      };
      try {
        const type = nodeTypes.get(node.type);
        if (!type?.run) throw ApplicationFailure.nonRetryable(`Node type ${node.type} cannot run as an activity`, CODE.validation_failed);
        const expressionContext: ExpressionContext = { ...context, execution: { id: ref.id, workflow_id: ref.workflowId } };
        input = await services.expressions.resolve(node.config, expressionContext);
        const parsed = (type.resolvedSchema ?? type.configSchema).safeParse(input);
        if (!parsed.success) {
          const detail = parsed.error.issues.map((i) => `${i.path.join('.') || 'config'}: ${i.message}`).join('; ');
          throw ApplicationFailure.nonRetryable(`Configuration after evaluating expressions is invalid: ${detail}`, CODE.validation_failed);
        }
        const result = await type.run({
          node,
          config: parsed.data,
          records: services.records,
          prices: services.config.SVC_AGENT_PRICES,
          execution: ref,
          signal: activity.cancellationSignal,
          connection: () => {
            if (node.connection_id === undefined) throw ApplicationFailure.nonRetryable('The node has no connection_id', CODE.validation_failed);
            const id = node.connection_id;
            return patiently(() => services.connections.resolve(id, ref.actingUserIds)).then((resolved) => {
              connectionType = resolved.type;
              return resolved;
            });
          },
          heartbeat: (details) => activity.heartbeat(details),
          actor: () => actorOf(ref),
        });
        const size = Buffer.byteLength(JSON.stringify(result.output ?? null));
        if (size > outputLimit) {
          throw ApplicationFailure.nonRetryable(
            `Node output is ${size} bytes, over the limit of ${outputLimit} (SVC_NODE_OUTPUT_LIMIT)`,
            CODE.output_too_large,
          );
        }
        const finished = Date.now();
        countAttempt(node.type, 'success', undefined, finished - started);
        const usage = (result.output as { usage?: { tokens_in?: number; tokens_out?: number; cost_usd?: number } } | null)?.usage;
        if (node.type === 'llm_prompt' && usage) countModelUse(services.metrics, connectionType ?? 'unknown', 'node', usage);
        await settle();
        await writeNode(ref.id, node, {
          status: 'success',
          started_at: new Date(started),
          finished_at: new Date(finished),
          duration_ms: finished - started,
          attempts,
          input,
          output: result.output ?? null,
        });
        return result;
      } catch (err) {
        const failure = toFailure(err);
        const finished = Date.now();
        const status = failure instanceof CancelledFailure ? 'cancelled' : 'failed';
        countAttempt(node.type, status, errorOf(failure).code, finished - started);
        await settle();
        await writeNode(ref.id, node, {
          status,
          started_at: new Date(started),
          finished_at: new Date(finished),
          duration_ms: finished - started,
          attempts,
          input,
          error: errorOf(failure),
        }).catch(() => undefined);
        throw failure;
      } finally {
        if (beat) clearInterval(beat);
        clearTimeout(showRunning);
      }
    },
  };

  return { control, nodes };
}
