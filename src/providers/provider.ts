import type { Response } from 'undici';
import type { ResolvedConnection } from '../connections/connection.service.js';
import { EgressDeniedError, ResponseTooLargeError, TooManyRedirectsError } from '../platform/egress.js';
import { CODE, type ErrorCode } from '../../workflows/error-codes.js';

/** One tool call the model asked for; `id` links it to its result in the next request. */
export interface ToolCall {
  id: string;
  name: string;
  args: Record<string, unknown>;
}

/** The conversation as the provider layer sees it, independent of any vendor's wire format. */
export type ChatMessage =
  | { role: 'user'; content: string }
  | { role: 'assistant'; content: string; toolCalls: ToolCall[] }
  | { role: 'tool'; toolCallId: string; name: string; content: string };

export interface ToolSpec {
  name: string;
  description: string;
  /** JSON Schema of the arguments. */
  parameters: Record<string, unknown>;
}

export interface ModelRequest {
  model: string;
  system?: string;
  messages: ChatMessage[];
  tools?: ToolSpec[];
  maxTokens?: number;
  /** Present when the caller wants the answer streamed; called with each text fragment. */
  onDelta?: (text: string) => void | Promise<void>;
  timeoutMs: number;
  signal?: AbortSignal;
}

export interface ModelReply {
  text: string;
  toolCalls: ToolCall[];
  usage: { tokensIn: number; tokensOut: number };
}

/** The most tokens one model call is counted with: far beyond any model's context, far below what breaks a sum. */
export const MAX_TOKENS_PER_CALL = 1_000_000_000;

/**
 * A token count as a provider reports it, made a sane integer: a number is rounded and kept
 * within 0 and MAX_TOKENS_PER_CALL (a provider that claims 1e308 tokens is counted at the
 * cap), anything else (a string, null, NaN) counts 0. Stored counts feed sums and budgets.
 */
export function tokenCount(value: unknown): number {
  const n = typeof value === 'number' ? value : typeof value === 'string' && value.trim() !== '' ? Number(value) : NaN;
  if (Number.isNaN(n) || n <= 0) return 0;
  return Math.min(Math.round(n), MAX_TOKENS_PER_CALL);
}

/**
 * `provider_unavailable` (429, 5xx) is worth retrying with backoff; the other two are not:
 * a wrong key stays wrong, and an unreachable host or a malformed answer is reported at once.
 */
export type ProviderErrorCode = Extract<
  ErrorCode,
  'provider_error' | 'provider_auth_failed' | 'provider_unavailable' | 'egress_denied' | 'forbidden' | 'response_too_large'
>;

export class ProviderError extends Error {
  constructor(
    readonly code: ProviderErrorCode,
    message: string,
    readonly httpStatus?: number,
  ) {
    super(message);
    this.name = 'ProviderError';
  }

  get retryable(): boolean {
    return this.code === 'provider_unavailable';
  }
}

export interface ModelProvider {
  complete(request: ModelRequest): Promise<ModelReply>;
}

/** The first `bytes` of a body as text, the rest never read (an error answer's excerpt). */
async function excerpt(response: Response, bytes: number): Promise<string> {
  const reader = response.body?.getReader();
  if (!reader) return '';
  const chunks: Uint8Array[] = [];
  let read = 0;
  try {
    while (read < bytes) {
      const { done, value } = await reader.read();
      if (done) break;
      chunks.push(value);
      read += value.byteLength;
    }
  } catch {
    // What was read before the failure is the excerpt.
  } finally {
    await reader.cancel().catch(() => undefined);
  }
  return Buffer.concat(chunks).subarray(0, bytes).toString('utf8');
}

/** Maps a provider's HTTP status to the error the turn reports. */
export async function errorForStatus(response: Response, vendor: string): Promise<ProviderError> {
  const text = (await excerpt(response, 1200)).slice(0, 300);
  const detail = text ? `: ${text}` : '';
  if (response.status === 401 || response.status === 403) {
    return new ProviderError(CODE.provider_auth_failed, `${vendor} refused the credential (HTTP ${response.status})`, response.status);
  }
  if (response.status === 429 || response.status >= 500) {
    return new ProviderError(CODE.provider_unavailable, `${vendor} answered HTTP ${response.status}${detail}`, response.status);
  }
  return new ProviderError(CODE.provider_error, `${vendor} answered HTTP ${response.status}${detail}`, response.status);
}

/** POSTs a JSON body with the connection's credential; network failures become provider_error. */
export async function postJson(
  connection: ResolvedConnection,
  path: string,
  body: unknown,
  request: ModelRequest,
  vendor: string,
  extraHeaders: Record<string, string> = {},
): Promise<Response> {
  let url: URL;
  try {
    url = new URL(connection.baseUrl.replace(/\/+$/, '') + path);
  } catch {
    throw new ProviderError(CODE.provider_error, `${vendor}: the connection's base_url is not a URL`);
  }
  const headers: Record<string, string> = {
    'content-type': 'application/json',
    accept: request.onDelta ? 'text/event-stream' : 'application/json',
    ...extraHeaders,
  };
  const signals = [AbortSignal.timeout(request.timeoutMs), ...(request.signal ? [request.signal] : [])];
  try {
    return await connection.fetch(url, { method: 'POST', headers, body: JSON.stringify(body), signal: AbortSignal.any(signals) });
  } catch (err) {
    throw networkError(err, vendor, request.timeoutMs);
  }
}

export function networkError(err: unknown, vendor: string, timeoutMs: number): ProviderError {
  if (err instanceof ProviderError) return err;
  if (err instanceof EgressDeniedError) return new ProviderError(CODE.egress_denied, `${vendor}: the egress policy refused the call: ${err.message}`);
  if (err instanceof ResponseTooLargeError)
    return new ProviderError(
      CODE.response_too_large,
      `${vendor} sent an answer larger than ${err.limit} bytes (SVC_EGRESS_RESPONSE_LIMIT); it was not read past that`,
    );
  if (err instanceof TooManyRedirectsError) return new ProviderError(CODE.provider_error, `${vendor} answered with too many redirects`);
  if ((err as Error).name === 'TimeoutError') return new ProviderError(CODE.provider_error, `${vendor} did not answer within ${timeoutMs} ms`);
  const cause = (err as { cause?: { code?: string; message?: string } }).cause;
  return new ProviderError(CODE.provider_error, `${vendor} is unreachable: ${cause?.code ?? cause?.message ?? (err as Error).message}`);
}

export interface SseEvent {
  event?: string;
  data: string;
}

/** Reads a `text/event-stream` body event by event; a broken connection becomes provider_error. */
export async function* readSse(response: Response, vendor: string, timeoutMs: number): AsyncGenerator<SseEvent> {
  if (!response.body) throw new ProviderError(CODE.provider_error, `${vendor} sent an empty stream`);
  const decoder = new TextDecoder();
  let buffer = '';
  const parse = (block: string): SseEvent | undefined => {
    let event: string | undefined;
    const data: string[] = [];
    for (const line of block.split(/\r?\n/)) {
      if (line.startsWith('event:')) event = line.slice(6).trim();
      else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
    }
    return data.length ? { ...(event ? { event } : {}), data: data.join('\n') } : undefined;
  };
  try {
    for await (const chunk of response.body as unknown as AsyncIterable<Uint8Array>) {
      buffer += decoder.decode(chunk, { stream: true });
      let cut: RegExpExecArray | null;
      while ((cut = /\r?\n\r?\n/.exec(buffer))) {
        const block = buffer.slice(0, cut.index);
        buffer = buffer.slice(cut.index + cut[0].length);
        const event = parse(block);
        if (event) yield event;
      }
    }
  } catch (err) {
    throw networkError(err, vendor, timeoutMs);
  }
  const last = parse(buffer);
  if (last) yield last;
}

/** The JSON body of a provider's answer, read up to the egress policy's limit. */
export async function readJsonBody(response: Response, vendor: string, timeoutMs: number): Promise<any> {
  let text: string;
  try {
    text = await response.text();
  } catch (err) {
    throw networkError(err, vendor, timeoutMs);
  }
  try {
    return JSON.parse(text);
  } catch {
    throw new ProviderError(CODE.provider_error, `${vendor} sent a body that is not JSON`);
  }
}

/** JSON of one stream event; anything else means the stream is malformed. */
export function parseEventJson(data: string, vendor: string): Record<string, any> {
  try {
    const value: unknown = JSON.parse(data);
    if (value && typeof value === 'object') return value as Record<string, any>;
  } catch {
    // reported below
  }
  throw new ProviderError(CODE.provider_error, `${vendor} sent a malformed stream event`);
}

/** Tool arguments arrive as JSON text; a model that sends something else gets an empty object. */
export function parseArgs(text: string | undefined, vendor: string): Record<string, unknown> {
  if (!text) return {};
  try {
    const value: unknown = JSON.parse(text);
    if (value && typeof value === 'object' && !Array.isArray(value)) return value as Record<string, unknown>;
  } catch {
    // reported below
  }
  throw new ProviderError(CODE.provider_error, `${vendor} sent tool arguments that are not a JSON object`);
}
