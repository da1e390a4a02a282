import { ApplicationFailure } from '@temporalio/activity';
import { describe, expect, it } from 'vitest';
import { AppError } from '../src/platform/errors.js';
import { ProviderError } from '../src/providers/index.js';
import { checkToolCallCount, connectionError, modelCallFailure, storedModelResult, uniqueToolCallIds } from './agent-model-call.js';

describe('a model call retried after its answer was stored', () => {
  it('answers the stored text, tool calls and usage', () => {
    const toolCalls = [{ id: 'c1', name: 'search_records', args: { q: 'x' } }];
    expect(storedModelResult({ content: 'hi', tool_calls: toolCalls, telemetry: { tokens_in: 3, tokens_out: 4, cost_usd: 0.01 } })).toEqual({
      text: 'hi',
      toolCalls,
      tokensIn: 3,
      tokensOut: 4,
      costUsd: 0.01,
    });
  });

  it('counts nothing for an answer stored without telemetry', () => {
    expect(storedModelResult({ content: '', tool_calls: null, telemetry: null })).toEqual({ text: '', toolCalls: [], tokensIn: 0, tokensOut: 0, costUsd: 0 });
  });
});

describe("a model call's failures", () => {
  it('says a connection no longer shared is forbidden, and a missing one a provider error', () => {
    const forbidden = connectionError(new AppError('forbidden', 'no'), 12);
    expect(forbidden).toBeInstanceOf(ProviderError);
    expect(forbidden).toMatchObject({ code: 'forbidden', message: "The provider connection 12 is no longer shared with the session's owner" });
    expect(connectionError(new AppError('not_found', 'gone'), 12)).toMatchObject({
      code: 'provider_error',
      message: 'The provider connection 12 no longer exists',
    });
    const other = new Error('db down');
    expect(connectionError(other, 12)).toBe(other);
  });

  it('retries only a provider that may answer later', () => {
    const unavailable = modelCallFailure(new ProviderError('provider_unavailable', 'busy'));
    expect(unavailable).toBeInstanceOf(ApplicationFailure);
    expect(unavailable).toMatchObject({ type: 'provider_unavailable', message: 'busy', nonRetryable: false });
    expect(modelCallFailure(new ProviderError('forbidden', 'no'))).toMatchObject({ type: 'forbidden', nonRetryable: true });
    const other = new Error('x');
    expect(modelCallFailure(other)).toBe(other);
  });
});

describe('the tool calls of one answer', () => {
  const call = (id: string, name = 'records_search') => ({ id, name, args: {} });

  it('keeps unique ids and gives a repeated one a suffix no other call has', () => {
    expect(uniqueToolCallIds([call('a'), call('b')])).toEqual([call('a'), call('b')]);
    expect(uniqueToolCallIds([call('x'), call('x', 'records_create'), call('x_2'), call('x')]).map((c) => c.id)).toEqual(['x', 'x_2', 'x_2_2', 'x_3']);
    expect(uniqueToolCallIds([call(''), call('')]).map((c) => c.id)).toEqual(['call', 'call_2']);
    expect(uniqueToolCallIds([call('x'), call('x', 'records_create')])[1]).toMatchObject({ name: 'records_create' });
  });

  it('refuses more calls than the limit as tool_call_limit, never retried', () => {
    expect(() => checkToolCallCount([call('a'), call('b')], 2)).not.toThrow();
    const refusal = (() => {
      try {
        checkToolCallCount([call('a'), call('b'), call('c')], 2);
      } catch (err) {
        return err;
      }
    })();
    expect(refusal).toBeInstanceOf(ApplicationFailure);
    expect(refusal).toMatchObject({ type: 'tool_call_limit', nonRetryable: true, message: expect.stringMatching(/3 tool calls in one answer; at most 2/) });
  });

  it("reads a stored answer's odd token counts as sane integers", () => {
    expect(storedModelResult({ content: '', tool_calls: null, telemetry: { tokens_in: 1.5, tokens_out: 1e308, cost_usd: 0 } })).toMatchObject({
      tokensIn: 2,
      tokensOut: 1_000_000_000,
    });
  });
});
