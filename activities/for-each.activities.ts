import { ApplicationFailure } from '@temporalio/activity';
import {
  forEachWorkflowId,
  itemRunWorkflowId,
  type BegunLoop,
  type ForEachConfig,
  type GraphEdge,
  itemChildWorkflowId,
  type GraphNode,
  type ItemKey,
  type ItemResult,
  type LoopKey,
  type LoopOutcome,
  type NodeContext,
  type NodeError,
  type OutputRef,
  type PureItems,
  type PureOutcome,
  type RunNodeOutput,
} from '../workflows/defs.js';
import { bodySink } from '../workflows/for-each-state.js';
import { GraphState } from '../workflows/graph.js';
import { contextFor } from '../workflows/references.js';
import { CODE } from '../workflows/error-codes.js';
import { ItemBudgetExceeded, itemId, type ItemCounts, type LoadedItem } from '../src/executions/execution-items.store.js';
import type { ExecutionRef } from '../src/executions/execution.mirror.js';
import {
  checkChildTarget,
  claimChildRuns,
  countAttempt,
  currentExecution,
  executeNode,
  executionById,
  payloadKey,
  runOf,
  writeNode,
  type GraphWorker,
} from './graph.activities.js';
import { boundFailure, checkOutputSize, errorOf, jsonBytes, toFailure } from './node-outcome.js';
import { patiently } from './patiently.js';
import { contextValues, evaluateForNode } from './run-values.js';

/** What a loop's first step is given: the node, its context, and where the loop is. */
export interface LoopStart {
  node: GraphNode;
  context: NodeContext;
  /** The graph run's Temporal run id (a loop of the graph: its execution is found by it). */
  runId: string;
  /** A loop inside a body: the outer item it runs in. */
  within?: ItemKey;
  /** A replay of failed items: the execution whose successful items are reused. */
  reuseFrom?: number;
}

/** What a loop's last step is given: the loop, how its items went, and how large an output may travel inline. */
export interface LoopEnd {
  loop: LoopKey;
  node: GraphNode;
  outcome: LoopOutcome;
  /** Workflow time the loop started. */
  startedAt: number;
  inlineBytes?: number;
  within?: ItemKey;
}

/** The activities of for_each loops, over the graph activities' worker (its ports and caches). */
export function loopActivities(g: GraphWorker) {
  return {
    beginLoop: (start: LoopStart) => beginLoop(g, start),
    finishLoop: (end: LoopEnd) => finishLoop(g, end),
    loadItems: (loop: LoopKey, after: number, limit: number, inlineBytes: number) => loadItems(g, loop, after, limit, inlineBytes),
    recordItems: (loop: LoopKey, results: ItemResult[]) => patiently(() => g.ports.executionItems.record(loop, results)),
    closeItems: (loop: LoopKey, left: 'skipped' | 'cancelled') => patiently(() => g.ports.executionItems.close(loop, left)).then(() => undefined),
    prepareItemChildRun: (node: GraphNode, context: NodeContext, item: ItemKey, inlineBytes: number) =>
      prepareItemChildRun(g, node, context, item, inlineBytes),
    keepItemOutput: (item: ItemKey, nodeId: string, output: { output: unknown }, outputRef?: OutputRef) => keepItemOutput(g, item, nodeId, output, outputRef),
    runPureItems: (batch: PureItems) => runPureItems(g, batch),
  };
}

/** What a value that is not a list is, in a sentence. */
function kindOf(value: unknown): string {
  if (value === null || value === undefined) return 'nothing (null)';
  if (typeof value === 'object') return 'an object';
  return `a ${typeof value} (${JSON.stringify(value).slice(0, 80)})`;
}

/** The execution a loop belongs to: the graph run's, or the outer item's for a loop in a body. */
const loopExecution = (g: GraphWorker, start: Pick<LoopStart, 'runId' | 'within'>): Promise<ExecutionRef> =>
  start.within ? executionById(g, start.within.execution) : currentExecution(g, start.runId);

/**
 * A loop's first step: evaluates `items`, refuses what is not a list (items_not_array) or is too
 * long (too_many_items), checks a `workflow_id` body's target and claims its child runs, and lists
 * the items (reusing a replayed run's successful ones). A loop of the graph shows as running in
 * the timeline from here; a loop in a body has no entry (its outer item is the record).
 */
export async function beginLoop(g: GraphWorker, start: LoopStart): Promise<BegunLoop> {
  const { node, context, within, reuseFrom } = start;
  const ref = await loopExecution(g, start);
  const loop: LoopKey = { execution: ref.id, node: node.id, scope: within ? [...within.scope, within.index] : [] };
  const startedAt = new Date();
  if (!within) await writeNode(g, ref.id, node, { status: 'running', started_at: startedAt, attempts: 1, input: node.config });
  try {
    const config = node.config as unknown as ForEachConfig;
    const { config: limits, executionItems } = g.ports;
    const items = await evaluateForNode(g.ports, ref, context, config.items);
    if (!Array.isArray(items)) throw ApplicationFailure.nonRetryable(`items evaluated to ${kindOf(items)}, not an array`, CODE.items_not_array);
    if (items.length > limits.SVC_FOR_EACH_MAX_ITEMS) {
      throw ApplicationFailure.nonRetryable(
        `items holds ${items.length} items, more than ${limits.SVC_FOR_EACH_MAX_ITEMS} (SVC_FOR_EACH_MAX_ITEMS)`,
        CODE.too_many_items,
      );
    }
    if (config.workflow_id !== undefined) await checkChildTarget(g, ref, config.workflow_id, config.workflow_id);
    const listed = await patiently(() => executionItems.list(loop, items, limits.SVC_FOR_EACH_MAX_RUN_ITEMS, reuseFrom)).catch((err: unknown) => {
      if (!(err instanceof ItemBudgetExceeded)) throw err;
      throw ApplicationFailure.nonRetryable(
        `The loops of this run would list more than ${err.budget} items in all (SVC_FOR_EACH_MAX_RUN_ITEMS); this list holds ${err.listed}`,
        CODE.too_many_items,
      );
    });
    if (config.workflow_id !== undefined && listed.pending > 0) {
      // Each item is a child run of the tree: all of them are counted now, so a list too long for
      // the budget fails before any item runs.
      const itemsWorkflowId = forEachWorkflowId(runOf().workflowId, node.id, within?.index);
      const pending = await patiently(() => executionItems.pendingIndexes(loop));
      await claimChildRuns(
        g,
        ref,
        pending.map((index) => itemRunWorkflowId(itemsWorkflowId, index)),
      );
    }
    return {
      loop,
      total: listed.total,
      pending: listed.pending,
      historyEvents: limits.SVC_FOR_EACH_HISTORY_EVENTS,
      ...(config.workflow_id !== undefined ? { workflowId: config.workflow_id } : {}),
    };
  } catch (err) {
    const failure = toFailure(err);
    if (!within) await writeNode(g, ref.id, node, { status: 'failed', started_at: startedAt, finished_at: new Date(), error: errorOf(failure) });
    throw failure;
  }
}

/** The message of a loop that stopped at a failed item. */
function stoppedAt(failure: NonNullable<LoopOutcome['failure']>, counts: ItemCounts): string {
  const at = (failure as NodeError & { node_id?: string }).node_id;
  return (
    `Item ${failure.index} failed${at ? ` at node ${at}` : ''} (${failure.code}: ${failure.message}); ` +
    `${counts.succeeded} of ${counts.total} items succeeded, ${counts.failed} failed, ${counts.skipped} did not run`
  );
}

/**
 * A loop's last step: items that never ran are marked skipped, and the node's outcome is
 * recorded (in the timeline for a loop of the graph): `{total, succeeded, failed, results}`, with
 * `results` only when the whole output fits SVC_NODE_OUTPUT_LIMIT, or `item_failed`. The output
 * goes back inline, or by reference when larger than `inlineBytes` (kept with the outer item for
 * a loop in a body).
 */
export async function finishLoop(g: GraphWorker, end: LoopEnd): Promise<{ result: RunNodeOutput; partial: boolean; error?: NodeError }> {
  const { loop, node, outcome, within } = end;
  const { executionItems, config } = g.ports;
  const counts = await patiently(() => executionItems.close(loop, 'skipped'));
  const finished = new Date();
  const entry = { started_at: new Date(end.startedAt), finished_at: finished, duration_ms: Math.max(0, finished.getTime() - end.startedAt), attempts: 1 };
  if (outcome.failure) {
    const { failure } = outcome;
    const error = failure.index >= 0 ? { code: CODE.item_failed, message: stoppedAt(failure, counts) } : { code: failure.code, message: failure.message };
    if (!within) await writeNode(g, loop.execution, node, { ...entry, status: 'failed', error });
    return { result: {}, partial: outcome.partial, error };
  }
  const summary = { total: counts.total, succeeded: counts.succeeded, failed: counts.failed };
  const room = config.SVC_NODE_OUTPUT_LIMIT - jsonBytes({ ...summary, results: [] });
  const results = await patiently(() => executionItems.results(loop, counts.total, room));
  const output = results ? { ...summary, results } : summary;
  const bytes = checkOutputSize(output, config.SVC_NODE_OUTPUT_LIMIT);
  const partial = outcome.partial || counts.failed > 0;
  if (!within) await writeNode(g, loop.execution, node, { ...entry, status: 'success', output });
  if (end.inlineBytes === undefined || bytes <= end.inlineBytes) return { result: { output, bytes }, partial };
  if (!within) return { result: { ref: { node: node.id, bytes } }, partial };
  await patiently(() => executionItems.keep(within, node.id, output));
  return { result: { ref: { node: node.id, bytes, item: within } }, partial };
}

/** The next page of a loop's items to run (each inline when small enough). */
function loadItems(g: GraphWorker, loop: LoopKey, after: number, limit: number, inlineBytes: number): Promise<{ items: LoadedItem[] }> {
  return patiently(() => g.ports.executionItems.page(loop, after, limit, inlineBytes));
}

/**
 * A run_workflow node of a for_each body: its payload evaluated, its target checked and its child
 * run counted, as for any run_workflow node; a payload too large for history is kept with the
 * item for the child's first step to read. No timeline entry: the item is the record.
 */
export async function prepareItemChildRun(
  g: GraphWorker,
  node: GraphNode,
  context: NodeContext,
  item: ItemKey,
  inlineBytes: number,
): Promise<{ workflowId: number; payload?: unknown; parentExecutionId: number; payloadRef?: { execution: number; node: string; item: ItemKey } }> {
  try {
    const ref = await executionById(g, item.execution);
    const config = (await evaluateForNode(g.ports, ref, context, node.config)) as {
      workflow_id: number;
      payload?: unknown;
    };
    const targetId = Number(config.workflow_id);
    await checkChildTarget(g, ref, config.workflow_id, targetId);
    await claimChildRuns(g, ref, [itemChildWorkflowId(runOf().workflowId, item.index, node.id)]);
    const payload = config.payload ?? null;
    checkOutputSize(payload, g.ports.config.SVC_NODE_OUTPUT_LIMIT);
    if (jsonBytes(payload) <= inlineBytes) return { workflowId: targetId, payload, parentExecutionId: ref.id };
    await patiently(() => g.ports.executionItems.keep(item, payloadKey(node.id), payload));
    return { workflowId: targetId, parentExecutionId: ref.id, payloadRef: { execution: ref.id, node: node.id, item } };
  } catch (err) {
    throw toFailure(err);
  }
}

/**
 * A run_workflow node's output in a for_each body, too large for history (or holding a child
 * output that was): kept with the item, answered by reference.
 */
export async function keepItemOutput(
  g: GraphWorker,
  item: ItemKey,
  nodeId: string,
  output: { output: unknown },
  outputRef?: OutputRef,
): Promise<RunNodeOutput> {
  let value = output;
  if (outputRef) {
    const execution = outputRef.execution ?? item.execution;
    const read = await patiently(() => g.ports.executionMirror.readValues(item.execution, [{ execution, node: outputRef.node }], false));
    value = { ...output, output: read.outputs.get(`${execution}:${outputRef.node}`) ?? null };
  }
  const bytes = jsonBytes(value);
  await patiently(() => g.ports.executionItems.keep(item, nodeId, value));
  return { ref: { node: nodeId, bytes, item } };
}

/**
 * A batch of items of a body of pure nodes only (transform, condition, switch, fail run as local
 * activities): each item's body runs here, the items of the batch together, and their results are
 * recorded at once. One local activity and one batch write for many items instead of a local
 * activity per node per item: pure nodes need no durable step of their own (they read nothing but
 * their context and do nothing outside), and a batch that did not finish runs again whole, to the
 * same results. Their nodes are not retried (a pure node fails the same way each time); on_error
 * "continue" and "branch" hold as in any body.
 */
export async function runPureItems(g: GraphWorker, batch: PureItems): Promise<PureOutcome> {
  const { loop, node, items, context } = batch;
  const ref = await executionById(g, loop.execution);
  const outer = await contextValues(g.ports.executionMirror, ref.id, context, g.ports.executionItems);
  const byRef = items.filter((i) => !('item' in i)).map((i) => ({ ...loop, index: i.index }));
  const read = byRef.length ? await patiently(() => g.ports.executionItems.read(byRef, [])) : undefined;
  const config = node.config as unknown as ForEachConfig;
  const body = { nodes: config.body!.nodes.map((n) => (n.config ? n : { ...n, config: {} })), edges: config.body!.edges ?? [] };
  const sink = bodySink({ ...config.body!, edges: body.edges });
  const results = await Promise.all(
    items.map((i) => {
      const value = 'item' in i ? i.item : read?.inputs.get(itemId({ ...loop, index: i.index }));
      return runPureItem(g, ref, body, sink, outer, i.index, value ?? null);
    }),
  );
  await patiently(() =>
    g.ports.executionItems.record(
      loop,
      results.map((r) => r.result),
    ),
  );
  const failed = results.filter((r) => r.result.status === 'failed');
  const first = failed[0]?.result;
  return {
    failed: failed.length,
    partial: results.some((r) => r.partial),
    ...(first ? { failure: { index: first.index, ...first.error! } } : {}),
  };
}

/** One item's pure body, its nodes one after the other as they become ready. */
async function runPureItem(
  g: GraphWorker,
  ref: ExecutionRef,
  body: { nodes: GraphNode[]; edges: GraphEdge[] },
  sink: string,
  outer: { trigger: unknown; nodes: Record<string, unknown> },
  index: number,
  item: unknown,
): Promise<{ result: ItemResult; partial: boolean }> {
  const startedAt = Date.now();
  const state = new GraphState(body);
  const nodes = new Map(body.nodes.map((n) => [n.id, n]));
  const outputs: Record<string, unknown> = { ...outer.nodes };
  let partial = false;
  const limit = g.ports.config.SVC_NODE_OUTPUT_LIMIT;
  for (let ready = state.ready(); ready.length; ready = state.ready()) {
    for (const id of ready) {
      const node = nodes.get(id)!;
      const started = Date.now();
      try {
        const result = await executeNode(g, { ref, node, started, attempts: 1 }, { trigger: outer.trigger, nodes: contextFor(node, outputs), item, index });
        countAttempt(g.ports.metrics, node.type, 'success', undefined, Date.now() - started);
        outputs[id] = result.output ?? null;
        state.complete(id, result.branch);
      } catch (err) {
        const error = errorOf(boundFailure(toFailure(err), limit));
        countAttempt(g.ports.metrics, node.type, 'failed', error.code, Date.now() - started);
        if (node.on_error !== 'continue' && node.on_error !== 'branch') {
          return { result: { index, status: 'failed', error: { ...error, node_id: id }, attempts: 1, startedAt, durationMs: Date.now() - startedAt }, partial };
        }
        outputs[id] = { error };
        if (node.on_error === 'continue') {
          partial = true;
          state.complete(id);
        } else state.fail(id);
      }
    }
  }
  const output = sink in outputs && nodes.has(sink) && state.skippedNodes().indexOf(sink) < 0 ? outputs[sink] : undefined;
  return {
    result: { index, status: 'success', ...(output !== undefined ? { output } : {}), attempts: 1, startedAt, durationMs: Date.now() - startedAt },
    partial,
  };
}
