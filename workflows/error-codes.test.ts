import { describe, expect, it } from 'vitest';
import { answersWith, ERROR_CODES, isErrorCode, isHttpErrorCode, NODE_REFUSALS, nodeRetry, type ErrorCode, type ErrorCodeSpec } from './error-codes.js';

const all = Object.entries(ERROR_CODES) as [ErrorCode, ErrorCodeSpec][];

describe('the catalogue of error codes', () => {
  it('declares each code once, in snake case, with a meaning of one or more sentences', () => {
    for (const [code, spec] of all) {
      expect(code).toMatch(/^[a-z][a-z0-9_]*[a-z0-9]$/);
      expect(spec.meaning, code).toMatch(/^[A-Z`].*\.$/s);
    }
    expect(new Set(all.map(([code]) => code)).size).toBe(all.length);
  });

  it('gives an answer only an error status, and another status only where it says so', () => {
    for (const [code, spec] of all) {
      if (spec.status !== null) expect(spec.status, code).toSatisfy((s: number) => Number.isInteger(s) && s >= 400 && s <= 599);
      for (const [status, where] of Object.entries(spec.otherStatuses ?? {})) {
        expect(spec.status, code).not.toBe(Number(status));
        expect(where, code).not.toBe('');
      }
    }
    expect(answersWith('egress_denied', 422)).toBe(true);
    expect(answersWith('egress_denied', 502)).toBe(true);
    expect(answersWith('egress_denied', 400)).toBe(false);
    expect(answersWith('conflict', 409)).toBe(true);
  });

  it('tells codes from other strings, and answer codes from the rest', () => {
    expect(isErrorCode('not_found')).toBe(true);
    expect(isErrorCode('toString')).toBe(false);
    expect(isErrorCode(404)).toBe(false);
    expect(isHttpErrorCode('not_found')).toBe(true);
    expect(isHttpErrorCode('node_failed')).toBe(false);
    expect(isHttpErrorCode('my_own_code')).toBe(false);
  });
});

describe('retries of node failures', () => {
  it('never retries a refusal: bad input fails the same way again', () => {
    for (const code of ['validation_failed', 'expression_error', 'expression_limit', 'connection_missing', 'output_too_large', 'child_run_limit'] as const) {
      expect(nodeRetry(code), code).toBe(false);
    }
    for (const code of ['not_found', 'forbidden', 'conflict', 'invalid_eql', 'record_referenced', 'egress_denied', 'provider_auth_failed'] as const) {
      expect(nodeRetry(code), code).toBe(false);
    }
  });

  it('retries the unexpected and outages under the node retry policy, and lets HTTP and provider failures say', () => {
    for (const code of ['node_failed', 'timeout', 'internal_error', 'service_unavailable', 'credential_unreadable'] as const)
      expect(nodeRetry(code), code).toBe(true);
    expect(nodeRetry('http_error')).toBe('per_failure');
    expect(nodeRetry('provider_error')).toBe('per_failure');
  });

  it('says nothing of a code no node fails with, nor of a node’s own code', () => {
    expect(nodeRetry('rate_limited')).toBeUndefined();
    expect(nodeRetry('cancelled')).toBeUndefined();
    expect(nodeRetry('out_of_stock')).toBeUndefined();
  });

  it('retries a service answer in a node exactly when its status is a 5xx', () => {
    // An AppError reaching a node is classified by the catalogue; that classification is the one
    // the status used to imply. The 502s below are the exceptions: a provider's refusal of the
    // credential, an answer from outside larger than the service reads, a model's answer with
    // more tool calls than it runs; none is an AppError a node throws, and asking again gets the same.
    const refusedAnswers = ['provider_auth_failed', 'response_too_large', 'tool_call_limit'];
    for (const [code, spec] of all) {
      if (spec.status === null || refusedAnswers.includes(code)) continue;
      const retried = spec.retried === true || spec.retried === 'per_failure';
      expect(retried, code).toBe(spec.status >= 500);
    }
  });

  it('makes every refusal, and nothing else, a non-retryable type of the node activities', () => {
    expect([...NODE_REFUSALS].sort()).toEqual(
      all
        .filter(([, spec]) => spec.retried === false)
        .map(([code]) => code)
        .sort(),
    );
    expect(NODE_REFUSALS).not.toContain('node_failed');
    expect(NODE_REFUSALS).not.toContain('http_error');
  });
});
