import { type AnswerHeaders, type EgressAnswer, EgressDeniedError, ResponseTooLargeError, TooManyRedirectsError } from '../platform/egress.js';
import { parseBoundedJson } from '../platform/json-depth.js';
import type { ResolvedConnection } from './connection.service.js';

export interface HttpResult {
  status: number;
  /** Names in lower case; `set-cookie` is the list of every cookie the answer sets. */
  headers: AnswerHeaders;
  body: unknown;
}

/** A network-level failure (DNS, refused, reset, timeout), described for people. */
export class HttpCallError extends Error {
  constructor(
    message: string,
    readonly reason: 'dns' | 'refused' | 'timeout' | 'network' | 'invalid_url' | 'too_many_redirects' | 'invalid_response',
  ) {
    super(message);
    this.name = 'HttpCallError';
  }
}

/** Joins a connection's base URL and a relative path without losing the base's own path. */
export function joinUrl(base: string, path: string, query?: Record<string, unknown>): URL {
  let url: URL;
  try {
    url = new URL(base.replace(/\/+$/, '') + (path ? (path.startsWith('/') ? path : `/${path}`) : ''));
  } catch {
    throw new HttpCallError(`Invalid URL from base ${base} and path ${path}`, 'invalid_url');
  }
  for (const [k, v] of Object.entries(query ?? {})) {
    if (v !== undefined && v !== null) url.searchParams.append(k, typeof v === 'string' ? v : JSON.stringify(v));
  }
  return url;
}

function describe(err: unknown, url: URL, timeoutMs: number): HttpCallError {
  const cause = (err as { cause?: { code?: string; message?: string } }).cause;
  const code = cause?.code ?? (err as { code?: string }).code;
  if ((err as Error).name === 'TimeoutError') return new HttpCallError(`No answer from ${url.host} within ${timeoutMs} ms`, 'timeout');
  if (code === 'ENOTFOUND' || code === 'EAI_AGAIN') return new HttpCallError(`Host ${url.hostname} could not be resolved`, 'dns');
  if (code === 'ECONNREFUSED') return new HttpCallError(`Connection to ${url.host} was refused`, 'refused');
  return new HttpCallError(`Request to ${url.host} failed: ${cause?.message ?? (err as Error).message}`, 'network');
}

/**
 * One HTTP request with the connection's credential applied (to its own origin only), within the
 * egress policy (EgressDeniedError passes through), and a bounded wait. The answer's body is read
 * up to the policy's SVC_EGRESS_RESPONSE_LIMIT (ResponseTooLargeError passes through); with
 * `readBody: false` it is not read at all (`body` is null).
 */
export async function httpCall(
  connection: ResolvedConnection,
  request: { method: string; path: string; headers?: Record<string, string>; query?: Record<string, unknown>; body?: unknown },
  options: { timeoutMs: number; signal?: AbortSignal; readBody?: boolean },
): Promise<HttpResult> {
  const url = joinUrl(connection.baseUrl, request.path, request.query);
  const headers: Record<string, string> = { accept: 'application/json, */*;q=0.5' };
  for (const [k, v] of Object.entries(request.headers ?? {})) headers[k.toLowerCase()] = v;
  let body: string | undefined;
  if (request.body !== undefined && request.body !== null && request.method !== 'GET' && request.method !== 'HEAD') {
    body = typeof request.body === 'string' ? request.body : JSON.stringify(request.body);
    headers['content-type'] ??= typeof request.body === 'string' ? 'text/plain' : 'application/json';
  }
  // One controller for the call's bound and the caller's cancel: cheaper than AbortSignal.timeout
  // and AbortSignal.any, which a call made for every node pays for.
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(new DOMException(`No answer within ${options.timeoutMs} ms`, 'TimeoutError')), options.timeoutMs);
  const cancel = () => controller.abort(options.signal?.reason);
  if (options.signal?.aborted) cancel();
  else options.signal?.addEventListener('abort', cancel, { once: true });
  let response: EgressAnswer;
  try {
    response = await connection.call(
      url,
      { method: request.method, headers, ...(body !== undefined ? { body } : {}), signal: controller.signal },
      options.readBody !== false,
    );
  } catch (err) {
    if (err instanceof EgressDeniedError || err instanceof ResponseTooLargeError) throw err;
    if (err instanceof TooManyRedirectsError) throw new HttpCallError(`${err.message} from ${url.host}`, 'too_many_redirects');
    throw describe(err, url, options.timeoutMs);
  } finally {
    clearTimeout(timer);
    options.signal?.removeEventListener('abort', cancel);
  }
  if (response.body === null) return { status: response.status, headers: response.headers, body: null };
  const buffer = response.body;
  const text = buffer.toString('utf8');
  let parsed: unknown = text;
  if ((response.headers['content-type'] ?? '').includes('json') && text) {
    try {
      parsed = parseBoundedJson(text);
    } catch (err) {
      if (/nests deeper/.test((err as Error).message))
        throw new HttpCallError(`The answer from ${url.host} is JSON ${(err as Error).message}`, 'invalid_response');
      parsed = text;
    }
  }
  return { status: response.status, headers: response.headers, body: parsed };
}
