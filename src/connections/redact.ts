import { ApplicationFailure } from '@temporalio/common';
import type { ConnectionType } from './connection.types.js';

/** What a connection's credential is replaced with wherever a call's outcome repeats it. */
export const REDACTED = '[redacted]';

/** Replaces every form of a credential in a value; the value is otherwise unchanged. */
export type Redact = <T>(value: T) => T;

/**
 * The forms a credential can come back in from a target that echoes what it was sent: as sent
 * (a Bearer token, an API-key header), base64 (HTTP Basic), with and without padding and in its
 * URL-safe alphabet, percent-encoded (echoed in a URL), escaped inside a JSON string, and for
 * `http_basic` the password alone. Longest first, so a longer form is replaced whole.
 */
export function credentialForms(cred: string, type: ConnectionType): string[] {
  const bytes = Buffer.from(cred, 'utf8');
  const forms = new Set([
    cred,
    bytes.toString('base64'),
    bytes.toString('base64').replace(/=+$/, ''),
    bytes.toString('base64url'),
    encodeURIComponent(cred),
    JSON.stringify(cred).slice(1, -1),
  ]);
  const colon = cred.indexOf(':');
  if (type === 'http_basic' && colon >= 0 && cred.length - colon - 1 >= 4) forms.add(cred.slice(colon + 1));
  return [...forms].filter((form) => form.length > 0).sort((a, b) => b.length - a.length);
}

/** A function that replaces `forms` in every string (and object key) of a JSON-like value. */
export function redactor(forms: readonly string[]): Redact {
  const text = (s: string) => forms.reduce((out, form) => (out.includes(form) ? out.split(form).join(REDACTED) : out), s);
  const walk = (value: unknown): unknown => {
    if (typeof value === 'string') return text(value);
    if (Array.isArray(value)) return value.map(walk);
    if (value && typeof value === 'object' && (Object.getPrototypeOf(value) === Object.prototype || Object.getPrototypeOf(value) === null)) {
      return Object.fromEntries(Object.entries(value).map(([k, v]) => [text(k), walk(v)]));
    }
    return value;
  };
  return <T>(value: T) => walk(value) as T;
}

/**
 * An error with the credential redacted from its message, stack and details (or data): the same
 * error when nothing changed, else a copy (an ApplicationFailure keeps its type, retry decision
 * and details) or the error with its message and stack rewritten.
 */
export function redactError(err: unknown, redact: Redact): unknown {
  if (err instanceof ApplicationFailure) {
    const message = redact(err.message);
    const details = err.details ? redact(err.details) : err.details;
    if (message === err.message && JSON.stringify(details) === JSON.stringify(err.details)) return err;
    return ApplicationFailure.create({
      message,
      type: err.type ?? undefined,
      nonRetryable: err.nonRetryable ?? false,
      ...(details ? { details: details as unknown[] } : {}),
      ...(err.nextRetryDelay !== undefined && err.nextRetryDelay !== null ? { nextRetryDelay: err.nextRetryDelay } : {}),
      ...(err.category ? { category: err.category } : {}),
    });
  }
  if (err instanceof Error) {
    err.message = redact(err.message);
    if (err.stack) err.stack = redact(err.stack);
    const withData = err as Error & { data?: unknown };
    if (withData.data !== undefined) withData.data = redact(withData.data);
  }
  return err;
}
