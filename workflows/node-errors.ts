// How a node's failure reads once it reaches workflow code. Deterministic workflow code.
import { ActivityFailure, ApplicationFailure, ChildWorkflowFailure } from '@temporalio/workflow';
import type { FailureKept, NodeError } from './defs.js';
import { CODE } from './error-codes.js';

/** The failure a node ended with, as the timeline and the execution record show it. */
export function nodeErrorOf(err: unknown): NodeError {
  let cause: unknown = err;
  while (cause instanceof ActivityFailure || cause instanceof ChildWorkflowFailure) cause = cause.cause ?? cause;
  if (cause instanceof ApplicationFailure) {
    // What the failure carries (an http_error's status and body of the answer) goes on with it.
    const data: unknown = cause.details?.[0];
    return { code: cause.type ?? CODE.node_failed, message: cause.message, ...(data && typeof data === 'object' ? { data } : {}) };
  }
  if (err instanceof ActivityFailure && err.cause?.name === 'TimeoutFailure') return { code: CODE.timeout, message: err.cause.message };
  return { code: CODE.node_failed, message: err instanceof Error ? err.message : String(err) };
}

/** The activity kept the failure's whole `{error}` in the timeline (history has its data cut to size). */
export function keptInTimeline(err: unknown): boolean {
  let cause: unknown = err;
  while (cause instanceof ActivityFailure || cause instanceof ChildWorkflowFailure) cause = cause.cause ?? cause;
  return cause instanceof ApplicationFailure && (cause.details?.[1] as FailureKept | undefined)?.kept_in_timeline === true;
}
