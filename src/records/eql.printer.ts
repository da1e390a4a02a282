import type { Expr, FieldRef, Value } from './eql.ast.js';

/**
 * Prints an EQL tree back as text that parses to the same tree: canonical spacing, lower-case
 * keywords, single-quoted strings, and only the parentheses the tree needs.
 */

function printString(value: string): string {
  let out = "'";
  for (const ch of value) {
    const code = ch.codePointAt(0)!;
    if (ch === "'" || ch === '\\') out += `\\${ch}`;
    else if (ch === '\n') out += '\\n';
    else if (ch === '\r') out += '\\r';
    else if (ch === '\t') out += '\\t';
    else if (code < 0x20 || code === 0x7f) out += `\\u${code.toString(16).padStart(4, '0')}`;
    else out += ch;
  }
  return `${out}'`;
}

export function printLiteral(literal: Value): string {
  switch (literal.type) {
    case 'param':
      return `:${literal.name}`;
    case 'string':
      return printString(literal.value);
    // String(-0) is "0"; the sign matters to nothing EQL compares, but keep it exact.
    case 'number':
      return Object.is(literal.value, -0) ? '-0' : String(literal.value);
    case 'boolean':
      return literal.value ? 'true' : 'false';
    case 'null':
      return 'null';
  }
}

const printField = (field: FieldRef) => field.path.join('.');

const precedence = (expr: Expr) => (expr.kind === 'or' ? 1 : expr.kind === 'and' ? 2 : 3);

function wrap(expr: Expr, parens: boolean): string {
  const text = printEql(expr);
  return parens ? `(${text})` : text;
}

export function printEql(expr: Expr): string {
  switch (expr.kind) {
    case 'or':
    case 'and': {
      const own = precedence(expr);
      // Left-associative: a right operand of the same precedence needs parentheses to stay right.
      return `${wrap(expr.left, precedence(expr.left) < own)} ${expr.kind} ${wrap(expr.right, precedence(expr.right) <= own)}`;
    }
    case 'not':
      return `not ${wrap(expr.operand, expr.operand.kind === 'and' || expr.operand.kind === 'or')}`;
    case 'compare':
      return `${printField(expr.field)} ${expr.op} ${printLiteral(expr.value)}`;
    case 'in':
      return `${printField(expr.field)} ${expr.negated ? 'not in' : 'in'} (${expr.values.map(printLiteral).join(', ')})`;
    case 'is_null':
      return `${printField(expr.field)} is ${expr.negated ? 'not null' : 'null'}`;
  }
}
