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
  type BeganExecution,
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
import { notRunNodes, runStatus, seedRun, type InterruptedNode } from './run-state.js';
import { runApproval } from './approval.js';
import { runWaitForEvent } from './wait-for-event.js';

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

/** One run's state: the graph, what its nodes answered, and how the run ends so far. */
interface Run {
  input: RunGraphInput;
  began: BeganExecution;
  /**
   * Runs begun on earlier code (their first step's recorded answer has no `history`) mark every
   * node with memos, as they were written; a lean run only nodes Temporal's events do not mark.
   */
  lean: boolean;
  nodes: Map<string, GraphNode>;
  state: GraphState;
  outputs: Record<string, unknown>;
  lastOutput: unknown;
  failure: RunGraphResult['error'];
  partial: boolean;
  cancelled: unknown;
  /** Workflow time each node started; the nodes a cancel interrupted. */
  startedAt: Map<string, number>;
  interrupted: InterruptedNode[];
}

/** Begins the execution record and the run's state, seeded with the outputs of a replay's seed. */
async function beginRun(input: RunGraphInput): Promise<Run> {
  // Bookkeeping runs as local activities: no task round trip through the server for each.
  // The answer says how this run marks its nodes; it is in the history, so a replay reads it back.
  const began = await localControl.beginExecution(input, workflowInfo().runId, { history: LEAN_HISTORY });
  const { graph } = began;
  const run: Run = {
    input,
    began,
    lean: began.history === LEAN_HISTORY,
    nodes: new Map(graph.nodes.map((n) => [n.id, n])),
    state: new GraphState(graph),
    outputs: {},
    lastOutput: undefined,
    failure: undefined,
    partial: false,
    cancelled: undefined,
    startedAt: new Map(),
    interrupted: [],
  };
  seedRun(run.state, run.outputs, input.seed);
  return run;
}

/** A delay node: a durable timer between its recorded start and end. */
async function runTimer(run: Run, node: GraphNode): Promise<RunNodeOutput> {
  const startedAt = Date.now();
  await localControl.recordNodeStart(node, workflowInfo().runId);
  await sleep(Number(node.config.duration_ms));
  const output = { waited_ms: Number(node.config.duration_ms) };
  await localControl.recordNodeEnd(node, workflowInfo().runId, { status: 'success', output, startedAt });
  return { output };
}

/** A sub-workflow node: a child run of the referenced workflow, its outcome recorded as the node's. */
async function runChild(run: Run, node: GraphNode): Promise<RunNodeOutput> {
  const startedAt = Date.now();
  const child = await control.prepareChildRun(node, { trigger: run.input.payload, nodes: contextFor(node, run.outputs) }, workflowInfo().runId);
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

/** Any other node: one activity, local for the node types the run was told to run locally. */
async function runActivity(run: Run, node: GraphNode): Promise<RunNodeOutput> {
  const { activityId: _id, heartbeatTimeout: _hb, ...localOptions } = activityOptions(node);
  const activities = runsLocally(run, node) ? proxyLocalActivities<NodeActivities>(localOptions) : proxyActivities<NodeActivities>(activityOptions(node));
  return activities.runNode({ node, context: { trigger: run.input.payload, nodes: contextFor(node, run.outputs) } });
}

/**
 * Runs one node the way its type runs. Not async itself: each way's promise is the one the caller
 * awaits, so a node's continuation takes as many steps as it always did and nodes that finish in
 * the same workflow task go on in the order they always did.
 */
function runNode(run: Run, node: GraphNode): Promise<RunNodeOutput> {
  const mode = runModeOf(run.began, node.type);
  if (mode === 'timer') return runTimer(run, node);
  if (mode === 'child') return runChild(run, node);
  // Waits hold the run in workflow code of their own; they see the same expression context as an activity.
  if (mode === 'wait') return runWaitForEvent(node, { trigger: run.input.payload, nodes: contextFor(node, run.outputs) }, workflowInfo().runId);
  if (mode === 'approval') return runApproval(node, { trigger: run.input.payload, nodes: contextFor(node, run.outputs) }, workflowInfo().runId);
  return runActivity(run, node);
}

const runsLocally = (run: Run, node: GraphNode) => runModeOf(run.began, node.type) === 'local';

/** A regular activity's own events mark its start and end in the history of a lean run. */
const markedByTemporal = (run: Run, node: GraphNode) => run.lean && runModeOf(run.began, node.type) === 'activity';

/** A marker in history: a reset knows this node finished in this workflow task. */
function markFinished(run: Run, node: GraphNode): void {
  if (markedByTemporal(run, node)) return;
  const memo = { [NODE_FINISHED_MEMO]: { node: node.id, local: runsLocally(run, node) } satisfies NodeFinishedMemo };
  // Added after runs were already in flight: their histories carry no such command.
  if (run.lean || patched(NODE_FINISHED_MEMO_PATCH)) upsertMemo(memo);
}

/** A marker in history: replay-from-node resets to the workflow task that started this node. */
function markStarted(run: Run, node: GraphNode): void {
  if (markedByTemporal(run, node)) return;
  upsertMemo(run.lean ? { [NODE_STARTED_MEMO]: node.id, [NODE_HISTORY_MEMO]: LEAN_HISTORY } : { [NODE_STARTED_MEMO]: node.id });
}

/** Runs one node and records what it answered, how it failed, or that a cancel interrupted it. */
async function runOne(run: Run, id: string): Promise<void> {
  const node = run.nodes.get(id)!;
  markStarted(run, node);
  run.startedAt.set(id, Date.now());
  try {
    const result = await runNode(run, node);
    run.outputs[id] = result.output;
    run.lastOutput = result.output;
    run.state.complete(id, result.branch);
    markFinished(run, node);
  } catch (err) {
    if (isCancellation(err)) {
      run.cancelled ??= err;
      run.interrupted.push({ id, type: node.type, startedAt: run.startedAt.get(id)! });
      return;
    }
    markFinished(run, node);
    const error = nodeErrorOf(err);
    if (node.on_error === 'continue') {
      run.partial = true;
      run.outputs[id] = { error };
      run.state.complete(id);
    } else {
      run.failure ??= { ...error, node_id: id };
    }
  }
}

/** Starts every node as soon as it is ready, until none runs and none is ready (or the run failed or was cancelled). */
async function runAll(run: Run): Promise<void> {
  const running = new Map<string, Promise<void>>();
  for (;;) {
    if (!run.failure && !run.cancelled) {
      for (const id of run.state.ready())
        running.set(
          id,
          runOne(run, id).finally(() => running.delete(id)),
        );
    }
    if (running.size === 0) break;
    await Promise.race(running.values());
  }
}

/** Writes the run's outcome to its execution record and answers it (a cancelled run ends cancelled). */
async function finishRun(run: Run): Promise<RunGraphResult> {
  const { failure, cancelled, lastOutput, interrupted } = run;
  const status = runStatus(run);
  const notRun = notRunNodes(run.state, run.nodes, Boolean(failure || cancelled));
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
    executionId: finished?.executionId ?? run.began.executionId,
    status,
    ...(lastOutput !== undefined ? { lastOutput } : {}),
    ...(failure ? { error: failure } : {}),
  };
}

/**
 * Interprets one workflow graph. Deterministic: the graph comes from the first activity's
 * recorded result, nodes start in the order GraphState yields them, and every side effect
 * (each node) is an activity, a durable timer or a child workflow.
 */
export async function runGraph(input: RunGraphInput): Promise<RunGraphResult> {
  const run = await beginRun(input);
  await runAll(run);
  return finishRun(run);
}
