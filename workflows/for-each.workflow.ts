// A loop's items workflow (FOR_EACH_WORKFLOW): a child of the run whose for_each node listed the
// items, it runs them `concurrency` at a time, in index order, each through the same scheduler as
// a graph (its body), loading pending items a page at a time and recording results in batches.
// Before its history nears Temporal's limits it stops starting items, lets the ones in flight end,
// records them and continues as new from the last index it started; a worker that dies meanwhile
// costs nothing, since Temporal replays the run from its history (items recorded, results held).
import { CancellationScope, continueAsNew, executeChild, isCancellation, proxyLocalActivities, workflowInfo } from '@temporalio/workflow';
import type { ControlActivities } from '../activities/index.js';
import {
  RUN_GRAPH_WORKFLOW,
  itemRunWorkflowId,
  type BeganExecution,
  type ForEachConfig,
  type ForEachInput,
  type GraphNode,
  type ItemKey,
  type ItemResult,
  type LoopOutcome,
  type RunGraphInput,
  type RunGraphResult,
} from './defs.js';
import { CountingGate, bodySink, bodyWeight, itemBoundsOf, LoopProgress, nearHistoryLimit, type PendingItem } from './for-each-state.js';
import { GraphState } from './graph.js';
import { nodeErrorOf, runAll } from './run-graph.workflow.js';
import type { Scope } from './run-scope.js';
import { RunValues } from './run-values.js';
import { Slots } from './slots.js';

const localControl = proxyLocalActivities<ControlActivities>({
  startToCloseTimeout: '1m',
  retry: { initialInterval: '500ms', maximumAttempts: 20 },
});

/** One run of a loop's items workflow: its input, what every item shares, and its progress. */
interface Items {
  input: ForEachInput;
  config: ForEachConfig;
  concurrency: number;
  keepGoing: boolean;
  /** What every item's body scope is given: the body as a graph, the run modes, the items' share of the bounds. */
  began: BeganExecution;
  bodyNodes: Map<string, GraphNode>;
  sink?: string;
  /** The trigger payload and outer nodes the body sees, forked for each item. */
  outer: RunValues;
  gate: CountingGate;
  slots: Slots;
  weight: number;
  pageSize: number;
  workflowId: string;
  progress: LoopProgress<ItemResult>;
  cancelled?: unknown;
}

function itemsOf(input: ForEachInput): Items {
  const config = input.node.config as unknown as ForEachConfig;
  const concurrency = config.concurrency ?? 10;
  const { places, ...bounds } = itemBoundsOf(input.bounds, concurrency);
  // A body's nodes are stored as they were sent: a node without a config has an empty one.
  const graph = config.body
    ? { nodes: config.body.nodes.map((n) => (n.config ? n : { ...n, config: {} })), edges: config.body.edges ?? [] }
    : { nodes: [], edges: [] };
  const outer = new RunValues(input.context.trigger, bounds, input.context.refs?.trigger === true);
  for (const [id, output] of Object.entries(input.context.nodes)) outer.set(id, { output });
  for (const [id, ref] of Object.entries(input.context.refs?.nodes ?? {})) outer.set(id, { ref });
  return {
    input,
    config,
    concurrency,
    keepGoing: config.on_item_error === 'continue',
    began: { executionId: input.loop.execution, version: 0, graph, runModes: input.runModes, bounds },
    bodyNodes: new Map(graph.nodes.map((n) => [n.id, n])),
    ...(config.body ? { sink: bodySink({ ...config.body, edges: graph.edges }) } : {}),
    outer,
    gate: new CountingGate(),
    slots: new Slots(places),
    weight: bodyWeight(config.body),
    pageSize: Math.min(200, Math.max(concurrency, 10)),
    workflowId: workflowInfo().workflowId,
    progress: new LoopProgress<ItemResult>(input.after ?? -1, input.outcome),
  };
}

/** The scope one item's body runs in: the body's graph, the outer values, the item. */
function itemScope(items: Items, pending: PendingItem): Scope {
  const key: ItemKey = { ...items.input.loop, index: pending.index };
  return {
    began: items.began,
    lean: true,
    nodes: items.bodyNodes,
    state: new GraphState(items.began.graph),
    values: items.outer.fork(items.began.bounds!),
    gate: items.gate,
    failure: undefined,
    partial: false,
    handled: [],
    cancelled: undefined,
    startedAt: new Map(),
    interrupted: [],
    item: { key, ...(pending.inline ? { value: pending.item } : {}), inline: pending.inline, itemsWorkflowId: items.workflowId, attempts: 1 },
    slots: items.slots,
    ...(items.input.reuseFrom !== undefined ? { itemsFrom: { execution: items.input.reuseFrom } } : {}),
  };
}

/** Runs one item's inline body; its result is the output of the body's output node (null when that node was skipped). */
async function runBody(items: Items, pending: PendingItem, startedAt: number): Promise<ItemResult> {
  const scope = itemScope(items, pending);
  await runAll(scope);
  if (scope.cancelled) throw scope.cancelled;
  const base = { index: pending.index, attempts: scope.item!.attempts, startedAt, durationMs: Date.now() - startedAt };
  if (scope.failure) return { ...base, status: 'failed', error: scope.failure };
  if (scope.partial) items.progress.outcome.partial = true;
  const outcome = scope.values.outcome(items.sink!);
  if (outcome?.ref) return { ...base, status: 'success', kept: items.sink! };
  return { ...base, status: 'success', ...(outcome ? { output: outcome.output } : {}) };
}

/** Runs one item as a child run of the body workflow, with payload `{item, index}`; its result is the child's output. */
async function runChildItem(items: Items, pending: PendingItem, startedAt: number): Promise<ItemResult> {
  const { loop, workflowId } = items.input;
  const key: ItemKey = { ...loop, index: pending.index };
  const args: RunGraphInput = {
    workflowId: workflowId!,
    payload: pending.inline ? { item: pending.item, index: pending.index } : null,
    trigger: 'child',
    parentExecutionId: loop.execution,
    ...(pending.inline ? {} : { payloadItem: key }),
  };
  const workflowIdOfRun = itemRunWorkflowId(items.workflowId, pending.index);
  const base = { index: pending.index, attempts: 1, startedAt };
  try {
    const result = await items.gate.other(() => executeChild(RUN_GRAPH_WORKFLOW, { workflowId: workflowIdOfRun, args: [args] }) as Promise<RunGraphResult>);
    const durationMs = Date.now() - startedAt;
    if (result.status === 'failed' || result.status === 'cancelled') {
      const error = result.error ?? { code: 'cancelled', message: 'The child run was cancelled' };
      return { ...base, durationMs, status: 'failed', error: { code: error.code, message: `Child execution ${result.executionId}: ${error.message}` } };
    }
    if (result.status === 'partial') items.progress.outcome.partial = true;
    return { ...base, durationMs, status: 'success', child: result.executionId };
  } catch (err) {
    if (isCancellation(err)) throw err;
    return { ...base, durationMs: Date.now() - startedAt, status: 'failed', error: nodeErrorOf(err) };
  }
}

/** Runs one item and keeps its result to record; a cancel of the run stops it. */
async function runItem(items: Items, pending: PendingItem): Promise<void> {
  const startedAt = Date.now();
  let result: ItemResult;
  try {
    result = items.input.workflowId !== undefined ? await runChildItem(items, pending, startedAt) : await runBody(items, pending, startedAt);
  } catch (err) {
    if (!isCancellation(err)) throw err;
    items.cancelled ??= err;
    return;
  }
  if (result.status === 'failed') items.progress.failed({ index: pending.index, ...result.error! }, items.keepGoing);
  items.progress.results.push(result);
}

/**
 * Runs a loop's pending items after `input.after`, `concurrency` at a time, until none is left,
 * an item failed and the loop stops at failures, the run was cancelled (its items left are
 * recorded cancelled), or the history is near its limit (then it continues as new).
 */
export async function forEachItems(input: ForEachInput): Promise<LoopOutcome> {
  const items = itemsOf(input);
  const { progress, gate, concurrency } = items;
  const running = new Map<number, Promise<void>>();
  let loading: Promise<void> | undefined;
  let recording: Promise<void> | undefined;
  let resting = false;
  const stopped = () => items.cancelled !== undefined || (!items.keepGoing && progress.outcome.failure !== undefined);
  const load = async () => {
    try {
      const page = await gate.local(() => localControl.loadItems(input.loop, progress.after, items.pageSize, items.began.bounds!.inlineBytes));
      progress.loaded(page.items, items.pageSize);
    } catch (err) {
      if (!isCancellation(err)) throw err;
      items.cancelled ??= err;
    }
  };
  // A batch is recorded even while the run is being cancelled: those items did end.
  const record = (batch: ItemResult[]) => CancellationScope.nonCancellable(() => gate.local(() => localControl.recordItems(input.loop, batch)));
  for (;;) {
    if (!stopped() && !resting)
      resting = nearHistoryLimit(workflowInfo(), running.size, items.weight, progress.startedHere, input.historyEvents, items.gate.events);
    if (!stopped() && !resting) {
      while (running.size < concurrency && progress.buffered > 0) {
        const pending = progress.next();
        running.set(
          pending.index,
          runItem(items, pending).finally(() => running.delete(pending.index)),
        );
        if (nearHistoryLimit(workflowInfo(), running.size, items.weight, progress.startedHere, input.historyEvents, items.gate.events)) break;
      }
      if (running.size < concurrency && progress.buffered === 0 && !progress.exhausted && !loading) loading = load().finally(() => (loading = undefined));
    }
    if (!recording && progress.results.length) recording = record(progress.take()).finally(() => (recording = undefined));
    const waits = [...running.values(), ...(loading ? [loading] : []), ...(recording ? [recording] : [])];
    if (!waits.length) break;
    await Promise.race(waits);
  }
  if (items.cancelled !== undefined) {
    await CancellationScope.nonCancellable(() => gate.local(() => localControl.closeItems(input.loop, 'cancelled')));
    throw items.cancelled;
  }
  if (!stopped() && !progress.done) {
    return continueAsNew<typeof forEachItems>({ ...input, after: progress.startedUpTo, outcome: progress.outcome });
  }
  return progress.outcome;
}
