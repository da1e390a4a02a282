/**
 * Workflow interceptors that refuse input the service did not produce (see trust.ts), bundled with
 * the workflow code ahead of every other interceptor, so nothing else sees that input first:
 *
 * - a run whose start arguments are missing or untrusted fails at once with `untrusted_input`,
 *   before its first step (no execution record is made);
 * - an update with an untrusted argument is refused before it is accepted (nothing is written
 *   to the history), or, for an update without a validator, fails;
 * - a signal with an untrusted argument is dropped, with a warning in the worker's log;
 * - a query with an untrusted argument fails.
 *
 * They add no step of their own to a run: a trusted call goes straight to the next interceptor.
 */
import { log, type WorkflowInterceptorsFactory } from '@temporalio/workflow';
import { isUntrusted, untrustedInput } from './trust.js';

const anyUntrusted = (args: readonly unknown[]) => args.some(isUntrusted);

export const interceptors: WorkflowInterceptorsFactory = () => ({
  inbound: [
    {
      // A rejected promise, not a throw: the SDK fails the run with a failure the execute chain
      // rejects with, whereas a synchronous throw here would fail the workflow task for ever.
      execute: (input, next) => (input.args.length === 0 || anyUntrusted(input.args) ? Promise.reject(untrustedInput('input of this run')) : next(input)),
      validateUpdate: (input, next) => {
        if (anyUntrusted(input.args)) throw untrustedInput(`argument of the ${input.name} update`);
        next(input);
      },
      handleUpdate: (input, next) => (anyUntrusted(input.args) ? Promise.reject(untrustedInput(`argument of the ${input.name} update`)) : next(input)),
      handleSignal: (input, next) => {
        if (!anyUntrusted(input.args)) return next(input);
        log.warn('A signal the service did not produce was dropped', { signal: input.signalName, code: 'untrusted_input' });
        return Promise.resolve();
      },
      handleQuery: (input, next) => (anyUntrusted(input.args) ? Promise.reject(untrustedInput(`argument of the ${input.queryName} query`)) : next(input)),
    },
  ],
});
