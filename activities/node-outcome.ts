// The pure steps of running a node (runNode in graph.activities.ts): how what a node threw becomes
// the failure Temporal records and the error the timeline shows, and the checks on its config and
// output. No I/O, so they are unit tested on their own.
import { ApplicationFailure, CancelledFailure } from '@temporalio/activity';
import { type FailureKept, type NodeError, type NodeErrorCode } from '../workflows/defs.js';
import { CODE, nodeRetry } from '../workflows/error-codes.js';
import { ExpressionError } from '../src/nodes/expressions.js';
import { ExpressionLimitError } from '../src/nodes/expression-sandbox.js';
import { AppError } from '../src/platform/errors.js';

/**
 * Turns anything a node threw into the failure Temporal records, classified by the catalogue of
 * error codes: a refusal (bad input, a 4xx of the service's own features) is final; anything
 * unexpected is `node_failed` and retried under the node's retry policy.
 */
export function toFailure(err: unknown): Error {
  if (err instanceof CancelledFailure) return err;
  if (err instanceof ApplicationFailure) {
    const refusal = nodeRetry(err.type ?? '') === false;
    return refusal && !err.nonRetryable
      ? ApplicationFailure.create({ message: err.message, type: err.type ?? undefined, nonRetryable: true, details: err.details as unknown[] })
      : err;
  }
  if (err instanceof ExpressionError) return ApplicationFailure.nonRetryable(err.message, CODE.expression_error);
  if (err instanceof ExpressionLimitError) return ApplicationFailure.nonRetryable(err.message, CODE.expression_limit);
  if (err instanceof AppError) {
    const retried = nodeRetry(err.code);
    const retryable = retried === true || retried === 'per_failure';
    return retryable ? ApplicationFailure.retryable(err.message, err.code) : ApplicationFailure.nonRetryable(err.message, err.code);
  }
  return ApplicationFailure.retryable(err instanceof Error ? err.message : String(err), CODE.node_failed satisfies NodeErrorCode);
}

/** The error a node's timeline entry shows for a failure from toFailure, with what it carries (`data`). */
export function errorOf(failure: Error): NodeError {
  const data: unknown = failure instanceof ApplicationFailure ? failure.details?.[0] : undefined;
  return {
    code: failure instanceof ApplicationFailure ? (failure.type ?? CODE.node_failed) : failure instanceof CancelledFailure ? CODE.cancelled : CODE.node_failed,
    message: failure.message,
    ...(data && typeof data === 'object' ? { data } : {}),
  };
}

/**
 * A failure's data (an http_error's `{status, body}`) within `limit` bytes of JSON
 * (SVC_NODE_OUTPUT_LIMIT): it goes into Temporal's history, the timeline and the next nodes'
 * input like an output. A larger one keeps its other fields and the start of its `body` as text,
 * marked `truncated: true` with the whole `size`.
 */
export function boundFailure(failure: Error, limit: number): Error {
  const data: unknown = failure instanceof ApplicationFailure ? failure.details?.[0] : undefined;
  if (!(failure instanceof ApplicationFailure) || !data || typeof data !== 'object') return failure;
  const size = Buffer.byteLength(JSON.stringify(data));
  if (size <= limit) return failure;
  const { body, ...rest } = data as Record<string, unknown>;
  const text = typeof body === 'string' ? body : JSON.stringify(body ?? null);
  const room = Math.max(0, limit - Buffer.byteLength(JSON.stringify(rest)) - 80);
  const bounded = {
    ...rest,
    body: Buffer.from(text)
      .subarray(0, room)
      .toString('utf8')
      .replace(/\uFFFD$/, ''),
    truncated: true,
    size,
  };
  return ApplicationFailure.create({
    message: failure.message,
    type: failure.type ?? undefined,
    nonRetryable: failure.nonRetryable === true,
    details: [bounded],
  });
}

/**
 * The failure as Temporal's history carries it for a run that keeps large values out of history:
 * data larger than `inlineBytes` is cut to that size (`truncated`, with its whole `size`). When
 * the node's whole `{error}` is in its timeline entry (`kept`), a second detail says so and the
 * run reads the whole by reference; otherwise the cut copy is what goes on.
 */
export function forHistory(failure: Error, inlineBytes: number, kept: boolean): Error {
  if (!(failure instanceof ApplicationFailure)) return failure;
  const data: unknown = failure.details?.[0];
  if (!data || typeof data !== 'object' || jsonBytes(data) <= inlineBytes) return failure;
  const cut = boundFailure(failure, inlineBytes) as ApplicationFailure;
  return ApplicationFailure.create({
    message: failure.message,
    type: failure.type ?? undefined,
    nonRetryable: failure.nonRetryable === true,
    details: kept ? [cut.details?.[0], { kept_in_timeline: true } satisfies FailureKept] : [cut.details?.[0]],
  });
}

/** A node's configuration, after its expressions were evaluated, failed its type's schema. */
export function invalidConfig(issues: { path: PropertyKey[]; message: string }[]): ApplicationFailure {
  const detail = issues.map((i) => `${i.path.join('.') || 'config'}: ${i.message}`).join('; ');
  return ApplicationFailure.nonRetryable(`Configuration after evaluating expressions is invalid: ${detail}`, CODE.validation_failed);
}

/** JSON size of a value as it is stored and sent. */
export const jsonBytes = (value: unknown): number => Buffer.byteLength(JSON.stringify(value ?? null));

/** Refuses a node output over `limit` bytes of JSON (SVC_NODE_OUTPUT_LIMIT); answers its size. */
export function checkOutputSize(output: unknown, limit: number): number {
  const size = jsonBytes(output);
  if (size > limit) {
    throw ApplicationFailure.nonRetryable(`Node output is ${size} bytes, over the limit of ${limit} (SVC_NODE_OUTPUT_LIMIT)`, CODE.output_too_large);
  }
  return size;
}

/** The model usage an llm_prompt node reports in its output, to be counted in the metrics. */
export function modelUsageOf(nodeType: string, output: unknown): { tokens_in?: number; tokens_out?: number; cost_usd?: number } | undefined {
  const usage = (output as { usage?: { tokens_in?: number; tokens_out?: number; cost_usd?: number } } | null)?.usage;
  return nodeType === 'llm_prompt' && usage ? usage : undefined;
}
