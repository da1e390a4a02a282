import { ERROR_BRANCH, type ForEachConfig, type Graph, type GraphNode } from '../../workflows/defs.js';
import { ancestors, findCycle } from '../../workflows/graph.js';
import { fieldReferences } from '../../workflows/references.js';
import { checkTemplates } from '../nodes/expressions.js';
import type { NodeType } from '../nodes/node-type.js';
import type { FieldProblem } from '../platform/errors.js';
import { scheduleProblems } from './schedule-spec.js';
import { nodeSchema, type Trigger } from './workflow.schemas.js';

/** How deep for_each bodies may nest (a loop in a loop's body is two). */
export const MAX_LOOP_DEPTH = 4;

/** What the checks of one graph share: the node types, the problems found, and every node id of the definition. */
interface Check {
  types: ReadonlyMap<string, NodeType<any>>;
  problems: FieldProblem[];
  /** Every node id met so far (ids are unique across the whole definition, bodies included). */
  seen: Set<string>;
  /** Every node id of the definition, bodies included. */
  all: Set<string>;
}

/**
 * Checks a graph the schema already shaped: unique ids (across for_each bodies too), edges between
 * existing nodes, no cycles, known node types with valid configuration and expressions, branch
 * names the source can take, references to nodes that exist and are upstream, and each for_each
 * body as a graph of its own. Returns every problem, not only the first.
 */
export function validateGraph(graph: Graph, trigger: Trigger, types: ReadonlyMap<string, NodeType<any>>): FieldProblem[] {
  const check: Check = { types, problems: [], seen: new Set(), all: new Set([...everyNode(graph.nodes)].map(([n]) => n.id)) };
  checkGraph(check, graph, '', new Set(), 1);
  if (trigger.type === 'schedule') check.problems.push(...scheduleProblems(trigger.config));
  return check.problems;
}

/** The body of a for_each node as stored. */
type Body = NonNullable<ForEachConfig['body']>;

/**
 * Checks one graph: the workflow's, or a for_each body at `prefix` (`nodes.2.config.body.`), whose
 * expressions may also name `outer`, the nodes upstream of its loop.
 */
function checkGraph(check: Check, graph: Graph, prefix: string, outer: Set<string>, depth: number): void {
  const { problems } = check;
  const ids = new Map<string, number>();
  const bodies: [Body, string, GraphNode][] = [];
  graph.nodes.forEach((node, i) => {
    const at = `${prefix}nodes.${i}`;
    if (check.seen.has(node.id)) {
      problems.push({
        field: `${at}.id`,
        message: `duplicate node id "${node.id}"${prefix ? ' (ids are unique across the whole workflow, for_each bodies included)' : ''}`,
      });
    }
    check.seen.add(node.id);
    ids.set(node.id, i);
    const body = checkNode(check, graph, node, at, prefix !== '');
    if (body) bodies.push([body, `${at}.config.body`, node]);
  });
  problems.push(...checkEdges(graph, ids, check.types, prefix));
  const duplicates = new Set<string>();
  for (const e of graph.edges) {
    const key = `${e.from}->${e.to}:${e.branch ?? ''}`;
    if (duplicates.has(key)) problems.push({ field: `${prefix}edges`, message: `duplicate edge ${e.from} -> ${e.to}` });
    duplicates.add(key);
  }
  const edgesSound = !problems.some((p) => p.field.startsWith(`${prefix}edges`));
  const cycle = edgesSound ? findCycle(graph) : undefined;
  if (cycle) problems.push({ field: `${prefix}edges`, message: `the graph has a cycle: ${cycle.join(' -> ')}` });
  const sound = edgesSound && !cycle;
  problems.push(...checkReferences(check, graph, prefix, outer, sound));
  // A body sees the nodes upstream of its loop (and what its loop's own body saw from outside).
  for (const [body, at, loop] of bodies) checkBody(check, body, at, sound ? new Set([...outer, ...ancestors(graph, loop.id)]) : undefined, depth);
}

/** One node: a known type, a configuration valid for it, expressions that parse, a connection when needed. Answers a for_each's body. */
function checkNode(check: Check, graph: Graph, node: GraphNode, at: string, inBody: boolean): Body | undefined {
  const { problems } = check;
  const type = check.types.get(node.type);
  if (!type) {
    problems.push({ field: `${at}.type`, message: `unknown node type "${node.type}" (known: ${[...check.types.keys()].join(', ')})` });
    return undefined;
  }
  if (inBody && (type.runsAs === 'wait' || type.runsAs === 'approval')) {
    problems.push({
      field: `${at}.type`,
      message: `a ${node.type} node cannot be inside a for_each body (its event or decision reaches the run, not one item); put it before or after the loop`,
    });
  }
  const parsed = type.configSchema.safeParse(node.config);
  if (!parsed.success) {
    for (const issue of parsed.error.issues) {
      const keys = issue.code === 'unrecognized_keys' ? issue.keys.join(', ') : '';
      problems.push({ field: [`${at}.config`, ...issue.path.map(String)].join('.'), message: keys ? `unknown field(s) ${keys}` : issue.message });
    }
  }
  const body = bodyOf(node);
  if (node.type === 'for_each' && (body === undefined) === ((node.config as { workflow_id?: unknown } | undefined)?.workflow_id === undefined)) {
    problems.push({ field: `${at}.config.body`, message: 'give either body or workflow_id' });
  }
  // A body's expressions are checked with its nodes.
  problems.push(...checkTemplates(ownConfig(node), `${at}.config`));
  if (type.needsConnection && node.connection_id === undefined) {
    problems.push({ field: `${at}.connection_id`, message: `a ${node.type} node needs a connection_id` });
  }
  problems.push(...checkErrorBranch(graph, node, at, type));
  return body;
}

/** A for_each node's body when it is shaped enough to check (its other fields may still be wrong: every problem is listed at once). */
function bodyOf(node: GraphNode): Body | undefined {
  if (node.type !== 'for_each') return undefined;
  const body = (node.config as { body?: unknown } | undefined)?.body;
  return body && typeof body === 'object' && Array.isArray((body as Body).nodes) ? (body as Body) : undefined;
}

/** A node's configuration without a for_each's body (whose nodes are checked as nodes of their own). */
function ownConfig(node: GraphNode): unknown {
  return bodyOf(node) ? { ...node.config, body: undefined } : node.config;
}

/** A for_each body: a graph of its own, nested no deeper than MAX_LOOP_DEPTH, with one node whose output is the item's result. */
function checkBody(check: Check, body: Body, at: string, outer: Set<string> | undefined, depth: number): void {
  if (depth >= MAX_LOOP_DEPTH) {
    check.problems.push({ field: at, message: `for_each bodies nest at most ${MAX_LOOP_DEPTH} levels deep` });
    return;
  }
  // A body's nodes were stored as sent: each is shaped as a node of a workflow (its defaults
  // filled in) before its graph is checked. One that is not (null, a string) is reported, and the
  // body's graph is not checked further (its ids and edges would mislead).
  const nodes: GraphNode[] = [];
  const unshaped: FieldProblem[] = [];
  body.nodes.forEach((node, i) => {
    const shaped = nodeSchema.safeParse(node);
    if (shaped.success) nodes.push(shaped.data as GraphNode);
    else for (const issue of shaped.error.issues) unshaped.push({ field: [`${at}.nodes.${i}`, ...issue.path.map(String)].join('.'), message: issue.message });
  });
  if (unshaped.length) {
    // The loop's configuration check may have reported them already.
    const known = new Set(check.problems.map((p) => `${p.field}\u0000${p.message}`));
    check.problems.push(...unshaped.filter((p) => !known.has(`${p.field}\u0000${p.message}`)));
    return;
  }
  // Edges the schema refused (reported with the node's config) are left out of the graph's checks.
  const edges = (Array.isArray(body.edges) ? body.edges : []).filter((e) => e && typeof e.from === 'string' && typeof e.to === 'string');
  const graph = { nodes, edges };
  checkGraph(check, graph, `${at}.`, outer ?? check.all, depth + 1);
  const sources = new Set(graph.edges.map((e) => e.from));
  const sinks = graph.nodes.filter((n) => !sources.has(n.id)).map((n) => n.id);
  if (body.output_node !== undefined) {
    if (!graph.nodes.some((n) => n?.id === body.output_node))
      check.problems.push({ field: `${at}.output_node`, message: `no node "${body.output_node}" in this body` });
  } else if (sinks.length > 1) {
    check.problems.push({
      field: `${at}.output_node`,
      message: `the body has several sink nodes (${sinks.join(', ')}): name the one whose output is an item's result`,
    });
  }
}

/** Each edge joins two nodes of its graph, and carries a branch its source can take ("error" only from a node with on_error "branch"). */
function checkEdges(graph: Graph, ids: Map<string, number>, types: ReadonlyMap<string, NodeType<any>>, prefix: string): FieldProblem[] {
  const problems: FieldProblem[] = [];
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
    if (edge.branch === ERROR_BRANCH && (source.on_error === 'branch' || !branches?.includes(ERROR_BRANCH))) {
      if (source.on_error !== 'branch') {
        problems.push({
          field: `${at}.branch`,
          message: `"error" edges leave only nodes with on_error "branch" (they carry its failure); ${source.id} has on_error "${source.on_error ?? 'fail'}"`,
        });
      }
    } else if (edge.branch !== undefined && !branches) {
      problems.push({ field: `${at}.branch`, message: `${source.type} nodes have no branches` });
    } else if (edge.branch !== undefined && branches && !branches.includes(edge.branch)) {
      problems.push({ field: `${at}.branch`, message: `"${edge.branch}" is not a branch of ${source.id} (${branches.join(', ')})` });
    }
  });
  return problems;
}

/**
 * The nodes each configuration's expressions name (`nodes.<id>`) must exist, and (once the edges
 * are sound) be upstream of the node: any other node has no output the node could read when it
 * runs. Inside a for_each body, the nodes upstream of the loop (`outer`) count as upstream too.
 * Expressions that reach `nodes` dynamically (`$keys(nodes)`) cannot be checked.
 */
function checkReferences(check: Check, graph: Graph, prefix: string, outer: Set<string>, edgesSound: boolean): FieldProblem[] {
  const problems: FieldProblem[] = [];
  graph.nodes.forEach((node, i) => {
    if (!node) return;
    const fields = fieldReferences(ownConfig(node), `${prefix}nodes.${i}.config`);
    if (!fields.length) return;
    const upstream = edgesSound ? new Set([...ancestors(graph, node.id), ...outer]) : undefined;
    for (const { field, ids: named } of fields) {
      for (const id of named ?? []) {
        if (!check.all.has(id)) {
          problems.push({ field, message: `refers to node "${id}" (nodes.${id}), which does not exist in this workflow` });
        } else if (upstream && !upstream.has(id)) {
          const why =
            id === node.id
              ? 'its own output'
              : `node "${id}", which is not upstream of it (no path of edges leads from ${id} to ${node.id}${prefix ? ', in its body or to its loop' : ''})`;
          problems.push({ field, message: `node "${node.id}" refers to ${why}: it has no output when ${node.id} runs` });
        }
      }
    }
  });
  return problems;
}

/**
 * A node with on_error "branch" hands its failure to its "error" edges: it needs one, and its own
 * branches (a switch's cases) cannot be called "error" as well.
 */
function checkErrorBranch(graph: Graph, node: GraphNode, at: string, type: NodeType<any>): FieldProblem[] {
  if (node.on_error !== 'branch') return [];
  const problems: FieldProblem[] = [];
  if (!graph.edges.some((e) => e.from === node.id && e.branch === ERROR_BRANCH)) {
    problems.push({
      field: `${at}.on_error`,
      message: `on_error "branch" needs at least one edge from ${node.id} with branch "error" (where its failure goes)`,
    });
  }
  if (type.branches?.(node.config).includes(ERROR_BRANCH)) {
    problems.push({
      field: `${at}.on_error`,
      message: `${node.id} has a branch named "error" of its own; with on_error "branch" that name is its failure's`,
    });
  }
  return problems;
}

/**
 * Every node of a definition with its place (`nodes.2.config.body.nodes.0`), for_each bodies
 * included: what a check of the whole definition walks (the connections it names, say).
 */
export function* everyNode(nodes: readonly GraphNode[], prefix = ''): Generator<[GraphNode, string]> {
  for (const [i, node] of nodes.entries()) {
    if (!node || typeof node !== 'object') continue;
    const at = `${prefix}nodes.${i}`;
    yield [node, at];
    const body = bodyOf(node);
    if (body) yield* everyNode(body.nodes as GraphNode[], `${at}.config.body.`);
  }
}

/**
 * The nodes of a valid definition with each for_each body's nodes stored as nodes of a workflow
 * are (their defaults applied: a missing `config` is `{}`, missing `edges` are `[]`), so a body
 * reads back as the document's Node does.
 */
export function shapeBodies(nodes: GraphNode[]): GraphNode[] {
  return nodes.map((node) => {
    const body = bodyOf(node);
    if (!body) return node;
    const shaped = shapeBodies(body.nodes.map((n) => nodeSchema.parse(n) as GraphNode));
    return { ...node, config: { ...node.config, body: { ...body, nodes: shaped, edges: body.edges ?? [] } } };
  });
}
