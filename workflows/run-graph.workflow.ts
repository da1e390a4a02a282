import {
  ActivityFailure,
  ApplicationFailure,
  CancellationScope,
  ChildWorkflowFailure,
  executeChild,
  isCancellation,
  proxyActivities,
  proxyLocalActivities,
  sleep,
  upsertMemo,
  workflowInfo,
  type ActivityOptions,
} from '@temporalio/workflow';
import type { ControlActivities, NodeActivities } from '../activities/index.js';
import {
  RUN_GRAPH_WORKFLOW,
  nodeActivityId,
  type GraphNode,
  type NodeError,
  type RunGraphInput,
  type RunGraphResult,
  type RunNodeOutput,
} from './defs.js';
import { GraphState } from './graph.js';
import { contextFor } from './references.js';

const control = proxyActivities<ControlActivities>({
  startToCloseTimeout: '30s',
  retry: { initialInterval: '500ms', maximumAttempts: 20, nonRetryableErrorTypes: ['not_found', 'validation_failed'] },
});
const localControl = proxyLocalActivities<ControlActivities>({
  startToCloseTimeout: '30s',
  retry: { initialInterval: '500ms', maximumAttempts: 20 },
});

const NON_RETRYABLE = ['validation_failed', 'expression_error', 'connection_missing', 'node_failed', 'output_too_large', 'not_found'];

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
      nonRetryableErrorTypes: NON_RETRYABLE,
    },
  };
}

/** The failure a node ended with, as the timeline and the execution record show it. */
function nodeErrorOf(err: unknown): NodeError {
  let cause: unknown = err;
  while (cause instanceof ActivityFailure || cause instanceof ChildWorkflowFailure) cause = cause.cause ?? cause;
  if (cause instanceof ApplicationFailure) return { code: cause.type ?? 'node_failed', message: cause.message };
  if (err instanceof ActivityFailure && err.cause?.name === 'TimeoutFailure') return { code: 'timeout', message: err.cause.message };
  return { code: 'node_failed', message: err instanceof Error ? err.message : String(err) };
}

/**
 * Interprets one workflow graph. Deterministic: the graph comes from the first activity's
 * recorded result, nodes start in the order GraphState yields them, and every side effect
 * (each node) is an activity, a durable timer or a child workflow.
 */
export async function runGraph(input: RunGraphInput): Promise<RunGraphResult> {
  // Bookkeeping runs as local activities: no task round trip through the server for each.
  const began = await localControl.beginExecution(input, workflowInfo().runId);
  const { executionId, graph } = began;
  const pure = new Set(began.pureTypes);
  const nodes = new Map(graph.nodes.map((n) => [n.id, n]));
  const state = new GraphState(graph);
  const outputs: Record<string, unknown> = {};
  let lastOutput: unknown;
  let failure: RunGraphResult['error'];
  let partial = false;
  let cancelled: unknown;

  for (const [id, output] of Object.entries(input.seed ?? {})) {
    outputs[id] = output;
    const branch = (output as { branch?: unknown } | null)?.branch ?? (output as { result?: unknown } | null)?.result;
    state.seed(id, branch === undefined ? undefined : String(branch));
  }

  const runNode = async (node: GraphNode): Promise<RunNodeOutput> => {
    if (node.type === 'delay') {
      const startedAt = Date.now();
      await localControl.recordNodeStart(node, workflowInfo().runId);
      await sleep(Number(node.config.duration_ms));
      const output = { waited_ms: Number(node.config.duration_ms) };
      await localControl.recordNodeEnd(node, workflowInfo().runId, { status: 'success', output, startedAt });
      return { output };
    }
    if (node.type === 'run_workflow') {
      const startedAt = Date.now();
      const child = await control.prepareChildRun(node, { trigger: input.payload, nodes: contextFor(node, outputs) }, workflowInfo().runId);
      try {
        const result = await executeChild(RUN_GRAPH_WORKFLOW, {
          workflowId: `${workflowInfo().workflowId}-${node.id}`,
          args: [{ workflowId: child.workflowId, payload: child.payload, trigger: 'child' } satisfies RunGraphInput],
        });
        const output = { execution_id: result.executionId, status: result.status, output: result.lastOutput ?? null };
        if (result.status === 'failed') throw ApplicationFailure.nonRetryable(`Child workflow failed: ${result.error?.message ?? ''}`, 'node_failed');
        await localControl.recordNodeEnd(node, workflowInfo().runId, { status: 'success', output, startedAt });
        return { output };
      } catch (err) {
        if (!isCancellation(err)) await localControl.recordNodeEnd(node, workflowInfo().runId, { status: 'failed', error: nodeErrorOf(err), startedAt });
        throw err;
      }
    }
    const { activityId: _id, heartbeatTimeout: _hb, ...localOptions } = activityOptions(node);
    const activities =
      began.localPureNodes && pure.has(node.type) ? proxyLocalActivities<NodeActivities>(localOptions) : proxyActivities<NodeActivities>(activityOptions(node));
    return activities.runNode({ node, context: { trigger: input.payload, nodes: contextFor(node, outputs) } });
  };

  const runOne = async (id: string) => {
    const node = nodes.get(id)!;
    // A marker in history: replay-from-node resets to the workflow task that started this node.
    upsertMemo({ node: id });
    try {
      const result = await runNode(node);
      outputs[id] = result.output;
      lastOutput = result.output;
      state.complete(id, result.branch);
    } catch (err) {
      if (isCancellation(err)) {
        cancelled ??= err;
        return;
      }
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
      for (const id of state.ready()) running.set(id, runOne(id).finally(() => running.delete(id)));
    }
    if (running.size === 0) break;
    await Promise.race(running.values());
  }

  const status: RunGraphResult['status'] = cancelled ? 'cancelled' : failure ? 'failed' : partial ? 'partial' : 'success';
  const notRun = [...state.skippedNodes(), ...(failure || cancelled ? state.unfinished() : [])].map((id) => ({ id, type: nodes.get(id)!.type }));
  await CancellationScope.nonCancellable(() =>
    localControl.finishExecution(workflowInfo().runId, { status, skipped: notRun, ...(failure ? { error: failure } : {}), lastOutput }),
  );
  if (cancelled) throw cancelled;
  return { executionId, status, ...(lastOutput !== undefined ? { lastOutput } : {}), ...(failure ? { error: failure } : {}) };
}
