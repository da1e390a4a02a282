// The pure steps of replaying an execution (ExecutionService.replay) besides its plan
// (replay-plan.ts): why a reset point could not be read. No I/O, so they are unit tested on their
// own (replay.test.ts).
import { conflict } from '../platform/errors.js';
import { temporalFailure } from '../temporal/connection.js';
import { RunStillOpen } from './reset-point.js';
import { branchOf } from '../../workflows/run-state.js';

/** How a replay is made, as metrics count it: the whole run again, a new run from a node reusing the other outcomes, or a Temporal reset. */
export type ReplayMode = 'rerun' | 'rerun_seeded' | 'reset';

/**
 * Why the reset point of execution `executionId` could not be read, as the API answers it: its
 * run is not closed yet (409 `execution_running`). A history Temporal no longer holds (past the
 * namespace's retention) answers undefined: no reset is possible, and the replay is a new run
 * seeded from the execution record instead. Other errors are answered as they are.
 */
export function resetPointFailure(err: unknown, executionId: number | string): unknown {
  if (err instanceof RunStillOpen) {
    return conflict(
      'execution_running',
      `Temporal has not closed the run of execution ${executionId} yet (its last workflow task is still in progress); try again shortly`,
    );
  }
  return temporalFailure(err)?.kind === 'missing' ? undefined : err;
}

/**
 * A replay's reused outputs as the run's input carries them: small ones inline (`seed`), larger
 * ones by reference to the new execution's timeline, where the replay copies them (`seedRefs`,
 * with the branch each was finished on, which the run cannot read from a value it does not hold).
 */
export function splitSeed(
  seed: Record<string, unknown>,
  inlineBytes: number,
): { seed: Record<string, unknown>; seedRefs?: Record<string, { branch?: string }> } {
  const inline: Record<string, unknown> = {};
  const refs: Record<string, { branch?: string }> = {};
  for (const [id, output] of Object.entries(seed)) {
    if (Buffer.byteLength(JSON.stringify(output ?? null)) <= inlineBytes) {
      inline[id] = output;
      continue;
    }
    const branch = branchOf(output);
    refs[id] = branch === undefined ? {} : { branch };
  }
  return Object.keys(refs).length ? { seed: inline, seedRefs: refs } : { seed: inline };
}
