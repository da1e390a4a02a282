// What the graph scheduler runs nodes over (a graph run, or one for_each item's body) and the
// small helpers every way of running a node shares. Deterministic workflow code.
import { condition } from '@temporalio/workflow';
import type { BeganExecution, GraphNode, ItemKey, NodeContext, NodeRunMode, RunGraphResult } from './defs.js';
import type { GraphState } from './graph.js';
import type { LocalGate, NodeAwaits } from './local-gate.js';
import { hasTemplate, type RunValues } from './run-values.js';
import type { InterruptedNode } from './run-state.js';
import type { Slots } from './slots.js';

/**
 * What the scheduler runs nodes over: a graph run, or the body of one for_each item (`item`),
 * which runs through the same scheduler in its loop's items workflow, with no timeline entry per
 * node (the item is the record) and no reset memos.
 */
export interface Scope {
  began: BeganExecution;
  /**
   * Runs begun on earlier code (their first step's recorded answer has no `history`) mark every
   * node with memos, as they were written; a lean run only nodes Temporal's events do not mark.
   */
  lean: boolean;
  nodes: Map<string, GraphNode>;
  state: GraphState;
  /** The trigger payload and the nodes' outputs, inline or by reference. */
  values: RunValues;
  /**
   * Orders the results of parallel local activities the same way live and on replay. Runs begun
   * before it (their first step granted no bounds) await each result as they always did.
   */
  gate?: LocalGate;
  failure: RunGraphResult['error'];
  partial: boolean;
  /** Nodes whose failure the run handled (on_error "continue" or "branch"): their output is `{error}`. */
  handled: string[];
  cancelled: unknown;
  /** Workflow time each node started; the nodes a cancel interrupted. */
  startedAt: Map<string, number>;
  interrupted: InterruptedNode[];
  /** The item whose body this scope runs. */
  item?: ItemScope;
  /** Places shared with the other items in flight: a node starts only once it has one. */
  slots?: Slots;
  /** A replay of failed items: the execution whose successful items the loops named (or every loop, without `node`) reuse. */
  itemsFrom?: { execution: number; node?: string };
  /**
   * Nodes in flight that only wait (a wait for an event, an approval, between their steps): they
   * carry nothing while they wait, so they do not count against `maxRunning`. `wake` tells the
   * scheduler a place came free.
   */
  pauses?: { waiting: number; wake?: () => void };
  /** Nodes in flight (runAll keeps it), waiting ones included. */
  active?: number;
  /** A graph run's own (not an item's): how each node that started runs, decided when it starts (see startCall). */
  modes?: Map<string, NodeRunMode>;
  /** A graph run's short calls run as local activities: how many are in flight, and the workflow task the last one began or ended in. */
  calls?: { inFlight: number; task: number };
  /** The node started as the graph run's last (closeInNode): when it succeeds its activity ends the record. */
  closing?: string;
  /** The record that node's activity ended. */
  closed?: { executionId: number };
}

/** A for_each item a scope runs the body of. */
export interface ItemScope {
  key: ItemKey;
  /** The item, when it travels inline (otherwise activities read it from the loop's items). */
  value?: unknown;
  inline: boolean;
  /** The Temporal workflow id of the loop's items workflow: child runs and inner loops are named under it. */
  itemsWorkflowId: string;
  /** The most attempts any of the body's nodes took. */
  attempts: number;
}

/** A node's expression context; inside a for_each body, with its item and index. */
export function contextOf(run: Scope, node: Pick<GraphNode, 'config'>): NodeContext {
  const context = run.values.contextFor(node);
  const item = run.item;
  if (!item) return context;
  // A node without expressions reads nothing, its item included.
  if (!hasTemplate(node.config)) return context;
  return item.inline
    ? { ...context, item: item.value, index: item.key.index }
    : { ...context, index: item.key.index, refs: { ...context.refs, item: item.key } };
}

/** A local activity of the run, through its gate when it has one (see LocalGate). */
export const local = <T>(run: Scope, start: () => Promise<T>): Promise<T> => (run.gate ? run.gate.local(start) : start());
/** Any other await of a node (an activity, a child, a timer), through the run's gate when it has one. */
export const other = <T>(run: Scope, start: () => Promise<T>): Promise<T> => (run.gate ? run.gate.other(start) : start());

/** What a run that keeps large values out of history asks of activities that answer a value. */
export const boundsOf = (run: Scope): { inlineBytes?: number } => (run.began.bounds ? { inlineBytes: run.began.bounds.inlineBytes } : {});

/** How a node module of its own (a wait, an approval) awaits: through the run's gate, with its bounds. */
export const awaitsOf = (run: Scope): NodeAwaits => ({
  local: (start) => local(run, start),
  other: (start) => other(run, start),
  pause: (wait) => pause(run, wait),
  ...boundsOf(run),
});

/**
 * A node's wait for a signal or a timer, during which it holds no place among the run's nodes in
 * flight (runAll counts `pauses.waiting` out); once it ends, the node waits for a place again, so
 * its next steps stay within `maxRunning`. Runs without pauses (begun before them) wait as before.
 */
export async function pause<T>(run: Scope, wait: () => Promise<T>): Promise<T> {
  const { pauses } = run;
  if (!pauses) return wait();
  pauses.waiting++;
  pauses.wake?.();
  try {
    return await wait();
  } finally {
    pauses.waiting--;
    const limit = run.began.bounds?.maxRunning ?? Infinity;
    if (run.active! - pauses.waiting > limit) await condition(() => run.active! - pauses.waiting <= limit);
  }
}
