import type { GraphNode } from './defs.js';
import { maskLiterals, templateParts } from './template-scan.mjs';

/** `nodes` at the start of a path (or after `$$.`, the root): not a field of something else, not `$nodes`. */
const ROOT_NODES = /(?<![\w$`]|\.\s*)nodes\b|\$\$\s*\.\s*nodes\b/g;

/** Node ids one expression refers to as `nodes.<id>` (or nodes.`<id>`); undefined when it reaches `nodes` otherwise. */
export function expressionReferences(expression: string): string[] | undefined {
  const code = maskLiterals(expression);
  const ids = new Set<string>();
  for (const m of code.matchAll(ROOT_NODES)) {
    const rest = code.slice(m.index! + m[0].length);
    const step = /^\s*\.\s*([A-Za-z_][\w]*)/.exec(rest) ?? /^\s*\.\s*`([^`]+)`/.exec(rest);
    if (!step) return undefined;
    ids.add(step[1]!);
  }
  return [...ids];
}

/**
 * Per string of a configuration that holds expressions: its path (`prefix.a.0`) and the node ids
 * its expressions name (undefined when one reaches `nodes` in a way that cannot be read statically).
 */
export function fieldReferences(config: unknown, prefix = 'config'): { field: string; ids: string[] | undefined }[] {
  const out: { field: string; ids: string[] | undefined }[] = [];
  const visit = (v: unknown, field: string) => {
    if (typeof v === 'string') {
      const parts = templateParts(v);
      if (!parts.length) return;
      const found = parts.map((p) => expressionReferences(p.source));
      out.push({ field, ids: found.some((ids) => ids === undefined) ? undefined : [...new Set(found.flatMap((ids) => ids!))] });
    } else if (Array.isArray(v)) v.forEach((item, i) => visit(item, `${field}.${i}`));
    else if (v && typeof v === 'object') for (const [k, item] of Object.entries(v)) visit(item, `${field}.${k}`);
  };
  visit(config, prefix);
  return out;
}

/**
 * Node ids the expressions of a configuration refer to as `nodes.<id>` (or nodes.`<id>`);
 * undefined when one reaches `nodes` in a way that cannot be read statically.
 */
export function referencedNodes(config: unknown): string[] | undefined {
  const ids = new Set<string>();
  for (const field of fieldReferences(config)) {
    if (!field.ids) return undefined;
    field.ids.forEach((id) => ids.add(id));
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
