import { createHash } from 'node:crypto';
import { z } from 'zod';

/**
 * Retry-safe starts. A client that retries a run, a replay or a webhook call (after a timeout, a
 * 503, a lost answer) sends the same `Idempotency-Key`; within SVC_IDEMPOTENCY_TTL_HOURS the
 * service answers with the first call's execution and starts nothing new. The key and the
 * execution record are written in one transaction before Temporal is asked, and the Temporal
 * workflow id derives from the execution id, so a start whose answer was lost is found again, and
 * a start Temporal never confirmed is sent again under the same workflow id (never twice).
 */
export interface Idempotency {
  key: string;
  /** Digest of the operation and its request: a key reused for another request is refused. */
  fingerprint: string;
}

export const IDEMPOTENCY_HEADER = 'idempotency-key';

/** The header as routes declare it (validated, documented in the OpenAPI document). */
export const idempotencyHeaders = z.object({
  [IDEMPOTENCY_HEADER]: z
    .string()
    .regex(/^[\x21-\x7e]{1,255}$/, '1 to 255 visible ASCII characters')
    .optional()
    .describe(
      "Makes a retried call safe: the same key (per workflow, remembered at least 24 hours) answers with the first call's execution_id and starts nothing new; the answer then carries `Idempotent-Replayed: true`. A key reused with a different request is refused with 422 `idempotency_key_reused`.",
    ),
});

/** JSON with object keys sorted, so equal requests give equal fingerprints. */
function canonical(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonical).join(',')}]`;
  if (value && typeof value === 'object') {
    return `{${Object.keys(value)
      .sort()
      .filter((k) => (value as Record<string, unknown>)[k] !== undefined)
      .map((k) => `${JSON.stringify(k)}:${canonical((value as Record<string, unknown>)[k])}`)
      .join(',')}}`;
  }
  return JSON.stringify(value ?? null);
}

/** The idempotency of a call, or undefined when it carries no key. */
export function idempotencyOf(headers: { [IDEMPOTENCY_HEADER]?: string | undefined }, operation: string, request: unknown): Idempotency | undefined {
  const key = headers[IDEMPOTENCY_HEADER];
  if (key === undefined) return undefined;
  return {
    key,
    fingerprint: createHash('sha256')
      .update(`${operation}\n${canonical(request)}`)
      .digest('hex'),
  };
}

/** The response header, as routes document it under the answers that can carry it. */
export const replayedHeader = {
  'Idempotent-Replayed': {
    description: "`true` when the call repeated an earlier call's Idempotency-Key: this answer is that call's, and nothing new was started",
    schema: { type: 'string', enum: ['true'] },
  },
};

/** The header a repeated call's answer carries. */
export const replayedHeaders = (replayed: boolean): Record<string, string> | undefined => (replayed ? { 'Idempotent-Replayed': 'true' } : undefined);
