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

const VENDOR = 'The OpenAI-compatible provider';

function wireMessages(system: string | undefined, messages: ChatMessage[]) {
  const out: Record<string, unknown>[] = system ? [{ role: 'system', content: system }] : [];
  for (const m of messages) {
    if (m.role === 'user') out.push({ role: 'user', content: m.content });
    else if (m.role === 'tool') out.push({ role: 'tool', tool_call_id: m.toolCallId, content: m.content });
    else {
      out.push({
        role: 'assistant',
        content: m.content || null,
        ...(m.toolCalls.length
          ? { tool_calls: m.toolCalls.map((c) => ({ id: c.id, type: 'function', function: { name: c.name, arguments: JSON.stringify(c.args) } })) }
          : {}),
      });
    }
  }
  return out;
}

/** Chat Completions (`POST {base_url}/chat/completions`): OpenAI, Ollama, vLLM, llama.cpp. */
export class OpenAiProvider implements ModelProvider {
  constructor(private readonly connection: ResolvedConnection) {}

  async complete(request: ModelRequest): Promise<ModelReply> {
    const stream = Boolean(request.onDelta);
    const body = {
      model: request.model,
      messages: wireMessages(request.system, request.messages),
      ...(request.tools?.length
        ? { tools: request.tools.map((t) => ({ type: 'function', function: { name: t.name, description: t.description, parameters: t.parameters } })) }
        : {}),
      ...(request.maxTokens ? { max_tokens: request.maxTokens } : {}),
      // Without include_usage a streamed answer carries no token counts at all.
      ...(stream ? { stream: true, stream_options: { include_usage: true } } : {}),
    };
    const response = await postJson(this.connection, '/chat/completions', body, request, VENDOR);
    if (!response.ok) throw await errorForStatus(response, VENDOR);
    return stream ? this.readStream(response, request) : this.readJson(response, request);
  }

  private async readJson(response: Response, request: ModelRequest): Promise<ModelReply> {
    const json = await readJsonBody(response, VENDOR, request.timeoutMs);
    const message = json?.choices?.[0]?.message;
    if (!message) throw new ProviderError(CODE.provider_error, `${VENDOR} sent no choices`);
    const toolCalls: ToolCall[] = (message.tool_calls ?? []).map((c: any) => ({
      id: String(c.id),
      name: String(c.function?.name),
      args: parseArgs(c.function?.arguments, VENDOR),
    }));
    return {
      text: typeof message.content === 'string' ? message.content : '',
      toolCalls,
      usage: { tokensIn: tokenCount(json.usage?.prompt_tokens), tokensOut: tokenCount(json.usage?.completion_tokens) },
    };
  }

  private async readStream(response: Response, request: ModelRequest): Promise<ModelReply> {
    let text = '';
    let finished = false;
    let done = false;
    const usage = { tokensIn: 0, tokensOut: 0 };
    const calls = new Map<number, { id: string; name: string; args: string }>();
    for await (const event of readSse(response, VENDOR, request.timeoutMs)) {
      if (event.data === '[DONE]') {
        done = true;
        break;
      }
      const chunk = parseEventJson(event.data, VENDOR);
      if (chunk.usage) {
        usage.tokensIn = tokenCount(chunk.usage.prompt_tokens);
        usage.tokensOut = tokenCount(chunk.usage.completion_tokens);
      }
      const choice = chunk.choices?.[0];
      if (!choice) continue;
      const delta = choice.delta ?? {};
      if (typeof delta.content === 'string' && delta.content) {
        text += delta.content;
        await request.onDelta!(delta.content);
      }
      for (const c of delta.tool_calls ?? []) {
        const index = Number(c.index ?? 0);
        const call = calls.get(index) ?? { id: '', name: '', args: '' };
        if (c.id) call.id = c.id;
        if (c.function?.name) call.name += c.function.name;
        if (c.function?.arguments) call.args += c.function.arguments;
        calls.set(index, call);
      }
      if (choice.finish_reason) finished = true;
    }
    if (!done && !finished) throw new ProviderError(CODE.provider_error, `${VENDOR} ended the stream before the answer was complete`);
    const toolCalls = [...calls.entries()]
      .sort((a, b) => a[0] - b[0])
      .map(([i, c]) => ({ id: c.id || `call_${i}`, name: c.name, args: parseArgs(c.args, VENDOR) }));
    return { text, toolCalls, usage };
  }
}
