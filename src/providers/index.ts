import type { ResolvedConnection } from '../connections/connection.service.js';
import { AnthropicProvider } from './anthropic.provider.js';
import { OpenAiProvider } from './openai.provider.js';
import { ProviderError, type ModelProvider } from './provider.js';
import { CODE } from '../../workflows/error-codes.js';

export const MODEL_CONNECTION_TYPES = ['openai', 'anthropic'] as const;

/** The provider client for a model connection (agent turns and the `llm_prompt` node share it). */
export function providerFor(connection: ResolvedConnection): ModelProvider {
  if (connection.type === 'openai') return new OpenAiProvider(connection);
  if (connection.type === 'anthropic') return new AnthropicProvider(connection);
  throw new ProviderError(CODE.provider_error, `Connection ${connection.id} is of type ${connection.type}, not a model provider`);
}

export * from './provider.js';
