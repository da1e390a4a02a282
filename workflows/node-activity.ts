// A node run as one activity (regular or local, for a graph or a for_each item). Workflow code.
import { proxyActivities, proxyLocalActivities, type ActivityOptions } from '@temporalio/workflow';
import type { NodeActivities } from '../activities/index.js';
import { DEFAULT_NODE_TIMEOUT_MS, NODE_REFUSALS, nodeActivityId, type GraphNode, type RunNodeOutput } from './defs.js';
import { boundsOf, contextOf, local, other, type ItemScope, type Scope } from './run-scope.js';
import { closesOf, runsLocally } from './run-modes.js';

function activityOptions(node: GraphNode): ActivityOptions {
  const retry = node.retry ?? {};
  return {
    activityId: nodeActivityId(node.id),
    startToCloseTimeout: node.timeout_ms ?? DEFAULT_NODE_TIMEOUT_MS,
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

/** Any other node: one activity, local for the node types the run was told to run locally. */
export function runActivity(run: Scope, node: GraphNode): Promise<RunNodeOutput> {
  const options = activityOptions(node);
  const { activityId: _id, heartbeatTimeout: _hb, ...localOptions } = options;
  if (run.item) return runItemActivity(run, run.item, node, options, localOptions);
  const input = { node, context: run.values.contextFor(node), ...boundsOf(run), ...closesOf(run, node) };
  if (runsLocally(run, node)) return local(run, () => proxyLocalActivities<NodeActivities>(localOptions).runNode(input));
  return other(run, () => proxyActivities<NodeActivities>(options).runNode(input));
}

/**
 * A node of a for_each body: the activity is told its item (no timeline entry; a large output is
 * kept with the item) and answers its attempts. Its activity id is Temporal's own: the same node
 * runs for many items at once, and an id must be unique among a run's pending activities.
 */
function runItemActivity(run: Scope, item: ItemScope, node: GraphNode, options: ActivityOptions, localOptions: ActivityOptions): Promise<RunNodeOutput> {
  const input = { node, context: contextOf(run, node), ...boundsOf(run), item: item.key };
  const { activityId: _id, ...withoutId } = options;
  return runsLocally(run, node)
    ? local(run, () => proxyLocalActivities<NodeActivities>(localOptions).runNode(input))
    : other(run, () => proxyActivities<NodeActivities>(withoutId).runNode(input));
}
