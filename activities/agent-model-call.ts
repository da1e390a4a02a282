// The pure steps of the agent's model-call activity (agentCallModel in agent.activities.ts): the
// answer of a call already stored, and how connection and provider errors become failures
// Temporal retries or not. No I/O, so they are unit tested on their own.
import { ApplicationFailure } from '@temporalio/activity';
import type { MessageRow } from '../src/agent/agent.store.js';
import { AppError } from '../src/platform/errors.js';
import { ProviderError, tokenCount, type ToolCall } from '../src/providers/index.js';
import type { AgentModelCallResult } from '../workflows/defs.js';
import { CODE } from '../workflows/error-codes.js';

/** A retried call answers what the first attempt stored, without calling the model again. */
export function storedModelResult(done: Pick<MessageRow, 'content' | 'tool_calls' | 'telemetry'>): AgentModelCallResult {
  return {
    text: done.content,
    toolCalls: done.tool_calls ?? [],
    // Answers stored before counts were made sane may hold any number (1.5, 1e308).
    tokensIn: tokenCount(done.telemetry?.tokens_in),
    tokensOut: tokenCount(done.telemetry?.tokens_out),
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

/**
 * The tool calls of one answer with ids unique within it. Each call is run, stored and approved
 * under its id (the step of the tool activity, the gate's action), so a model that sends two
 * calls with one id would have the second answered by the first's stored result: an approved
 * action that never ran. A repeated id gets a suffix (`call_1_2`: letters, digits and `_` only,
 * which every provider takes back); the conversation sent back carries the new ids on both the
 * call and its result, so the model reads each result against its call.
 */
export function uniqueToolCallIds(calls: ToolCall[]): ToolCall[] {
  const taken = new Set<string>();
  return calls.map((call) => {
    let id = call.id || 'call';
    for (let n = 2; taken.has(id); n++) id = `${call.id || 'call'}_${n}`;
    taken.add(id);
    return id === call.id ? call : { ...call, id };
  });
}

/**
 * Refuses an answer with more tool calls than one answer may carry (SVC_AGENT_MAX_TOOL_CALLS):
 * the turn ends with `tool_call_limit`, nothing of the answer runs and it is not kept.
 */
export function checkToolCallCount(calls: ToolCall[], limit: number): void {
  if (calls.length <= limit) return;
  throw ApplicationFailure.create({
    type: CODE.tool_call_limit,
    message: `The model asked for ${calls.length} tool calls in one answer; at most ${limit} are run per answer (SVC_AGENT_MAX_TOOL_CALLS). Nothing ran; ask again for less.`,
    nonRetryable: true,
  });
}
