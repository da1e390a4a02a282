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
import { CountingGate, Wakeup, bodySink, bodyWeight, itemBoundsOf, LoopProgress, nearHistoryLimit, type PendingItem } from './for-each-state.js';
import { GraphState } from './graph.js';
import { nodeErrorOf } from './node-errors.js';
import { runAll, runOne } from './run-graph.workflow.js';
import type { Scope } from './run-scope.js';
import { RunValues } from './run-values.js';
import { Slots } from './slots.js';

const localControl = proxyLocalActivities<ControlActivities>({
  startToCloseTimeout: '1m',
  retry: { initialInterval: '500ms', maximumAttempts: 20 },
});
// A batch of pure items may hold a few dozen items of expressions, each bounded by its own deadline.
const pureControl = proxyLocalActivities<ControlActivities>({
  startToCloseTimeout: '10m',
  retry: { initialInterval: '500ms', maximumAttempts: 5 },
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
  /** Every body node is pure and runs locally: items run in batches of `batch`, one local activity each (runPureItems). */
  pure: boolean;
  batch: number;
  /** Items in flight (in batches when pure). */
  inFlight: number;
  pageSize: number;
  workflowId: string;
  progress: LoopProgress<ItemResult>;
  /** The indexes of the items (or the first items of the batches) in flight. */
  running: Set<number>;
  /** A page load, a batch record in flight; no item starts any more (the history is near its budget). */
  loading: boolean;
  recording: boolean;
  resting: boolean;
  /** Each item, page and batch that ends wakes the loop (one promise, not a race over every item in flight). */
  wake: Wakeup;
  cancelled?: unknown;
  /** An item's run failed in workflow code itself (not the item): the loop fails with it. */
  crashed?: unknown;
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
    ...pureBatches(config, graph.nodes, input),
    inFlight: 0,
    pageSize: Math.min(200, Math.max(concurrency, 10)),
    workflowId: workflowInfo().workflowId,
    progress: new LoopProgress<ItemResult>(input.after ?? -1, input.outcome),
    running: new Set(),
    loading: false,
    recording: false,
    resting: false,
    wake: new Wakeup(),
  };
}

/**
 * A body of pure nodes only runs its items in batches (half the concurrency each, so two batches
 * keep the expression threads busy, 50 at most): a batch weighs one step in history. Any other
 * body runs item by item, each node its own step.
 */
function pureBatches(config: ForEachConfig, nodes: GraphNode[], input: ForEachInput): { pure: boolean; batch: number; weight: number } {
  const pure = config.body !== undefined && nodes.every((n) => input.runModes[n.type] === 'local');
  const concurrency = config.concurrency ?? 10;
  return pure ? { pure, batch: Math.min(50, Math.max(1, Math.ceil(concurrency / 2))), weight: 1 } : { pure, batch: 1, weight: bodyWeight(config.body) };
}

/** Runs a batch of pure items in one local activity, which records their results itself. */
async function runBatch(items: Items, batch: PendingItem[]): Promise<void> {
  const { input, progress } = items;
  try {
    const outcome = await items.gate.local(() =>
      pureControl.runPureItems({
        loop: input.loop,
        node: input.node,
        items: batch.map((p) => (p.inline ? { index: p.index, item: p.item } : { index: p.index })),
        context: input.context,
      }),
    );
    if (outcome.failure) progress.failed(outcome.failure, items.keepGoing);
    if (outcome.partial) progress.outcome.partial = true;
  } catch (err) {
    if (isCancellation(err)) items.cancelled ??= err;
    else items.crashed ??= err;
  } finally {
    items.running.delete(batch[0]!.index);
    items.inFlight -= batch.length;
    items.wake.notify();
  }
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

/**
 * Starts one item's inline body (its result, once it ran: bodyResult). A body of one node runs it
 * without the scheduler around it: the workflow sandbox traces every promise workflow code makes
 * (a stack trace each), and a loop of calls makes many.
 */
function runBody(items: Items, pending: PendingItem): { ran: Promise<void>; scope: Scope } {
  const scope = itemScope(items, pending);
  const only = items.began.graph.nodes.length === 1 ? items.began.graph.nodes[0]! : undefined;
  return { ran: only ? runOne(scope, only.id) : runAll(scope), scope };
}

/** An item's result once its body ran. */
function bodyResult(items: Items, scope: Scope, pending: PendingItem, startedAt: number): ItemResult {
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

/**
 * Runs one item and keeps its result to record; a cancel of the run stops it. Continuations rather
 * than an async function: one promise less for each item (see runBody).
 */
function runItem(items: Items, pending: PendingItem): void {
  const startedAt = Date.now();
  const ended = (result: ItemResult | undefined, err?: unknown) => {
    if (result) {
      if (result.status === 'failed') items.progress.failed({ index: pending.index, ...result.error! }, items.keepGoing);
      items.progress.results.push(result);
    } else if (isCancellation(err)) items.cancelled ??= err;
    else items.crashed ??= err;
    items.running.delete(pending.index);
    items.inFlight--;
    items.wake.notify();
  };
  const fail = (err: unknown) => ended(undefined, err);
  if (items.input.workflowId !== undefined) {
    void runChildItem(items, pending, startedAt).then(ended, fail);
    return;
  }
  const { ran, scope } = runBody(items, pending);
  void ran.then(() => {
    let result: ItemResult;
    try {
      result = bodyResult(items, scope, pending, startedAt);
    } catch (err) {
      return fail(err);
    }
    ended(result);
  }, fail);
}

/**
 * Runs a loop's pending items after `input.after`, `concurrency` at a time, until none is left,
 * an item failed and the loop stops at failures, the run was cancelled (its items left are
 * recorded cancelled), or the history is near its limit (then it continues as new).
 */
export async function forEachItems(input: ForEachInput): Promise<LoopOutcome> {
  const items = itemsOf(input);
  const { progress, gate } = items;
  for (;;) {
    if (items.crashed !== undefined) throw items.crashed;
    if (!stopped(items) && !items.resting) items.resting = nearLimit(items);
    if (!stopped(items) && !items.resting) startItems(items);
    if (!items.recording && progress.results.length) void recordBatch(items, progress.take());
    if (!items.running.size && !items.loading && !items.recording) break;
    await items.wake.wait();
  }
  if (items.cancelled !== undefined) {
    await CancellationScope.nonCancellable(() => gate.local(() => localControl.closeItems(input.loop, 'cancelled')));
    throw items.cancelled;
  }
  if (!stopped(items) && !progress.done) {
    return continueAsNew<typeof forEachItems>({ ...input, after: progress.startedUpTo, outcome: progress.outcome });
  }
  return progress.outcome;
}

/** No item starts any more: the run was cancelled, or an item failed and the loop stops at failures. */
const stopped = (items: Items) => items.cancelled !== undefined || (!items.keepGoing && items.progress.outcome.failure !== undefined);

/** The run's history is near its budget: it starts nothing more and continues as new once the items in flight end. */
const nearLimit = (items: Items) =>
  nearHistoryLimit(workflowInfo(), items.running.size, items.weight, items.progress.startedHere, items.input.historyEvents, items.gate.events);

/** Starts items (or batches of pure items) while the concurrency allows and items are loaded; loads the next page when none are. */
function startItems(items: Items): void {
  const { progress, concurrency } = items;
  while (items.inFlight < concurrency && progress.buffered > 0) {
    const batch = [progress.next()];
    while (batch.length < items.batch && items.inFlight + batch.length < concurrency && progress.buffered > 0) batch.push(progress.next());
    items.running.add(batch[0]!.index);
    items.inFlight += batch.length;
    if (items.pure) void runBatch(items, batch);
    else runItem(items, batch[0]!);
    if (nearLimit(items)) break;
  }
  if (items.inFlight < concurrency && progress.buffered === 0 && !progress.exhausted && !items.loading) void loadPage(items);
}

/** Loads the next page of pending items. */
async function loadPage(items: Items): Promise<void> {
  const { input, progress } = items;
  items.loading = true;
  try {
    const page = await items.gate.local(() => localControl.loadItems(input.loop, progress.after, items.pageSize, items.began.bounds!.inlineBytes));
    progress.loaded(page.items, items.pageSize);
  } catch (err) {
    if (isCancellation(err)) items.cancelled ??= err;
    else items.crashed ??= err;
  } finally {
    items.loading = false;
    items.wake.notify();
  }
}

/** Records a batch of results; even while the run is being cancelled: those items did end. */
async function recordBatch(items: Items, batch: ItemResult[]): Promise<void> {
  items.recording = true;
  try {
    await CancellationScope.nonCancellable(() => items.gate.local(() => localControl.recordItems(items.input.loop, batch)));
  } catch (err) {
    items.crashed ??= err;
  } finally {
    items.recording = false;
    items.wake.notify();
  }
}
