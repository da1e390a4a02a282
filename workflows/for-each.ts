// The for_each node as the graph runs it (and as a body runs a loop nested in it): a control-flow
// module of workflow code beside the timer and the child run. The run itself holds three steps of
// it whatever the number of items: the items are listed in PostgreSQL, a child workflow runs them
// (forEachItems, which continues as new as its history grows), and the loop's outcome is read
// back. So a list of 10,000 items costs the run a dozen history events, not tens of thousands.
import { ApplicationFailure, executeChild, isCancellation, proxyActivities, workflowInfo } from '@temporalio/workflow';
import type { ControlActivities } from '../activities/index.js';
import {
  FOR_EACH_WORKFLOW,
  NODE_REFUSALS,
  forEachWorkflowId,
  type ForEachInput,
  type GraphNode,
  type LoopOutcome,
  type NodeContext,
  type RunNodeOutput,
} from './defs.js';
import { CODE } from './error-codes.js';
import { boundsOf, contextOf, other, type Scope } from './run-scope.js';

const control = proxyActivities<ControlActivities>({
  // Listing 10,000 items or reading their results back is a few seconds of PostgreSQL at most.
  startToCloseTimeout: '5m',
  retry: { initialInterval: '500ms', maximumAttempts: 20, nonRetryableErrorTypes: [...NODE_REFUSALS] },
});

/** The execution a loop reuses the successful items of (a replay of its failed items), if any. */
function reuseOf(run: Scope, node: GraphNode): number | undefined {
  const from = run.itemsFrom;
  return from && (from.node === undefined || from.node === node.id) ? from.execution : undefined;
}

/** What the body sees from outside: the loop node's context without the outer item (inside, `item` is the body's own). */
function outerContext(context: NodeContext): NodeContext {
  const { item: _item, index: _index, refs, ...rest } = context;
  if (!refs) return rest;
  const { item: _itemRef, ...otherRefs } = refs;
  return Object.keys(otherRefs).length ? { ...rest, refs: otherRefs } : rest;
}

/**
 * Runs a for_each node: lists its items (failing with items_not_array or too_many_items before any
 * runs), runs those without a result to reuse in its items workflow, then records the node's
 * outcome: `{total, succeeded, failed, results}`, or `item_failed` when an item failed and the
 * loop stops at failures.
 */
export async function runLoop(run: Scope, node: GraphNode): Promise<RunNodeOutput> {
  const bounds = run.began.bounds;
  if (!bounds || !run.began.runModes) throw ApplicationFailure.nonRetryable('This run began on workflow code without loops; replay it', CODE.validation_failed);
  const startedAt = Date.now();
  const within = run.item?.key;
  const reuseFrom = reuseOf(run, node);
  const context = contextOf(run, node);
  const begun = await other(run, () =>
    control.beginLoop({ node, context, runId: workflowInfo().runId, ...(within ? { within } : {}), ...(reuseFrom !== undefined ? { reuseFrom } : {}) }),
  );
  let outcome: LoopOutcome = { partial: false };
  if (begun.pending > 0) {
    const input: ForEachInput = {
      loop: begun.loop,
      node,
      context: outerContext(context),
      runModes: run.began.runModes,
      bounds,
      ...(begun.workflowId !== undefined ? { workflowId: begun.workflowId } : {}),
      ...(reuseFrom !== undefined ? { reuseFrom } : {}),
      ...(begun.historyEvents !== undefined ? { historyEvents: begun.historyEvents } : {}),
    };
    try {
      outcome = await other(run, () =>
        executeChild(FOR_EACH_WORKFLOW, {
          workflowId: run.item
            ? forEachWorkflowId(run.item.itemsWorkflowId, node.id, run.item.key.index)
            : forEachWorkflowId(workflowInfo().workflowId, node.id),
          args: [input],
        }),
      );
    } catch (err) {
      if (isCancellation(err)) throw err;
      // The items workflow itself failed (not an item: it reports those): the loop fails with it.
      outcome = { partial: false, failure: { index: -1, code: CODE.node_failed, message: `The loop's items stopped: ${(err as Error).message}` } };
    }
  }
  const ended = await other(run, () => control.finishLoop({ loop: begun.loop, node, outcome, startedAt, ...boundsOf(run), ...(within ? { within } : {}) }));
  if (ended.error) throw ApplicationFailure.nonRetryable(ended.error.message, ended.error.code);
  return { ...ended.result, ...(ended.partial ? { partial: true } : {}) };
}
