import type { HttpClient } from './http.js';
import { TARGET_HOST } from './http-target.js';
import { createServer, type Server, type ServerResponse } from 'node:http';

/** One scripted answer of a fake model provider. */
export interface ScriptStep {
  text?: string;
  /** Tool calls of the answer; `id` overrides the id the fake makes up (to send two calls with one id). */
  toolCalls?: { id?: string; name: string; args: Record<string, unknown> }[];
  /** Answer this HTTP status with an error body instead. */
  status?: number;
  /** Stream: send a broken event and end; JSON: send a body that is not JSON. */
  malformed?: boolean;
  delayMs?: number;
  /** Hold the answer until this settles: a call kept in flight for exactly as long as the test needs. */
  until?: Promise<unknown>;
  /** Pause between streamed chunks. */
  chunkDelayMs?: number;
  /** Stream this many text pieces `@<Date.now() at sending>;` instead of `text` (latency benchmarks). */
  stampTokens?: number;
  /** Token counts of the answer's usage, sent as they are (a test may send 1.5 or 1e308). */
  usage?: { in: unknown; out: unknown };
}

export interface SeenModelRequest {
  path: string;
  headers: Record<string, string | string[] | undefined>;
  body: any;
}

export interface FakeProvider {
  url: string;
  requests: SeenModelRequest[];
  /** Queues answers, used in order; with none queued the provider answers "ok". */
  script(...steps: ScriptStep[]): void;
  close(): Promise<void>;
}

type Writer = (req: SeenModelRequest, step: ScriptStep, res: ServerResponse, callSeq: number) => Promise<void>;

const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));
const words = (text: string) => text.match(/\S+\s*|\s+/g) ?? [];

async function serve(path: string, write: Writer): Promise<FakeProvider> {
  const requests: SeenModelRequest[] = [];
  const queue: ScriptStep[] = [];
  let calls = 0;
  const server: Server = createServer((req, res) => {
    let raw = '';
    req.on('data', (c) => (raw += c));
    req.on('end', async () => {
      const seen: SeenModelRequest = { path: req.url ?? '/', headers: req.headers, body: raw ? JSON.parse(raw) : undefined };
      if (seen.path !== path) {
        res.writeHead(404).end();
        return;
      }
      requests.push(seen);
      const step = queue.shift() ?? { text: 'ok' };
      if (step.delayMs) await pause(step.delayMs);
      if (step.until) await step.until.catch(() => undefined);
      if (step.status) {
        res.writeHead(step.status, { 'content-type': 'application/json' }).end(JSON.stringify({ error: { message: `scripted ${step.status}` } }));
        return;
      }
      await write(seen, step, res, ++calls);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, TARGET_HOST, resolve));
  const address = server.address();
  const port = typeof address === 'object' && address ? address.port : 0;
  return {
    url: `http://${TARGET_HOST}:${port}`,
    requests,
    script: (...steps) => void queue.push(...steps),
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

const sse = (res: ServerResponse, step: ScriptStep) => {
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
  return async (data: unknown, event?: string) => {
    res.write(`${event ? `event: ${event}\n` : ''}data: ${typeof data === 'string' ? data : JSON.stringify(data)}\n\n`);
    await pause(step.chunkDelayMs ?? 2);
  };
};

/** An OpenAI-compatible Chat Completions endpoint (`{url}/chat/completions`). */
export function startFakeOpenAi(): Promise<FakeProvider> {
  return serve('/chat/completions', async (req, step, res, seq) => {
    const usage = {
      prompt_tokens: step.usage?.in ?? 11,
      completion_tokens: step.usage?.out ?? 7,
      total_tokens: Number(step.usage?.in ?? 11) + Number(step.usage?.out ?? 7),
    };
    const toolCalls = (step.toolCalls ?? []).map((c, i) => ({
      id: c.id ?? `call_${seq}_${i}`,
      type: 'function',
      function: { name: c.name, arguments: JSON.stringify(c.args) },
    }));
    if (!req.body.stream) {
      if (step.malformed) return void res.writeHead(200, { 'content-type': 'application/json' }).end('{"choices": [');
      const message = { role: 'assistant', content: step.text ?? null, ...(toolCalls.length ? { tool_calls: toolCalls } : {}) };
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({
          id: `chatcmpl-${seq}`,
          object: 'chat.completion',
          model: req.body.model,
          choices: [{ index: 0, message, finish_reason: toolCalls.length ? 'tool_calls' : 'stop' }],
          usage,
        }),
      );
      return;
    }
    const send = sse(res, step);
    const chunk = (delta: unknown, finish: string | null = null) => ({
      id: `chatcmpl-${seq}`,
      object: 'chat.completion.chunk',
      choices: [{ index: 0, delta, finish_reason: finish }],
    });
    await send(chunk({ role: 'assistant', content: '' }));
    if (step.malformed) {
      await send(chunk({ content: 'partial ' }));
      await send('{"choices": [{"delta": ');
      return void res.end();
    }
    if (step.stampTokens) for (let i = 0; i < step.stampTokens; i++) await send(chunk({ content: `@${Date.now()};` }));
    for (const piece of words(step.text ?? '')) await send(chunk({ content: piece }));
    for (const [index, call] of toolCalls.entries()) {
      const args = call.function.arguments;
      const half = Math.floor(args.length / 2);
      await send(chunk({ tool_calls: [{ index, id: call.id, type: 'function', function: { name: call.function.name, arguments: args.slice(0, half) } }] }));
      await send(chunk({ tool_calls: [{ index, function: { arguments: args.slice(half) } }] }));
    }
    await send(chunk({}, toolCalls.length ? 'tool_calls' : 'stop'));
    if (req.body.stream_options?.include_usage) await send({ id: `chatcmpl-${seq}`, object: 'chat.completion.chunk', choices: [], usage });
    await send('[DONE]');
    res.end();
  });
}

/** An Anthropic Messages endpoint (`{url}/v1/messages`). */
export function startFakeAnthropic(): Promise<FakeProvider> {
  return serve('/v1/messages', async (req, step, res, seq) => {
    const usage = { input_tokens: step.usage?.in ?? 13, output_tokens: step.usage?.out ?? 5 };
    const blocks = [
      ...(step.text ? [{ type: 'text', text: step.text }] : []),
      ...(step.toolCalls ?? []).map((c, i) => ({ type: 'tool_use', id: c.id ?? `toolu_${seq}_${i}`, name: c.name, input: c.args })),
    ];
    const stopReason = step.toolCalls?.length ? 'tool_use' : 'end_turn';
    if (!req.body.stream) {
      if (step.malformed) return void res.writeHead(200, { 'content-type': 'application/json' }).end('{"content": [');
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ id: `msg_${seq}`, type: 'message', role: 'assistant', model: req.body.model, content: blocks, stop_reason: stopReason, usage }));
      return;
    }
    const send = sse(res, step);
    await send(
      {
        type: 'message_start',
        message: { id: `msg_${seq}`, type: 'message', role: 'assistant', content: [], usage: { input_tokens: usage.input_tokens, output_tokens: 1 } },
      },
      'message_start',
    );
    if (step.malformed) {
      await send('{"type": "content_block_delta", ', 'content_block_delta');
      return void res.end();
    }
    for (const [index, block] of blocks.entries()) {
      if (block.type === 'text') {
        await send({ type: 'content_block_start', index, content_block: { type: 'text', text: '' } }, 'content_block_start');
        for (const piece of words((block as { text: string }).text))
          await send({ type: 'content_block_delta', index, delta: { type: 'text_delta', text: piece } }, 'content_block_delta');
      } else {
        const b = block as { id: string; name: string; input: unknown };
        await send({ type: 'content_block_start', index, content_block: { type: 'tool_use', id: b.id, name: b.name, input: {} } }, 'content_block_start');
        const json = JSON.stringify(b.input);
        await send({ type: 'content_block_delta', index, delta: { type: 'input_json_delta', partial_json: json.slice(0, 3) } }, 'content_block_delta');
        await send({ type: 'content_block_delta', index, delta: { type: 'input_json_delta', partial_json: json.slice(3) } }, 'content_block_delta');
      }
      await send({ type: 'content_block_stop', index }, 'content_block_stop');
    }
    await send({ type: 'message_delta', delta: { stop_reason: stopReason }, usage: { output_tokens: usage.output_tokens } }, 'message_delta');
    await send({ type: 'message_stop' }, 'message_stop');
    res.end();
  });
}

/** Parses a `text/event-stream` body into its events, in order. */
export function parseSse(text: string): { event: string; data: any }[] {
  return text
    .split(/\n\n/)
    .filter((block) => block.trim())
    .map((block) => {
      const event = /^event: (.*)$/m.exec(block)?.[1] ?? 'message';
      const data = block
        .split('\n')
        .filter((l) => l.startsWith('data: '))
        .map((l) => l.slice(6))
        .join('\n');
      return { event, data: data ? JSON.parse(data) : null };
    });
}

/**
 * Shares connections with users (a connection is usable by its owner, the users it is shared with
 * and administrators), keeping whom they were shared with before.
 */
export async function shareConnections(admin: HttpClient, ids: number[], users: { id: number }[]): Promise<void> {
  const items = (await admin.get('/api/workflow/v1/connections')).body.data.items as { id: number; shared_with: number[] }[];
  for (const id of ids) {
    const current = items.find((c) => c.id === id)?.shared_with ?? [];
    const res = await admin.patch(`/api/workflow/v1/connections/${id}`, { shared_with: [...new Set([...current, ...users.map((u) => u.id)])] });
    if (res.status !== 200) throw new Error(`connection ${id} not shared (${res.status}): ${res.text}`);
  }
}

/** Stores an `openai` or `anthropic` connection pointing at a fake provider; returns its id. */
export async function providerConnection(admin: HttpClient, type: string, baseUrl: string, cred = 'sk-test-cred-1234'): Promise<number> {
  const res = await admin.post('/api/workflow/v1/connections', { type, label: `${type} ${Math.random()}`, cred, extra: { base_url: baseUrl } });
  if (res.status !== 201) throw new Error(`connection not created (${res.status}): ${res.text}`);
  return res.body.data.id as number;
}
