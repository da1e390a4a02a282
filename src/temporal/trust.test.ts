import { createRequire } from 'node:module';
import { ApplicationFailure, defaultPayloadConverter, type Payload } from '@temporalio/common';
import { describe, expect, it } from 'vitest';
import { CODE } from '../../workflows/error-codes.js';
import { isUntrusted, UNTRUSTED_ENCODING, UNTRUSTED_MARK, untrustedInput } from '../../workflows/trust.js';

// The converter module as the Temporal SDK loads it: by path, with require().
const converter = createRequire(import.meta.url)('../../workflows/data-converter.cjs') as {
  payloadConverter: { toPayload(v: unknown): Payload; fromPayload(p: Payload): unknown };
  failureConverter: { errorToFailure(e: Error, c: unknown): any; failureToError(f: any, c: unknown): Error };
  isUntrusted(v: unknown): boolean;
  UNTRUSTED_ENCODING: string;
  UNTRUSTED_MARK: symbol;
  UNTRUSTED_INPUT: string;
};
const { payloadConverter, failureConverter } = converter;
const untrustedPayload: Payload = { metadata: { encoding: new TextEncoder().encode(UNTRUSTED_ENCODING) } };
const refusal = (fn: () => unknown) => {
  try {
    fn();
  } catch (err) {
    return err;
  }
  return undefined;
};

describe('the converter module and trust.ts', () => {
  it('name the same encoding, mark and code', () => {
    expect(converter.UNTRUSTED_ENCODING).toBe(UNTRUSTED_ENCODING);
    expect(converter.UNTRUSTED_MARK).toBe(UNTRUSTED_MARK);
    expect(converter.UNTRUSTED_INPUT).toBe(CODE.untrusted_input);
    expect(untrustedInput('input of this run')).toMatchObject({ type: 'untrusted_input', nonRetryable: true });
  });
});

describe('an untrusted payload', () => {
  it('becomes a value the checks recognise and any use of which fails with untrusted_input', async () => {
    const value = payloadConverter.fromPayload(untrustedPayload) as Record<string, unknown>;
    expect(isUntrusted(value)).toBe(true);
    expect(converter.isUntrusted(value)).toBe(true);
    for (const use of [() => value.workflowId, () => Object.keys(value), () => 'payload' in value, () => JSON.stringify(value), () => `${value}`]) {
      const err = refusal(use);
      expect(err).toBeInstanceOf(ApplicationFailure);
      expect(err).toMatchObject({ type: 'untrusted_input', nonRetryable: true });
    }
    // A promise resolved with it (an activity's result) rejects instead.
    await expect(Promise.resolve(value)).rejects.toMatchObject({ type: 'untrusted_input' });
    expect(refusal(() => payloadConverter.toPayload(value))).toMatchObject({ type: 'untrusted_input' });
  });

  it('is told apart from every value JSON can carry', () => {
    for (const value of [{ workflowId: 1, payload: {} }, [], null, 'binary/untrusted', 0, { [String(UNTRUSTED_MARK)]: true }]) {
      expect(isUntrusted(payloadConverter.fromPayload(payloadConverter.toPayload(value))), JSON.stringify(value)).toBe(false);
    }
    expect(payloadConverter.fromPayload(defaultPayloadConverter.toPayload({ a: [1, 'x'] }))).toEqual({ a: [1, 'x'] });
  });
});

describe('failures', () => {
  it('carry their message and stack trace in the encoded attributes, a payload the codec encrypts', () => {
    const failure = failureConverter.errorToFailure(ApplicationFailure.nonRetryable('declined card 4111', 'expression_error'), payloadConverter);
    expect(failure.message).toBe('Encoded failure');
    expect(failure.stackTrace).toBe('');
    expect(JSON.stringify(failure)).not.toContain('4111');
    const back = failureConverter.failureToError(failure, payloadConverter);
    expect(back).toBeInstanceOf(ApplicationFailure);
    expect(back).toMatchObject({ message: 'declined card 4111', type: 'expression_error' });
  });

  it('keep the message they came with when their encoded attributes are not the service’s', () => {
    const forged = { message: 'plain message', encodedAttributes: untrustedPayload, applicationFailureInfo: { type: 'x', nonRetryable: true } };
    expect(failureConverter.failureToError(forged, payloadConverter)).toMatchObject({ message: 'plain message', type: 'x' });
  });
});
