import type { GraphNode } from './defs.js';

const TEMPLATE = /\{\{([\s\S]+?)\}\}/g;

/**
 * Node ids the expressions of a configuration refer to as `nodes.<id>` (or nodes.`<id>`);
 * undefined when one reaches `nodes` in a way that cannot be read statically.
 */
export function referencedNodes(config: unknown): string[] | undefined {
  const ids = new Set<string>();
  const expressions: string[] = [];
  const collect = (v: unknown) => {
    if (typeof v === 'string') for (const m of v.matchAll(TEMPLATE)) expressions.push(m[1]!);
    else if (Array.isArray(v)) v.forEach(collect);
    else if (v && typeof v === 'object') Object.values(v).forEach(collect);
  };
  collect(config);
  for (const expression of expressions) {
    for (const m of expression.matchAll(/\bnodes\b/g)) {
      const rest = expression.slice(m.index! + 5);
      const step = /^\s*\.\s*([A-Za-z_][\w]*)/.exec(rest) ?? /^\s*\.\s*`([^`]+)`/.exec(rest);
      if (!step) return undefined;
      ids.add(step[1]!);
    }
  }
  return [...ids];
}

/**
 * The outputs a node's expressions can see: those it names, or all of them when that cannot be
 * told. Passing only these keeps each activity's input (and Temporal's history) small.
 */
export function contextFor(node: GraphNode, outputs: Record<string, unknown>): Record<string, unknown> {
  const names = referencedNodes(node.config);
  if (!names) return { ...outputs };
  return Object.fromEntries(names.filter((n) => n in outputs).map((n) => [n, outputs[n]]));
}
