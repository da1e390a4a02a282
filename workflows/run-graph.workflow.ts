import {
  ActivityFailure,
  ApplicationFailure,
  CancellationScope,
  ChildWorkflowFailure,
  executeChild,
  isCancellation,
  patched,
  proxyActivities,
  proxyLocalActivities,
  sleep,
  upsertMemo,
  workflowInfo,
  type ActivityOptions,
} from '@temporalio/workflow';
import type { ControlActivities, NodeActivities } from '../activities/index.js';
import {
  LEAN_HISTORY,
  NODE_FINISHED_MEMO,
  NODE_FINISHED_MEMO_PATCH,
  NODE_HISTORY_MEMO,
  NODE_REFUSALS,
  NODE_STARTED_MEMO,
  RUN_GRAPH_WORKFLOW,
  childWorkflowId,
  nodeActivityId,
  runModeOf,
  type NodeFinishedMemo,
  type GraphNode,
  type NodeError,
  type RunGraphInput,
  type RunGraphResult,
  type RunNodeOutput,
} from './defs.js';
import { GraphState } from './graph.js';
import { contextFor } from './references.js';
import { CODE } from './error-codes.js';

const control = proxyActivities<ControlActivities>({
  startToCloseTimeout: '30s',
  retry: { initialInterval: '500ms', maximumAttempts: 20, nonRetryableErrorTypes: [CODE.not_found, CODE.validation_failed] },
});
const localControl = proxyLocalActivities<ControlActivities>({
  startToCloseTimeout: '30s',
  retry: { initialInterval: '500ms', maximumAttempts: 20 },
});

function activityOptions(node: GraphNode): ActivityOptions {
  const retry = node.retry ?? {};
  return {
    activityId: nodeActivityId(node.id),
    startToCloseTimeout: node.timeout_ms ?? 30_000,
    // Node activities heartbeat, so a killed worker is noticed in seconds, not at the timeout.
    heartbeatTimeout: 6_000,
    retry: {
      maximumAttempts: retry.max_attempts ?? 3,
      initialInterval: retry.initial_interval_ms ?? 1_000,
      backoffCoefficient: retry.backoff_coefficient ?? 2,
      ...(retry.max_interval_ms ? { maximumInterval: retry.max_interval_ms } : {}),
      nonRetryableErrorTypes: [...NODE_REFUSALS],
    },
  };
}

/** The failure a node ended with, as the timeline and the execution record show it. */
function nodeErrorOf(err: unknown): NodeError {
  let cause: unknown = err;
  while (cause instanceof ActivityFailure || cause instanceof ChildWorkflowFailure) cause = cause.cause ?? cause;
  if (cause instanceof ApplicationFailure) return { code: cause.type ?? CODE.node_failed, message: cause.message };
  if (err instanceof ActivityFailure && err.cause?.name === 'TimeoutFailure') return { code: CODE.timeout, message: err.cause.message };
  return { code: CODE.node_failed, message: err instanceof Error ? err.message : String(err) };
}

/**
 * Interprets one workflow graph. Deterministic: the graph comes from the first activity's
 * recorded result, nodes start in the order GraphState yields them, and every side effect
 * (each node) is an activity, a durable timer or a child workflow.
 */
export async function runGraph(input: RunGraphInput): Promise<RunGraphResult> {
  // Bookkeeping runs as local activities: no task round trip through the server for each.
  // The answer says how this run marks its nodes; it is in the history, so a replay reads it back.
  const began = await localControl.beginExecution(input, workflowInfo().runId, { history: LEAN_HISTORY });
  const { graph } = began;
  // Runs begun on earlier code (their first step's recorded answer has no `history`) mark every
  // node with memos, as they were written; a lean run only nodes Temporal's events do not mark.
  const lean = began.history === LEAN_HISTORY;
  const nodes = new Map(graph.nodes.map((n) => [n.id, n]));
  const state = new GraphState(graph);
  const outputs: Record<string, unknown> = {};
  let lastOutput: unknown;
  let failure: RunGraphResult['error'];
  let partial = false;
  let cancelled: unknown;
  /** Workflow time each node started; the nodes a cancel interrupted. */
  const startedAt = new Map<string, number>();
  const interrupted: { id: string; type: string; startedAt: number }[] = [];

  for (const [id, output] of Object.entries(input.seed ?? {})) {
    outputs[id] = output;
    const branch = (output as { branch?: unknown } | null)?.branch ?? (output as { result?: unknown } | null)?.result;
    state.seed(id, branch === undefined ? undefined : String(branch));
  }

  const runNode = async (node: GraphNode): Promise<RunNodeOutput> => {
    const mode = runModeOf(began, node.type);
    if (mode === 'timer') {
      const startedAt = Date.now();
      await localControl.recordNodeStart(node, workflowInfo().runId);
      await sleep(Number(node.config.duration_ms));
      const output = { waited_ms: Number(node.config.duration_ms) };
      await localControl.recordNodeEnd(node, workflowInfo().runId, { status: 'success', output, startedAt });
      return { output };
    }
    if (mode === 'child') {
      const startedAt = Date.now();
      const child = await control.prepareChildRun(node, { trigger: input.payload, nodes: contextFor(node, outputs) }, workflowInfo().runId);
      try {
        const result = await executeChild(RUN_GRAPH_WORKFLOW, {
          workflowId: childWorkflowId(workflowInfo().workflowId, node.id),
          // Answers recorded before children knew their parent carry no parentExecutionId.
          args: [
            {
              workflowId: child.workflowId,
              payload: child.payload,
              trigger: 'child',
              ...(child.parentExecutionId !== undefined ? { parentExecutionId: child.parentExecutionId } : {}),
            } satisfies RunGraphInput,
          ],
        });
        const output = { execution_id: result.executionId, status: result.status, output: result.lastOutput ?? null };
        if (result.status === 'failed') throw ApplicationFailure.nonRetryable(`Child workflow failed: ${result.error?.message ?? ''}`, CODE.node_failed);
        await localControl.recordNodeEnd(node, workflowInfo().runId, { status: 'success', output, startedAt });
        return { output };
      } catch (err) {
        if (!isCancellation(err)) await localControl.recordNodeEnd(node, workflowInfo().runId, { status: 'failed', error: nodeErrorOf(err), startedAt });
        throw err;
      }
    }
    const { activityId: _id, heartbeatTimeout: _hb, ...localOptions } = activityOptions(node);
    const activities = runsLocally(node) ? proxyLocalActivities<NodeActivities>(localOptions) : proxyActivities<NodeActivities>(activityOptions(node));
    return activities.runNode({ node, context: { trigger: input.payload, nodes: contextFor(node, outputs) } });
  };

  const runsLocally = (node: GraphNode) => runModeOf(began, node.type) === 'local';

  /** A regular activity's own events mark its start and end in the history of a lean run. */
  const markedByTemporal = (node: GraphNode) => lean && runModeOf(began, node.type) === 'activity';

  /** A marker in history: a reset knows this node finished in this workflow task. */
  const markFinished = (node: GraphNode) => {
    if (markedByTemporal(node)) return;
    const memo = { [NODE_FINISHED_MEMO]: { node: node.id, local: runsLocally(node) } satisfies NodeFinishedMemo };
    // Added after runs were already in flight: their histories carry no such command.
    if (lean || patched(NODE_FINISHED_MEMO_PATCH)) upsertMemo(memo);
  };

  /** A marker in history: replay-from-node resets to the workflow task that started this node. */
  const markStarted = (node: GraphNode) => {
    if (markedByTemporal(node)) return;
    upsertMemo(lean ? { [NODE_STARTED_MEMO]: node.id, [NODE_HISTORY_MEMO]: LEAN_HISTORY } : { [NODE_STARTED_MEMO]: node.id });
  };

  const runOne = async (id: string) => {
    const node = nodes.get(id)!;
    markStarted(node);
    startedAt.set(id, Date.now());
    try {
      const result = await runNode(node);
      outputs[id] = result.output;
      lastOutput = result.output;
      state.complete(id, result.branch);
      markFinished(node);
    } catch (err) {
      if (isCancellation(err)) {
        cancelled ??= err;
        interrupted.push({ id, type: node.type, startedAt: startedAt.get(id)! });
        return;
      }
      markFinished(node);
      const error = nodeErrorOf(err);
      if (node.on_error === 'continue') {
        partial = true;
        outputs[id] = { error };
        state.complete(id);
      } else {
        failure ??= { ...error, node_id: id };
      }
    }
  };

  const running = new Map<string, Promise<void>>();
  for (;;) {
    if (!failure && !cancelled) {
      for (const id of state.ready())
        running.set(
          id,
          runOne(id).finally(() => running.delete(id)),
        );
    }
    if (running.size === 0) break;
    await Promise.race(running.values());
  }

  const status: RunGraphResult['status'] = cancelled ? 'cancelled' : failure ? 'failed' : partial ? 'partial' : 'success';
  const notRun = [...state.skippedNodes(), ...(failure || cancelled ? state.unfinished() : [])].map((id) => ({ id, type: nodes.get(id)!.type }));
  // The record this run writes to: after a reset (from the API or by an operator in the Temporal
  // Web UI or CLI) that is the reset run's own execution, not the one beginExecution found.
  const finished = await CancellationScope.nonCancellable(() =>
    localControl.finishExecution(workflowInfo().runId, {
      status,
      skipped: notRun,
      ...(failure ? { error: failure } : {}),
      lastOutput,
      ...(interrupted.length ? { cancelled: interrupted } : {}),
    }),
  );
  if (cancelled) throw cancelled;
  return {
    // Runs recorded before finishExecution answered with the id have only beginExecution's.
    executionId: finished?.executionId ?? began.executionId,
    status,
    ...(lastOutput !== undefined ? { lastOutput } : {}),
    ...(failure ? { error: failure } : {}),
  };
}
