import jsonata from 'jsonata';
import { templateParts } from '../../workflows/template-scan.mjs';

/** Raised for a malformed or failing `{{ }}` expression; becomes the node error `expression_error`. */
export class ExpressionError extends Error {
  constructor(
    message: string,
    readonly expression: string,
    /** Where in the template (0-based) the problem is, when JSONata says. */
    readonly position?: number,
  ) {
    super(message);
    this.name = 'ExpressionError';
  }
}

export interface ExpressionContext {
  trigger: unknown;
  nodes: Record<string, unknown>;
  execution: { id: number; workflow_id: number };
  /** Inside a for_each body: the item and its index. */
  item?: unknown;
  index?: number;
}

/**
 * Checks one expression's syntax; `offset` is where it starts in its template, so a position is
 * told in the template's terms. Only parsing happens here, on the calling thread: evaluating what
 * an author wrote is the expression sandbox's (expression-sandbox.ts), which bounds its time and
 * memory.
 */
function compile(source: string, offset: number): void {
  try {
    jsonata(source);
  } catch (err) {
    const e = err as { message?: string; position?: number };
    // JSONata counts the character after the problem, from 1: the 0-based index of that character.
    const position = e.position !== undefined ? offset + Math.max(0, e.position - 1) : undefined;
    throw new ExpressionError(`Invalid expression "${source.trim()}": ${e.message}${position !== undefined ? ` at ${position}` : ''}`, source, position);
  }
}

/**
 * The syntax problems of one template string: each `{{ }}` must parse, and be closed (a `}}`
 * inside the expression's own braces, brackets, strings or comments does not close it).
 */
export function templateProblems(text: string): ExpressionError[] {
  const problems: ExpressionError[] = [];
  for (const part of templateParts(text)) {
    if (part.end < 0) {
      problems.push(new ExpressionError(`"{{" at ${part.start} is never closed by a matching "}}"`, part.source, part.start));
      continue;
    }
    try {
      compile(part.source, part.start + 2);
    } catch (err) {
      problems.push(err as ExpressionError);
    }
  }
  return problems;
}

/** Checks the syntax of every `{{ }}` in a value; returns the problems (definition-time validation). */
export function checkTemplates(value: unknown, path = 'config'): { field: string; message: string }[] {
  const problems: { field: string; message: string }[] = [];
  const visit = (v: unknown, p: string) => {
    if (typeof v === 'string') {
      for (const problem of templateProblems(v)) problems.push({ field: p, message: problem.message });
    } else if (Array.isArray(v)) v.forEach((item, i) => visit(item, `${p}.${i}`));
    else if (v && typeof v === 'object') for (const [k, item] of Object.entries(v)) visit(item, `${p}.${k}`);
  };
  visit(value, path);
  return problems;
}

/** Whether a value holds any `{{ }}` to evaluate (anything else is its own result). */
export function hasTemplates(value: unknown): boolean {
  if (typeof value === 'string') return value.includes('{{');
  if (Array.isArray(value)) return value.some(hasTemplates);
  if (value && typeof value === 'object') return Object.values(value).some(hasTemplates);
  return false;
}
