import { z } from 'zod';
import type { ForEachConfig } from '../../workflows/defs.js';
import type { NodeType } from './node-type.js';

/** Most items of one loop in flight at once. */
export const MAX_CONCURRENCY = 100;

/** A body, its nodes shaped by `node`: loosely here (each is checked as a node with the whole definition), as `Node` in the document. */
const bodyOf = (node: z.ZodType) =>
  z.strictObject({
    nodes: z.array(node).min(1).max(500),
    edges: z
      .array(z.strictObject({ from: z.string().min(1).max(64), to: z.string().min(1).max(64), branch: z.string().min(1).max(100).optional() }))
      .max(2000)
      .default([]),
    output_node: z.string().min(1).max(64).optional().describe('The body node whose output is the item’s result, when the body has several sink nodes'),
  });

/**
 * The configuration, its body's nodes shaped by `node`. The graph check (graph-validator.ts)
 * checks each body node as a node of a workflow and the body as a graph, so that every problem is
 * listed at once with its place (`nodes.3.config.body.nodes.0.config.path`), and that exactly one
 * of `body` and `workflow_id` is given (a plain object schema: workflow files rewrite its fields).
 */
const configOf = (node: z.ZodType) =>
  z.strictObject({
    items: z.union([z.string(), z.array(z.unknown())]).describe('An expression yielding an array (`{{ nodes.fetch.body.leads }}`), or the array itself'),
    body: bodyOf(node).optional().describe('The nodes run for each item: a graph of its own; its one sink node (or `output_node`) gives the item’s result'),
    workflow_id: z
      .number()
      .int()
      .positive()
      .max(2_147_483_647)
      .optional()
      .describe('Instead of `body`: a workflow run per item, as a child run with payload `{item, index}`; its output is the item’s result'),
    concurrency: z.number().int().min(1).max(MAX_CONCURRENCY).default(10).describe('Items in flight at once'),
    on_item_error: z
      .enum(['fail', 'continue'])
      .default('fail')
      .describe(
        '`fail`: no item starts after one failed, and the node fails once the ones in flight end; `continue`: the others go on and the run ends `partial`',
      ),
  });

/**
 * Runs a body once per item of a list, `concurrency` items at a time: the workflow runs the node
 * itself (its items in child workflows of their own, which continue as new as their history
 * grows), so a list of thousands never meets Temporal's limits.
 */
export const forEachNode: NodeType<ForEachConfig> = {
  type: 'for_each',
  pure: false,
  runsAs: 'loop',
  description:
    'config `{items, body: {nodes, edges, output_node?} | workflow_id, concurrency?, on_item_error?}`: runs the body once per item of `items` (an expression yielding an array), `concurrency` (1 to 100, default 10) at a time; inside the body expressions see `item`, `index`, `trigger` and `nodes`. `workflow_id` runs that workflow per item with payload `{item, index}` instead. `on_item_error`: `fail` (default: no item starts after a failure and the node fails with `item_failed`) or `continue` (the run ends `partial`). Output `{total, succeeded, failed, results}` (`results` by index, null for a failed item, left out when over the output limit); every item is listed at `GET /executions/{id}/nodes/{node_id}/items`.',
  configSchema: configOf(z.looseObject({ id: z.string(), type: z.string() })),
  documentedConfig: configOf,
};
