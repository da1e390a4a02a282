import type { ForEachConfig, Graph, GraphNode } from '../../workflows/defs.js';
import { findCycle } from '../../workflows/graph.js';
import { checkTemplates } from '../nodes/expressions.js';
import type { NodeType } from '../nodes/node-type.js';
import type { FieldProblem } from '../platform/errors.js';
import { nodeSchema, type Trigger } from './workflow.schemas.js';

/** A 5- or 6-field cron line, or an @-shorthand Temporal understands. */
const cronPattern = /^(@(yearly|annually|monthly|weekly|daily|hourly|every\s+\S+))$|^(\S+\s+){4,5}\S+$/;

/** How deep for_each bodies may nest (a loop in a loop's body is two). */
export const MAX_LOOP_DEPTH = 4;

/**
 * Checks a graph the schema already shaped: unique ids (across for_each bodies too), edges between
 * existing nodes, no cycles, known node types with valid configuration and expressions, branch
 * names the source can take, and each for_each body as a graph of its own. Returns every problem,
 * not only the first.
 */
export function validateGraph(graph: Graph, trigger: Trigger, types: ReadonlyMap<string, NodeType<any>>): FieldProblem[] {
  const problems: FieldProblem[] = [];
  checkGraph(graph, '', types, problems, new Set(), 1);
  if (trigger.type === 'schedule' && !cronPattern.test(trigger.config.cron.trim())) {
    problems.push({ field: 'trigger.config.cron', message: 'expected a cron line of 5 or 6 fields or an @-shorthand' });
  }
  return problems;
}

/** The body of a for_each node, once its configuration parsed. */
type Body = NonNullable<ForEachConfig['body']>;

/**
 * Checks one graph (the workflow's, or a for_each body at `prefix`, such as `nodes.2.config.body.`),
 * its bodies included; `seen` holds every node id met so far in the whole definition.
 */
function checkGraph(graph: Graph, prefix: string, types: ReadonlyMap<string, NodeType<any>>, problems: FieldProblem[], seen: Set<string>, depth: number): void {
  const ids = new Map<string, number>();
  graph.nodes.forEach((node, i) => {
    const at = `${prefix}nodes.${i}`;
    if (prefix) {
      // A body's nodes were stored as sent: each is shaped as a node of a workflow first.
      const shaped = nodeSchema.safeParse(node);
      if (!shaped.success) {
        for (const issue of shaped.error.issues) problems.push({ field: [at, ...issue.path.map(String)].join('.'), message: issue.message });
        return;
      }
      node = shaped.data as GraphNode;
    }
    if (seen.has(node.id))
      problems.push({
        field: `${at}.id`,
        message: `duplicate node id "${node.id}"${prefix ? ' (ids are unique across the whole workflow, for_each bodies included)' : ''}`,
      });
    seen.add(node.id);
    ids.set(node.id, i);
    checkNode(node, at, types, problems, seen, depth);
  });
  graph.edges.forEach((edge, i) => {
    const at = `${prefix}edges.${i}`;
    for (const end of ['from', 'to'] as const) {
      if (!ids.has(edge[end])) problems.push({ field: `${at}.${end}`, message: `no node "${edge[end]}"${prefix ? ' in this body' : ''}` });
    }
    if (edge.from === edge.to) problems.push({ field: at, message: 'an edge cannot connect a node to itself' });
    const source = graph.nodes[ids.get(edge.from) ?? -1];
    const type = source && types.get(source.type);
    if (!type) return;
    const branches = type.branches?.(source.config ?? {});
    if (edge.branch !== undefined && !branches) {
      problems.push({ field: `${at}.branch`, message: `${source.type} nodes have no branches` });
    } else if (edge.branch !== undefined && branches && !branches.includes(edge.branch)) {
      problems.push({ field: `${at}.branch`, message: `"${edge.branch}" is not a branch of ${source.id} (${branches.join(', ')})` });
    }
  });
  const duplicates = new Set<string>();
  for (const e of graph.edges) {
    const key = `${e.from}->${e.to}:${e.branch ?? ''}`;
    if (duplicates.has(key)) problems.push({ field: `${prefix}edges`, message: `duplicate edge ${e.from} -> ${e.to}` });
    duplicates.add(key);
  }
  if (!problems.some((p) => p.field.startsWith(`${prefix}edges`))) {
    const cycle = findCycle(graph);
    if (cycle) problems.push({ field: `${prefix}edges`, message: `the graph has a cycle: ${cycle.join(' -> ')}` });
  }
}

/** One node: a known type, a configuration valid for it, expressions that parse, a connection when needed; a for_each's body. */
function checkNode(node: GraphNode, at: string, types: ReadonlyMap<string, NodeType<any>>, problems: FieldProblem[], seen: Set<string>, depth: number): void {
  const type = types.get(node.type);
  if (!type) {
    problems.push({ field: `${at}.type`, message: `unknown node type "${node.type}" (known: ${[...types.keys()].join(', ')})` });
    return;
  }
  const parsed = type.configSchema.safeParse(node.config);
  if (!parsed.success) {
    for (const issue of parsed.error.issues) {
      const keys = issue.code === 'unrecognized_keys' ? issue.keys.join(', ') : '';
      problems.push({ field: [`${at}.config`, ...issue.path.map(String)].join('.'), message: keys ? `unknown field(s) ${keys}` : issue.message });
    }
  }
  const body = node.type === 'for_each' ? (node.config as { body?: Body }).body : undefined;
  // A body's expressions are checked with its nodes, below.
  const own = body ? { ...node.config, body: undefined } : node.config;
  problems.push(...checkTemplates(own, `${at}.config`));
  if (type.needsConnection && node.connection_id === undefined) {
    problems.push({ field: `${at}.connection_id`, message: `a ${node.type} node needs a connection_id` });
  }
  // The body is checked even when another field is wrong, so that every problem is listed at once.
  if (body && typeof body === 'object' && Array.isArray(body.nodes)) checkBody(body, `${at}.config.body`, types, problems, seen, depth);
}

/** A for_each body: a graph of its own, nested no deeper than MAX_LOOP_DEPTH, with one node whose output is the item's result. */
function checkBody(body: Body, at: string, types: ReadonlyMap<string, NodeType<any>>, problems: FieldProblem[], seen: Set<string>, depth: number): void {
  if (depth >= MAX_LOOP_DEPTH) {
    problems.push({ field: at, message: `for_each bodies nest at most ${MAX_LOOP_DEPTH} levels deep` });
    return;
  }
  // Edges the schema refused (reported with the node's config) are left out of the graph's checks.
  const edges = (Array.isArray(body.edges) ? body.edges : []).filter((e) => e && typeof e.from === 'string' && typeof e.to === 'string');
  const graph = { nodes: body.nodes as GraphNode[], edges };
  checkGraph(graph, `${at}.`, types, problems, seen, depth + 1);
  const sources = new Set(graph.edges.map((e) => e.from));
  const sinks = graph.nodes.filter((n) => !sources.has(n.id)).map((n) => n.id);
  if (body.output_node !== undefined) {
    if (!graph.nodes.some((n) => n.id === body.output_node))
      problems.push({ field: `${at}.output_node`, message: `no node "${body.output_node}" in this body` });
  } else if (sinks.length > 1) {
    problems.push({
      field: `${at}.output_node`,
      message: `the body has several sink nodes (${sinks.join(', ')}): name the one whose output is an item's result`,
    });
  }
}

/**
 * Every node of a definition with its place (`nodes.2.config.body.nodes.0`), for_each bodies
 * included: what a check of the whole definition walks (the connections it names, say).
 */
export function* everyNode(nodes: readonly GraphNode[], prefix = ''): Generator<[GraphNode, string]> {
  for (const [i, node] of nodes.entries()) {
    const at = `${prefix}nodes.${i}`;
    yield [node, at];
    const body = node.type === 'for_each' ? (node.config as { body?: { nodes?: unknown } } | undefined)?.body : undefined;
    if (body && Array.isArray(body.nodes)) yield* everyNode(body.nodes as GraphNode[], `${at}.config.body.`);
  }
}
