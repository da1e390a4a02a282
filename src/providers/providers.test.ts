import { Response } from 'undici';
import { describe, expect, it, vi } from 'vitest';
import type { ResolvedConnection } from '../connections/connection.service.js';
import { AnthropicProvider } from './anthropic.provider.js';
import { OpenAiProvider } from './openai.provider.js';
import { MAX_TOKENS_PER_CALL, ProviderError, tokenCount } from './provider.js';

/** A connection whose requests `send` answers (the egress policy and the credential are the connection's own business). */
const connection = (type: 'openai' | 'anthropic', send: ResolvedConnection['fetch']): ResolvedConnection => ({
  id: 1,
  type,
  baseUrl: 'http://provider.invalid/v1/',
  fetch: send,
  call: () => Promise.reject(new Error('a model provider streams its answer through fetch')),
  redact: (value) => value,
});

/** A streamed body cut at awkward places (inside events, inside CRLF pairs). */
function streamed(text: string, cut = 7): Response {
  const bytes = new TextEncoder().encode(text);
  const body = new ReadableStream<Uint8Array>({
    start(controller) {
      for (let i = 0; i < bytes.length; i += cut) controller.enqueue(bytes.slice(i, i + cut));
      controller.close();
    },
  });
  return new Response(body, { headers: { 'content-type': 'text/event-stream' } });
}

const request = (deltas: string[]) => ({
  model: 'm',
  messages: [{ role: 'user' as const, content: 'hi' }],
  timeoutMs: 1000,
  onDelta: (d: string) => void deltas.push(d),
});

describe('OpenAI-compatible stream', () => {
  it('joins text and tool-call fragments and reads the usage chunk', async () => {
    const events = [
      { choices: [{ delta: { content: 'Hel' } }] },
      { choices: [{ delta: { content: 'lo' } }] },
      { choices: [{ delta: { tool_calls: [{ index: 0, id: 'c1', function: { name: 'records_get', arguments: '{"entity":' } }] } }] },
      { choices: [{ delta: { tool_calls: [{ index: 0, function: { arguments: '"note","uuid":"u"}' } }] } }] },
      { choices: [{ delta: {}, finish_reason: 'tool_calls' }] },
      { choices: [], usage: { prompt_tokens: 12, completion_tokens: 4 } },
    ];
    const fetch = vi.fn(async () => streamed(events.map((e) => `data: ${JSON.stringify(e)}\r\n\r\n`).join('') + 'data: [DONE]\r\n\r\n'));
    const deltas: string[] = [];
    const reply = await new OpenAiProvider(connection('openai', fetch)).complete(request(deltas));
    expect(reply).toEqual({
      text: 'Hello',
      toolCalls: [{ id: 'c1', name: 'records_get', args: { entity: 'note', uuid: 'u' } }],
      usage: { tokensIn: 12, tokensOut: 4 },
    });
    expect(deltas).toEqual(['Hel', 'lo']);
    const [url, init] = fetch.mock.calls[0] as unknown as [URL, { body: string }];
    expect(url.href).toBe('http://provider.invalid/v1/chat/completions');
    expect(JSON.parse(init.body as string)).toMatchObject({ stream: true, stream_options: { include_usage: true } });
  });

  it('calls a stream cut short malformed', async () => {
    const send = async () => streamed(`data: ${JSON.stringify({ choices: [{ delta: { content: 'x' } }] })}\n\n`);
    await expect(new OpenAiProvider(connection('openai', send)).complete(request([]))).rejects.toMatchObject({ code: 'provider_error' });
  });

  it('maps statuses: 401 refused, 429 and 5xx retryable, other 4xx not', async () => {
    for (const [status, code, retryable] of [
      [401, 'provider_auth_failed', false],
      [403, 'provider_auth_failed', false],
      [429, 'provider_unavailable', true],
      [502, 'provider_unavailable', true],
      [400, 'provider_error', false],
    ] as const) {
      const send = async () => new Response('{"error": "x"}', { status });
      const err = await new OpenAiProvider(connection('openai', send)).complete({ model: 'm', messages: [], timeoutMs: 1000 }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ProviderError);
      expect(err).toMatchObject({ code, retryable });
    }
  });
});

describe('Anthropic stream', () => {
  it('assembles text and tool_use input from deltas, with usage from start and delta', async () => {
    const ev = (type: string, data: Record<string, unknown>) => `event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`;
    const body =
      ev('message_start', { message: { usage: { input_tokens: 20, output_tokens: 1 } } }) +
      ev('content_block_start', { index: 0, content_block: { type: 'text', text: '' } }) +
      ev('content_block_delta', { index: 0, delta: { type: 'text_delta', text: 'Sure.' } }) +
      ev('content_block_stop', { index: 0 }) +
      ev('content_block_start', { index: 1, content_block: { type: 'tool_use', id: 't1', name: 'entities_list', input: {} } }) +
      ev('content_block_delta', { index: 1, delta: { type: 'input_json_delta', partial_json: '{"q"' } }) +
      ev('content_block_delta', { index: 1, delta: { type: 'input_json_delta', partial_json: ':"x"}' } }) +
      ev('content_block_stop', { index: 1 }) +
      ev('message_delta', { delta: { stop_reason: 'tool_use' }, usage: { output_tokens: 9 } }) +
      ev('message_stop', {});
    const deltas: string[] = [];
    const reply = await new AnthropicProvider(connection('anthropic', async () => streamed(body, 5))).complete(request(deltas));
    expect(reply).toEqual({ text: 'Sure.', toolCalls: [{ id: 't1', name: 'entities_list', args: { q: 'x' } }], usage: { tokensIn: 20, tokensOut: 9 } });
    expect(deltas).toEqual(['Sure.']);
  });

  it('reports an unreachable host as provider_error', async () => {
    const send = async (): Promise<Response> => {
      throw Object.assign(new TypeError('fetch failed'), { cause: { code: 'ECONNREFUSED' } });
    };
    await expect(new AnthropicProvider(connection('anthropic', send)).complete({ model: 'm', messages: [], timeoutMs: 1000 })).rejects.toMatchObject({
      code: 'provider_error',
      message: expect.stringContaining('unreachable'),
    });
  });
});

describe('token counts as providers report them', () => {
  it('are made sane integers: rounded, at least 0, at most MAX_TOKENS_PER_CALL; anything else is 0', () => {
    for (const [reported, counted] of [
      [12, 12],
      [1.5, 2],
      [1e308, MAX_TOKENS_PER_CALL],
      [Number.POSITIVE_INFINITY, MAX_TOKENS_PER_CALL],
      [-4, 0],
      [Number.NaN, 0],
      ['37', 37],
      ['many', 0],
      ['', 0],
      [null, 0],
      [undefined, 0],
      [{ n: 3 }, 0],
    ] as const) {
      expect(tokenCount(reported), String(reported)).toBe(counted);
    }
  });
});
