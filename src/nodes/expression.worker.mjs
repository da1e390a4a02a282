// One thread of the expression sandbox (src/nodes/expression-sandbox.ts). It evaluates the `{{ }}`
// templates of one node at a time, off the main thread: however long an expression runs (a regular
// expression that backtracks, a sort of a huge array) or however much memory it takes, it stalls
// only this thread, which the sandbox terminates at its deadline or when it exceeds its heap.
// Plain JavaScript: a worker thread loads it without the TypeScript loader.
import { parentPort } from 'node:worker_threads';
import jsonata from 'jsonata';
import { templateParts, wholeExpression } from '../../workflows/template-scan.mjs';
import { schemaValidators } from './schema-validators.mjs';
/**
 * JSONata's own guardrails, within the sandbox's deadline: its evaluation loop stops itself a
 * little before the thread would be terminated, and recursion and sequences are bounded too.
 */
const guardrails = (timeoutMs) => ({ timeout: Math.max(10, timeoutMs - 50), stack: 500, sequence: 100_000 });
const compiled = new Map();

class ExpressionFailure extends Error {
  constructor(message, limit = false, position = undefined) {
    super(message);
    this.limit = limit;
    this.position = position;
  }
}

/** JSONata counts the character after a problem from 1: the 0-based index in the template, past `offset`. */
const positionOf = (err, offset) => (typeof err?.position === 'number' ? offset + Math.max(0, err.position - 1) : undefined);

function compile(source, timeoutMs, offset) {
  const key = `${timeoutMs}\u0000${source}`;
  let expression = compiled.get(key);
  if (!expression) {
    try {
      expression = jsonata(source, guardrails(timeoutMs));
    } catch (err) {
      const position = positionOf(err, offset);
      throw new ExpressionFailure(`Invalid expression "${source.trim()}": ${err.message}${position !== undefined ? ` at ${position}` : ''}`, false, position);
    }
    if (compiled.size > 5000) compiled.clear();
    compiled.set(key, expression);
  }
  return expression;
}

/** JSONata's guardrail codes: what the expression may cost, not what it means. */
const LIMITS = { D1012: 'ran too long', D1011: 'recursed too deeply', D2015: 'built too long a sequence' };

/** Evaluates one expression; `offset` is where it starts in its template string (for error positions). */
async function evaluate(source, context, timeoutMs, offset = 0) {
  const expression = compile(source, timeoutMs, offset);
  try {
    return await expression.evaluate(context);
  } catch (err) {
    const limit = LIMITS[err.code];
    throw new ExpressionFailure(`Expression "${source.trim()}" ${limit ?? `failed: ${err.message}`}`, limit !== undefined, positionOf(err, offset));
  }
}

const asText = (value) => (value === undefined || value === null ? '' : typeof value === 'string' ? value : JSON.stringify(value));

/**
 * A string that is one whole `{{ }}` yields the raw value; other strings get each `{{ }}` replaced
 * by its text. A `{{` nothing closes is text (as it always was; saving a workflow refuses it).
 */
async function resolve(value, context, timeoutMs) {
  if (typeof value === 'string') {
    if (!value.includes('{{')) return value;
    const whole = wholeExpression(value);
    if (whole !== undefined) return evaluate(whole, context, timeoutMs, value.indexOf('{{') + 2);
    let out = '';
    let last = 0;
    for (const part of templateParts(value)) {
      if (part.end < 0) break;
      out += value.slice(last, part.start) + asText(await evaluate(part.source, context, timeoutMs, part.start + 2));
      last = part.end;
    }
    return out + value.slice(last);
  }
  if (Array.isArray(value)) {
    const out = [];
    for (const item of value) out.push(await resolve(item, context, timeoutMs));
    return out;
  }
  if (value && typeof value === 'object') {
    const out = {};
    for (const [key, item] of Object.entries(value)) out[key] = await resolve(item, context, timeoutMs);
    return out;
  }
  return value;
}

/** Whether a value would take more than `limit` bytes as JSON (roughly; stops counting once it does). */
function largerThan(value, limit) {
  let size = 0;
  const stack = [value];
  while (stack.length) {
    const item = stack.pop();
    if (typeof item === 'string') size += item.length + 2;
    else if (item !== null && typeof item === 'object') {
      for (const [key, child] of Object.entries(item)) {
        size += key.length + 4;
        stack.push(child);
      }
    } else size += 8;
    if (size > limit) return true;
  }
  return false;
}

// Loaded and listening: the sandbox starts a job's deadline only now, so a thread's start (slow on
// a busy machine) never counts against an expression.
parentPort.postMessage({ ready: true });

/** JSON Schemas checked here, each compiled once: this thread's own cache, of the code src/approvals/editable-fields.ts uses too. */
const schemas = schemaValidators();

/** Ajv's errors of `value` against `schema`, or null: its patterns run here, where the deadline stops them. */
function checkSchema({ schema, value }) {
  const validate = schemas.validatorOf(schema);
  if (validate(value)) return null;
  return validate.errors.map(({ keyword, instancePath, params, message }) => ({ keyword, instancePath, params, message }));
}

parentPort.on('message', async ({ id, template, expression, schemaCheck, context, timeoutMs, resultBytes }) => {
  if (schemaCheck) {
    try {
      parentPort.postMessage({ id, ok: true, value: checkSchema(schemaCheck) });
    } catch (err) {
      parentPort.postMessage({ id, ok: false, message: `The JSON Schema could not be checked: ${err?.message ?? err}` });
    }
    return;
  }
  try {
    const value = expression === undefined ? await resolve(template, context, timeoutMs) : await evaluate(expression, context, timeoutMs);
    if (largerThan(value, resultBytes)) throw new ExpressionFailure(`The node's evaluated configuration is larger than ${resultBytes} bytes`, true);
    try {
      parentPort.postMessage({ id, ok: true, value });
    } catch {
      // A value that is not plain data (a function an expression returned): as it would be stored.
      parentPort.postMessage({ id, ok: true, value: value === undefined ? undefined : JSON.parse(JSON.stringify(value) ?? 'null') });
    }
  } catch (err) {
    const failure = err instanceof ExpressionFailure;
    parentPort.postMessage({
      id,
      ok: false,
      limit: failure && err.limit,
      ...(failure && err.position !== undefined ? { position: err.position } : {}),
      message: failure ? err.message : `Expression failed: ${err?.message ?? err}`,
    });
  }
});
