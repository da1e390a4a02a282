// The pure steps of the agent's model-call activity (agentCallModel in agent.activities.ts): the
// answer of a call already stored, and how connection and provider errors become failures
// Temporal retries or not. No I/O, so they are unit tested on their own.
import { ApplicationFailure } from '@temporalio/activity';
import type { MessageRow } from '../src/agent/agent.store.js';
import { AppError } from '../src/platform/errors.js';
import { ProviderError } from '../src/providers/index.js';
import type { AgentModelCallResult } from '../workflows/defs.js';
import { CODE } from '../workflows/error-codes.js';

/** A retried call answers what the first attempt stored, without calling the model again. */
export function storedModelResult(done: Pick<MessageRow, 'content' | 'tool_calls' | 'telemetry'>): AgentModelCallResult {
  return {
    text: done.content,
    toolCalls: done.tool_calls ?? [],
    tokensIn: done.telemetry?.tokens_in ?? 0,
    tokensOut: done.telemetry?.tokens_out ?? 0,
    costUsd: done.telemetry?.cost_usd ?? 0,
  };
}

/**
 * The session's provider connection could not be resolved: no longer shared with the owner
 * (forbidden) or gone (provider_error). Other errors are thrown as they are.
 */
export function connectionError(err: unknown, providerId: string | number): unknown {
  if (err instanceof AppError && err.status === 403) {
    return new ProviderError(CODE.forbidden, `The provider connection ${providerId} is no longer shared with the session's owner`);
  }
  if (err instanceof AppError) return new ProviderError(CODE.provider_error, `The provider connection ${providerId} no longer exists`);
  return err;
}

/** A provider's error as the activity's failure: retried only when the provider may answer later. */
export function modelCallFailure(err: unknown): unknown {
  if (err instanceof ProviderError) return ApplicationFailure.create({ type: err.code, message: err.message, nonRetryable: !err.retryable });
  return err;
}
