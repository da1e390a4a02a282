import type { Graph } from '../../workflows/defs.js';
import { findCycle } from '../../workflows/graph.js';
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
  });
  graph.edges.forEach((edge, i) => {
    for (const end of ['from', 'to'] as const) {
      if (!ids.has(edge[end])) problems.push({ field: `edges.${i}.${end}`, message: `no node "${edge[end]}"` });
    }
    if (edge.from === edge.to) problems.push({ field: `edges.${i}`, message: 'an edge cannot connect a node to itself' });
    const source = graph.nodes[ids.get(edge.from) ?? -1];
    const type = source && types.get(source.type);
    if (!type) return;
    const branches = type.branches?.(source.config);
    if (edge.branch !== undefined && !branches) {
      problems.push({ field: `edges.${i}.branch`, message: `${source.type} nodes have no branches` });
    } else if (edge.branch !== undefined && branches && !branches.includes(edge.branch)) {
      problems.push({ field: `edges.${i}.branch`, message: `"${edge.branch}" is not a branch of ${source.id} (${branches.join(', ')})` });
    }
  });
  const duplicates = new Set<string>();
  for (const e of graph.edges) {
    const key = `${e.from}->${e.to}:${e.branch ?? ''}`;
    if (duplicates.has(key)) problems.push({ field: 'edges', message: `duplicate edge ${e.from} -> ${e.to}` });
    duplicates.add(key);
  }
  if (!problems.some((p) => p.field.startsWith('edges'))) {
    const cycle = findCycle(graph);
    if (cycle) problems.push({ field: 'edges', message: `the graph has a cycle: ${cycle.join(' -> ')}` });
  }
  if (trigger.type === 'schedule') problems.push(...scheduleProblems(trigger.config));
  return problems;
}
