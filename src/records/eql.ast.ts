/** The EQL syntax tree. Every node keeps `pos`, the code-unit offset where it starts. */

export type Literal =
  | { type: 'string'; value: string; pos: number }
  | { type: 'number'; value: number; pos: number }
  | { type: 'boolean'; value: boolean; pos: number }
  | { type: 'null'; pos: number };

/**
 * `:name`: a value bound from the parameters given with the expression (never spliced into its
 * text), so a value from a webhook or a model stays one value whatever it holds.
 */
export interface Param {
  type: 'param';
  name: string;
  pos: number;
}

/** Where a value goes: a literal written in the expression, or a bound parameter. */
export type Value = Literal | Param;

/** `name` or one relation hop `relation.name`. */
export interface FieldRef {
  path: [string] | [string, string];
  pos: number;
}

export type CompareOp = '=' | '!=' | '<' | '<=' | '>' | '>=' | '~' | '!~';

export type Expr =
  | { kind: 'and' | 'or'; left: Expr; right: Expr; pos: number }
  | { kind: 'not'; operand: Expr; pos: number }
  | { kind: 'compare'; field: FieldRef; op: CompareOp; value: Value; pos: number }
  | { kind: 'in'; field: FieldRef; negated: boolean; values: Value[]; pos: number }
  | { kind: 'is_null'; field: FieldRef; negated: boolean; pos: number };

/** The tree without positions, for comparing two parses of differently spelled expressions. */
export function withoutPositions(node: unknown): unknown {
  if (Array.isArray(node)) return node.map(withoutPositions);
  if (node && typeof node === 'object') {
    return Object.fromEntries(
      Object.entries(node)
        .filter(([k]) => k !== 'pos')
        .map(([k, v]) => [k, withoutPositions(v)]),
    );
  }
  return node;
}
