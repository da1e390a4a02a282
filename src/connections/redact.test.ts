import { ApplicationFailure } from '@temporalio/common';
import { describe, expect, it } from 'vitest';
import { AppError } from '../platform/errors.js';
import { credentialForms, redactError, redactor, REDACTED } from './redact.js';

const CRED = 'user:p@ss/w0rd+=&"quoted"';
const b64 = Buffer.from(CRED).toString('base64');

describe('the forms of a credential', () => {
  it('are the value as sent, its base64 (padded or not, URL-safe), percent-encoded and JSON-escaped, longest first', () => {
    const forms = credentialForms(CRED, 'http_bearer');
    for (const form of [
      CRED,
      b64,
      b64.replace(/=+$/, ''),
      Buffer.from(CRED).toString('base64url'),
      encodeURIComponent(CRED),
      JSON.stringify(CRED).slice(1, -1),
    ])
      expect(forms, form).toContain(form);
    expect(forms).toEqual([...forms].sort((a, b) => b.length - a.length));
    expect(forms).not.toContain('p@ss/w0rd+=&"quoted"');
  });

  it('include the password alone for HTTP Basic, unless it is too short to tell from other text', () => {
    expect(credentialForms(CRED, 'http_basic')).toContain('p@ss/w0rd+=&"quoted"');
    expect(credentialForms('user:abc', 'http_basic')).not.toContain('abc');
  });
});

describe('redacting', () => {
  const redact = redactor(credentialForms(CRED, 'http_basic'));

  it('replaces every form in every string and key of a value, and nothing else', () => {
    const echoed = {
      status: 200,
      headers: { authorization: `Basic ${b64}`, [`x-${CRED}`]: 'key' },
      body: { seen: [`token=${encodeURIComponent(CRED)}`, `{"cred":"${JSON.stringify(CRED).slice(1, -1)}"}`, 'untouched', 42, null, true] },
    };
    expect(redact(echoed)).toEqual({
      status: 200,
      headers: { authorization: `Basic ${REDACTED}`, [`x-${REDACTED}`]: 'key' },
      body: { seen: [`token=${REDACTED}`, `{"cred":"${REDACTED}"}`, 'untouched', 42, null, true] },
    });
    expect(echoed.headers.authorization).toBe(`Basic ${b64}`); // a copy, the original unchanged
  });

  it('rewrites a failure that quotes it, keeping its type, retry decision and details otherwise', () => {
    const failure = ApplicationFailure.create({ message: `HTTP 400 with ${CRED}`, type: 'http_error', nonRetryable: true, details: [{ body: { auth: b64 } }] });
    const clean = redactError(failure, redact) as ApplicationFailure;
    expect(clean).toBeInstanceOf(ApplicationFailure);
    expect(clean).toMatchObject({ message: `HTTP 400 with ${REDACTED}`, type: 'http_error', nonRetryable: true, details: [{ body: { auth: REDACTED } }] });
    expect(clean.stack).not.toContain(CRED);
    const untouched = ApplicationFailure.retryable('HTTP 503', 'http_error');
    expect(redactError(untouched, redact)).toBe(untouched);
  });

  it('rewrites other errors in place: message, stack and data', () => {
    const err = new AppError('forbidden', `refused ${CRED}`, { echoed: CRED });
    expect(redactError(err, redact)).toBe(err);
    expect(err.message).toBe(`refused ${REDACTED}`);
    expect(err.stack).not.toContain(CRED);
    expect(err.data).toEqual({ echoed: REDACTED });
    expect(redactError('a string', redact)).toBe('a string');
  });
});
