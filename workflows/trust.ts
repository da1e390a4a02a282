/**
 * What the worker trusts: only payloads the service produced, that is encrypted with the service
 * key (the codec's AES-256-GCM authenticates them). Anything else that reaches a run through
 * Temporal (a start, signal, update or query sent with the Temporal CLI or UI, an activity result
 * sent for a running activity, bytes that merely claim to be ciphertext) arrives as an untrusted
 * value and is refused with `untrusted_input`. The names are those of workflows/data-converter.cjs,
 * which the SDK loads by path and cannot import this file (a unit test keeps the two in step).
 */
import { ApplicationFailure } from '@temporalio/workflow';
import { CODE } from './error-codes.js';

export { UNTRUSTED_ENCODING } from './defs.js';
/** The own property of the value the data converter makes of such a payload. */
export const UNTRUSTED_MARK = Symbol.for('workflow-svc.untrusted-input');

/** Whether `value` stands for a payload the service did not produce. Reads nothing else of it. */
export function isUntrusted(value: unknown): boolean {
  return typeof value === 'object' && value !== null && Object.prototype.hasOwnProperty.call(value, UNTRUSTED_MARK);
}

/** The refusal of what `what` carried: final, so Temporal neither retries it nor a run waits on it. */
export function untrustedInput(what: string): ApplicationFailure {
  return ApplicationFailure.create({
    type: CODE.untrusted_input,
    nonRetryable: true,
    message: `The ${what} was not produced by this service (it is not encrypted with the service key), so it was refused; start runs and decide actions through the service's API`,
  });
}
