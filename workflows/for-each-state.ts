// The pure steps of a loop's items workflow (for-each.workflow.ts): how its items share the run's
// bounds, when its history is near Temporal's limits, which body node gives an item's result,
// and what it has loaded, started and still has to record. No Temporal API, so they are unit
// tested on their own (for-each-state.test.ts).
import { FOR_EACH_HISTORY_EVENTS, type GraphEdge, type GraphNode, type ItemFailure, type LoopOutcome, type RunBounds } from './defs.js';
import { LocalGate } from './local-gate.js';

/**
 * What each item's body gets of the run's bounds. Up to max(concurrency, maxRunning) nodes of the
 * loop are in flight at once (its places), so each gets its share of what maxRunning nodes of a
 * graph may carry in one workflow task: the task stays as bounded as a graph's.
 */
export function itemBoundsOf(bounds: RunBounds, concurrency: number): RunBounds & { places: number } {
  const places = Math.max(concurrency, bounds.maxRunning);
  const share = (bytes: number) => Math.max(1024, Math.floor((bytes * bounds.maxRunning) / places));
  return { inlineBytes: share(bounds.inlineBytes), contextBytes: share(bounds.contextBytes), maxRunning: bounds.maxRunning, places };
}

/** History events one body node may add while it runs (an activity's three, a workflow task's three). */
const EVENTS_PER_NODE = 6;
/** Events of an item beside its nodes (its share of a batch record and of the tasks that start it). */
const EVENTS_PER_ITEM = 4;
/** Events kept for the run's own steps (a page load, the last batch, continue-as-new). */
const EVENTS_KEPT = 100;

/**
 * The run's gate, counting the history events what it runs will add: a local activity its
 * marker, anything else (an activity, a child, a timer) its own events and a workflow task's.
 * Temporal's history length only moves between workflow tasks, and one task of local activities
 * may run for seconds and hundreds of items: this count moves with each of them.
 */
export class CountingGate extends LocalGate {
  events = 0;

  override local<T>(start: () => Promise<T>): Promise<T> {
    this.events += 1;
    return super.local(start);
  }

  override other<T>(start: () => Promise<T>): Promise<T> {
    this.events += EVENTS_PER_NODE;
    return super.other(start);
  }
}

/**
 * How many node-sized steps one item of this body may take: a loop inside it three (its list,
 * its items workflow, its outcome), a child run two, any other node one.
 */
export function bodyWeight(body: { nodes: Pick<GraphNode, 'type'>[] } | undefined): number {
  if (!body) return 2; // a workflow_id body: one child run per item
  return body.nodes.reduce((sum, n) => sum + (n.type === 'for_each' ? 3 : n.type === 'run_workflow' ? 2 : 1), 0);
}

/**
 * Whether the items workflow should start no more items and continue as new once the ones in
 * flight end: Temporal suggests it, or the history could pass FOR_EACH_HISTORY_EVENTS while the
 * items in flight (and the one about to start) finish (`budget`: the loop's own, when it has one).
 * A run that has started nothing yet always
 * starts one item, so a heavy body still moves on.
 */
export function nearHistoryLimit(
  info: { historyLength: number; continueAsNewSuggested: boolean },
  inFlight: number,
  weight: number,
  startedHere: number,
  budget = FOR_EACH_HISTORY_EVENTS,
  /** The events the run's own commands add (CountingGate), which Temporal's length shows only after the task. */
  counted = 0,
): boolean {
  if (startedHere === 0 && inFlight === 0) return false;
  if (info.continueAsNewSuggested) return true;
  const draining = (inFlight + 1) * (weight * EVENTS_PER_NODE + EVENTS_PER_ITEM) + EVENTS_KEPT;
  return Math.max(info.historyLength, counted) + draining >= budget;
}

/** The body node whose output is an item's result: `output_node`, or the body's one sink. */
export function bodySink(body: { nodes: Pick<GraphNode, 'id'>[]; edges: Pick<GraphEdge, 'from'>[]; output_node?: string }): string {
  if (body.output_node) return body.output_node;
  const sources = new Set(body.edges.map((e) => e.from));
  const sinks = body.nodes.filter((n) => !sources.has(n.id));
  // The definition was refused at save unless there is exactly one.
  return sinks[0]!.id;
}

/**
 * Wakes a loop that waits for any of many things to end (items, a page load, a batch record) with
 * one promise per wait, not a race over all of them: the workflow sandbox traces every promise
 * made in workflow code, and a race over the items in flight made dozens for each item.
 */
export class Wakeup {
  private wake: (() => void) | undefined;
  private early = false;

  /** Resolves at the next notify(), or at once when one came since the last wait. */
  wait(): Promise<void> {
    if (this.early) {
      this.early = false;
      return Promise.resolve();
    }
    return new Promise((resolve) => (this.wake = resolve));
  }

  notify(): void {
    const wake = this.wake;
    this.wake = undefined;
    if (wake) wake();
    else this.early = true;
  }
}

/** An item the items workflow holds: loaded, not started yet. */
export interface PendingItem {
  index: number;
  /** Present when the item travels inline. */
  item?: unknown;
  inline: boolean;
}

/**
 * What one run of a loop's items workflow knows: the items loaded and not yet started (in index
 * order), how far it loaded and started, whether any item is left to load, and how the loop went.
 */
export class LoopProgress<R> {
  private buffer: PendingItem[] = [];
  /** The last index loaded (the next page starts after it). */
  private loadedUpTo: number;
  /** The last index started; a run continued as new starts after it. */
  startedUpTo: number;
  exhausted = false;
  /** Items started by this run. */
  startedHere = 0;
  /** Results not recorded yet. */
  results: R[] = [];
  outcome: LoopOutcome;

  constructor(after: number, outcome: LoopOutcome | undefined) {
    this.loadedUpTo = after;
    this.startedUpTo = after;
    this.outcome = outcome ? { ...outcome } : { partial: false };
  }

  get after(): number {
    return this.loadedUpTo;
  }

  get buffered(): number {
    return this.buffer.length;
  }

  /** A page came back; fewer than asked means none are left after it. */
  loaded(items: { index: number; item?: unknown }[], asked: number): void {
    for (const i of items) this.buffer.push('item' in i ? { index: i.index, item: i.item, inline: true } : { index: i.index, inline: false });
    if (items.length) this.loadedUpTo = items.at(-1)!.index;
    if (items.length < asked) this.exhausted = true;
  }

  next(): PendingItem {
    const item = this.buffer.shift()!;
    this.startedUpTo = item.index;
    this.startedHere++;
    return item;
  }

  /** An item failed: the first failure is the loop's, and with on_item_error "continue" the run ends partial. */
  failed(failure: ItemFailure, continueOnError: boolean): void {
    if (continueOnError) this.outcome.partial = true;
    else this.outcome.failure ??= failure;
  }

  /** Every item was started and nothing is left to load. */
  get done(): boolean {
    return this.exhausted && this.buffer.length === 0;
  }

  /** The results to record now, taken out. */
  take(): R[] {
    return this.results.splice(0);
  }
}
