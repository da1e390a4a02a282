import type { Response } from 'undici';
import type { ResolvedConnection } from '../connections/connection.service.js';
import {
  ProviderError,
  errorForStatus,
  parseArgs,
  parseEventJson,
  postJson,
  readJsonBody,
  tokenCount,
  readSse,
  type ChatMessage,
  type ModelProvider,
  type ModelReply,
  type ModelRequest,
  type ToolCall,
} from './provider.js';
import { CODE } from '../../workflows/error-codes.js';

const VENDOR = 'The Anthropic provider';
const DEFAULT_MAX_TOKENS = 4096;

/** Messages API turns: tool results travel as `tool_result` blocks of a user turn, merged when adjacent. */
function wireMessages(messages: ChatMessage[]) {
  const out: { role: 'user' | 'assistant'; content: unknown[] }[] = [];
  const push = (role: 'user' | 'assistant', block: unknown) => {
    const last = out[out.length - 1];
    if (last && last.role === role) last.content.push(block);
    else out.push({ role, content: [block] });
  };
  for (const m of messages) {
    if (m.role === 'user') push('user', { type: 'text', text: m.content });
    else if (m.role === 'tool') push('user', { type: 'tool_result', tool_use_id: m.toolCallId, content: m.content });
    else {
      if (m.content) push('assistant', { type: 'text', text: m.content });
      for (const c of m.toolCalls) push('assistant', { type: 'tool_use', id: c.id, name: c.name, input: c.args });
      if (!m.content && !m.toolCalls.length) push('assistant', { type: 'text', text: '(no answer)' });
    }
  }
  return out;
}

/** Anthropic Messages API (`POST {base_url}/v1/messages`). */
export class AnthropicProvider implements ModelProvider {
  constructor(private readonly connection: ResolvedConnection) {}

  async complete(request: ModelRequest): Promise<ModelReply> {
    const stream = Boolean(request.onDelta);
    const body = {
      model: request.model,
      max_tokens: request.maxTokens ?? DEFAULT_MAX_TOKENS,
      ...(request.system ? { system: request.system } : {}),
      messages: wireMessages(request.messages),
      ...(request.tools?.length ? { tools: request.tools.map((t) => ({ name: t.name, description: t.description, input_schema: t.parameters })) } : {}),
      ...(stream ? { stream: true } : {}),
    };
    const response = await postJson(this.connection, '/v1/messages', body, request, VENDOR);
    if (!response.ok) throw await errorForStatus(response, VENDOR);
    return stream ? this.readStream(response, request) : this.readJson(response, request);
  }

  private async readJson(response: Response, request: ModelRequest): Promise<ModelReply> {
    const json = await readJsonBody(response, VENDOR, request.timeoutMs);
    if (!Array.isArray(json?.content)) throw new ProviderError(CODE.provider_error, `${VENDOR} sent no content`);
    let text = '';
    const toolCalls: ToolCall[] = [];
    for (const block of json.content) {
      if (block.type === 'text') text += String(block.text ?? '');
      else if (block.type === 'tool_use')
        toolCalls.push({ id: String(block.id), name: String(block.name), args: (block.input ?? {}) as Record<string, unknown> });
    }
    return { text, toolCalls, usage: { tokensIn: tokenCount(json.usage?.input_tokens), tokensOut: tokenCount(json.usage?.output_tokens) } };
  }

  private async readStream(response: Response, request: ModelRequest): Promise<ModelReply> {
    let text = '';
    let stopped = false;
    const usage = { tokensIn: 0, tokensOut: 0 };
    const blocks = new Map<number, { type: string; id: string; name: string; json: string }>();
    for await (const event of readSse(response, VENDOR, request.timeoutMs)) {
      const data = parseEventJson(event.data, VENDOR);
      const type = data.type ?? event.event;
      if (type === 'message_start') {
        usage.tokensIn = tokenCount(data.message?.usage?.input_tokens);
        usage.tokensOut = tokenCount(data.message?.usage?.output_tokens);
      } else if (type === 'content_block_start') {
        const b = data.content_block ?? {};
        blocks.set(Number(data.index ?? 0), { type: String(b.type), id: String(b.id ?? ''), name: String(b.name ?? ''), json: '' });
        if (b.type === 'text' && b.text) {
          text += b.text;
          await request.onDelta!(b.text);
        }
      } else if (type === 'content_block_delta') {
        const d = data.delta ?? {};
        if (d.type === 'text_delta' && d.text) {
          text += d.text;
          await request.onDelta!(d.text);
        } else if (d.type === 'input_json_delta') {
          const block = blocks.get(Number(data.index ?? 0));
          if (block) block.json += String(d.partial_json ?? '');
        }
      } else if (type === 'message_delta') {
        if (data.usage?.output_tokens !== undefined) usage.tokensOut = tokenCount(data.usage.output_tokens);
        if (data.usage?.input_tokens) usage.tokensIn = tokenCount(data.usage.input_tokens);
      } else if (type === 'message_stop') stopped = true;
      else if (type === 'error')
        throw new ProviderError(
          data.error?.type === 'overloaded_error' ? CODE.provider_unavailable : CODE.provider_error,
          `${VENDOR} reported ${data.error?.type ?? 'an error'} in the stream`,
        );
    }
    if (!stopped) throw new ProviderError(CODE.provider_error, `${VENDOR} ended the stream before the answer was complete`);
    const toolCalls = [...blocks.entries()]
      .sort((a, b) => a[0] - b[0])
      .filter(([, b]) => b.type === 'tool_use')
      .map(([, b]) => ({ id: b.id, name: b.name, args: parseArgs(b.json || '{}', VENDOR) }));
    return { text, toolCalls, usage };
  }
}
