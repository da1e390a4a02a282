import { ERROR_BRANCH, type Graph, type GraphNode } from '../../workflows/defs.js';
import { ancestors, findCycle } from '../../workflows/graph.js';
import { fieldReferences } from '../../workflows/references.js';
import { checkTemplates } from '../nodes/expressions.js';
import type { NodeType } from '../nodes/node-type.js';
import type { FieldProblem } from '../platform/errors.js';
import { scheduleProblems } from './schedule-spec.js';
import type { Trigger } from './workflow.schemas.js';

/**
 * Checks a graph the schema already shaped: unique ids, edges between existing nodes, no cycles,
 * known node types with valid configuration and expressions, branch names the source can take.
 * Returns every problem, not only the first.
 */
export function validateGraph(graph: Graph, trigger: Trigger, types: ReadonlyMap<string, NodeType<any>>): FieldProblem[] {
  const problems: FieldProblem[] = [];
  const ids = new Map<string, number>();
  graph.nodes.forEach((node, i) => {
    if (ids.has(node.id)) problems.push({ field: `nodes.${i}.id`, message: `duplicate node id "${node.id}"` });
    ids.set(node.id, i);
    const type = types.get(node.type);
    if (!type) {
      problems.push({ field: `nodes.${i}.type`, message: `unknown node type "${node.type}" (known: ${[...types.keys()].join(', ')})` });
      return;
    }
    const parsed = type.configSchema.safeParse(node.config);
    if (!parsed.success) {
      for (const issue of parsed.error.issues) {
        const keys = issue.code === 'unrecognized_keys' ? issue.keys.join(', ') : '';
        problems.push({ field: [`nodes.${i}.config`, ...issue.path.map(String)].join('.'), message: keys ? `unknown field(s) ${keys}` : issue.message });
      }
    }
    problems.push(...checkTemplates(node.config, `nodes.${i}.config`));
    if (type.needsConnection && node.connection_id === undefined) {
      problems.push({ field: `nodes.${i}.connection_id`, message: `a ${node.type} node needs a connection_id` });
    }
    problems.push(...checkErrorBranch(graph, node, i, type));
  });
  problems.push(...checkEdges(graph, ids, types));
  const duplicates = new Set<string>();
  for (const e of graph.edges) {
    const key = `${e.from}->${e.to}:${e.branch ?? ''}`;
    if (duplicates.has(key)) problems.push({ field: 'edges', message: `duplicate edge ${e.from} -> ${e.to}` });
    duplicates.add(key);
  }
  const edgesSound = !problems.some((p) => p.field.startsWith('edges'));
  const cycle = edgesSound ? findCycle(graph) : undefined;
  if (cycle) problems.push({ field: 'edges', message: `the graph has a cycle: ${cycle.join(' -> ')}` });
  problems.push(...checkReferences(graph, ids, edgesSound && !cycle));
  if (trigger.type === 'schedule') problems.push(...scheduleProblems(trigger.config));
  return problems;
}

/** Each edge joins two existing nodes, and carries a branch its source can take ("error" only from a node with on_error "branch"). */
function checkEdges(graph: Graph, ids: Map<string, number>, types: ReadonlyMap<string, NodeType<any>>): FieldProblem[] {
  const problems: FieldProblem[] = [];
  graph.edges.forEach((edge, i) => {
    for (const end of ['from', 'to'] as const) {
      if (!ids.has(edge[end])) problems.push({ field: `edges.${i}.${end}`, message: `no node "${edge[end]}"` });
    }
    if (edge.from === edge.to) problems.push({ field: `edges.${i}`, message: 'an edge cannot connect a node to itself' });
    const source = graph.nodes[ids.get(edge.from) ?? -1];
    const type = source && types.get(source.type);
    if (!type) return;
    const branches = type.branches?.(source.config);
    if (edge.branch === ERROR_BRANCH && (source.on_error === 'branch' || !branches?.includes(ERROR_BRANCH))) {
      if (source.on_error !== 'branch') {
        problems.push({
          field: `edges.${i}.branch`,
          message: `"error" edges leave only nodes with on_error "branch" (they carry its failure); ${source.id} has on_error "${source.on_error ?? 'fail'}"`,
        });
      }
    } else if (edge.branch !== undefined && !branches) {
      problems.push({ field: `edges.${i}.branch`, message: `${source.type} nodes have no branches` });
    } else if (edge.branch !== undefined && branches && !branches.includes(edge.branch)) {
      problems.push({ field: `edges.${i}.branch`, message: `"${edge.branch}" is not a branch of ${source.id} (${branches.join(', ')})` });
    }
  });
  return problems;
}

/**
 * The nodes each configuration's expressions name (`nodes.<id>`) must exist, and (once the edges
 * are sound) be upstream of the node: any other node has no output the node could read when it
 * runs. Expressions that reach `nodes` dynamically (`$keys(nodes)`) cannot be checked.
 */
function checkReferences(graph: Graph, ids: Map<string, number>, edgesSound: boolean): FieldProblem[] {
  const problems: FieldProblem[] = [];
  graph.nodes.forEach((node, i) => {
    const fields = fieldReferences(node.config, `nodes.${i}.config`);
    if (!fields.length) return;
    const upstream = edgesSound ? ancestors(graph, node.id) : undefined;
    for (const { field, ids: named } of fields) {
      for (const id of named ?? []) {
        if (!ids.has(id)) {
          problems.push({ field, message: `refers to node "${id}" (nodes.${id}), which does not exist in this workflow` });
        } else if (upstream && !upstream.has(id)) {
          const why = id === node.id ? 'its own output' : `node "${id}", which is not upstream of it (no path of edges leads from ${id} to ${node.id})`;
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
function checkErrorBranch(graph: Graph, node: GraphNode, i: number, type: NodeType<any>): FieldProblem[] {
  if (node.on_error !== 'branch') return [];
  const problems: FieldProblem[] = [];
  if (!graph.edges.some((e) => e.from === node.id && e.branch === ERROR_BRANCH)) {
    problems.push({
      field: `nodes.${i}.on_error`,
      message: `on_error "branch" needs at least one edge from ${node.id} with branch "error" (where its failure goes)`,
    });
  }
  if (type.branches?.(node.config).includes(ERROR_BRANCH)) {
    problems.push({
      field: `nodes.${i}.on_error`,
      message: `${node.id} has a branch named "error" of its own; with on_error "branch" that name is its failure's`,
    });
  }
  return problems;
}
