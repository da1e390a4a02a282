import { ApplicationFailure } from '@temporalio/activity';
import { z } from 'zod';
import { costOf, hasPrice } from '../providers/pricing.js';
import { ProviderError, providerFor } from '../providers/index.js';
import type { NodeType } from './node-type.js';
import { CODE } from '../../workflows/error-codes.js';

const config = z.strictObject({
  model: z.string().trim().min(1).max(200),
  prompt: z.string().min(1).max(100_000),
  system: z.string().max(32_000).optional(),
  max_tokens: z.union([z.number().int().min(1).max(200_000), z.string()]).optional(),
});
const resolved = z.object({
  model: z.string().trim().min(1).max(200),
  prompt: z.string().min(1).max(100_000),
  system: z.string().max(32_000).optional(),
  max_tokens: z.coerce.number().int().min(1).max(200_000).optional(),
});

/**
 * One model call through an `openai` or `anthropic` connection, with the agent's provider layer:
 * 429/5xx are retried under the node's retry policy, a refused key or a malformed answer fail at once.
 */
export const llmPromptNode: NodeType<z.infer<typeof resolved>> = {
  type: 'llm_prompt',
  pure: false,
  needsConnection: true,
  description:
    'config `{model, prompt, system?, max_tokens?}` through an `openai` or `anthropic` connection. Output `{text, model, usage: {tokens_in, tokens_out, cost_usd, price_known}}` (cost from SVC_AGENT_PRICES; an unknown model costs 0 with `price_known: false`). Fails with `provider_error` or `provider_auth_failed`.',
  configSchema: config,
  resolvedSchema: resolved,
  run: async ({ config: c, connection, node, signal, prices }) => {
    const target = await connection();
    try {
      const reply = await providerFor(target).complete({
        model: c.model,
        messages: [{ role: 'user', content: c.prompt }],
        ...(c.system ? { system: c.system } : {}),
        ...(c.max_tokens ? { maxTokens: c.max_tokens } : {}),
        timeoutMs: node.timeout_ms ?? 60_000,
        signal,
      });
      const usage = {
        tokens_in: reply.usage.tokensIn,
        tokens_out: reply.usage.tokensOut,
        cost_usd: costOf(prices, c.model, reply.usage.tokensIn, reply.usage.tokensOut),
        price_known: hasPrice(prices, c.model),
      };
      return { output: { text: reply.text, model: c.model, usage } };
    } catch (err) {
      if (err instanceof ProviderError) {
        if (err.retryable) throw ApplicationFailure.retryable(err.message, CODE.provider_error, { status: err.httpStatus });
        throw ApplicationFailure.nonRetryable(err.message, err.code, { status: err.httpStatus });
      }
      throw err;
    }
  },
};
