// One thread of the expression sandbox (src/nodes/expression-sandbox.ts). It evaluates the `{{ }}`
// templates of one node at a time, off the main thread: however long an expression runs (a regular
// expression that backtracks, a sort of a huge array) or however much memory it takes, it stalls
// only this thread, which the sandbox terminates at its deadline or when it exceeds its heap.
// Plain JavaScript: a worker thread loads it without the TypeScript loader.
import { parentPort } from 'node:worker_threads';
import jsonata from 'jsonata';

const WHOLE = /^\s*\{\{([\s\S]+?)\}\}\s*$/;
const PART = /\{\{([\s\S]+?)\}\}/g;
/**
 * JSONata's own guardrails, within the sandbox's deadline: its evaluation loop stops itself a
 * little before the thread would be terminated, and recursion and sequences are bounded too.
 */
const guardrails = (timeoutMs) => ({ timeout: Math.max(10, timeoutMs - 50), stack: 500, sequence: 100_000 });
const compiled = new Map();

class ExpressionFailure extends Error {
  constructor(message, limit = false) {
    super(message);
    this.limit = limit;
  }
}

function compile(source, timeoutMs) {
  const key = `${timeoutMs}\u0000${source}`;
  let expression = compiled.get(key);
  if (!expression) {
    try {
      expression = jsonata(source, guardrails(timeoutMs));
    } catch (err) {
      throw new ExpressionFailure(`Invalid expression "${source.trim()}": ${err.message}${err.position !== undefined ? ` at ${err.position}` : ''}`);
    }
    if (compiled.size > 5000) compiled.clear();
    compiled.set(key, expression);
  }
  return expression;
}

/** JSONata's guardrail codes: what the expression may cost, not what it means. */
const LIMITS = { D1012: 'ran too long', D1011: 'recursed too deeply', D2015: 'built too long a sequence' };

async function evaluate(source, context, timeoutMs) {
  const expression = compile(source, timeoutMs);
  try {
    return await expression.evaluate(context);
  } catch (err) {
    const limit = LIMITS[err.code];
    throw new ExpressionFailure(`Expression "${source.trim()}" ${limit ?? `failed: ${err.message}`}`, limit !== undefined);
  }
}

const asText = (value) => (value === undefined || value === null ? '' : typeof value === 'string' ? value : JSON.stringify(value));

/** A string that is one whole `{{ }}` yields the raw value; other strings get each `{{ }}` replaced by its text. */
async function resolve(value, context, timeoutMs) {
  if (typeof value === 'string') {
    const whole = WHOLE.exec(value);
    if (whole) return evaluate(whole[1], context, timeoutMs);
    if (!value.includes('{{')) return value;
    let out = '';
    let last = 0;
    for (const match of value.matchAll(PART)) {
      out += value.slice(last, match.index) + asText(await evaluate(match[1], context, timeoutMs));
      last = match.index + match[0].length;
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

parentPort.on('message', async ({ id, template, context, timeoutMs, resultBytes }) => {
  try {
    const value = await resolve(template, context, timeoutMs);
    if (largerThan(value, resultBytes)) throw new ExpressionFailure(`The node's evaluated configuration is larger than ${resultBytes} bytes`, true);
    try {
      parentPort.postMessage({ id, ok: true, value });
    } catch {
      // A value that is not plain data (a function an expression returned): as it would be stored.
      parentPort.postMessage({ id, ok: true, value: value === undefined ? undefined : JSON.parse(JSON.stringify(value) ?? 'null') });
    }
  } catch (err) {
    const failure = err instanceof ExpressionFailure;
    parentPort.postMessage({ id, ok: false, limit: failure && err.limit, message: failure ? err.message : `Expression failed: ${err?.message ?? err}` });
  }
});
