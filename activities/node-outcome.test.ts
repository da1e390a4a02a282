import { ApplicationFailure, CancelledFailure } from '@temporalio/activity';
import { describe, expect, it } from 'vitest';
import { ExpressionError } from '../src/nodes/expressions.js';
import { ExpressionLimitError } from '../src/nodes/expression-sandbox.js';
import { AppError } from '../src/platform/errors.js';
import { boundFailure, checkOutputSize, errorOf, invalidConfig, modelUsageOf, toFailure } from './node-outcome.js';

describe('what a node threw, as the failure Temporal records', () => {
  it('makes refusals final and retries what is unexpected', () => {
    const refusal = toFailure(ApplicationFailure.retryable('bad', 'validation_failed')) as ApplicationFailure;
    expect(refusal).toMatchObject({ type: 'validation_failed', nonRetryable: true });
    expect(toFailure(new Error('boom'))).toMatchObject({ type: 'node_failed', message: 'boom', nonRetryable: false });
    expect(toFailure('text')).toMatchObject({ type: 'node_failed', message: 'text' });
  });

  it('classifies expression errors and the service’s own errors by the catalogue', () => {
    expect(toFailure(new ExpressionError('no such field', '{{ x }}'))).toMatchObject({ type: 'expression_error', nonRetryable: true });
    expect(toFailure(new ExpressionLimitError('too slow'))).toMatchObject({ type: 'expression_limit', nonRetryable: true });
    expect(toFailure(new AppError('not_found', 'gone'))).toMatchObject({ type: 'not_found', nonRetryable: true });
    expect(toFailure(new AppError('service_unavailable', 'later'))).toMatchObject({ type: 'service_unavailable', nonRetryable: false });
  });

  it('passes a cancellation on as it is, and the timeline shows it as cancelled', () => {
    const cancelled = new CancelledFailure('cancelled');
    expect(toFailure(cancelled)).toBe(cancelled);
    expect(errorOf(cancelled)).toEqual({ code: 'cancelled', message: 'cancelled' });
    expect(errorOf(ApplicationFailure.nonRetryable('x', 'output_too_large'))).toEqual({ code: 'output_too_large', message: 'x' });
    expect(errorOf(new Error('y'))).toEqual({ code: 'node_failed', message: 'y' });
  });
});

describe("checks on a node's configuration and output", () => {
  it('lists every invalid field of the evaluated configuration', () => {
    const failure = invalidConfig([
      { path: ['url'], message: 'Invalid url' },
      { path: [], message: 'Required' },
    ]);
    expect(failure).toMatchObject({
      type: 'validation_failed',
      nonRetryable: true,
      message: 'Configuration after evaluating expressions is invalid: url: Invalid url; config: Required',
    });
  });

  it('refuses an output over the limit in bytes of JSON, and accepts one at it', () => {
    expect(() => checkOutputSize({ a: 'é' }, 11)).not.toThrow(); // {"a":"é"} is 10 bytes
    expect(() => checkOutputSize({ a: 'é' }, 9)).toThrow('Node output is 10 bytes, over the limit of 9 (SVC_NODE_OUTPUT_LIMIT)');
    expect(() => checkOutputSize(undefined, 4)).not.toThrow();
  });

  it('counts model usage of llm_prompt nodes only', () => {
    expect(modelUsageOf('llm_prompt', { text: 'x', usage: { tokens_in: 1 } })).toEqual({ tokens_in: 1 });
    expect(modelUsageOf('http_request', { usage: { tokens_in: 1 } })).toBeUndefined();
    expect(modelUsageOf('llm_prompt', null)).toBeUndefined();
  });
});

describe('what a failure carries', () => {
  it('shows an http_error’s status and body of the answer as the error’s data', () => {
    const failure = ApplicationFailure.nonRetryable('HTTP 402 from POST /pay', 'http_error', { status: 402, body: { error: 'card declined' } });
    expect(errorOf(failure)).toEqual({ code: 'http_error', message: 'HTTP 402 from POST /pay', data: { status: 402, body: { error: 'card declined' } } });
  });

  it('keeps data within the output limit: the start of the body, marked truncated', () => {
    const small = ApplicationFailure.nonRetryable('HTTP 500', 'http_error', { status: 500, body: 'short' });
    expect(boundFailure(small, 1000)).toBe(small);
    const big = ApplicationFailure.retryable('HTTP 500', 'http_error', { status: 500, body: { text: 'x'.repeat(5000) } });
    const bounded = boundFailure(big, 1000) as ApplicationFailure;
    expect(bounded).toMatchObject({ type: 'http_error', message: 'HTTP 500', nonRetryable: false });
    const data = bounded.details![0] as { status: number; body: string; truncated: boolean; size: number };
    expect(data).toMatchObject({ status: 500, truncated: true });
    expect(data.body.startsWith('{"text":"xxx')).toBe(true);
    expect(data.size).toBeGreaterThan(5000);
    expect(Buffer.byteLength(JSON.stringify(data))).toBeLessThanOrEqual(1000);
  });
});
