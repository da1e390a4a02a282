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
}

const WHOLE = /^\s*\{\{([\s\S]+?)\}\}\s*$/;
const PART = /\{\{([\s\S]+?)\}\}/g;
/** Guardrails of JSONata itself: a definition cannot hang or exhaust a worker. */
const GUARDRAILS = { timeout: 1000, stack: 500, sequence: 100_000 };
const compiled = new Map<string, jsonata.Expression>();

function compile(source: string): jsonata.Expression {
  let expression = compiled.get(source);
  if (!expression) {
    try {
      expression = jsonata(source, GUARDRAILS);
    } catch (err) {
      const e = err as { message?: string; position?: number };
      throw new ExpressionError(`Invalid expression "${source.trim()}": ${e.message}${e.position !== undefined ? ` at ${e.position}` : ''}`, source);
    }
    if (compiled.size > 5000) compiled.clear();
    compiled.set(source, expression);
  }
  return expression;
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

/** Evaluates one JSONata expression against the run's context. */
export async function evaluate(source: string, context: ExpressionContext): Promise<unknown> {
  const expression = compile(source);
  try {
    return await expression.evaluate(context);
  } catch (err) {
    const e = err as { message?: string; code?: string };
    const reason =
      e.code === 'D1012' ? 'ran too long' : e.code === 'D1011' ? 'nests too deeply' : e.code === 'D2015' ? 'built too long a sequence' : `failed: ${e.message}`;
    throw new ExpressionError(`Expression "${source.trim()}" ${reason}`, source);
  }
}

const asText = (value: unknown) => (value === undefined || value === null ? '' : typeof value === 'string' ? value : JSON.stringify(value));

/**
 * Resolves a JSON template: a string that is one whole `{{ }}` yields the raw value; other
 * strings get each `{{ }}` replaced by its text. Object keys are taken literally.
 */
export async function resolveTemplate(value: unknown, context: ExpressionContext): Promise<unknown> {
  if (typeof value === 'string') {
    const whole = WHOLE.exec(value);
    if (whole) return evaluate(whole[1]!, context);
    if (!value.includes('{{')) return value;
    let out = '';
    let last = 0;
    for (const match of value.matchAll(PART)) {
      out += value.slice(last, match.index) + asText(await evaluate(match[1]!, context));
      last = match.index! + match[0].length;
    }
    return out + value.slice(last);
  }
  if (Array.isArray(value)) return Promise.all(value.map((v) => resolveTemplate(v, context)));
  if (value && typeof value === 'object') {
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(value)) out[k] = await resolveTemplate(v, context);
    return out;
  }
  return value;
}
