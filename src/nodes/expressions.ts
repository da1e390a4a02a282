import jsonata from 'jsonata';

/** Raised for a malformed or failing `{{ }}` expression; becomes the node error `expression_error`. */
export class ExpressionError extends Error {
  constructor(
    message: string,
    readonly expression: string,
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

const PART = /\{\{([\s\S]+?)\}\}/g;
/**
 * Checks one expression's syntax. Only parsing happens here, on the calling thread: evaluating
 * what an author wrote is the expression sandbox's (expression-sandbox.ts), which bounds its time
 * and memory.
 */
function compile(source: string): void {
  try {
    jsonata(source);
  } catch (err) {
    const e = err as { message?: string; position?: number };
    throw new ExpressionError(`Invalid expression "${source.trim()}": ${e.message}${e.position !== undefined ? ` at ${e.position}` : ''}`, source);
  }
}

/** Checks the syntax of every `{{ }}` in a value; returns the problems (definition-time validation). */
export function checkTemplates(value: unknown, path = 'config'): { field: string; message: string }[] {
  const problems: { field: string; message: string }[] = [];
  const visit = (v: unknown, p: string) => {
    if (typeof v === 'string') {
      for (const match of v.matchAll(PART)) {
        try {
          compile(match[1]!);
        } catch (err) {
          problems.push({ field: p, message: (err as Error).message });
        }
      }
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
